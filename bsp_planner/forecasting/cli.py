"""`bsp-planner forecast train | evaluate | predict`: per-task forecasters over a job.

Defaults come from the experiment file (its job, workload range, start, steps and forecast horizon);
TensorFlow is imported only by the commands that need it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Column, Table

from ..core import atomic
from ..core.errors import InputError
from ..core.outputs import check_output_dir
from ..core.tables import print_json, print_table
from ..inputs.job import load_job
from ..inputs.settings import apply_flag_overrides, flag_overrides
from ..inputs.shipped import find_experiment, output_base
from .base import LearnedForecaster
from .prepare import GAP_POLICIES
from .registry import DEFAULT_FORECASTER, FORECASTERS, TRAINED_FORECASTER, default_settings, is_learned

app = typer.Typer(
    help="Workload forecasters: train one model per task on the first half of its series, evaluate on the second, "
    "write the forecast matrices `simulate` reads.",
    no_args_is_help=True,
)
console = Console()
err_console = Console(stderr=True)  # progress and messages when stdout holds --json

ExperimentOpt = Annotated[
    Path | None,
    typer.Option(
        "--experiment",
        "-e",
        help="Experiment file (or a shipped experiment's name) for the job, workload range, start, steps and H "
        "\\[default: the shipped default].",
    ),
]
JobOpt = Annotated[Path | None, typer.Option("--job", help="Job file (instead of the experiment's job).")]
TaskOpt = Annotated[list[str] | None, typer.Option("--task", "-t", help="Only this task (repeatable).")]
HorizonOpt = Annotated[
    int | None,
    typer.Option("--horizon", "-H", help="Steps ahead to forecast \\[default: the experiment's forecast.horizon]."),
]
GapsOpt = Annotated[
    str | None,
    typer.Option(
        "--gaps",
        help="Gaps in a series' timestamps: error (refuse), fill (interpolate on the regular grid) or ignore (rows as "
        "consecutive steps) \\[default: the experiment's forecast.gaps if it has one, else the policy its shipped "
        "forecasts were made with, else error].",
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set", help="A forecaster setting, KEY=VALUE or FORECASTER.KEY=VALUE, e.g. --set units=64 (repeatable)."
    ),
]
ModelsOpt = Annotated[
    Path | None,
    typer.Option(
        "--models",
        help="Where models are read from and saved: <models>/<job>/<forecaster>/<task>.keras \\[default: read the "
        "shipped models; save what is trained under ./models].",
        show_default=False,
    ),
]
ShippedOpt = Annotated[
    bool,
    typer.Option(
        "--shipped",
        help="Save trained models into the package's shipped copy (bsp_planner/data/models; for maintainers, "
        "in a checkout) instead of ./models.",
    ),
]
RetrainOpt = Annotated[bool, typer.Option("--retrain", help="Train anew even if a saved model matches.")]


def _say(prefix: str, msg: str) -> None:
    console.print(f"[dim]{prefix}:[/] {msg}", highlight=False)


def _say_err(prefix: str, msg: str) -> None:
    err_console.print(f"[dim]{prefix}:[/] {msg}", highlight=False)


def _parse_settings(items: list[str] | None, names: list[str]) -> dict[str, dict]:
    """--set KEY=VALUE (for every learned forecaster asked for) or FORECASTER.KEY=VALUE."""
    out: dict[str, dict] = {}
    learned = [n for n in names if is_learned(n)]
    for item in items or []:
        if "=" not in item:
            raise InputError(f"expected KEY=VALUE, got {item!r}", field="--set")
        key, value = (x.strip() for x in item.split("=", 1))  # checked by the forecaster's settings loader
        # a bare KEY: every learned forecaster asked for that has such a setting
        targets = [n for n in learned if key in default_settings(n)] or learned
        if "." in key:
            fname, key = key.split(".", 1)
            if fname not in FORECASTERS:
                raise InputError(f"unknown forecaster '{fname}'; known: {', '.join(FORECASTERS)}", field="--set")
            # ensemble.KEY sets every ensemble asked for, `ensemble:a,b` too (its settings are the ensemble's)
            targets = [n for n in names if fname == "ensemble" and FORECASTERS.members(n) is not None] or [fname]
        if not targets:
            raise InputError(
                "settings apply to the learned forecasters (lstm, lstm-thesis, gbm, ensemble, ensemble-fit) only",
                field="--set",
            )
        for n in targets:
            out.setdefault(n, {})[key] = value
    for n, values in out.items():  # checked now, by the settings loader, before any data is read
        try:  # a forecaster without settings refuses any (baselines.NoSettings)
            cls = FORECASTERS.get(n)
            checked = cls.settings_type.from_dict(values)
            if n in names and getattr(cls, "members", None) and getattr(checked, "weights", None):
                cls.resolve_weights(checked.weights)  # type: ignore[attr-defined]  # one weight per member
        except InputError as exc:
            raise InputError(f"{exc.message} (from --set)", field=exc.field) from None
    return out


def _context(experiment, job, tasks, horizon, gaps, settings, names, models, shipped, experiment_flags=()):
    """(workspace, experiment, where models are read, where trained ones are saved) for a command.
    Read: --models, else the shipped models (package data). Saved: --models, the shipped copy with
    --shipped, else ./models (never the package folder by default: after a pip install it is
    site-packages). `experiment_flags` ((flag, KEY, value), e.g. --start) override the experiment's
    fields, checked as the file's are and before any series is read, an error naming the flag."""
    from ..inputs.experiment import load_experiment
    from .pipeline import DEFAULT_MODEL_ROOT, LOCAL_MODEL_ROOT, Workspace

    if shipped and models is not None:
        raise InputError("give either --models or --shipped, not both", field="--shipped")
    read = models if models is not None else DEFAULT_MODEL_ROOT
    save = models if models is not None else DEFAULT_MODEL_ROOT if shipped else LOCAL_MODEL_ROOT
    exp = apply_flag_overrides(load_experiment(find_experiment(experiment)), flag_overrides(experiment_flags))
    # --horizon stands for the experiment's forecast.horizon: checked as that field is (0 is refused, not
    # taken for "not given"), but not against the planner's horizon (a forecaster serves any planner)
    forecast = apply_flag_overrides(exp.forecast, flag_overrides([("--horizon", "horizon", horizon)]))
    job_path = job if job is not None else exp.job_path
    if gaps is None:  # ForecastSettings has no gaps field: the shipped forecasts' policy, else "error"
        gaps = _shipped_gap_policy(exp, job_path)
    if gaps not in GAP_POLICIES:
        raise InputError(f"expected one of {', '.join(GAP_POLICIES)}, got {gaps!r}", field="--gaps")
    for n in names:
        if n not in FORECASTERS:
            raise InputError(f"unknown forecaster '{n}'; known: {', '.join(FORECASTERS)}", field="--forecaster")
    ws = Workspace.load(
        job_path,
        workload_range=tuple(exp.workload_range),
        gaps=gaps,
        tasks=tasks,
        horizon=forecast.horizon,
        settings=_parse_settings(settings, names),
    )
    filled = [(p.task, p.filled) for p in ws.prepared if p.filled]
    if filled:  # messages, on stderr: stdout may hold --json
        err_console.print(
            "[yellow]gaps filled by interpolation:[/] " + ", ".join(f"{t} ({n} steps)" for t, n in filled),
            highlight=False,
        )
    return ws, exp, read, save


