"""`bsp-planner run`, `bsp-planner worker` and `bsp-planner zk start|stop|status`.

    bsp-planner zk start
    bsp-planner run --planner mpc                      # the shipped live-default experiment, local backend
    bsp-planner run --resume live-20261121-101500-ab12

Credentials for ZooKeeper's digest ACLs never appear on a command line: `--zk-auth-file FILE` (a file
holding `user:password`, mode 600), or $BSP_PLANNER_ZK_AUTH_FILE, or $BSP_PLANNER_ZK_AUTH; with none of
them a run makes its own (runs/<run-id>/zk-auth) and hands it to its workers.
"""

from __future__ import annotations

import math
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from ..core.errors import InputError
from ..core.outputs import check_output_dir
from ..core.signals import routed_to
from ..inputs.job import load_job
from ..inputs.series import load_job_series
from ..inputs.settings import apply_flag_overrides, flag_overrides
from ..inputs.shipped import find_experiment
from ..profiling.cgroups import CFS_PERIOD_US
from .zkserver import DEFAULT_DATA_DIR, DEFAULT_PORT, LocalZooKeeper, configured_port, running_servers, stop_command

if TYPE_CHECKING:
    from .coordinator import Coordinator
    from .metrics import RunMetrics
    from .run_settings import MetricsEndpoint, RunSettings
    from .watchers import RunWatcher

zk_app = typer.Typer(
    help="A local ZooKeeper server for live runs (Debian's zookeeper package, or ZOOKEEPER_HOME).", no_args_is_help=True
)

METRICS_PORT_ENV = "BSP_PLANNER_METRICS_PORT"  # the in-cluster coordinator's manifest sets both
METRICS_HOST_ENV = "BSP_PLANNER_METRICS_HOST"
_HOSTS_HELP = "ZooKeeper connection string host:port[,host:port...] (default $BSP_PLANNER_ZOOKEEPER or 127.0.0.1:2181)."
_AUTH_HELP = (
    "File holding user:password for the run's digest ACL (mode 600); or set $BSP_PLANNER_ZK_AUTH_FILE / "
    "$BSP_PLANNER_ZK_AUTH."
)


def _hosts(value: str | None) -> str:
    from ..zk.session import DEFAULT_HOSTS, ENV_HOSTS

    return value or os.environ.get(ENV_HOSTS) or DEFAULT_HOSTS


# `run`'s options of the kubernetes backend only: none given by default (the backend's environment decides)
_K8S = {
    flag: typer.Option(None, flag, help=f"kubernetes: {text}")
    for flag, text in (
        ("--namespace", "the namespace (default: the pod's own, the kubeconfig context's, else bsp-planner)."),
        ("--image", "the workers' image (default $BSP_PLANNER_IMAGE, or the coordinator pod's own)."),
        ("--kubeconfig", "kubeconfig file (default $KUBECONFIG; in-cluster config inside a pod)."),
        ("--context", "kubeconfig context."),
        ("--zk-auth-secret", "Secret (key `auth`) the worker pods read the ZooKeeper credentials from."),
        ("--worker-zookeeper", "ZooKeeper as the pods reach it (default zookeeper.<namespace>.svc:2181)."),
        ("--pending-timeout", "seconds a pod may stay Pending before the run stops, resumable (default 120)."),
        ("--node-selector", "key=value[,key=value] for the worker pods."),
    )
}


def _flag(name: str) -> str:
    """The `run` option of a parameter or RunSettings field: set_ -> --set, zk_wait_s -> --zk-wait."""
    return "--" + name.removesuffix("_s").replace("_", "-").strip("-")


# RunSettings fields a `run` option sets: a value the settings loader refuses is named by its option
_RUN_FLAGS = {
    field: _flag(field)
    for field in (
        "mode reconfigure backend zookeeper zk_root session_timeout_s zk_wait_s step_timeout_s barrier stress_ng "
        "cgroup_prefix cpu_weight cfs_period_us"
    ).split()
}


# `run` options whose value is the RunSettings field of the same name, as given
_SAME_NAMED = (
    "planner reconfigure backend zk_root stress_ng cgroup_prefix cpu_weight cfs_period_us keep_zk barrier".split()
)


