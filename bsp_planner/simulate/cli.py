"""`bsp-planner simulate`: run every strategy of an experiment in simulation and compare them."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from ..core.errors import InputError, InputWarning
from ..core.filelock import output_lock
from ..core.outputs import check_output_dir
from ..inputs.settings import apply_flag_overrides, flag_overrides, flags_blamed
from ..inputs.shipped import describe_experiment, experiment_names, find_experiment, shipped_or_given

if TYPE_CHECKING:
    from rich.progress import Progress

    from ..inputs.experiment import Experiment
    from .scenario import Scenario

QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.", metavar="")]


def progress_bar(console: Console, quiet: bool, *, transient: bool, last: bool = False) -> Progress:
    """The progress bar of a long command (`rl train`'s too): what it does, how far, how long; with
    `last`, a column for its task's `last` field (the latest evaluation)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
    columns += [TimeElapsedColumn(), TimeRemainingColumn(), *([TextColumn("{task.fields[last]}")] if last else [])]
    return Progress(*columns, console=console, disable=quiet, transient=transient)


def simulate(
    experiment: Annotated[
        Path | None,
        typer.Argument(
            help=f"Experiment file (TOML), or the name of a shipped one ({', '.join(experiment_names())}) "
            "; without one, the shipped default.",
            show_default=False,
        ),
    ] = None,
    experiment_opt: Annotated[
        Path | None, typer.Option("--experiment", "-e", help="The same as the argument.", show_default=False)
    ] = None,
    strategies: Annotated[
        str | None, typer.Option("--strategies", "-s", help="Comma-separated, e.g. 'exppo,static:3,dp,mpc,floor'.")
    ] = None,
    mode: Annotated[
        list[str] | None, typer.Option("--mode", "-m", help="perfect and/or forecast (repeatable).")
    ] = None,
    steps: Annotated[int | None, typer.Option(help="Supersteps to simulate.")] = None,
    start: Annotated[int | None, typer.Option(help="First step, counted into the test half of the series.")] = None,
    penalty: Annotated[float | None, typer.Option("--penalty", help="Checkpoint penalty C in seconds.")] = None,
    budget: Annotated[float | None, typer.Option("--budget", help="CPU budget in millicores.")] = None,
    allocator: Annotated[str | None, typer.Option(help="greedy, threshold or exact.")] = None,
    forecasts: Annotated[
        str | None, typer.Option("--forecasts", help="Forecaster name or folder of forecast CSVs.")
    ] = None,
    actual: Annotated[
        Path | None,
        typer.Option(
            "--actual",
            help="Folder of per-task CSVs to replay as actual workloads, or a live run's folder (the workloads its tasks ran).",
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Output folder (default: the experiment's).")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override any field: KEY=VALUE or SECTION.KEY=VALUE (repeatable).")
    ] = None,
    quiet: QuietOpt = False,
    online: Annotated[
        bool,
        typer.Option(
            "--online", metavar="", help="Forecast before every step from the observed history (no forecast file)."
        ),
    ] = False,
    learn: Annotated[
        bool,
        typer.Option(
            "--learn", metavar="", help="The performance model learns from every measured step (learning.csv)."
        ),
    ] = False,
    true_profile: Annotated[
        Path | None,
        typer.Option("--true-profile", help="Profile the simulated tasks really follow (plan on the experiment's)."),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            help="Run strategies and modes in this many processes (results identical to 1; default: the CPUs "
            "this process may use).",
        ),
    ] = None,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json",
            metavar="",
            help="Print the comparison's rows as JSON on stdout instead of tables (messages go to stderr).",
        ),
    ] = False,
) -> None:
    """Compare reconfiguration strategies on a job in simulation (table, CSV/JSON/Markdown, chart)."""
    from ..core.tables import print_json
    from ..inputs.experiment import load_experiment
    from ..inputs.profiles import warn_if_other_processor
    from .parallel_runs import check_jobs, default_jobs, run_pairs
    from .report import comparison_rows, print_table, write_outputs
    from .runs import check_strategies, offline_strategies, one_pool_strategies
    from .scenario import build_scenario

    if experiment is not None and experiment_opt is not None and experiment != experiment_opt:
        raise InputError(
            f"two experiments given ({experiment} and --experiment {experiment_opt}); give one", field="--experiment"
        )

    console = Console(stderr=json_out)  # with --json, stdout holds the JSON document only
    # every flag as an override (flag, KEY=VALUE), --set first, then the named flags: they go through the same
    # settings loader as the file, so an error names the flag
    flagged = [("--set", item) for item in set_ or []] + flag_overrides(
        [
            ("--strategies", "strategies", strategies),
            ("--steps", "steps", steps),
            ("--start", "start", start),
            ("--penalty", "penalty_s", penalty),
            ("--budget", "cpu.budget_millicores", budget),
            ("--allocator", "planner.allocator", allocator),
            ("--forecasts", "forecast.source", _folder_from_cwd(forecasts)),
            ("--mode", "modes", mode),
            ("--actual", "forecast.actual", shipped_or_given(actual, "traces")),
            ("--online", "online", online),
            ("--learn", "learn", learn),
            ("--true-profile", "true_profile", true_profile),
        ]
    )
    exp = apply_flag_overrides(load_experiment(find_experiment(experiment or experiment_opt)), flagged)
    # the experiment's own list (not one the user just typed): leave out what cannot plan step by step
    own_list = strategies is None and not any(item.startswith("strategies=") for _, item in flagged)
    left_out = offline_strategies(exp.strategies) if (exp.online or exp.learn) and own_list else []
    if left_out:
        exp.strategies = [s for s in exp.strategies if s not in left_out]
        console.print(
            f"[yellow]note[/]: {', '.join(left_out)} left out: planning step by step (online/learn), and "
            f"{'they plan' if len(left_out) > 1 else 'it plans'} the whole job before the first step"
        )
    with flags_blamed(flagged, exp.path):
        check_strategies(exp.strategies, exp)
    costs = exp.reconfigure_cost
    if not exp.node and (costs.in_place_s is not None or costs.recreate_s is not None):
        warnings.warn(
            f"{exp.path}: [reconfigure_cost] is not used by simulate in a one-pool experiment (no [[node]]): every "
            f"change is charged penalty_s ({exp.penalty_s:g} s); `run` plans with it",
            InputWarning,
            stacklevel=1,
        )
    jobs = default_jobs() if jobs is None else check_jobs(jobs)
    out_dir = out if out is not None else exp.output_path
    out_flag = "--out" if out is not None else "output"
    check_output_dir(out_dir, out_flag)
    with output_lock(out_dir, out_flag):  # a second simulate into the same folder is refused, naming this pid
        t0 = time.perf_counter()
        with flags_blamed(flagged, exp.path):  # a budget too small for the job's tasks: --budget's fault, if it set it
            scen = build_scenario(exp)
        _refuse_unknown_workloads(exp, scen)
        warn_if_other_processor(exp.profile_path)
        pairs = [(m, s) for m in exp.modes for s in exp.strategies] + one_pool_strategies(scen, exp.strategies)
        with progress_bar(console, quiet, transient=True) as progress:  # every pair, on `jobs` processes
            bar = progress.add_task("simulating", total=len(pairs))
            results = run_pairs(
                scen,
                pairs,
                jobs,
                on_start=lambda m, s: progress.update(bar, description=f"{m:8s} {s}"),
                on_done=lambda m, s: progress.advance(bar),
            )
        elapsed = time.perf_counter() - t0
        paths = write_outputs(
            out_dir, results, _run_meta(exp, scen, out_dir, elapsed), scen.task_names, scen.cpu.to_millicores
        )
    rows = comparison_rows(results)
    if json_out:
        print_json(rows)
    for m in exp.modes if not json_out else ():  # a table per mode, then the run's size and time
        print_table(
            [r for r in rows if r["mode"] == m],
            console,
            title=f"{exp.name} · {m} mode · predictions: {scen.forecast_label[m]}",
        )
    pl = scen.placement  # on nodes a change costs what it is: a resize in place, or a move
    cost = (
        f"penalty {exp.penalty_s:g} s"
        if pl is None
        else f"a change in place {pl.in_place_s:g} s, a task moved {pl.recreate_s:g} s"
    )
    console.print(
        f"{len(scen.task_names)} tasks x {exp.steps} steps, {cost}, budget "
        f"{exp.cpu.budget_millicores:g}m; {len(results)} runs in {elapsed:.1f} s"
    )
    if scen.interference:
        console.print(scen.interference, highlight=False)
    learned = f", {paths['learning'].name}" if "learning" in paths else ""
    console.print(
        f"wrote {paths['md']}, {paths['csv'].name}, {paths['json'].name}, {paths['steps'].name}{learned}, "
        f"chart {paths['chart']}"
    )


