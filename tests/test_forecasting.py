"""Forecasting: transforms, no peeking, a real (tiny) LSTM fit, quantiles, files, bad inputs, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bsp_planner.core.errors import InputError
from bsp_planner.forecasting.base import rolling_error_quantiles
from bsp_planner.forecasting.baselines import PersistenceForecaster, SeasonalNaiveForecaster
from bsp_planner.forecasting.files import read_forecast_metadata, read_forecasts, write_forecasts
from bsp_planner.forecasting.prepare import prepare_task
from bsp_planner.forecasting.transforms import MinMaxScaler, difference, supervised_pairs, undifference
from bsp_planner.inputs.series import TaskSeries, read_series_csv

PERIOD = 12
H = 6
# Tiny, fast settings for the real training runs below.
TINY = {"units": 8, "epochs": 40, "patience": 8, "batch_size": 32, "learning_rate": 0.01, "interval_window": 60}


def seasonal_series(n: int = 480, period: int = PERIOD, seed: int = 0, noise: float = 0.6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return 30 + 12 * np.sin(2 * np.pi * t / period) + noise * rng.standard_normal(n)


def task_series(
    values: np.ndarray, interval_s: int = 7200, name: str = "t", drop: list[int] | None = None
) -> TaskSeries:
    stamps = np.datetime64("2024-01-01T00:00:00", "s") + np.arange(len(values)) * np.timedelta64(interval_s, "s")
    if drop:
        keep = np.setdiff1d(np.arange(len(values)), drop)
        stamps, values = stamps[keep], values[keep]
    return TaskSeries(
        task=name, timestamps=stamps, values=np.asarray(values, float), source=Path("synthetic.csv"), first_row=0
    )


def write_series_csv(path: Path, values, interval_s: int = 7200, start: str = "2024-01-01T00:00:00") -> Path:
    t0 = np.datetime64(start, "s")
    lines = ["timestamp,value"]
    for i, v in enumerate(values):
        stamp = str(t0 + np.timedelta64(i * interval_s, "s")).replace("T", " ")
        lines.append(f"{stamp},{v}")
    path.write_text("\n".join(lines) + "\n")
    return path


# -- transforms -------------------------------------------------------------------------------------


@pytest.mark.parametrize("lag", [1, PERIOD])
def test_differencing_inverts_exactly(lag):
    x = seasonal_series(200)
    d = difference(x, lag)
    assert d.shape == (200 - lag,)
    back = undifference(x[:lag], d, lag)
    np.testing.assert_allclose(back, x[lag:], rtol=0, atol=1e-9)
    # batched: forward from any known stretch
    np.testing.assert_allclose(
        undifference(x[None, 50 : 50 + lag], d[None, 50 : 50 + 30], lag)[0], x[50 + lag : 80 + lag], atol=1e-9
    )


def test_scaling_to_minus_one_one_inverts_exactly():
    d = difference(seasonal_series(200))
    sc = MinMaxScaler.fit(d)
    s = sc.transform(d)
    assert s.min() == pytest.approx(-1.0) and s.max() == pytest.approx(1.0)
    np.testing.assert_allclose(sc.inverse(s), d, atol=1e-12)
    with pytest.raises(ValueError):
        MinMaxScaler.fit(np.ones(10))


def test_supervised_pairs_never_include_the_origin_or_later():
    x = np.arange(30.0)  # value == its index
    X, Y, o = supervised_pairs(x, 4, 3)
    assert X.shape == (len(o), 4) and Y.shape == (len(o), 3)
    assert np.all(X.max(axis=1) < o)  # inputs end strictly before the origin
    np.testing.assert_array_equal(Y[:, 0], o)  # outputs start at it


# -- no peeking: a forecast for step t uses nothing from step t on ----------------------------------


def _assert_no_peeking(f, series, origins):
    base = f.predict_origins(series, origins)
    for o in origins:
        changed = series.copy()
        changed[o:] = changed[o:] * 3 + 100  # wreck the future of this origin
        again = f.predict_origins(changed, np.array([o]))
        np.testing.assert_allclose(again[:, 0], base[:, list(origins).index(o)], atol=1e-9)


@pytest.mark.parametrize("cls", [PersistenceForecaster, SeasonalNaiveForecaster])
def test_baselines_do_not_peek(cls):
    x = seasonal_series(400)
    f = cls(horizon=H, period=PERIOD).fit(x[:200])
    _assert_no_peeking(f, x, np.array([150, 230, 330, 390]))


def test_rolling_quantiles_use_only_errors_already_known():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(600)
    zero = lambda s, o: np.zeros((len(o), 5))  # noqa: E731
    o = np.array([400])
    a = rolling_error_quantiles(zero, x, o, 5, (0.1, 0.5, 0.9), 100, 1, np.zeros((3, 5)), gamma=0.01)
    y = x.copy()
    y[400:] += 50
    b = rolling_error_quantiles(zero, y, o, 5, (0.1, 0.5, 0.9), 100, 1, np.zeros((3, 5)), gamma=0.01)
    np.testing.assert_array_equal(a, b)
    # without adaptation, lead h's quantiles are those of the 100 latest errors known before the origin
    c = rolling_error_quantiles(zero, x, o, 5, (0.1, 0.5, 0.9), 100, 1, np.zeros((3, 5)))
    assert c[2, 0, 0] == pytest.approx(np.quantile(x[300:400], 0.9))
    assert c[0, 0, 4] == pytest.approx(np.quantile(x[300:400], 0.1))


def test_adaptive_intervals_reach_their_coverage_when_errors_grow():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(3000) * np.linspace(1, 3, 3000)
    o = np.arange(1000, 2980)
    zero = lambda s, oo: np.zeros((len(oo), 5))  # noqa: E731
    q = rolling_error_quantiles(zero, x, o, 5, (0.1, 0.5, 0.9), 100, 1, np.zeros((3, 5)), gamma=0.01)
    truth = x[o[:, None] + np.arange(5)]
    assert 0.77 <= np.mean((truth >= q[0]) & (truth <= q[2])) <= 0.83


# -- gaps and the grid -------------------------------------------------------------------------------


def test_gap_is_an_error_that_says_where_and_offers_to_fill():
    ts = task_series(seasonal_series(120), drop=[50, 51, 52])
    with pytest.raises(InputError) as e:
        prepare_task(ts, ts.values, gaps="error")
    msg = str(e.value)
    assert "row 50" in msg and "6 h missing" in msg and "--gaps fill" in msg
    assert e.value.line == 52  # the first row after the gap is data row 50, line 52 of the file


def test_filled_gaps_keep_forecasts_on_the_rows_and_do_not_peek():
    x = seasonal_series(300)
    ts = task_series(x, drop=[200, 201, 202, 203])  # 4 steps missing inside the test half
    p = prepare_task(ts, ts.values, gaps="fill")
    assert p.filled == 4 and len(p.grid) == 300 and len(p.rows) == 296
    # interpolated values lie between the rows either side of the gap
    assert np.all(np.diff(p.grid[199:205]) == pytest.approx(np.diff(p.grid[199:205]).mean()))
    f = SeasonalNaiveForecaster(horizon=H, period=PERIOD).fit(p.train_grid)
    o = np.arange(190, 205)  # origins before, at and after the gap (row indices)
    pred = p.predict_rows(f, o)
    assert pred.shape == (3, len(o), H)
    # before the gap nothing changes: row == grid step
    np.testing.assert_allclose(pred[1, 0], f.predict_origins(p.grid, np.array([190]))[1, 0])
    # row 198 + 2 = row 200 stands 4 grid steps later than its row number says: lead 2 -> grid lead 6 (capped at H-1)
    lm = p.lead_map(np.array([198]), H)[0]
    np.testing.assert_array_equal(lm, [0, 1, 5, 5, 5, 5])
    # no peeking through the filled grid either
    rows = p.rows.copy()
    for o1 in (196, 197, 199):
        changed = rows.copy()
        changed[o1:] += 40
        ts2 = TaskSeries("t", ts.timestamps, changed, ts.source, 0)
        p2 = prepare_task(ts2, changed, gaps="fill")
        np.testing.assert_allclose(p2.predict_rows(f, np.array([o1]))[:, 0], pred[:, list(o).index(o1)], atol=1e-9)


def test_ignore_treats_rows_as_consecutive_steps():
    ts = task_series(seasonal_series(120), drop=[50])
    p = prepare_task(ts, ts.values, gaps="ignore")
    assert p.filled == 0 and len(p.grid) == len(p.rows) == 119


# -- bad inputs ----------------------------------------------------------------------------------------


def test_missing_and_non_numeric_values_name_the_line(tmp_path):
    path = write_series_csv(tmp_path / "s.csv", [1.0, 2.0, "", 4.0])
    with pytest.raises(InputError) as e:
        read_series_csv(path)
    assert e.value.line == 4 and "missing value" in str(e.value)
    path = write_series_csv(tmp_path / "s.csv", [1.0, "n/a", 3.0])
    with pytest.raises(InputError) as e:
        read_series_csv(path)
    assert e.value.line == 3 and "'n/a'" in str(e.value)
    ts = task_series(np.array([1.0, 2.0, np.nan, 4.0, 5.0, 6.0]))
    with pytest.raises(InputError, match="missing or non-numeric value at data row 2"):
        prepare_task(ts, ts.values)


def test_constant_series_is_refused():
    ts = task_series(np.full(100, 7.0))
    with pytest.raises(InputError, match="constant"):
        prepare_task(ts, ts.values)


def test_series_too_short_for_the_window_says_what_it_needs():
    from bsp_planner.forecasting.pipeline import train_one

    ws, p = _workspace_for(seasonal_series(60))
    with pytest.raises(InputError) as e:
        train_one(ws, "lstm", p)
    assert "too short for lstm" in str(e.value) and "input window" in str(e.value) and "'t'" in str(e.value)


def test_unknown_forecaster_and_task(tmp_path):
    from bsp_planner.forecasting.registry import make_forecaster

    ws, p = _workspace_for(seasonal_series(200))
    with pytest.raises(InputError, match="unknown forecaster 'arima'"):
        make_forecaster("arima", p, H)
    from bsp_planner.forecasting.prepare import prepare_job

    with pytest.raises(InputError, match="unknown task 'nope'; the job has t"):
        prepare_job(ws.job_series, tasks=["nope"])


# -- the LSTMs, for real but tiny ------------------------------------------------------------------


def _workspace_for(values, period_s: int = PERIOD, settings=None):
    """A one-task workspace on a series with `period_s` steps per day."""
    from bsp_planner.forecasting.pipeline import Workspace
    from bsp_planner.inputs.job import Job
    from bsp_planner.inputs.series import JobSeries, WorkloadScaler

    interval = 86_400 // period_s
    ts = task_series(np.asarray(values, float), interval_s=interval)
    js = JobSeries((ts,), (WorkloadScaler.fit(ts.train),))
    ws = Workspace.from_series(Job(name="tiny", tasks=()), js, horizon=H, settings=settings or {})
    return ws, ws.prepared[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny lstm fitted on a clearly seasonal series, saved; shared by the tests below."""
    from bsp_planner.forecasting.pipeline import obtain

    root = tmp_path_factory.mktemp("models")
    ws, p = _workspace_for(seasonal_series(600), settings={"lstm": TINY})
    f, how = obtain(ws, "lstm", p, model_root=root)
    assert how == "trained"
    return ws, p, f, root