def run(
    ctx: typer.Context,
    experiment: Path = typer.Option(
        Path("live-default"),
        "--experiment",
        "-e",
        help="Experiment file (TOML), or a shipped experiment's name: job, profile, CPU levels, planner settings.",
    ),
    job: Path | None = typer.Option(None, "--job", help="Job file, instead of the experiment's."),
    planner: str = typer.Option("mpc", "--planner", "-p", help="mpc, static:K, exppo, dp, dqn..., as in simulate."),
    mode: str = typer.Option("perfect", "--mode", "-m", help="perfect or forecast: what the planner is told."),
    reconfigure: str | None = typer.Option(
        None,
        "--reconfigure",
        help="recreate (checkpoint, stop, start under the new quota), in-place (rewrite the quota; Kubernetes 1.33+), "
        "or auto (in place where the backend can). Default: in-place for a job with process tasks (their state is in "
        "memory: recreate is refused unless they say restorable = true), else the backend's (local: recreate; "
        "kubernetes: $BSP_PLANNER_K8S_RECONFIGURE, else auto).",
    ),
    backend: str = typer.Option(
        "local",
        "--backend",
        help="Where tasks run: local (processes under cgroup CPU quotas) or kubernetes (one pod per task).",
    ),
    steps: int | None = typer.Option(None, "--steps", help="Supersteps to run (default: the experiment's)."),
    online: bool = typer.Option(
        False,
        "--online",
        help="Forecast the workloads before every step from the history observed so far (the experiment's forecaster, "
        "seeded with the job's series; no forecast file); implies --mode forecast.",
    ),
    learn: bool = typer.Option(
        False,
        "--learn",
        help="The performance model learns from every measured step (the profile its prior); each step's predicted vs "
        "measured, before and after learning, goes to the run log.",
    ),
    set_: list[str] | None = typer.Option(
        None, "--set", help="Override an experiment field: KEY=VALUE or SECTION.KEY=VALUE (repeatable)."
    ),
    zookeeper: str | None = typer.Option(None, "--zookeeper", help=_HOSTS_HELP),
    zk_root: str | None = typer.Option(None, "--zk-root", help="The run's znode (default /bsp-planner/runs/<run-id>)."),
    zk_auth_file: Path | None = typer.Option(None, "--zk-auth-file", help=_AUTH_HELP),
    zk_wait: float = typer.Option(
        30.0, "--zk-wait", help="Seconds to wait for an unreachable ZooKeeper before giving up (at start and mid-run)."
    ),
    session_timeout: float = typer.Option(10.0, "--session-timeout", help="ZooKeeper session timeout in seconds."),
    step_timeout: float | None = typer.Option(
        None,
        "--step-timeout",
        help="Seconds one superstep may take, from publishing it to every task's release, before the run stops "
        "(default 600; on --resume, the run's own unless given).",
    ),
    barrier: str = typer.Option(
        "double",
        "--barrier",
        help="The steps' ZooKeeper barrier: double (the tasks count each other) or counting (the coordinator "
        "counts the arrivals: fewer requests per task, for many tasks).",
    ),
    run_id: str | None = typer.Option(
        None, "--run-id", help="Name of the run folder runs/<run-id> (default: live-<date>-<time>-<hex>)."
    ),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Where run folders go."),
    resume: str | None = typer.Option(
        None, "--resume", help="Continue this run from its last completed step, with the same plan."
    ),
    keep_zk: bool = typer.Option(False, "--keep-zk", help="Keep the run's znodes when it finishes."),
    stress_ng: str = typer.Option("stress-ng", "--stress-ng", help="The stress-ng executable."),
    cgroup_prefix: str = typer.Option(
        "bsp-planner", "--cgroup-prefix", help="Name start of the run's cgroup (<prefix>.live.<run-id>)."
    ),
    cpu_weight: str = typer.Option(
        "guaranteed",
        "--cpu-weight",
        help="Local backend: the run group's weight against other processes: guaranteed (tasks get their CPU ahead of "
        "other work; quotas still cap each task) or workers (as the profiler weighs its runs).",
    ),
    cfs_period_us: int | None = typer.Option(
        None,
        "--cfs-period-us",
        help="Local backend: the CFS period of the tasks' CPU quotas, in microseconds. Default: the period the "
        f"profile was measured at (profile run --cfs-period-us), else {CFS_PERIOD_US}. A 10 ms period cuts the "
        "step-to-step jitter of small quotas and the wait of a throttled task's report.",
    ),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="No per-step lines (the planned reconfiguration cost and the totals are kept)."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print summary.json on stdout, not the table (the rest: stderr)."
    ),
    metrics_port: str | None = typer.Option(
        None,
        "--metrics-port",
        envvar=METRICS_PORT_ENV,
        help="Serve the run's Prometheus metrics at http://HOST:PORT/metrics while it runs (0: any free port, "
        f"printed); none unless given (or ${METRICS_PORT_ENV}). See docs/metrics.md.",
    ),
    metrics_host: str = typer.Option(
        "127.0.0.1",
        "--metrics-host",
        envvar=METRICS_HOST_ENV,
        help="The address the metrics endpoint binds: this machine only by default; 0.0.0.0 (every interface) "
        "where Prometheus scrapes it from elsewhere, as in a pod.",
    ),
    namespace: str | None = _K8S["--namespace"],
    image: str | None = _K8S["--image"],
    kubeconfig: Path | None = _K8S["--kubeconfig"],
    context: str | None = _K8S["--context"],
    zk_auth_secret: str | None = _K8S["--zk-auth-secret"],
    worker_zookeeper: str | None = _K8S["--worker-zookeeper"],
    pending_timeout: float | None = _K8S["--pending-timeout"],
    node_selector: str | None = _K8S["--node-selector"],
) -> None:
    """Run a job live: real tasks under CPU limits, synchronised superstep by superstep through ZooKeeper,
    reconfigured as the planner decides; writes a run log, a chart and a summary to runs/<run-id>/."""
    from .coordinator import Coordinator
    from .run_settings import RunSettings
    from .run_store import check_run_id, new_run_id

    console = Console(stderr=json_out)  # with --json, stdout holds the JSON document only
    endpoint = _metrics_endpoint(ctx, metrics_port, metrics_host)
    check_output_dir(runs_dir, "--runs-dir")
    flagged: list[tuple[str, str]] = []  # a new run's experiment overrides, each with the option that gave it
    if resume is not None:
        rid = check_run_id(resume)
        settings = _resumed_settings(runs_dir, rid, zookeeper, zk_wait)
        _refuse_changes_on_resume(ctx, settings, rid)
    else:
        rid = check_run_id(run_id) if run_id else new_run_id()
        flagged = [("--set", item) for item in set_ or []] + flag_overrides(
            [
                ("--job", "job", job),
                ("--steps", "steps", steps),
                ("--online", "online", online),
                ("--learn", "learn", learn),
            ]
        )
        overrides = [item for _, item in flagged]
        if online and mode == "perfect":
            mode = "forecast"  # online forecasts are what the planner is told
        on_k8s = backend in ("kubernetes", "k8s")
        if pending_timeout is not None:  # a bad number is refused on any backend, before any work
            _positive_seconds(pending_timeout, "--pending-timeout")
        settings = RunSettings(
            kubernetes=_kubernetes_settings(ctx.params) if on_k8s else {},
            worker_start_s=300.0 if on_k8s else 60.0,  # pods: scheduling, image pulls
            experiment=str(find_experiment(experiment).resolve()),
            mode=mode,
            overrides=overrides,
            zookeeper=_hosts(zookeeper),
            zk_auth=_auth_source(zk_auth_file),
            session_timeout_s=session_timeout,
            zk_wait_s=zk_wait,
            **{name: ctx.params[name] for name in _SAME_NAMED},
        )
    if step_timeout is not None:
        settings.step_timeout_s = _positive_seconds(step_timeout, "--step-timeout")
    try:  # the settings through the settings loader, before anything is created
        settings = settings.checked()
    except InputError as exc:  # a refused value names its option
        if exc.field not in _RUN_FLAGS:
            raise
        raise InputError(exc.message, field=_RUN_FLAGS[exc.field]) from None
    if resume is None:
        _check_experiment(settings, flagged)
    note = lambda text: console.print(text, highlight=False)  # noqa: E731
    say = (lambda text: None) if quiet else note
    from .backends.kubernetes.job_status import cluster_watchers  # Events and a BspJob's status, in a cluster

    metrics = _serve_metrics(console, endpoint, runs_dir)
    try:
        watchers: list[RunWatcher] = cluster_watchers(settings) + ([metrics] if metrics is not None else [])
        coord = Coordinator(settings, rid, runs_dir, resume=resume is not None, say=say, note=note, watchers=watchers)
        how = settings.reconfigure or "the backend's default"
        console.print(
            f"run {rid}: planner {settings.planner}, {settings.mode} mode, reconfigure {how}, "
            f"ZooKeeper {settings.zookeeper}",
            highlight=False,
        )
        _run_to_the_end(console, coord, json_out)
    finally:
        if metrics is not None:
            metrics.close()  # the endpoint ends with the run


