"""Soak: random SIGTERM, SIGINT and SIGKILL at random times during `simulate -j 2`, `profile run` and a
live `run` (then `--resume`), checking after every round that nothing is left and nothing is torn.

    PYTHONPATH=. .venv/bin/python benchmarks/soak_signals.py --rounds 20 --seed 24

Each round runs one command (in turn: simulate, profile, live run), sends it one signal drawn from
SIGTERM / SIGINT / SIGKILL after a delay drawn from [0.3, 6] s (seeded), waits for it to end, then checks:

- exit status: 128 + N for SIGTERM and SIGINT (0 only for a command that ended before its signal was due);
- processes: none of the command's left (pool workers, stress-ng, workers), waiting up to 10 s for the
  kernel's parent-death signals after a SIGKILL;
- cgroups: none left after SIGTERM / SIGINT; after SIGKILL the empty groups a killed command cannot remove
  are counted, and the next start with the same prefix must remove them (the profile run again; the
  `--resume`; for a run killed before its run folder existed, the next run);
- hidden files: none beside an output after SIGTERM / SIGINT; after SIGKILL the lock and staging entries
  are counted, and the next command writing there must remove them and say so;
- torn files: `simulate`'s output folder absent or whole (five files, the JSON readable), a profile whose
  every row has five fields and loads after the same command is run again to completion, a live run that
  `--resume` completes with every step logged exactly once.

It needs root (cgroups), stress-ng and ZooKeeper (java + the Debian package), like the live tests. Prints a
Markdown table and a summary line; exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from bsp_planner.profiling.cgroups import detect_hierarchy  # noqa: E402

from zk_fixtures import tiny_experiment  # noqa: E402  (the live tests' tiny three-task job)

SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGKILL]
PREFIX = f"bsp-planner-soak-{os.getpid()}"
PROFILE_JOB = """name = "soak"

