"""Property-based tests (hypothesis): random and mutated experiment, job, profile, series, forecast and
trace files and flag values. Whatever the input, `bsp-planner simulate` (and `forecast evaluate`,
`forecast predict`, `profile heatmap` on the files they read) either succeeds or exits 2 with an error
naming the file, field or flag, never another exception; and a failed run leaves an existing output
folder byte-identical.

Seeded (derandomize) and bounded, so every CI run sees the same examples in a few tens of seconds.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bsp_planner import cli
from bsp_planner.forecasting.files import write_forecasts, write_trace

from synthetic import DATA, write_profile

TASKS = ["affinity", "atomic"]
PROPS = settings(
    max_examples=20,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
FAST = ["-q", "--strategies", "mpc,floor", "--mode", "perfect"]
# What an error must name: a file (by its name), a field, or a flag.
NAMES_SOMETHING = re.compile(r"(\.toml|\.csv|\.json|field '[^']+'|--[a-z])")
OLD_RESULTS = {"comparison.csv": b"old table\n", "comparison.json": b"{}\n", "steps.csv": b"old steps\n"}


# -- the world every example starts from: small and valid --------------------------------------------
@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("world")
    rows = (DATA / "datasets" / "nyc_taxi.csv").read_text().splitlines()[:401]
    (base / "series.csv").write_text("\n".join(rows) + "\n")
    write_profile(base / "profile.csv", tasks=TASKS)
    (base / "job.toml").write_text(JOB)
    (base / "exp.toml").write_text(EXPERIMENT)
    return base


JOB = """name = "small"
workers = 1

[[task]]
name = "affinity"
stressor = "affinity"
ops_per_unit = 10
series = { file = "series.csv", first_row = 0, last_row = 199 }

[[task]]
name = "atomic"
stressor = "atomic"
ops_per_unit = 2.5
series = { file = "series.csv", first_row = 200, last_row = 399 }
"""

EXPERIMENT = """job = "job.toml"
profile = "profile.csv"
steps = 5
penalty_s = 1.0
modes = ["perfect"]
strategies = ["mpc", "floor"]
output = "out"

[cpu]
budget_millicores = 2000
min_millicores = 250
step_millicores = 50
max_millicores = 2000

[planner]
horizon = 5
dp_max_segment = 10

[forecast]
source = "seasonal-naive"
horizon = 10
"""


def fresh(world: Path) -> Path:
    """A private copy of the world for one example, with an earlier run's results in out/."""
    folder = Path(tempfile.mkdtemp(dir=world.parent))
    for f in world.iterdir():
        shutil.copy(f, folder / f.name)
    (folder / "out").mkdir()
    for name, data in OLD_RESULTS.items():
        (folder / "out" / name).write_bytes(data)
    return folder


def simulate(folder: Path, *args) -> tuple[int, str]:
    return run_cli("simulate", folder / "exp.toml", *args)


def run_cli(*args) -> tuple[int, str]:
    """Run the CLI in-process as a user would; any exception but SystemExit fails the test."""
    argv = ["bsp-planner", *map(str, args)]
    err, out = io.StringIO(), io.StringIO()
    old = sys.argv
    sys.argv = argv
    code = 0
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            cli.main()
    except SystemExit as exc:
        code = exc.code or 0
    finally:
        sys.argv = old
    return code, " ".join(err.getvalue().split())


def check_outcome(folder: Path, code: int, err: str) -> None:
    assert code in (0, 2), err
    if code == 2:
        # ours ("error: FILE, line, field: ...") or the command line parser's ("Usage: ... Invalid value for '--x'")
        assert (err.startswith("error:") or err.startswith("Usage:")) and NAMES_SOMETHING.search(err), err
        for name, data in OLD_RESULTS.items():
            assert (folder / "out" / name).read_bytes() == data, f"{name} changed by a failed run: {err}"
        assert sorted(p.name for p in (folder / "out").iterdir()) == sorted(OLD_RESULTS)
    shutil.rmtree(folder)


# -- value generators -------------------------------------------------------------------------------
def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