#: `run` options that define a run: on --resume the run's own (run.json) hold; another value given is refused
_FIXED_ON_RESUME = (
    "planner mode reconfigure backend experiment job steps online learn set_ barrier zk_root cgroup_prefix cpu_weight "
    "cfs_period_us run_id"
).split()


def _refuse_changes_on_resume(ctx: typer.Context, settings: RunSettings, rid: str) -> None:
    """A resumed run replays its own plan with its own settings: an option given on the command line with
    another value than the run's own (run.json) is refused, never silently ignored; the run's own value
    typed again is fine (a command line repeated with --resume added)."""
    for name in _FIXED_ON_RESUME:
        flag = _flag(name)
        source = ctx.get_parameter_source(name)
        if source is None or source.name != "COMMANDLINE":  # typer's own copy of click's enum: compare names
            continue
        value = ctx.params.get(name)
        own = rid if name == "run_id" else getattr(settings, name, None)
        if name == "experiment" and own is not None:
            same = find_experiment(value).resolve() == Path(own).resolve()
        else:
            same = own is not None and value is not None and (value == own or str(value) == str(own))
        if same:
            continue  # the run's own value, typed again (a script resuming with its flags): nothing changes
        was = f" (it runs with {flag} {own})" if own is not None else ""
        raise InputError(
            f"a resumed run keeps its own settings{was}: it replays its plan step by step. Resume without "
            f"{flag}, or start a new run (--run-id) to use another",
            field=flag,
        )