@pytest.mark.slow
def test_lstm_fits_a_seasonal_series_better_than_persistence(trained):
    ws, p, f, _ = trained
    o = np.arange(p.n_train, len(p.rows) - H + 1)
    truth = p.rows[o[:, None] + np.arange(H)]
    lstm = np.sqrt(np.mean((p.predict_rows(f, o)[1] - truth) ** 2))
    pers = PersistenceForecaster(horizon=H, period=PERIOD).fit(p.train_grid)
    base = np.sqrt(np.mean((p.predict_rows(pers, o)[1] - truth) ** 2))
    assert lstm < 0.5 * base, (lstm, base)


@pytest.mark.slow
def test_lstm_does_not_peek_and_its_quantiles_are_ordered(trained):
    ws, p, f, _ = trained
    origins = np.array([320, 333, 460, 590])
    _assert_no_peeking(f, p.grid, origins)
    q = f.predict_origins(p.grid, np.arange(300, 590))
    assert q.shape == (3, 290, H)
    assert np.all(np.diff(q, axis=0) >= 0)
    np.testing.assert_allclose(q[1], f.predict_median(p.grid, np.arange(300, 590)))
    assert np.all(q[2] - q[0] > 0)  # a real interval, not a point


@pytest.mark.slow
def test_saved_model_reloads_identically_and_mismatched_settings_are_refused(trained):
    from bsp_planner.forecasting.pipeline import obtain

    ws, p, f, root = trained
    g, how = obtain(ws, "lstm", p, model_root=root)
    assert how == "loaded"
    o = np.arange(300, 400)
    np.testing.assert_allclose(g.predict_origins(p.grid, o), f.predict_origins(p.grid, o), atol=1e-6)
    assert (root / "tiny" / "lstm" / "t.keras").is_file() and (root / "tiny" / "lstm" / "t.npz").is_file()
    # forecasts run in NumPy from the saved weights; the Keras model itself gives the same numbers
    from bsp_planner.forecasting.lstm import LSTMForecaster

    k = LSTMForecaster.load(root / "tiny" / "lstm", "t", keras_engine=True)
    k.weights_ = None  # forecast through TensorFlow
    np.testing.assert_allclose(k.predict_median(p.grid, o), g.predict_median(p.grid, o), atol=1e-4)
    meta = json.loads((root / "tiny" / "lstm" / "t.json").read_text())
    assert meta["settings"]["units"] == 8 and meta["data"]["task"] == "t"
    ws2, p2 = _workspace_for(seasonal_series(600), settings={"lstm": {**TINY, "units": 16}})
    with pytest.raises(InputError, match=r"units: saved 8, requested 16"):
        obtain(ws2, "lstm", p2, model_root=root)