def _shipped_gap_policy(exp, job_path: Path) -> str:
    """The gap policy the experiment's shipped forecasts were made with, for the same job; else "error"."""
    from .provider import shipped_folders

    if exp.path is None:
        return "error"
    name = load_job(job_path).name
    for folder, meta in shipped_folders(exp.path.parent, DEFAULT_FORECASTER):
        if (
            meta["inputs"].get("job") == name
            and meta.get("experiment", exp.name) == exp.name
            and "gaps" in meta["inputs"]
        ):
            policy = meta["inputs"]["gaps"]
            if policy != "error":
                err_console.print(
                    f"[dim]gaps: {policy}, as the shipped forecasts in {folder} were made (--gaps to choose)[/]",
                    highlight=False,
                )
            return policy
    return "error"


@app.command()
def train(
    forecaster: Annotated[list[str], typer.Option("--forecaster", "-f", help="lstm or lstm-thesis (repeatable).")] = [  # noqa: B006  (typer needs a list; only read)
        TRAINED_FORECASTER
    ],
    experiment: ExperimentOpt = None,
    job: JobOpt = None,
    task: TaskOpt = None,
    horizon: HorizonOpt = None,
    gaps: GapsOpt = None,
    settings: SetOpt = None,
    models: ModelsOpt = None,
    shipped: ShippedOpt = False,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the trained models as JSON on stdout instead of the table (messages go to stderr)."
        ),
    ] = False,
) -> None:
    """Train one model per task on the first half of its series and save it (Keras format + metadata)
    under ./models (or --models; --shipped: the package's shipped models)."""
    from .pipeline import model_folder, prefixed, task_prefix, train_one

    for n in forecaster:
        if n in FORECASTERS and not issubclass(FORECASTERS.get(n), LearnedForecaster):
            what = (
                "is fitted on the job's series when used (nothing is saved)"
                if is_learned(n)
                else "has nothing to train"
            )
            raise InputError(f"{n} {what}; train lstm or lstm-thesis", field="--forecaster")
    ws, _, _, models = _context(experiment, job, task, horizon, gaps, settings, forecaster, models, shipped)
    columns = ("forecaster", "task", "epochs", "best epoch", "val RMSE", "seconds")
    table = Table(*columns, title=f"trained models · job {ws.job.name}")
    total = time.perf_counter()
    say = _say_err if json_out else _say
    out = console if not json_out else err_console
    trained: list[dict] = []
    for n in forecaster:
        folder = model_folder(models, ws.job.name, n)
        for i, p in enumerate(ws.prepared):
            prefix = task_prefix(ws, i, n)
            say(prefix, "training")
            t0 = time.perf_counter()
            f = train_one(ws, n, p, say=prefixed(say, prefix))
            assert isinstance(f, LearnedForecaster)  # checked with is_learned above
            f.save(folder, p.task, extra={"data": ws.data_identity(p)})
            dt = time.perf_counter() - t0
            info = f.info
            val = info.get("val_rmse")
            say(prefix, f"done in {dt:.1f} s" + (f", validation RMSE {val:.3f}" if val is not None else ""))
            trained.append(
                {
                    "forecaster": n,
                    "task": p.task,
                    "epochs": info.get("epochs_run"),
                    "best_epoch": info.get("best_epoch"),
                    "kept_start": bool(info.get("kept_start")),
                    "val_rmse": val,
                    "seconds": round(dt, 3),
                    "folder": str(folder),
                }
            )
            table.add_row(
                n,
                p.task,
                str(info.get("epochs_run", "")),
                "start (kept)" if info.get("kept_start") else str(info.get("best_epoch", "-")),
                f"{val:.3f}" if val is not None else "-",
                f"{dt:.1f}",
            )
    if json_out:
        print_json({"job": ws.job.name, "models": trained})
    else:
        print_table(console, table)
    where = ", ".join(str(model_folder(models, ws.job.name, n)) for n in forecaster)
    out.print(
        f"trained {len(forecaster) * len(ws.prepared)} models in {time.perf_counter() - total:.1f} s; saved in {where}"
    )
    if not shipped:
        out.print(f"forecast with them: bsp-planner forecast predict --models {models}", highlight=False)


