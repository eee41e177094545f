"""`bsp-planner profile ...`: measure task durations over a grid of CPU limits x workload sizes.

    bsp-planner profile calibrate --job jobs/thesis-8.toml --target-s 0.3
    bsp-planner profile run --job jobs/thesis-8.toml --out profiles/local-2core/profile.csv
    bsp-planner profile heatmap profiles/local-2core/profile.csv
    bsp-planner profile pairs --job jobs/thesis-8.toml --out profiles/local-2core/pairs.csv

Bad inputs raise InputError, which `bsp_planner.cli.main` prints before exiting with status 2.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from ..core.errors import InputError
from ..core.filelock import output_lock
from ..core.outputs import check_output_dir
from ..core.tables import print_json, print_table
from ..inputs.job import load_job
from ..inputs.profiles import load_profile, metadata_path
from ..inputs.settings import MAX_MAGNITUDE
from ..inputs.shipped import data_path, shipped_or_given
from .cgroups import CFS_PERIOD_US, MAX_SHARES, check_period_us, quota_us
from .grid import Grid, parse_levels, select_tasks, validate_grid

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .calibrate import Calibration
    from .grid import Failure

app = typer.Typer(help="Measure task durations over a grid of CPU limits x workload sizes.", no_args_is_help=True)

DEFAULT_JOB = data_path("jobs/thesis-8.toml")  # shipped (package data)
_CPU_HELP = "CPU limits in millicores, comma-separated (1000 = one CPU)."
_PREFIX_HELP = "Parent cgroup of the runs' groups (<cgroup root>/<prefix>/<run>; for `run` it is a name start)."
_W_HELP = "Workload sizes, comma-separated (bogo-ops = ops_per_unit x workload)."


def _task_list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [n.strip() for n in text.split(",")]
    if not text.strip() or any(not n for n in names):
        raise InputError(f"expected comma-separated task names, got {text!r}", field="--tasks")
    return names


@contextlib.contextmanager
def _resumable(console: Console, runs: Path) -> Iterator[None]:
    """Ctrl-C during a measurement: say where the finished runs are and that the same command resumes,
    then end with 130 (the lock and the backend are released on the way out)."""
    try:
        yield
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted[/]: every finished run is in {runs}; run the same command again to resume")
        raise typer.Exit(130) from None


#: the longest a run, a step or a Job's start may be given (a week): more is a typo, and overflows the waits
MAX_WAIT_S = 604800.0


def _seconds(value: float, flag: str) -> float:
    """A flag's seconds: positive, finite, at most a week; an InputError naming the flag otherwise."""
    if not (math.isfinite(value) and 0 < value <= MAX_WAIT_S):
        raise InputError(
            f"expected a positive number of seconds up to {MAX_WAIT_S:g} (a week), got {value:g}", field=flag
        )
    return value


def _shares(value: int) -> int:
    """--cpu-shares: 0 (the kernel's default) or a v1 cpu.shares weight, 2..262144 (it was clamped silently)."""
    if value != 0 and not 2 <= value <= MAX_SHARES:
        raise InputError(
            f"expected 0 (the kernel's default) or a weight from 2 to {MAX_SHARES}, got {value}", field="--cpu-shares"
        )
    return value


def _millicores(value: float, flag: str, tasks: int = 1) -> float:
    """A CPU limit from a flag: positive, finite, and `tasks` of them within this host's CPUs."""
    cores = len(os.sched_getaffinity(0))
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"expected a positive CPU limit in millicores, got {value:g}", field=flag)
    if value > cores * 1000 / tasks:
        what = f"{tasks} tasks at {value:g}m each" if tasks > 1 else f"{value:g}m"
        raise InputError(f"{what}: more than this host's {cores * 1000}m; lower {flag}", field=flag)
    return value


def _check_workload(workload: float) -> None:
    if not (math.isfinite(workload) and 0 < workload <= MAX_MAGNITUDE):
        raise InputError(
            f"expected a positive finite workload of at most {MAX_MAGNITUDE:g}, got {workload:g}", field="--workload"
        )


def _period(value: int) -> int:
    """--cfs-period-us, checked as the kernel takes it, the error naming the flag."""
    return check_period_us(value, field="--cfs-period-us")


