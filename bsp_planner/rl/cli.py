"""`bsp-planner rl ...`: train and evaluate reinforcement-learning agents for reconfiguration.

    bsp-planner rl train                       # DQN on envs/default.toml -> ./agents/default/dqn.zip
    bsp-planner rl train --shipped             # ... into the package's shipped agent (maintainers)
    bsp-planner rl train --algo ppo --timesteps 200000
    bsp-planner rl evaluate                    # the shipped agent vs MPC on its held-out steps
    bsp-planner rl info agents/default/dqn.zip
    bsp-planner simulate --strategies dqn,mpc  # the agent as a planner

torch, stable-baselines3 and gymnasium are imported inside the commands only.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Column, Table

from ..core import atomic
from ..core.errors import InputError
from ..core.outputs import check_output_dir, check_output_file
from ..core.tables import print_json, print_table
from ..inputs.settings import apply_flag_overrides, apply_overrides, flag_overrides, flags_blamed
from ..simulate.cli import QuietOpt

if TYPE_CHECKING:
    from .settings import EnvSettings
    from .train import TrainResult

app = typer.Typer(
    help="Reinforcement-learning planners: train and evaluate agents (DQN, PPO, A2C).", no_args_is_help=True
)

EnvArg = Annotated[Path | None, typer.Argument(help="Environment file (TOML); default envs/default.toml.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Experiment override KEY=VALUE (repeatable), e.g. forecast.source=persistence (paths relative to the "
        "experiment file).",
    ),
]
EnvSetOpt = Annotated[
    list[str] | None,
    typer.Option("--env-set", help="Environment override KEY=VALUE (repeatable), e.g. window=8, agent.gamma=0.9."),
]


@app.command("train")
def train(
    env: EnvArg = None,
    algo: Annotated[str | None, typer.Option("--algo", help="dqn (default), ppo or a2c.")] = None,
    timesteps: Annotated[int | None, typer.Option("--timesteps", "-n", help="Environment steps to train for.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed of the learner and the environment.")] = None,
    train_range: Annotated[
        str | None, typer.Option("--train-range", help="Steps to learn on, START:END (end exclusive).")
    ] = None,
    eval_range: Annotated[
        str | None, typer.Option("--eval-range", help="Held-out steps to evaluate on, START:END.")
    ] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="Refuse a training range that overlaps the evaluation range.")
    ] = False,
    agent: Annotated[
        Path | None,
        typer.Option("--agent", help="Where to save the agent (default ./agents/<env>/<algo>.zip)."),
    ] = None,
    shipped: Annotated[
        bool,
        typer.Option(
            "--shipped",
            help="Save the agent as the package's shipped one (bsp_planner/data/agents/<env>/<algo>.zip; for "
            "maintainers, in a checkout) instead of ./agents.",
        ),
    ] = False,
    run_dir: Annotated[
        Path | None, typer.Option("--run-dir", help="Logs, checkpoints, plot (default out/rl/<env>-<algo>).")
    ] = None,
    eval_every: Annotated[
        int | None, typer.Option("--eval-every", help="Evaluate on the held-out range every N steps.")
    ] = None,
    checkpoint_every: Annotated[
        int | None, typer.Option("--checkpoint-every", help="Save a checkpoint every N steps.")
    ] = None,
    set_: SetOpt = None,
    env_set: EnvSetOpt = None,
    quiet: QuietOpt = False,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the held-out results as JSON on stdout instead of the table (messages go to stderr)."
        ),
    ] = False,
) -> None:
    """Train an agent on the environment's training steps, evaluating it on the held-out steps."""
    from ..inputs.experiment import load_experiment
    from .data import experiment_overrides
    from .settings import DEFAULT_AGENT_DIR, StepRange, load_env_settings

    if shipped and agent is not None:
        raise InputError("give either --agent or --shipped, not both", field="--shipped")
    console = Console(stderr=json_out)  # with --json, stdout holds the JSON document only
    flagged = flag_overrides(
        [
            ("--algo", "agent.algo", algo),
            ("--timesteps", "agent.timesteps", timesteps),
            ("--seed", "agent.seed", seed),
            ("--eval-every", "agent.eval_every", eval_every),
            ("--checkpoint-every", "agent.checkpoint_every", checkpoint_every),
        ]
    )
    for key, text in (("train", train_range), ("eval", eval_range)):
        if text is not None:
            r = StepRange.parse(text, f"--{key}-range")
            flagged += flag_overrides(
                [(f"--{key}-range", f"{key}.start", r.start), (f"--{key}-range", f"{key}.steps", r.steps)]
            )
    # --env-set, then the named flags, each error naming its flag
    s = apply_flag_overrides(load_env_settings(env), [("--env-set", item) for item in env_set or []] + flagged)
    a = s.agent
    # Not into the package by default: after a pip install that is site-packages.
    agents_root = DEFAULT_AGENT_DIR.parent if shipped else Path("agents")
    agent_path = agent if agent is not None else (agents_root / s.name / f"{a.algo}.zip")
    out = run_dir if run_dir is not None else Path("out") / "rl" / f"{s.name}-{a.algo}"
    # Every input checked before any training (or the shipped agent's folder) is touched.
    check_output_dir(out, "--run-dir")
    check_output_file(agent_path, "--shipped" if shipped else "--agent")
    load_experiment(s.experiment_path, experiment_overrides(s, s.train, set_))  # as the training's build_data
    console.print(
        f"training {a.algo.upper()} for {a.timesteps} steps on steps {s.train} ({s.mode} mode; window {s.window}, "
        f"actions a0..a{s.horizon_actions}, seed {a.seed}); held-out evaluation on steps {s.eval}"
    )
    result = _train_with_progress(console, s, out, agent_path, strict, list(set_ or []), quiet)
    m = result.meta
    rows = {a.algo: m["eval"], **m["baseline"]}
    if json_out:  # the fields of `rl evaluate --json`, the training's own added
        print_json(
            {
                "agent": str(result.agent_path),
                "train_range": asdict(s.train),
                "eval_range": asdict(s.eval),
                "mode": s.mode,
                "forecasts": m["eval_forecasts"],
                "train_seconds": m["train_seconds"],
                "results": rows,
            }
        )
    else:
        _print_comparison(console, rows, f"held-out steps {s.eval} · {s.mode} mode · {m['eval_forecasts']}")
    console.print(f"trained in {m['train_seconds']:.0f} s; agent {result.agent_path} (+ .json)")
    if not shipped:
        console.print(f"plan with it: bsp-planner simulate --strategies rl:{result.agent_path}", highlight=False)
    console.print(f"logs {out}: eval.csv, learning_curve.png, tb/ (tensorboard --logdir {out / 'tb'}), checkpoints/")