@pytest.mark.slow
def test_training_is_seeded_and_repeatable(trained):
    from bsp_planner.forecasting.pipeline import train_one

    ws, p, f, _ = trained
    again = train_one(ws, "lstm", p)
    o = np.arange(300, 360)
    np.testing.assert_array_equal(again.predict_median(p.grid, o), f.predict_median(p.grid, o))


@pytest.mark.slow
def test_thesis_lstm_follows_its_recipe():
    from bsp_planner.forecasting.pipeline import train_one

    ws, p = _workspace_for(seasonal_series(300), settings={"lstm-thesis": {"units": 4, "epochs": 2}})
    f = train_one(ws, "lstm-thesis", p)
    # input: one scaled difference; output: H scaled differences
    assert tuple(f.model.input_shape) == (None, 1, 1) and tuple(f.model.output_shape) == (None, H)
    assert f.model.count_params() == 4 * 4 * (4 + 1 + 1) + (4 + 1) * H
    d = np.diff(p.train_grid)
    assert f.scaler_.lo == pytest.approx(d.min()) and f.scaler_.hi == pytest.approx(d.max())
    _assert_no_peeking(f, p.grid, np.array([200, 250]))
    q = f.predict_origins(p.grid, np.arange(160, 290))
    assert np.all(np.diff(q, axis=0) >= 0)