def _check_experiment(settings: RunSettings, flagged: list[tuple[str, str]]) -> None:
    """The experiment with the run's overrides, its planner and its job file, read as the coordinator will
    read them, so that a bad value is refused before the run's folder is made; errors name the flag that
    set it (more steps than the job's series hold: --steps, or --set start=... where it set the start)."""
    from ..inputs.experiment import load_experiment
    from ..simulate.runs import check_strategies

    planned = [("--planner", f"strategies={settings.planner}"), ("--mode", f"modes={settings.mode}")]
    exp = apply_flag_overrides(load_experiment(settings.experiment), flagged + planned)
    try:
        check_strategies(exp.strategies, exp)
    except InputError as exc:  # the run's one strategy is its --planner
        raise InputError(exc.message, field="--planner") from None
    job = load_job(exp.job_path)
    if all(t.series is not None for t in job.tasks):  # a job whose tasks report their workloads has no span
        try:
            load_job_series(job, exp.workload_range).check_length(exp.start, exp.steps, path=exp.path)
        except InputError as exc:
            by = [f for f, item in flagged if f == "--steps" or item.split("=")[0].strip() in ("steps", "start")]
            flag = by[-1] if by else None  # the last flag that set the span, else the experiment's own field
            raise InputError(exc.message, path=None if flag else exc.path, field=flag or exc.field) from None