@app.command("run")
def run(
    job: Path = typer.Option(DEFAULT_JOB, "--job", help="The job file (TOML)."),
    out: Path = typer.Option(..., "--out", help="Profile CSV to write or resume, e.g. profiles/<name>/profile.csv."),
    cpu: str = typer.Option("250,500,750,1000,1500,2000", "--cpu", help=_CPU_HELP),
    workloads: str = typer.Option("10,20,30,40,50", "--workloads", help=_W_HELP),
    repeats: int = typer.Option(2, "--repeats", help="Runs per (task, workload, CPU) cell."),
    timeout: float = typer.Option(
        60.0,
        "--timeout",
        help="Seconds before a run (a process task: a step) is killed and logged as failed.",
    ),
    tasks: str | None = typer.Option(None, "--tasks", help="Only these tasks, comma-separated (default: all)."),
    warmup_steps: int = typer.Option(
        1, "--warmup-steps", help="process tasks: steps per workload run first and discarded (cold caches)."
    ),
    measure_steps: int = typer.Option(
        5, "--measure-steps", help="process tasks: steps per workload timed after the warm-up; their mean counts."
    ),
    min_measure_s: float = typer.Option(
        1.0,
        "--min-measure-s",
        help="process tasks: measure a workload until its timed steps also last this long (10 CFS periods).",
    ),
    max_measure_steps: int = typer.Option(
        1000,
        "--max-measure-steps",
        help="process tasks: at most this many timed steps per workload; a workload whose steps still add up to "
        "less than --min-measure-s (a step that does almost nothing) fails its cell.",
    ),
    stress_ng: str = typer.Option("stress-ng", "--stress-ng", help="The stress-ng executable."),
    cgroup_prefix: str = typer.Option("bsp-planner", "--cgroup-prefix", help=_PREFIX_HELP),
    cpu_shares: int = typer.Option(
        262144,
        "--cpu-shares",
        help="CPU weight of the runs' groups (v1 cpu.shares; 0 = kernel default). High, so other load on "
        "the host does not stand in for the quota.",
    ),
    cfs_period_us: int = typer.Option(
        CFS_PERIOD_US,
        "--cfs-period-us",
        help="local: the CFS period of the runs' quotas, in us (1000..1000000; the quota is the CPU level's share "
        "of it). Shorter periods make a step's time depend less on where in a period it starts and ends; a live "
        "run should use the same (run setting cfs_period_us).",
    ),
    backend: str = typer.Option(
        "local", "--backend", help="local (cgroup quotas on this host) or kubernetes (one Job per run)."
    ),
    parallel: int = typer.Option(4, "--parallel", help="kubernetes: Jobs running at once."),
    namespace: str | None = typer.Option(
        None, "--namespace", help="kubernetes: the namespace (default: the kubeconfig context's, else bsp-planner)."
    ),
    image: str | None = typer.Option(
        None, "--image", help="kubernetes: the image of the Jobs (default $BSP_PLANNER_IMAGE)."
    ),
    kubeconfig: Path | None = typer.Option(
        None, "--kubeconfig", help="kubernetes: kubeconfig file (default $KUBECONFIG; in-cluster config inside a pod)."
    ),
    context: str | None = typer.Option(None, "--context", help="kubernetes: kubeconfig context."),
    node_selector: str | None = typer.Option(
        None, "--node-selector", help="kubernetes: key=value[,key=value] for the Jobs' pods."
    ),
    startup_timeout: float = typer.Option(
        300.0, "--startup-timeout", help="kubernetes: seconds a Job may take to start (scheduling, image pull)."
    ),
    profile_id: str | None = typer.Option(
        None, "--profile-id", help="kubernetes: label of the Jobs (default: derived from --out)."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print the counts and failed runs as JSON on stdout instead (messages go to stderr)."
    ),
) -> None:
    """Run every task at every (CPU, workload) cell, REPEATS times; resumable.

    A stressor or command task is started afresh for each cell; a long-running process task once per CPU
    level and repeat, its profiling session assigning the workloads step by step (docs/profiling.md)."""
    from .local import LocalBackend
    from .process import ProcessSteps
    from .profile_files import failures_path
    from .runner import check_profile_path, run_grid

    console = Console(stderr=json_out)  # with --json, stdout holds the JSON document only
    _seconds(timeout, "--timeout")
    _seconds(startup_timeout, "--startup-timeout")
    if parallel < 1:  # a kubernetes option, checked on every backend (never ignored unread)
        raise InputError(f"expected at least 1 Job at once, got {parallel}", field="--parallel")
    _shares(cpu_shares)
    _period(cfs_period_us)
    grid = Grid(parse_levels(cpu, "--cpu"), parse_levels(workloads, "--workloads"), repeats)
    steps = ProcessSteps(warmup_steps, measure_steps, min_measure_s, max_measure_steps)
    the_job = load_job(shipped_or_given(job, "jobs") or job)
    if backend in ("kubernetes", "k8s"):
        from ..k8s.config import parse_node_selector
        from .kubernetes import KubernetesProfiler, default_profile_id, run_grid_kubernetes

        profiler = KubernetesProfiler(
            namespace=namespace,
            kubeconfig=str(kubeconfig) if kubeconfig else None,
            context=context,
            image=image,
            node_selector=parse_node_selector(node_selector or ""),
            parallelism=parallel,
            startup_timeout_s=startup_timeout,
            profile_id=profile_id or default_profile_id(out),
        )
        measure = lambda: run_grid_kubernetes(  # noqa: E731
            the_job, out, grid, profiler, tasks=_task_list(tasks), timeout_s=timeout, process_steps=steps
        )
        runs_on: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    elif backend == "local":
        runs_on = LocalBackend(
            stress_ng=stress_ng, prefix=cgroup_prefix, cpu_shares=cpu_shares or None, cfs_period_us=cfs_period_us
        )
        validate_grid(grid, cores=len(os.sched_getaffinity(0)))  # levels this machine can give
        for c in grid.cpu_millicores:  # every level a quota the kernel takes at this period, before any run
            quota_us(c, cfs_period_us)
        measure = lambda: run_grid(  # noqa: E731
            the_job, out, grid, runs_on, tasks=_task_list(tasks), timeout_s=timeout, process_steps=steps
        )
    else:
        raise InputError(f"unknown backend {backend!r}; known: local, kubernetes", field="--backend")
    check_profile_path(out)  # before its lock is made beside it
    # one writer per profile: a second one is refused, naming this pid
    with output_lock(out, "--out"), runs_on, _resumable(console, out):
        report = measure()
    console.print(
        f"{report.measured} run(s) measured, {report.skipped} already in {out}, "
        f"{len(report.failures)} failed, in {report.wall_s:.0f} s; metadata in {metadata_path(out)}"
    )
    if json_out:  # the table's rows (every field of a failure), with the counts of the line above
        failed = [dataclasses.asdict(f) for f in report.failures]
        print_json({"profile": str(out), "measured": report.measured, "skipped": report.skipped, "failed": failed})
    if report.failures:
        _print_failures(console, report.failures, failures_path(out), table=not json_out)
        raise typer.Exit(1)