SAFE_TEXT = st.text(alphabet=st.characters(codec="ascii", exclude_categories=("Cc",)), max_size=12)
NUMBERS = st.one_of(
    st.integers(-5, 60),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 2, 10, 50, 250, 2000, 10**9, 1e308, -1e-300]),
)
SCALARS = st.one_of(
    NUMBERS, st.booleans(), SAFE_TEXT, st.sampled_from(["mpc", "floor", "perfect", "linear", "clamp", "dp", "thesis"])
)
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=3),
    st.dictionaries(st.sampled_from(["a", "start", "file"]), SCALARS, max_size=2),
)

EXPERIMENT_KEYS = [
    "job",
    "profile",
    "interpolation",
    "out_of_grid",
    "workload_range",
    "steps",
    "start",
    "penalty_s",
    "modes",
    "strategies",
    "output",
    "compat",
    "typo",
    "cpu.budget_millicores",
    "cpu.min_millicores",
    "cpu.step_millicores",
    "cpu.max_millicores",
    "cpu.exppo_max_millicores",
    "cpu.typo",
    "planner.allocator",
    "planner.discount",
    "planner.horizon",
    "planner.length_punishment",
    "planner.dp_max_segment",
    "planner.optimum_max_segment",
    "forecast.source",
    "forecast.horizon",
    "forecast.actual",
]


def set_toml_key(text: str, key: str, value) -> str:
    """Set (or add) `key` (maybe SECTION.KEY) in a TOML text made of top-level keys and [tables]."""
    section, _, name = key.rpartition(".")
    lines = text.splitlines()
    header = f"[{section}]" if section else None
    start = 0 if header is None else lines.index(header) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("[")), len(lines))
    line = f"{name} = {toml_value(value)}"
    for i in range(start, end):
        if lines[i].split("=")[0].strip() == name:
            lines[i] = line
            break
    else:
        lines.insert(start, line)
    return "\n".join(lines) + "\n"


# -- the properties ---------------------------------------------------------------------------------
def test_the_world_itself_is_valid(world):
    folder = fresh(world)
    code, err = simulate(folder, "-q")
    assert code == 0, err
    shutil.rmtree(folder)


@PROPS
@given(changes=st.lists(st.tuples(st.sampled_from(EXPERIMENT_KEYS), VALUES), min_size=1, max_size=3))
def test_mutated_experiment_files(world, changes):
    folder = fresh(world)
    text = (folder / "exp.toml").read_text()
    for key, value in changes:
        text = set_toml_key(text, key, value)
    (folder / "exp.toml").write_text(text)
    # The output must stay in the example's folder; long runs are not the point here.
    code, err = simulate(folder, "--steps", "5", "--out", folder / "out", *FAST[:1])
    check_outcome(folder, code, err)


FLAGS = st.one_of(
    st.tuples(st.just("--budget"), NUMBERS.map(str)),
    st.tuples(st.just("--penalty"), NUMBERS.map(str)),
    st.tuples(st.just("--steps"), st.integers(-3, 12).map(str)),
    st.tuples(st.just("--start"), st.integers(-3, 120).map(str)),
    st.tuples(
        st.just("--strategies"),
        st.lists(st.sampled_from(["mpc", "floor", "dp", "static:2", "static:0", "exppo", "bogus", ""]), max_size=4).map(
            ",".join
        ),
    ),
    st.tuples(st.just("--mode"), st.sampled_from(["perfect", "forecast", "both", ""])),
    st.tuples(st.just("--allocator"), st.sampled_from(["greedy", "exact", "magic"])),
    st.tuples(st.just("--forecasts"), st.sampled_from(["seasonal-naive", "persistence", "nowhere", ""])),
    st.tuples(
        st.just("--set"), st.tuples(st.sampled_from(EXPERIMENT_KEYS + ["", "a.b.c"]), SCALARS.map(str)).map("=".join)
    ),
    st.tuples(st.just("--set"), SAFE_TEXT),
)


@PROPS
@given(flags=st.lists(FLAGS, min_size=1, max_size=4))
def test_random_flag_values(world, flags):
    folder = fresh(world)
    args = [x for pair in flags for x in pair]
    if "--strategies" not in args:
        args += ["--strategies", "mpc,floor"]
    code, err = simulate(folder, "-q", *args)
    check_outcome(folder, code, err)


JOB_KEYS = [
    "name",
    "workers",
    "typo",
    "task.name",
    "task.stressor",
    "task.ops_per_unit",
    "task.workers",
    "task.worker",
    "task.series.first_row",
    "task.series.last_row",
    "task.series.file",
    "task.series.typo",
]