def _resumed_settings(runs_dir: Path, rid: str, zookeeper: str | None, zk_wait: float) -> RunSettings:
    """The run's own settings, read (not taken: the coordinator takes the run before writing), with the
    ZooKeeper address and wait of this invocation."""
    from .run_settings import RunSettings
    from .run_store import RunStore, resolved_path

    store = RunStore(runs_dir, rid)
    meta = store.read_meta()
    settings = RunSettings.from_dict(meta["settings"], path=store.meta_path)
    settings.experiment = str(resolved_path(settings.experiment, store.run_dir))  # recorded relative to the run
    if zookeeper:
        settings.zookeeper = zookeeper  # the server may have moved; everything else is the run's
    settings.zk_wait_s = zk_wait
    return settings


def _metrics_endpoint(ctx: typer.Context, port: str | None, host: str) -> MetricsEndpoint:
    """--metrics-port and --metrics-host checked; an error names the option, or the environment variable
    the value came from."""
    from .run_settings import MetricsEndpoint

    def where(name: str, flag: str, env: str) -> str:
        source = ctx.get_parameter_source(name)
        return f"${env}" if source is not None and source.name == "ENVIRONMENT" else flag

    return MetricsEndpoint.from_flags(
        port,
        host,
        port_field=where("metrics_port", "--metrics-port", METRICS_PORT_ENV),
        host_field=where("metrics_host", "--metrics-host", METRICS_HOST_ENV),
    )


def _serve_metrics(console: Console, endpoint: MetricsEndpoint, runs_dir: Path) -> RunMetrics | None:
    """The run's metrics endpoint, listening before the run starts (None without --metrics-port); a port
    that cannot be bound stops the command here, before any work."""
    if endpoint.port is None:
        return None
    try:
        from .metrics import RunMetrics
    except ImportError:
        raise InputError(
            "serving metrics needs prometheus-client: pip install 'bsp-planner[live]'", field="--metrics-port"
        ) from None
    metrics = RunMetrics(runs_dir)
    try:
        port = metrics.serve(endpoint.host, endpoint.port)
    except OSError as exc:  # an unknown host (socket.gaierror), the port taken or not ours to bind
        raise InputError(
            f"cannot serve metrics on {endpoint.host}:{endpoint.port}: {exc.strerror or exc}",
            field="--metrics-host" if isinstance(exc, socket.gaierror) else "--metrics-port",
        ) from None
    shown = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
    console.print(f"metrics: http://{shown}:{port}/metrics", highlight=False)
    return metrics


def _auth_source(zk_auth_file: Path | None) -> str:
    """Where a new run's ZooKeeper credentials come from: --zk-auth-file, the environment's file or
    user:password, else credentials generated for the run."""
    from ..zk.credentials import ENV_AUTH, ENV_AUTH_FILE

    if zk_auth_file is not None:
        if not zk_auth_file.is_file():
            what = "a folder" if zk_auth_file.is_dir() else "not found"
            raise InputError(
                f"{what}; expected a file holding user:password", path=zk_auth_file, field="--zk-auth-file"
            )
        return f"file:{zk_auth_file.resolve()}"
    if os.environ.get(ENV_AUTH_FILE):
        return f"file:{Path(os.environ[ENV_AUTH_FILE]).resolve()}"
    if os.environ.get(ENV_AUTH):
        return "env"
    return "generated"


def _kubernetes_settings(params: dict[str, Any]) -> dict[str, Any]:
    """The kubernetes backend's settings that were given (the others come from its environment)."""
    from ..k8s.config import parse_node_selector

    given = {name: params[name] for name in ("namespace", "image", "context", "zk_auth_secret")}
    given |= {
        "kubeconfig": str(params["kubeconfig"].resolve()) if params["kubeconfig"] else None,
        "worker_zk_hosts": params["worker_zookeeper"],
        "pending_timeout_s": params["pending_timeout"],
        "node_selector": parse_node_selector(params["node_selector"]) if params["node_selector"] else None,
    }
    return {k: v for k, v in given.items() if v is not None}