def _train_with_progress(
    console: Console, s: EnvSettings, out: Path, agent_path: Path, strict: bool, overrides: list[str], quiet: bool
) -> TrainResult:
    """train_agent with a progress bar showing the latest held-out evaluation; Ctrl-C says what is kept."""
    from ..simulate.cli import progress_bar
    from .train import train_agent

    a = s.agent
    with progress_bar(console, quiet, transient=False, last=True) as progress:
        bar = progress.add_task(a.algo, total=a.timesteps, last="")

        def tick(n: int, last: dict | None) -> None:
            text = f"held-out {last['total_s']:.1f} s, {last['reconfigurations']} reconf." if last else ""
            progress.update(bar, completed=min(n, a.timesteps), last=text)

        try:
            return train_agent(
                s,
                out,
                agent_path,
                strict=strict,
                extra_overrides=overrides,
                progress=tick,
                warn=lambda m: console.print(f"[yellow]warning:[/] {m}"),
            )
        except KeyboardInterrupt:
            progress.stop()
            console.print(f"interrupted: no agent saved; checkpoints so far are in {out / 'checkpoints'}")
            raise typer.Exit(130) from None


def _print_comparison(console: Console, rows: dict[str, dict], title: str) -> None:
    table = Table(
        "strategy", *(Column(c, justify="right") for c in ("total s", "compute s", "reconfigurations")), title=title
    )
    for name, r in rows.items():
        table.add_row(name, f"{r['total_s']:.2f}", f"{r['compute_s']:.2f}", str(r["reconfigurations"]))
    print_table(console, table)