# -- files -----------------------------------------------------------------------------------------------


def test_forecast_files_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    m = rng.uniform(10, 50, size=(3, 25, H))
    write_forecasts(tmp_path / "fc", ["a", "b", "c"], m, {"forecaster": "lstm", "digest": "abc"})
    back = read_forecasts(tmp_path / "fc", ["a", "b", "c"], 25, H)
    np.testing.assert_allclose(back, m, atol=5e-7)
    np.testing.assert_allclose(read_forecasts(tmp_path / "fc", ["b"], 5, 3, start=10)[0], m[1, 10:15, :3], atol=5e-7)
    assert read_forecast_metadata(tmp_path / "fc")["digest"] == "abc"


# -- commands, on a small synthetic job --------------------------------------------------------------


@pytest.fixture
def small_job(tmp_path):
    """Two tasks of 2-hourly data (12 steps a day); the second with a gap in its test half."""
    values = seasonal_series(400)
    write_series_csv(tmp_path / "a.csv", values)
    gappy = list(seasonal_series(400, seed=1))
    write_series_csv(tmp_path / "b.csv", gappy)
    text = (tmp_path / "b.csv").read_text().splitlines()
    del text[300:303]  # data rows 298..300 gone: a 8 h gap before (new) data row 298
    (tmp_path / "b.csv").write_text("\n".join(text) + "\n")
    (tmp_path / "job.toml").write_text(
        'name = "small"\n'
        '[[task]]\nname = "alpha"\nstressor = "cpu"\nops_per_unit = 1\nseries = { file = "a.csv" }\n'
        '[[task]]\nname = "beta"\nstressor = "cpu"\nops_per_unit = 1\nseries = { file = "b.csv" }\n'
    )
    (tmp_path / "exp.toml").write_text(
        'job = "job.toml"\nprofile = "p.csv"\nsteps = 50\nstart = 5\nworkload_range = [10, 50]\n'
        '[planner]\nhorizon = 6\n[forecast]\nsource = "seasonal-naive"\nhorizon = 6\n'
    )
    return tmp_path


def _run(args):
    from bsp_planner.cli import app

    return CliRunner().invoke(app, args, catch_exceptions=False)