def _run_to_the_end(console: Console, coord: Coordinator, json_out: bool = False) -> None:
    """Run, turning SIGINT, SIGTERM and SIGHUP (Ctrl-C, `kill`, a deleted pod, a closed terminal) into the
    coordinator's clean, resumable stop; exit 128 + the signal's number when a signal stopped it, 3 when
    ZooKeeper or the run folder did, 1 when the run failed."""
    from .coordinator import RunInterrupted
    from .executor import RunFailed

    err = Console(stderr=True)

    # Raising inside a ZooKeeper call could leave the client stuck: a running coordinator stops at its next
    # check instead (within a tick). A second signal, or one before the steps, stops now.
    try:
        with routed_to(lambda signum: coord.request_stop()):
            result = coord.run()
    except (RunInterrupted, RunFailed) as exc:
        stopped = isinstance(exc, RunInterrupted)
        err.print(f"{'[yellow]stopped' if stopped else '[bold red]run failed'}[/]: {exc}", highlight=False)
        _show(console, coord, json_out)
        raise typer.Exit(3 if stopped else 1) from None
    _show(console, coord, json_out)
    console.print(
        f"run folder: {result.run_dir} (steps.csv, steps.jsonl, summary.md, chart.png, logs/)", highlight=False
    )


def _positive_seconds(value: float, flag: str) -> float:
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"expected a positive, finite number of seconds, got {value!r}", field=flag)
    return float(value)


def _show(console: Console, coord: Coordinator, json_out: bool = False) -> None:
    """The summary table (with --json: summary.json's content, on stdout), then the totals line."""
    from ..core.tables import print_json
    from ..simulate.report import print_table

    if not (sm := coord.summary):
        return
    if json_out:
        print_json(sm)
    else:
        print_table(sm["rows"], console, title=f"{coord.run_id}: live vs simulated, steps: {sm['steps_note']}")
    console.print(
        f"total: live {sm['live_total_s']:.2f} s, simulated {sm['simulated_total_s']:.2f} s ({sm['total_error_pct']:+.1f}%); "
        f"with measured reconfiguration cost {sm['simulated_total_measured_penalty_s']:.2f} s "
        f"({sm['total_error_measured_penalty_pct']:+.1f}%); "
        f"per-step error mean |.| {sm['step_error_pct']['mean_abs']:.1f}%; "
        + (
            f"barrier overhead mean {1e3 * sm['barrier_s']['mean']:.1f} ms; "
            if "barrier_s" in sm
            else f"report-to-notice mean {1e3 * sm['report_to_notice_s']['mean']:.1f} ms; "
        )
        + (f"decision latency p95 {1e3 * d['p95']:.1f} ms; " if (d := sm.get("decision_latency_s")) else "")
        + f"{sm['reconfigurations']} reconfiguration(s), mean {sm['reconfig_s_mean']:.3f} s",
        highlight=False,
    )


def worker(
    ctx: typer.Context,
    zookeeper: str | None = typer.Option(None, "--zookeeper", help=_HOSTS_HELP),
    root: str = typer.Option(..., "--root", help="The run's znode."),
    task: str = typer.Option(..., "--task", help="This worker's task name."),
    incarnation: int = typer.Option(
        0, "--incarnation", help="How many times this task was started before (set by the coordinator)."
    ),
    zk_auth_file: Path | None = typer.Option(None, "--zk-auth-file", help=_AUTH_HELP),
    stress_ng: str = typer.Option("stress-ng", "--stress-ng", help="The stress-ng executable."),
    session_timeout: float = typer.Option(10.0, "--session-timeout", help="ZooKeeper session timeout in seconds."),
    zk_wait: float = typer.Option(
        120.0, "--zk-wait", help="Seconds ZooKeeper may stay unreachable before the worker gives up."
    ),
    step_timeout: float = typer.Option(
        3600.0, "--step-timeout", help="Seconds one step (its barriers and its stress-ng) may take."
    ),
) -> None:
    """One task of a live run (started by a backend; also a Kubernetes container's command)."""
    from ..zk.credentials import ENV_AUTH, ENV_AUTH_FILE, load_credentials
    from .worker import Worker, WorkerConfig

    creds = load_credentials(zk_auth_file)
    if creds is None:
        raise InputError(
            f"no ZooKeeper credentials: set ${ENV_AUTH_FILE} (a file holding user:password) or ${ENV_AUTH}",
            field="zk-auth",
        )
    code = Worker(
        WorkerConfig(
            hosts=_hosts(zookeeper),
            creds=creds,
            session_timeout_s=session_timeout,
            zk_wait_s=zk_wait,
            connect_timeout_s=min(30.0, zk_wait),
            step_timeout_s=_positive_seconds(step_timeout, "--step-timeout"),
            **{name: ctx.params[name] for name in ("root", "task", "incarnation", "stress_ng")},
        )
    ).run()
    sys.stdout.flush()
    raise typer.Exit(code)


