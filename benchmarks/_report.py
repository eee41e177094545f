"""What every benchmark records beside its figures: the host's load average (the host is shared), and
the results written as JSON once it is over."""

from __future__ import annotations

import json
import os
from pathlib import Path


def load() -> str:
    """The 1, 5 and 15 minute load averages, as `uptime` prints them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def write_results(results: dict, out: Path) -> None:
    """Record the load after the runs, write the results to `out` (JSON) and say so."""
    results["load_after"] = load()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"load average before {results['load_before']}, after {results['load_after']}; wrote {out}")