@app.command()
def evaluate(
    forecaster: Annotated[
        list[str] | None,
        typer.Option("--forecaster", "-f", help="Forecasters to compare (repeatable) \\[default: all]."),
    ] = None,
    experiment: ExperimentOpt = None,
    job: JobOpt = None,
    task: TaskOpt = None,
    horizon: HorizonOpt = None,
    gaps: GapsOpt = None,
    settings: SetOpt = None,
    models: ModelsOpt = None,
    retrain: RetrainOpt = False,
    shipped: ShippedOpt = False,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder for evaluation.json, rmse_by_lead.csv and the plot.")
    ] = Path("out/forecast-eval"),
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Print evaluation.json on stdout instead of the tables (messages go to stderr)."),
    ] = False,
) -> None:
    """RMSE per lead time on the test halves, every forecaster side by side, and 80% interval coverage."""
    from .pipeline import evaluate as run_evaluation
    from .pipeline import plot_evaluation

    names = list(forecaster or FORECASTERS)
    check_output_dir(out, "--out")  # before any training
    ws, _, model_root, save_root = _context(experiment, job, task, horizon, gaps, settings, names, models, shipped)
    ev = run_evaluation(
        ws, names, model_root=model_root, retrain=retrain, save_root=save_root, say=_say_err if json_out else _say
    )
    evaluation = {**ev.to_dict(), "job": ws.job.name, "gaps": ws.gaps}
    if json_out:
        print_json(evaluation)
    else:
        print_evaluation(ev, ws.job.name)
    atomic.write_json(out / "evaluation.json", evaluation)
    lines = ["forecaster,task,lead,rmse"]
    for n in names:
        for t, rmse in [("all", ev.overall_rmse(n))] + [(t, s.rmse) for t, s in ev.scores[n].items()]:
            lines += [f"{n},{t},{h},{v:.4f}" for h, v in enumerate(rmse, start=1)]
    (out / "rmse_by_lead.csv").write_text("\n".join(lines) + "\n")
    png = plot_evaluation(
        ev, out / "rmse_by_lead.png", title=f"Forecast error against lead time · job {ws.job.name} (test halves)"
    )
    (err_console if json_out else console).print(
        f"wrote {out / 'evaluation.json'}, {out / 'rmse_by_lead.csv'} and {png}"
    )