def _server(data_dir: Path):
    """The server of `data_dir`, on the port it was started with (its zoo.cfg's)."""
    return LocalZooKeeper(data_dir, port=configured_port(data_dir))


def _run_hint(z: LocalZooKeeper) -> str:
    """What a live run needs to use this server: nothing if it is where runs connect unless told."""
    from ..zk.session import ENV_HOSTS

    if _hosts(None) == z.hosts:
        return "live runs use it unless told otherwise"
    where = f"${ENV_HOSTS} is {os.environ[ENV_HOSTS]}" if os.environ.get(ENV_HOSTS) else f"they use {_hosts(None)}"
    return f"a live run needs --zookeeper {z.hosts} (or {ENV_HOSTS}={z.hosts}): {where} unless told"


def _elsewhere(z: LocalZooKeeper) -> str:
    """The servers `zk start` started in other folders, one a line with the command stopping it; "" if none."""
    others = [
        f"\n  {o.hosts} from {o.data_dir}: `{stop_command(o)}`" for o in running_servers() if o.data_dir != z.data_dir
    ]
    return "; `zk start` started these:" + "".join(others) if others else ""


@zk_app.command("start")
def zk_start(
    port: int = typer.Option(DEFAULT_PORT, "--port", help="Client port on 127.0.0.1."),
    data_dir: Path = typer.Option(
        DEFAULT_DATA_DIR, "--data-dir", help="Folder for zoo.cfg, the data, server.log and server.pid."
    ),
    wait: float = typer.Option(60.0, "--wait", help="Seconds to wait for the server to answer."),
) -> None:
    """Start a standalone ZooKeeper on 127.0.0.1 in the background."""
    if not 1 <= port <= 65535:  # 0 would be "any free port", which no client could then find
        raise InputError(f"expected a TCP port from 1 to 65535, got {port}", field="--port")
    if data_dir.exists() and not data_dir.is_dir():
        raise InputError("expected a folder for the server's files, this is a file", path=data_dir, field="--data-dir")
    _positive_seconds(wait, "--wait")
    z = LocalZooKeeper(data_dir, port=port)
    pid = z.start(wait_s=wait)
    typer.echo(f"ZooKeeper listening on {z.hosts} (pid {pid}; data, log and pid file in {z.data_dir})")
    typer.echo(f"{_run_hint(z)}; stop it with `{stop_command(z)}`")


@zk_app.command("stop")
def zk_stop(data_dir: Path = typer.Option(DEFAULT_DATA_DIR, "--data-dir", help="The folder `zk start` used.")) -> None:
    """Stop the server started by `bsp-planner zk start` (exit 1 if none runs there but one runs elsewhere)."""
    z = _server(data_dir)
    if z.stop():
        typer.echo(f"stopped the ZooKeeper server of {z.data_dir}")
        return
    if not (others := _elsewhere(z)):  # nothing to stop anywhere: the wished state holds
        return typer.echo(f"no ZooKeeper server of {z.data_dir} was running, nor any other server `zk start` started")
    typer.echo(f"nothing stopped: no server runs from {z.data_dir}{others}", err=True)
    raise typer.Exit(1)


@zk_app.command("status")
def zk_status(
    data_dir: Path = typer.Option(DEFAULT_DATA_DIR, "--data-dir", help="The folder `zk start` used."),
) -> None:
    """Whether the server of DATA_DIR runs and answers."""
    z = _server(data_dir)
    pid = z.recorded_pid()
    if pid is None:
        typer.echo(f"not running (no server of {z.data_dir}){_elsewhere(z)}")
        raise typer.Exit(1)
    typer.echo(f"running: pid {pid}, {z.hosts}, " + ("answers" if z.ok() else "NOT answering"))


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("worker")(worker)
    app.add_typer(zk_app, name="zk")