@PROPS
@given(changes=st.lists(st.tuples(st.sampled_from(JOB_KEYS), st.integers(0, 1), VALUES), min_size=1, max_size=3))
def test_mutated_job_files(world, changes):
    import tomllib

    folder = fresh(world)
    job = tomllib.loads((folder / "job.toml").read_text())
    for key, which, value in changes:
        parts = key.split(".")
        target = job["task"][which] if parts[0] == "task" else job
        parts = parts[1:] if parts[0] == "task" else parts
        if len(parts) == 2:
            target = target["series"]
        target[parts[-1]] = value
    lines = [f"{k} = {toml_value(v)}" for k, v in job.items() if k != "task"]
    for t in job["task"]:
        lines += ["[[task]]"] + [f"{k} = {toml_value(v)}" for k, v in t.items()]
    (folder / "job.toml").write_text("\n".join(lines) + "\n")
    code, err = simulate(folder, *FAST)
    check_outcome(folder, code, err)


def mutate_csv(text: str, data) -> str:
    """One of: a cell replaced, a line dropped or duplicated, the file cut at some byte, a column added."""
    lines = text.splitlines()
    kind = data.draw(st.sampled_from(["cell", "drop", "dup", "cut", "column", "header"]))
    i = data.draw(st.integers(0, len(lines) - 1))
    if kind == "cell":
        cells = lines[i].split(",")
        j = data.draw(st.integers(0, len(cells) - 1))
        cells[j] = data.draw(st.one_of(NUMBERS.map(str), SAFE_TEXT.filter(lambda s: "," not in s)))
        lines[i] = ",".join(cells)
    elif kind == "drop":
        del lines[i]
    elif kind == "dup":
        lines.insert(i, lines[i])
    elif kind == "column":
        lines[i] += ",1"
    elif kind == "header":
        lines[0] = data.draw(SAFE_TEXT)
    else:
        return text[: data.draw(st.integers(0, len(text)))]
    return "\n".join(lines) + "\n"


def mutate_file(path: Path, data) -> None:
    """mutate_csv, or a few raw bytes (maybe not UTF-8) spliced in somewhere."""
    if data.draw(st.integers(0, 4)) == 0:
        raw = path.read_bytes()
        at = data.draw(st.integers(0, len(raw)))
        path.write_bytes(raw[:at] + data.draw(st.binary(min_size=1, max_size=6)) + raw[at:])
    else:
        path.write_text(mutate_csv(path.read_text(), data))


@PROPS
@given(data=st.data())
def test_mutated_profiles_and_their_metadata(world, data):
    folder = fresh(world)
    if data.draw(st.booleans()):
        mutate_file(folder / "profile.csv", data)
    else:
        meta = '{"format": 1, "tasks": {"affinity": {"stressor": "affinity", "ops_per_unit": 10, "workers": 1}}}'
        meta = data.draw(st.sampled_from([meta, meta.replace("10", "11"), meta.replace('affinity"}', 'x"}')]))
        (folder / "profile.meta.json").write_text(meta[: data.draw(st.integers(0, len(meta)))])
    code, err = simulate(folder, *FAST)
    check_outcome(folder, code, err)


@PROPS
@given(data=st.data(), forecaster=st.sampled_from(["seasonal-naive", "persistence"]))
def test_mutated_series(world, data, forecaster):
    folder = fresh(world)
    mutate_file(folder / "series.csv", data)
    code, err = simulate(folder, "-q", "--strategies", "mpc,floor", "--forecasts", forecaster)
    check_outcome(folder, code, err)


@PROPS
@given(data=st.data())
def test_mutated_forecast_and_trace_files(world, data):
    folder = fresh(world)
    rng = np.random.default_rng(0)
    write_forecasts(folder / "fc", TASKS, 10 + 40 * rng.random((2, 5, 10)))
    write_trace(folder / "trace", TASKS, 10 + 40 * rng.random((2, 5)))
    which = data.draw(st.sampled_from(["fc", "trace"]))
    mutate_file(folder / which / f"{data.draw(st.sampled_from(TASKS))}.csv", data)
    code, err = simulate(
        folder, "-q", "--strategies", "mpc,floor", "--forecasts", folder / "fc", "--actual", folder / "trace"
    )
    check_outcome(folder, code, err)