[[task]]
name = "spin"
stressor = "cpu"
ops_per_unit = 40
series = {{ file = "{data}/datasets/nyc_taxi.csv", first_row = 0, last_row = 1998 }}
"""


@dataclass
class Round:
    n: int
    command: str
    sig: int
    delay_s: float
    code: int | None = None
    problems: list[str] = field(default_factory=list)
    left_groups: int = 0  # empty cgroups a SIGKILLed command left (the next start removes them)
    left_hidden: int = 0  # hidden lock/staging entries a SIGKILLed simulate left (the next one removes them)
    sent: bool = False  # the signal was sent (the command had not ended before its delay)
    note: str = ""


def bsp(*args: object) -> list[str]:
    return [sys.executable, "-m", "bsp_planner.cli", *map(str, args)]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def processes_with(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line contains `marker`."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(ln for ln in (p / "status").read_text().splitlines() if ln.startswith("State:"))
        except (OSError, StopIteration):
            continue
        if marker in cmd and "Z" not in state.split()[1]:
            out.append(int(p.name))
    return out


def groups(prefix: str) -> list[Path]:
    """Every cgroup whose name starts with `prefix` (the profiler's under it, a live run's beside it)."""
    root = detect_hierarchy().root
    return sorted(p for p in root.glob(f"{prefix}*") if p.is_dir()) + sorted(
        p for p in root.glob(f"{prefix}*/*") if p.is_dir()
    )


def group_pids(prefix: str) -> list[int]:
    pids = []
    for g in groups(prefix):
        try:
            pids += [int(x) for x in (g / "cgroup.procs").read_text().split()]
        except OSError:
            pass
    return pids


def wait_gone(check, timeout_s: float = 10.0) -> list:
    deadline = time.monotonic() + timeout_s
    left = check()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = check()
    return left


def signal_after(proc: subprocess.Popen, sig: int, delay_s: float, r: Round) -> int:
    """Send `sig` after `delay_s` (unless the command ended first: then `r.sent` stays False); its exit status."""
    try:
        proc.wait(timeout=delay_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(sig)
        r.sent = True
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return proc.returncode


def check_exit(r: Round) -> None:
    if r.code == 0 and not r.sent:
        r.note = "finished before the signal"
        return
    if r.code == 0:
        r.problems.append("exit 0 although the signal was sent: the stop was lost")
        return
    if r.code == -r.sig and r.sig != signal.SIGKILL:  # the signal's own default action: it came during the
        r.note = "stopped in the interpreter's start-up, before the command began"  # imports, before any work
        return
    expected = -signal.SIGKILL if r.sig == signal.SIGKILL else 128 + r.sig
    if r.code != expected:
        r.problems.append(f"exit {r.code}, expected {expected}")


# -- the three commands ---------------------------------------------------------------------------------
def simulate_round(r: Round, work: Path) -> None:
    out = work / f"sim-{r.n}"
    proc = subprocess.Popen(
        bsp("simulate", "-m", "perfect", "--steps", "400", "-s", "mpc,dp,optimum", "-j", "2", "-q", "-o", out),
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    r.code = signal_after(proc, r.sig, r.delay_s, r)
    check_exit(r)
    left = wait_gone(lambda: processes_with(str(out)))
    if left:
        r.problems.append(f"{len(left)} process(es) left: {left}")
    if out.exists():
        names = sorted(p.name for p in out.iterdir())
        want = ["comparison.csv", "comparison.json", "comparison.md", "comparison.png", "steps.csv"]
        if names != want:
            r.problems.append(f"torn output folder: {names}")
        else:
            try:
                json.loads((out / "comparison.json").read_text())
            except ValueError as exc:
                r.problems.append(f"torn comparison.json: {exc}")
    hidden = [p.name for p in work.iterdir() if p.name.startswith(f".sim-{r.n}")]
    if hidden and r.sig != signal.SIGKILL:
        r.problems.append(f"left beside the output: {hidden}")
    elif hidden:  # nothing runs in a SIGKILLed process: the next simulate into the same folder removes them
        r.left_hidden = len(hidden)
        again = subprocess.run(
            bsp("simulate", "-m", "perfect", "--steps", "20", "-s", "mpc", "-q", "-o", out),
            env=env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        left = [p.name for p in work.iterdir() if p.name.startswith(f".sim-{r.n}")]
        if again.returncode != 0:
            r.problems.append(f"the next simulate: exit {again.returncode}: {again.stderr.strip()[-200:]}")
        elif left:
            r.problems.append(f"the next simulate did not remove what the killed one left: {left}")
        elif "killed" not in again.stderr:
            r.problems.append("the next simulate removed the killed one's leftovers without a word")


def profile_round(r: Round, work: Path) -> None:
    job = work / "soak-job.toml"
    job.write_text(PROFILE_JOB.format(data=ROOT / "bsp_planner" / "data"))
    out = work / f"prof-{r.n}" / "profile.csv"
    args = ["profile", "run", "--job", job, "--out", out, "--cpu", "250,500,1000", "--workloads", "10,20,30"]
    args += ["--repeats", "2", "--cgroup-prefix", PREFIX]
    before = [g for g in groups(PREFIX) if g.parent == detect_hierarchy().root / PREFIX]
    proc = subprocess.Popen(bsp(*args), env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r.code = signal_after(proc, r.sig, r.delay_s, r)
    check_exit(r)
    left = wait_gone(lambda: group_pids(PREFIX))
    if left:
        r.problems.append(f"{len(left)} process(es) left in the cgroups: {left}")
    stale = [g for g in groups(PREFIX) if g.parent == detect_hierarchy().root / PREFIX]
    if stale and r.sig != signal.SIGKILL:
        r.problems.append(f"cgroups left: {[g.name for g in stale]}")
    r.left_groups = len(stale)
    if out.exists():
        rows = out.read_text().split("\n")
        body = [ln for ln in rows[1:-1] if ln]
        if any(len(ln.split(",")) != 5 for ln in body):
            r.problems.append("a profile row without its five fields")
    # the same command again, to the end: the profile resumes, loads, holds each cell once
    done = subprocess.run(bsp(*args), env=env(), capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        r.problems.append(f"resume exit {done.returncode}: {done.stderr.strip()[-200:]}")
        return
    if [g for g in before + stale if g.exists()]:
        r.problems.append("the next start did not remove the groups a killed profiler left")
    from bsp_planner.inputs.profiles import load_profile

    try:
        load_profile(out)
    except Exception as exc:  # a duplicate or torn row: what this soak looks for
        r.problems.append(f"the resumed profile does not load: {exc}")
    hidden = [p.name for p in out.parent.iterdir() if p.name.startswith(".")]
    if hidden:
        r.problems.append(f"left beside the profile after its resume: {hidden}")


def live_round(r: Round, work: Path, zk_hosts: str, creds: Path) -> None:
    exp = tiny_experiment(work / f"live-{r.n}", steps=6)
    runs = work / "runs"
    rid = f"soak{r.n}"
    common = ["--runs-dir", runs, "--zookeeper", zk_hosts, "--cgroup-prefix", PREFIX, "-q"]
    proc = subprocess.Popen(
        bsp("run", "-e", exp, "--planner", "mpc", "--run-id", rid, "--zk-auth-file", creds, *common),
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    r.code = signal_after(proc, r.sig, r.delay_s, r)
    check_exit(r)
    marker = f"/{rid}"
    left = wait_gone(lambda: [p for p in processes_with("bsp_planner.cli worker") if p in processes_with(marker)])
    if left:
        r.problems.append(f"{len(left)} worker(s) left: {left}")
    live_groups = [g for g in groups(f"{PREFIX}.live.{rid}")]
    if live_groups and r.sig != signal.SIGKILL:
        r.problems.append(f"cgroups left: {[g.name for g in live_groups]}")
    r.left_groups = len(live_groups)
    if not (runs / rid / "run.json").exists():
        if groups(f"{PREFIX}.live.{rid}"):  # no --resume reaches them: the next run's start must remove them
            r.note = "killed before its run.json; the next run removed its groups"
            nxt = f"{rid}-next"
            done = subprocess.run(
                bsp("run", "-e", exp, "--planner", "mpc", "--run-id", nxt, "--zk-auth-file", creds, *common),
                env=env(),
                capture_output=True,
                text=True,
                timeout=600,
            )
            if done.returncode != 0:
                r.problems.append(f"the next run: exit {done.returncode}: {' '.join(done.stderr.split())[-200:]}")
            if groups(f"{PREFIX}.live.{rid}"):
                r.problems.append("killed before its run.json: the next run's start did not remove its cgroups")
            if groups(f"{PREFIX}.live.{nxt}"):
                r.problems.append("cgroups left after the next run")
        return
    if json.loads((runs / rid / "run.json").read_text()).get("status") != "finished":
        done = subprocess.run(
            bsp("run", "--resume", rid, *common), env=env(), capture_output=True, text=True, timeout=600
        )
        if done.returncode != 0:
            r.problems.append(f"resume exit {done.returncode}: {' '.join(done.stderr.split())[-200:]}")
            return
    steps = [json.loads(ln)["step"] for ln in (runs / rid / "steps.jsonl").read_text().splitlines() if ln.strip()]
    if steps != list(range(6)):
        r.problems.append(f"steps logged {steps}, expected each of 0..5 once")
    if groups(f"{PREFIX}.live.{rid}"):
        r.problems.append("cgroups left after the resume")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--seed", type=int, default=24)
    args = ap.parse_args()
    rng = random.Random(args.seed)

    from bsp_planner.runtime.zkserver import LocalZooKeeper, free_port
    from bsp_planner.zk.credentials import Credentials, write_credentials_file

    results: list[Round] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bsp-soak-") as tmp:
        work = Path(tmp)
        creds = write_credentials_file(work / "zk-auth", Credentials("soak", "pw-" + os.urandom(6).hex()))
        zk = LocalZooKeeper(work / "zk", port=free_port())
        zk.start()
        try:
            for n in range(args.rounds):
                command = ("simulate", "profile", "run")[n % 3]
                r = Round(n, command, rng.choice(SIGNALS), round(rng.uniform(0.3, 6.0), 2))
                if command == "simulate":
                    simulate_round(r, work)
                elif command == "profile":
                    profile_round(r, work)
                else:
                    live_round(r, work, zk.hosts, creds)
                results.append(r)
                status = "ok" if not r.problems else "; ".join(r.problems)
                print(
                    f"round {n:2d} {command:8s} {signal.Signals(r.sig).name:7s} after {r.delay_s:4.2f} s: "
                    f"exit {r.code}: {status}",
                    flush=True,
                )
        finally:
            zk.stop()
    wall = time.monotonic() - started
    leftover = groups(PREFIX)
    print()
    print("| round | command | signal | after (s) | exit | cgroups / hidden entries left by SIGKILL | result |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        result = "ok" if not r.problems else "; ".join(r.problems)
        result += f" ({r.note})" if r.note else ""
        print(
            f"| {r.n} | {r.command} | {signal.Signals(r.sig).name} | {r.delay_s:.2f} | {r.code} "
            f"| {r.left_groups} / {r.left_hidden} | {result} |"
        )
    failed = [r for r in results if r.problems]
    print(
        f"\n{len(results)} rounds in {wall:.0f} s, {len(failed)} failed; cgroups under the soak's prefix at the end: "
        f"{len(leftover)}"
    )
    if leftover:
        print("left:", ", ".join(str(g.relative_to(detect_hierarchy().root)) for g in leftover))
    for g in reversed(leftover):  # a failed soak's leftovers: remove them so the host is clean
        try:
            g.rmdir()
        except OSError:
            pass
    return 1 if failed or leftover else 0


if __name__ == "__main__":
    sys.exit(main())