@app.command("evaluate")
def evaluate(
    agent: Annotated[Path | None, typer.Option("--agent", help="Agent .zip (default: the shipped DQN agent).")] = None,
    env: Annotated[
        Path | None, typer.Option("--env", help="Environment file (default: the one the agent was trained with).")
    ] = None,
    strategies: Annotated[
        str, typer.Option("--strategies", "-s", help="Planners to compare with, comma-separated.")
    ] = "mpc",
    eval_range: Annotated[str | None, typer.Option("--eval-range", help="Steps to evaluate on, START:END.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Refuse steps the agent was trained on.")] = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the results as JSON here.")] = None,
    set_: SetOpt = None,
    env_set: EnvSetOpt = None,
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Print the results as JSON on stdout instead of tables (messages go to stderr)."),
    ] = False,
) -> None:
    """Run an agent and other planners on held-out steps; totals and reconfigurations."""
    from ..simulate.runs import check_strategies
    from .agent import load_agent
    from .planner import default_agent_path
    from .settings import StepRange, load_env_settings, shipped_relative
    from .train import evaluate_agent

    console = Console(stderr=json_out)  # with --json, stdout holds the JSON document only
    if out is not None:
        check_output_file(out, "--out")  # before the runs
    names = [x.strip() for x in strategies.split(",") if x.strip()]
    with flags_blamed([("--strategies", f"strategies={strategies}")]):
        check_strategies(names)  # before the forecasts the environment needs (minutes)
    ag = load_agent(agent if agent is not None else default_agent_path())
    extra = list(env_set or [])
    if eval_range is not None:
        r = StepRange.parse(eval_range, "--eval-range")
        extra += [f"eval.start={r.start}", f"eval.steps={r.steps}"]
    s = load_env_settings(env, extra) if env is not None else apply_overrides(ag.settings(), extra, flag="--env-set")
    if not strict and ag.train_range.overlaps(s.eval):
        console.print(f"[yellow]warning:[/] the agent was trained on steps {ag.train_range}, which overlap {s.eval}")
    runs, data = evaluate_agent(ag, s, names, extra_overrides=list(set_ or []), strict=strict)
    rows = {k: v.to_dict() for k, v in runs.items()}
    if not json_out:
        _print_comparison(console, rows, f"{ag.path.name} · steps {s.eval} · {s.mode} mode · {data.forecast_label}")
    oos = "yes" if not ag.train_range.overlaps(s.eval) else "no"
    console.print(
        f"agent trained on steps {ag.train_range} ({ag.meta.get('timesteps')} steps, seed {ag.meta.get('seed')}); "
        f"out of sample: {oos}"
    )
    results = {
        "agent": shipped_relative(ag.path),  # a shipped agent as agents/default/dqn.zip, not this machine's path
        "eval_range": asdict(s.eval),
        "mode": s.mode,
        "forecasts": data.forecast_label,
        "out_of_sample": oos == "yes",
        "results": rows,
    }
    if json_out:
        print_json(results)
    if out is not None:
        atomic.write_json(out, results)
        console.print(f"wrote {out}")


@app.command("info")
def info(
    agent: Annotated[Path | None, typer.Argument(help="Agent .zip (default: the shipped DQN agent).")] = None,
) -> None:
    """What an agent expects and how it was trained (its metadata), without loading the model."""
    from .agent import agent_file, read_metadata
    from .planner import default_agent_path
    from .settings import StepRange

    path = agent_file(agent) if agent is not None else default_agent_path()
    if not Path(path).is_file():
        raise InputError("agent file not found; train one with `bsp-planner rl train`", path=path)
    m = read_metadata(path)
    e = m["env"]
    console = Console()
    console.print(
        f"{path}: {m['algo'].upper()}, observations ({e['actions']}, {e['window']}), actions a0..a{e['actions'] - 1}"
    )
    console.print(
        f"trained {m.get('timesteps')} steps, seed {m.get('seed')}, on steps {StepRange(**m['train_range'])} "
        f"({e['mode']} mode, {m.get('forecasts')}), penalty {m.get('penalty_s')} s, in {m.get('train_seconds')} s"
    )
    if m.get("eval"):
        ev = m["eval"]
        r = StepRange(**m["eval_range"])
        line = f"held-out steps {r}: {ev['total_s']} s, {ev['reconfigurations']} reconfigurations"
        for k, b in (m.get("baseline") or {}).items():
            line += f"; {k} {b['total_s']} s, {b['reconfigurations']}"
        console.print(line)