def test_cli_evaluate_refuses_gaps_then_compares_forecasters(small_job):
    from bsp_planner.cli import app

    r = CliRunner().invoke(app, ["forecast", "evaluate", "-e", str(small_job / "exp.toml"), "-f", "persistence"])
    assert isinstance(r.exception, InputError) and "--gaps fill" in str(r.exception) and "beta" in str(r.exception)
    out = small_job / "ev"
    r = _run(
        [
            "forecast",
            "evaluate",
            "-e",
            str(small_job / "exp.toml"),
            "-f",
            "persistence",
            "-f",
            "seasonal-naive",
            "--gaps",
            "fill",
            "-o",
            str(out),
        ]
    )
    assert r.exit_code == 0, r.output
    assert "seasonal-naive" in r.output and "all tasks" in r.output
    data = json.loads((out / "evaluation.json").read_text())
    sn, pe = data["overall"]["seasonal-naive"], data["overall"]["persistence"]
    assert len(sn["rmse_by_lead"]) == H and sn["mean_rmse"] < pe["mean_rmse"]
    assert 0.6 < sn["coverage_80"] <= 1.0
    assert (out / "rmse_by_lead.png").stat().st_size > 10_000


def test_cli_predict_writes_what_simulate_reads(small_job):
    from bsp_planner.forecasting.provider import forecast_matrix
    from bsp_planner.inputs.job import load_job
    from bsp_planner.inputs.series import load_job_series

    r = _run(
        [
            "forecast",
            "predict",
            "-e",
            str(small_job / "exp.toml"),
            "-f",
            "seasonal-naive",
            "--gaps",
            "ignore",
            "-o",
            str(small_job / "fc"),
        ]
    )
    assert r.exit_code == 0, r.output
    meta = read_forecast_metadata(small_job / "fc")
    assert meta["forecaster"] == "seasonal-naive" and meta["inputs"]["steps"] == 50 and meta["inputs"]["start"] == 5
    js = load_job_series(load_job(small_job / "job.toml"))
    fc, label = forecast_matrix(str(small_job / "fc"), js, 0, 50, H)
    direct, _ = forecast_matrix("seasonal-naive", js, 5, 50, H)
    np.testing.assert_allclose(fc, direct, atol=1e-5)  # ignore == how simulate has always replayed rows
    assert label.startswith("seasonal-naive (files fc, digest")


def test_unknown_task_and_forecaster_on_the_command_line(small_job):
    from bsp_planner.cli import app

    r = CliRunner().invoke(app, ["forecast", "evaluate", "-e", str(small_job / "exp.toml"), "-t", "gamma"])
    assert isinstance(r.exception, InputError) and "unknown task 'gamma'" in str(r.exception)
    r = CliRunner().invoke(app, ["forecast", "evaluate", "-e", str(small_job / "exp.toml"), "-f", "prophet"])
    assert isinstance(r.exception, InputError) and "unknown forecaster 'prophet'" in str(r.exception)


def test_provider_uses_shipped_forecasts_only_when_their_digest_matches(small_job, monkeypatch, tmp_path):
    from bsp_planner.forecasting import pipeline, provider
    from bsp_planner.forecasting.pipeline import Workspace, inputs_digest, request_inputs
    from bsp_planner.inputs.job import load_job
    from bsp_planner.inputs.series import load_job_series

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    job = load_job(small_job / "job.toml")
    js = load_job_series(job)
    ws = Workspace.from_series(job, js, gaps="fill", horizon=H)
    inputs = request_inputs(ws, "lstm", 0, 50)
    shipped = small_job / "forecasts" / "default"
    write_forecasts(
        shipped,
        job.task_names,
        np.full((2, 50, H), 33.0),
        {"forecaster": "lstm", "digest": inputs_digest(inputs), "inputs": inputs},
    )
    fc, label = provider.forecast_matrix("lstm", js, 0, 50, H, base_dir=small_job)
    assert np.all(fc == 33.0) and "shipped forecasts default/" in label
    # "default" names the default forecaster: its shipped folder, not the lstm's
    from bsp_planner.forecasting.registry import DEFAULT_FORECASTER

    default_inputs = request_inputs(ws, DEFAULT_FORECASTER, 0, 50)
    write_forecasts(
        small_job / "forecasts" / f"default-{DEFAULT_FORECASTER}",
        job.task_names,
        np.full((2, 50, H), 44.0),
        {"forecaster": DEFAULT_FORECASTER, "digest": inputs_digest(default_inputs), "inputs": default_inputs},
    )
    fc, label = provider.forecast_matrix("default", js, 0, 50, H, base_dir=small_job)
    assert np.all(fc == 44.0) and "shipped" in label
    # steps inside the shipped ones: those rows (a forecast before step t never depends on later steps)
    fc, label = provider.forecast_matrix("lstm", js, 10, 20, H, base_dir=small_job)
    assert fc.shape == (2, 20, H) and np.all(fc == 33.0) and "from row 10" in label

    calls = []

    def fake(ws_, name, start, steps, **kw):
        calls.append((name, start, steps, ws_.gaps))
        return np.full((2, steps, H), 21.0), {
            "digest": inputs_digest(request_inputs(ws_, name, start, steps)),
            "models": {"alpha": "trained", "beta": "trained"},
        }

    monkeypatch.setattr(pipeline, "forecast_experiment", fake)
    messages = []
    fc, label = provider.forecast_matrix("lstm", js, 30, 30, H, base_dir=small_job, say=messages.append)
    assert calls == [("lstm", 30, 30, "fill")] and np.all(fc == 21.0)
    assert "regenerated" in label and "steps: 50 -> 30" in messages[0]
    # the regenerated forecasts are cached: the same request again needs no work
    fc, label = provider.forecast_matrix("lstm", js, 30, 30, H, base_dir=small_job, say=messages.append)
    assert len(calls) == 1 and "cached" in label and np.all(fc == 21.0)