@settings(PROPS, max_examples=10)
@given(data=st.data())
def test_forecast_commands_on_mutated_series_and_flags(world, data):
    folder = fresh(world)
    if data.draw(st.booleans()):
        mutate_file(folder / "series.csv", data)
    horizon = data.draw(st.sampled_from(["10", "5", "0", "-1", "500", "x"]))
    exp = folder / "exp.toml"
    if data.draw(st.booleans()):
        code, err = run_cli(
            "forecast",
            "evaluate",
            "-f",
            "persistence",
            "-f",
            "seasonal-naive",
            "--experiment",
            exp,
            "--horizon",
            horizon,
            "--out",
            folder / "out",
        )
    else:
        code, err = run_cli(
            "forecast",
            "predict",
            "-f",
            data.draw(st.sampled_from(["seasonal-naive", "persistence"])),
            "--experiment",
            exp,
            "--horizon",
            horizon,
            "--steps",
            data.draw(st.sampled_from(["5", "0", "1000"])),
            "--out",
            folder / "out",
        )
    if code == 0:  # a success may write into out/: nothing more to check about it
        shutil.rmtree(folder)
        return
    check_outcome(folder, code, err)


@settings(PROPS, max_examples=10)
@given(data=st.data())
def test_profile_heatmap_on_mutated_profiles(world, data):
    folder = fresh(world)
    p = folder / "profile.csv"
    mutate_file(p, data)
    code, err = run_cli("profile", "heatmap", p, "--out-dir", folder / "out")
    if code == 0:
        shutil.rmtree(folder)
        return
    check_outcome(folder, code, err)


ENV_KEYS = [
    "experiment",
    "overrides",
    "mode",
    "window",
    "actions",
    "episode_steps",
    "penalty_scale",
    "obs_scale",
    "reward_scale",
    "obs_high",
    "typo",
    "train.start",
    "train.steps",
    "train.typo",
    "eval.start",
    "eval.steps",
    "agent.algo",
    "agent.timesteps",
    "agent.gamma",
    "agent.net_arch",
    "agent.learning_rate",
    "agent.typo",
]


@PROPS
@given(
    changes=st.lists(st.tuples(st.sampled_from(ENV_KEYS), VALUES), min_size=1, max_size=3),
    overrides=st.lists(st.tuples(st.sampled_from(ENV_KEYS), SCALARS.map(str)).map("=".join), max_size=2),
)
def test_mutated_rl_environment_files_and_env_set(tmp_path_factory, changes, overrides):
    """The RL environment settings (what `rl train`/`rl evaluate` read first): every value through the
    one loader, an InputError naming the file or flag and the field otherwise."""
    from bsp_planner.core.errors import InputError
    from bsp_planner.rl.settings import DEFAULT_ENV, EnvSettings, load_env_settings

    folder = tmp_path_factory.mktemp("env")
    text = "\n".join(line.split("#")[0].rstrip() for line in DEFAULT_ENV.read_text().splitlines()) + "\n"
    for key, value in changes:
        text = set_toml_key(text, key, value)
    (folder / "env.toml").write_text(text)
    try:
        s = load_env_settings(folder / "env.toml", overrides)
    except InputError as exc:
        assert exc.field or exc.path, str(exc)
        assert "env.toml" in str(exc) or exc.field, str(exc)
        return
    assert isinstance(s, EnvSettings) and s.episode_steps < s.train.steps
    assert all(math.isfinite(v) and v > 0 for v in (s.penalty_scale, s.obs_high))


@PROPS
@given(
    values=st.dictionaries(
        st.sampled_from(
            ["units", "epochs", "lags", "val_fraction", "init", "calendar", "l2", "learning_rate", "window", "typo"]
        ),
        VALUES,
        max_size=3,
    )
)
def test_lstm_settings_from_any_table(values):
    from bsp_planner.core.errors import InputError
    from bsp_planner.forecasting.lstm_data import LSTMSettings

    try:
        s = LSTMSettings.from_dict(values)
    except InputError as exc:
        assert exc.field and exc.field.startswith("lstm."), str(exc)
        return
    assert LSTMSettings.from_dict(s.to_dict()) == s  # what a saved model records reads back the same