def _print_failures(console: Console, failures: list[Failure], log: Path, table: bool = True) -> None:
    rows = Table("task", "workload", "cpu (m)", "repeat", "reason", title="failed runs")
    for f in failures:
        rows.add_row(f.task, f"{f.workload:g}", f"{f.cpu_millicores:g}", str(f.repeat), f.reason)
    if table:
        print_table(console, rows)
    console.print(
        f"[red]{len(failures)} run(s) failed[/] (logged in {log}); "
        "the profile is incomplete: run the same command again to retry them"
    )


@app.command("pairs")
def pairs(
    job: Path = typer.Option(DEFAULT_JOB, "--job", help="The job file (TOML)."),
    out: Path = typer.Option(..., "--out", help="Pair profile CSV to write or resume, e.g. profiles/<name>/pairs.csv."),
    cpu: float = typer.Option(1000, "--cpu", help="CPU limit of each task of a pair, in millicores (its own quota)."),
    workload: float = typer.Option(20, "--workload", help="Workload of the timed runs."),
    repeats: int = typer.Option(3, "--repeats", help="Runs per ordered pair (and alone per task); medians count."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds before a run is killed and logged as failed."),
    tasks: str | None = typer.Option(None, "--tasks", help="Only these tasks, comma-separated (default: all)."),
    stress_ng: str = typer.Option("stress-ng", "--stress-ng", help="The stress-ng executable."),
    cgroup_prefix: str = typer.Option("bsp-planner", "--cgroup-prefix", help=_PREFIX_HELP),
    cpu_shares: int = typer.Option(262144, "--cpu-shares", help="As for `profile run`."),
    cfs_period_us: int = typer.Option(CFS_PERIOD_US, "--cfs-period-us", help="As for `profile run`."),
) -> None:
    """How much each task slows down while another co-runs on this host, each under its own quota; resumable.

    Per repeat: every task alone, then beside every other task (docs/nodes.md, "Interference")."""
    from .local import LocalBackend
    from .pairs import measure_pairs, runs_path
    from .runner import check_profile_path

    check_profile_path(out, "pair profile")
    _check_workload(workload)
    if repeats < 1:
        raise InputError(f"expected at least 1, got {repeats}", field="--repeats")
    _seconds(timeout, "--timeout")
    _shares(cpu_shares)
    _period(cfs_period_us)
    _millicores(cpu, "--cpu", tasks=2)
    quota_us(cpu, cfs_period_us)
    the_job = load_job(shipped_or_given(job, "jobs") or job)
    selected = select_tasks(the_job, _task_list(tasks))
    other = [t.name for t in selected if t.kind != "stressor"]
    if other:
        raise InputError(
            f"task {other[0]!r} is not a stress-ng stressor; pair profiles measure stressor tasks (--tasks)",
            field="--tasks",
        )
    if len(selected) < 2:
        raise InputError("expected at least two tasks to pair", field="--tasks")
    console = Console()
    backend = LocalBackend(
        stress_ng=stress_ng, prefix=cgroup_prefix, cpu_shares=cpu_shares or None, cfs_period_us=cfs_period_us
    )
    backend.stress_ng_path()  # before the lock, the runs file and the metadata are made
    with output_lock(out, "--out"), backend, _resumable(console, runs_path(out)):
        report = measure_pairs(
            the_job,
            out,
            selected,
            backend,
            cpu_millicores=cpu,
            workload=workload,
            repeats=repeats,
            timeout_s=timeout,
        )
    console.print(
        f"{report.measured} run(s) measured, {report.skipped} already in {runs_path(out).name}, "
        f"{len(report.failures)} failed, in {report.wall_s:.0f} s; {report.pairs} pair(s) in {out}, "
        f"metadata in {metadata_path(out).name}"
    )
    if report.failures:
        for (a, b, r), reason in report.failures[:10]:
            console.print(f"[red]failed[/] {a} {'beside ' + b if b else 'alone'} #{r}: {reason}", highlight=False)
        console.print("the pair profile is incomplete: run the same command again to retry them")
        raise typer.Exit(1)


@app.command("calibrate")
def calibrate(
    job: Path = typer.Option(DEFAULT_JOB, "--job", help="The job file (TOML)."),
    target_s: float = typer.Option(0.3, "--target-s", help="Seconds one run should take at --cpu and --workload."),
    cpu: float = typer.Option(
        2000, "--cpu", help="CPU limit (millicores) of the calibration runs: the grid's top level."
    ),
    workload: float = typer.Option(10, "--workload", help="Workload of the calibration runs: the grid's lowest."),
    tasks: str | None = typer.Option(None, "--tasks", help="Only these tasks, comma-separated (default: all)."),
    checks: int = typer.Option(3, "--checks", help="Verification runs per task (their median counts)."),
    scaling: bool = typer.Option(True, "--scaling/--no-scaling", help="Also time CPU/2 and 2 x workload."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds before a run is killed."),
    stress_ng: str = typer.Option("stress-ng", "--stress-ng", help="The stress-ng executable."),
    cgroup_prefix: str = typer.Option("bsp-planner", "--cgroup-prefix", help=_PREFIX_HELP),
    cpu_shares: int = typer.Option(262144, "--cpu-shares", help="As for `profile run`."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Print every calibration run."),
    json_out: bool = typer.Option(
        False, "--json", help="Print the suggestions as JSON on stdout instead of the table (messages go to stderr)."
    ),
) -> None:
    """Suggest ops_per_unit per task so one run at CPU and WORKLOAD takes about TARGET_S seconds."""
    from .calibrate import calibrate_task
    from .local import LocalBackend

    _seconds(target_s, "--target-s")
    _seconds(timeout, "--timeout")
    _shares(cpu_shares)
    _check_workload(workload)
    if checks < 1:
        raise InputError(f"expected at least 1, got {checks}", field="--checks")
    quota_us(_millicores(cpu, "--cpu"))
    console = Console(stderr=json_out)  # with --json, stdout holds the JSON document only
    the_job = load_job(shipped_or_given(job, "jobs") or job)
    selected = select_tasks(the_job, _task_list(tasks))
    results: list[Calibration] = []
    with LocalBackend(stress_ng=stress_ng, prefix=cgroup_prefix, cpu_shares=cpu_shares or None) as backend:
        backend.check(selected, the_job.path)
        for t in selected:
            with console.status(f"calibrating {t.name}..."):
                results.append(
                    calibrate_task(
                        backend.run,
                        t,
                        cpu_millicores=cpu,
                        workload=workload,
                        target_s=target_s,
                        timeout_s=timeout,
                        checks=checks,
                        scaling=scaling,
                        log=console.print if verbose else None,
                    )
                )
    if json_out:
        doc = {"cpu_millicores": cpu, "workload": workload, "target_s": target_s}
        print_json({**doc, "tasks": [dataclasses.asdict(r) for r in results]})
        return
    print_table(console, _calibration_table(results, cpu, workload, target_s))
    if scaling:
        console.print("ratios near 2 mean the stressor uses its whole CPU quota and costs ops linearly")
    console.print(f"\nops_per_unit values for {job}:")
    for r in results:
        console.print(f"  {r.task}: ops_per_unit = {r.ops_per_unit:g}", highlight=False)


def _calibration_table(results: list[Calibration], cpu: float, workload: float, target_s: float) -> Table:
    columns = ("task", "ops_per_unit now", "s now", "suggested", "s (median)", "t(cpu/2)/t", "t(2w)/t", "runs")
    table = Table(*columns, title=f"one run at {cpu:g}m, workload {workload:g}; target {target_s:g} s")
    for r in results:
        now = f"{r.old_duration_s:.3f}" if r.old_duration_s else "failed"
        ratios = [f"{x:.2f}" if x else "-" for x in (r.cpu_ratio, r.workload_ratio)]
        suggested = [f"{r.ops_per_unit:g}", f"{r.duration_s:.3f}"]
        table.add_row(r.task, f"{r.old_ops_per_unit:g}", now, *suggested, *ratios, str(r.runs))
    return table


@app.command("heatmap")
def heatmap(
    profile: Path = typer.Argument(..., help="A profile CSV."),
    out_dir: Path | None = typer.Option(
        None, "--out-dir", help="Where the PNGs go (default: heatmaps/ beside the profile)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the table's rows as JSON on stdout instead."),
) -> None:
    """One PNG heatmap per task: mean duration over workload x CPU limit."""
    from .heatmap import scaling_exponents, write_heatmaps

    prof = load_profile(profile)
    out_dir = out_dir or profile.parent / "heatmaps"
    check_output_dir(out_dir, "--out-dir")
    paths = write_heatmaps(prof, out_dir)
    columns = ("task", "min s", "max s", "cpu exponent", "workload exponent", "png")
    table = Table(*columns, title="duration ~ workload^b x cpu^-a (1 and 1 = ideal)")
    records = []
    for p, (name, tp) in zip(paths, prof.tasks.items(), strict=True):
        a, b = scaling_exponents(tp)
        table.add_row(name, f"{tp.duration_s.min():.2f}", f"{tp.duration_s.max():.2f}", f"{a:.2f}", f"{b:.2f}", str(p))
        records.append(
            {
                "task": name,
                "min_duration_s": float(tp.duration_s.min()),
                "max_duration_s": float(tp.duration_s.max()),
                "cpu_exponent": float(a),
                "workload_exponent": float(b),
                "png": str(p),
            }
        )
    if json_out:
        print_json(records)
    else:
        print_table(Console(), table)