def _refuse_unknown_workloads(exp: Experiment, scen: Scenario) -> None:
    """A task with neither a series nor a replayed trace: its workloads exist only in a run (the task
    reports them), so a simulation would charge invented ones. Refused, naming the fix."""
    unknown = [t for t, known in zip(scen.task_names, scen.known_workloads, strict=True) if not known]
    if unknown and not exp.forecast.actual:
        raise InputError(
            f"task '{unknown[0]}' has no series, so simulate does not know its workloads (it reports them only as "
            "it runs): replay those of an earlier run with `--actual runs/<run-id>` (a live run's folder) or "
            "`simulate --actual DIR` (one <task>.csv per task, header workload), or give every task a "
            "`series = { file = ... }`",
            path=scen.job.path,
            field=f"{unknown[0]}.series",
        )


def _folder_from_cwd(source: str | None) -> str | Path | None:
    """--forecasts names a forecaster or a folder; a folder given on the command line is relative to the
    current directory, as every other path flag (the experiment's own `forecast.source`, to its file)."""
    if source is None or not ("/" in source or Path(source).is_dir()):
        return source
    return Path(source)  # written absolute by flag_overrides


def _run_meta(exp: Experiment, scen: Scenario, out_dir: Path, elapsed: float) -> dict:
    """What comparison.json records about the run besides its results."""
    return {
        # how the experiment and profile were named, never this machine's absolute paths
        "experiment": describe_experiment(exp.path, out_dir),
        "job": scen.job.name,
        "profile": exp.profile,
        "steps": exp.steps,
        "start": exp.start,
        "penalty_s": exp.penalty_s,
        "budget_millicores": exp.cpu.budget_millicores,
        "forecasts": scen.forecast_label,
        **({"interference": scen.interference} if scen.interference else {}),
        "settings": exp.to_dict(),
        "elapsed_s": round(elapsed, 3),
    }