def print_evaluation(ev, job_name: str) -> None:
    names = ev.forecasters
    t = Table(
        "task",
        *(Column(n, justify="right") for n in names),
        title=f"job {job_name} · test halves · mean RMSE over lead times 1..{ev.horizon} (workload units) "
        "· coverage of the 80% interval",
        caption="bold: the lowest RMSE of the row; 'all tasks' pools every task's errors per lead time",
    )

    def row(rmse: dict[str, float], cover: dict[str, str]) -> list[str]:
        best = min(rmse.values())
        return [
            f"[bold]{rmse[n]:.3f} · {cover[n]}[/]" if rmse[n] == best else f"{rmse[n]:.3f} · {cover[n]}" for n in names
        ]

    for task in ev.tasks:
        s = {n: ev.scores[n][task] for n in names}
        t.add_row(task, *row({n: s[n].mean_rmse for n in names}, {n: f"{s[n].coverage:.0%}" for n in names}))
    t.add_section()
    overall = {n: float(ev.overall_rmse(n).mean()) for n in names}
    t.add_row("all tasks", *row(overall, {n: f"{ev.overall_coverage(n):.1%}" for n in names}))
    print_table(console, t)
    lt = Table(*(Column(c, justify="right") for c in ["lead", *names]), title="RMSE by lead time, all tasks together")
    rm = {n: ev.overall_rmse(n) for n in names}
    for h in range(ev.horizon):
        lt.add_row(str(h + 1), *[f"{rm[n][h]:.3f}" for n in names])
    print_table(console, lt)


@app.command()
def predict(
    forecaster: Annotated[
        str, typer.Option("--forecaster", "-f", help="Which forecaster makes them.")
    ] = DEFAULT_FORECASTER,
    experiment: ExperimentOpt = None,
    job: JobOpt = None,
    horizon: HorizonOpt = None,
    gaps: GapsOpt = None,
    settings: SetOpt = None,
    start: Annotated[int | None, typer.Option("--start", help="First step \\[default: the experiment's].")] = None,
    steps: Annotated[int | None, typer.Option("--steps", help="Steps \\[default: the experiment's].")] = None,
    models: ModelsOpt = None,
    retrain: RetrainOpt = False,
    shipped: ShippedOpt = False,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Folder for <task>.csv + forecasts.json \\[default: experiments/forecasts/<experiment>/ for "
            f"{DEFAULT_FORECASTER}, .../<experiment>-<forecaster>/ otherwise].",
        ),
    ] = None,
) -> None:
    """Write the forecast matrices of an experiment's steps (row t: the next H values predicted before step t)."""
    from .files import write_forecasts
    from .pipeline import forecast_experiment

    flags = [("--start", "start", start), ("--steps", "steps", steps)]
    ws, exp, model_root, save_root = _context(
        experiment, job, None, horizon, gaps, settings, [forecaster], models, shipped, flags
    )
    start, steps = exp.start, exp.steps
    if out is None:
        out = (
            output_base(exp.path)
            / "forecasts"
            / (exp.name if forecaster == DEFAULT_FORECASTER else f"{exp.name}-{forecaster}")
        )
    check_output_dir(out, "--out")  # before any training
    t0 = time.perf_counter()
    matrix, meta = forecast_experiment(
        ws,
        forecaster,
        start,
        steps,
        model_root=model_root,
        retrain=retrain,
        save_root=save_root,
        say=_say,
    )
    meta["experiment"] = exp.name
    write_forecasts(out, [p.task for p in ws.prepared], matrix, meta)  # every task, in the job's order
    console.print(
        f"wrote {forecaster} forecasts for steps {start}..{start + steps - 1} (H = {ws.horizon}) of {len(ws.prepared)} tasks "
        f"to {out} in {time.perf_counter() - t0:.1f} s · digest {meta['digest']}"
    )
    if np.isnan(matrix).any():  # pragma: no cover - a bug, not an input problem
        raise RuntimeError("forecasts contain NaN")