def test_train_and_rl_train_refuse_both_a_folder_and_the_shipped_copy(small_job, tmp_path):
    from bsp_planner.cli import app

    args = ["forecast", "train", "-e", str(small_job / "exp.toml"), "--models", str(tmp_path / "m"), "--shipped"]
    r = CliRunner().invoke(app, args)
    assert isinstance(r.exception, InputError) and "--shipped" in str(r.exception)
    r = CliRunner().invoke(app, ["rl", "train", "--agent", str(tmp_path / "a.zip"), "--shipped", "-q"])
    assert isinstance(r.exception, InputError) and "--shipped" in str(r.exception)
    assert not (tmp_path / "m").exists() and not (tmp_path / "a.zip").exists()


@pytest.mark.slow
def test_train_saves_into_the_current_directory_not_the_package(small_job, monkeypatch):
    from bsp_planner.forecasting.pipeline import DEFAULT_MODEL_ROOT

    monkeypatch.chdir(small_job)
    exp = ["-e", "exp.toml", "-f", "lstm-thesis", "--gaps", "ignore"]
    r = _run(["forecast", "train", *exp, "--set", "lstm-thesis.epochs=1"])
    assert r.exit_code == 0, r.output
    assert (small_job / "models" / "small" / "lstm-thesis" / "alpha.keras").is_file()
    assert not (DEFAULT_MODEL_ROOT / "small").exists()  # the package's shipped models are untouched
    # predict reads them with --models (the shipped folder has no model of this job)
    args = ["forecast", "predict", *exp, "--set", "lstm-thesis.epochs=1", "--models", "models", "-o", "fc"]
    r = _run(args)
    assert r.exit_code == 0, r.output
    assert read_forecast_metadata(small_job / "fc")["models"] == {"alpha": "loaded", "beta": "loaded"}


@pytest.mark.parametrize("folder, forecaster", [("default", None), ("default-lstm", "lstm")])
def test_the_shipped_forecasts_are_current_for_the_default_experiment(folder, forecaster):
    """The forecasts that ship are what the default experiment would compute now: made by the default
    forecaster (the lstm's beside them), with the inputs' digest of today's settings, so `simulate` reads
    them instead of regenerating them (a changed forecaster setting must come with regenerated files)."""
    from bsp_planner.forecasting.pipeline import Workspace, inputs_digest, request_inputs
    from bsp_planner.forecasting.registry import DEFAULT_FORECASTER
    from bsp_planner.inputs.experiment import load_experiment
    from bsp_planner.inputs.shipped import data_path, find_experiment

    exp = load_experiment(find_experiment(None))
    name = forecaster or DEFAULT_FORECASTER
    if forecaster is None:
        assert exp.forecast.source == DEFAULT_FORECASTER
    meta = read_forecast_metadata(data_path("experiments") / "forecasts" / folder)
    assert meta["forecaster"] == name
    ws = Workspace.load(
        exp.job_path,
        workload_range=tuple(exp.workload_range),
        gaps=meta["inputs"]["gaps"],
        horizon=exp.forecast.horizon,
    )
    now = request_inputs(ws, name, exp.start, exp.steps)
    assert inputs_digest(now) == meta["digest"], "regenerate with `bsp-planner forecast predict`"
