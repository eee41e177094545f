"""Synthetic, seeded inputs for tests: profiles and experiments that need no measurement."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from bsp_planner.inputs.shipped import data_dir

DATA = data_dir()  # the shipped defaults (package data)
THESIS_TASKS = ["affinity", "atomic", "bsearch", "cap", "chmod", "memcpy", "vecmath", "zero"]
WORKLOADS = [10, 20, 30, 40, 50]
CPUS = [250, 500, 750, 1000, 1500, 2000]


def write_profile(
    path: Path, tasks=THESIS_TASKS, workloads=WORKLOADS, cpus=CPUS, seed: int = 0, repeats: int = 2
) -> Path:
    """duration = base_i * (w / 10) * (2000 / c) ** alpha_i, with 3% multiplicative noise."""
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["task", "workload", "cpu_millicores", "duration_s", "repeat"])
        for t in tasks:
            base, alpha = 0.3 * (1 + 0.5 * rng.random()), 0.8 + 0.3 * rng.random()
            for wl in workloads:
                for c in cpus:
                    for r in range(repeats):
                        d = base * wl / 10 * (2000 / c) ** alpha * (1 + 0.03 * rng.standard_normal())
                        w.writerow([t, wl, c, f"{d:.5f}", r])
    return path


def write_experiment(folder: Path, profile: Path, **fields) -> Path:
    """An experiment file on the shipped thesis-8 job with a given profile; fields override defaults."""
    settings = {
        "job": str(DATA / "jobs" / "thesis-8.toml"),
        "profile": str(profile),
        "steps": 60,
        "penalty_s": 1.0,
        "modes": ["perfect", "forecast"],
        "strategies": ["exppo", "static:1", "static:4", "dp", "mpc", "floor"],
        "output": str(folder / "out"),
    }
    cpu = {"budget_millicores": 8000, "min_millicores": 250, "step_millicores": 50, "max_millicores": 2000}
    planner = {"horizon": 10, "dp_max_segment": 20}
    forecast = {"source": "seasonal-naive", "horizon": 20}
    for k, v in fields.items():
        section, _, key = k.partition("__")
        if key:
            {"cpu": cpu, "planner": planner, "forecast": forecast}[section][key] = v
        else:
            settings[k] = v

    def fmt(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\") + '"'
        if isinstance(v, list):
            return "[" + ", ".join(fmt(x) for x in v) + "]"
        return repr(v)

    lines = [f"{k} = {fmt(v)}" for k, v in settings.items()]
    for name, table in (("cpu", cpu), ("planner", planner), ("forecast", forecast)):
        lines.append(f"[{name}]")
        lines += [f"{k} = {fmt(v)}" for k, v in table.items()]
    path = folder / "exp.toml"
    path.write_text("\n".join(lines) + "\n")
    return path
