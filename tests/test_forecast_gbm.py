"""The global gradient-boosted forecaster (`gbm`) and the ensemble: no look-ahead, the source-series
rule of its pools, refits on past data only, ensemble weights, and both as forecast sources."""

from __future__ import annotations

import numpy as np
import pytest

from bsp_planner.core.errors import InputError
from bsp_planner.forecasting.gbm import GBMForecaster, GBMSettings, Member, SeriesFacts
from bsp_planner.forecasting.pipeline import Workspace, obtain
from bsp_planner.forecasting.registry import FORECASTERS
from bsp_planner.inputs.job import load_job
from bsp_planner.inputs.series import load_job_series

H = 6
PERIOD = 12  # 2-hourly data
SMALL = {"n_estimators": 30, "learning_rate": 0.1, "num_leaves": 7, "min_child_samples": 5, "refit_every": 24}


def series(n: int = 400, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return 30 + 10 * np.sin(2 * np.pi * t / PERIOD) + 3 * np.sin(2 * np.pi * t / (7 * PERIOD)) + rng.normal(0, 0.5, n)


def write_csv(path, values, interval_s: int = 7200) -> None:
    t0 = np.datetime64("2024-01-01T00:00:00", "s")
    rows = [f"{str(t0 + np.timedelta64(i * interval_s, 's')).replace('T', ' ')},{v}" for i, v in enumerate(values)]
    path.write_text("timestamp,value\n" + "\n".join(rows) + "\n")


@pytest.fixture
def pieces_job(tmp_path):
    """Three tasks: 'early' and 'late' are consecutive pieces of one file, 'other' its own series."""
    write_csv(tmp_path / "one.csv", series(800))
    write_csv(tmp_path / "two.csv", series(400, seed=3))
    (tmp_path / "job.toml").write_text(
        'name = "pieces"\n'
        '[[task]]\nname = "early"\nstressor = "cpu"\nops_per_unit = 1\n'
        'series = { file = "one.csv", first_row = 0, last_row = 399 }\n'
        '[[task]]\nname = "late"\nstressor = "cpu"\nops_per_unit = 1\nseries = { file = "one.csv", first_row = 400 }\n'
        '[[task]]\nname = "other"\nstressor = "cpu"\nops_per_unit = 1\nseries = { file = "two.csv" }\n'
    )
    (tmp_path / "exp.toml").write_text(
        'job = "job.toml"\nprofile = "p.csv"\nsteps = 20\nworkload_range = [10, 50]\n'
        f'[planner]\nhorizon = {H}\n[forecast]\nsource = "gbm"\nhorizon = {H}\n'
    )
    return tmp_path


def workspace(folder, settings=None) -> Workspace:
    job = load_job(folder / "job.toml")
    return Workspace.from_series(job, load_job_series(job), horizon=H, settings=settings or {"gbm": dict(SMALL)})


def fitted(settings: dict | None = None, n_train: int = 200, seed: int = 0) -> tuple[GBMForecaster, np.ndarray]:
    x = series(400, seed)
    f = GBMForecaster(
        H,
        period=PERIOD,
        interval_s=7200,
        t0=np.datetime64("2024-01-01T00:00:00"),
        settings=GBMSettings.from_dict({**SMALL, **(settings or {})}),
    )
    other = Member(
        "other", series(300, seed + 7), SeriesFacts(1, PERIOD, 7200, np.datetime64("2024-03-01T00:00:00", "s"))
    )
    if f.settings.statistical:
        from bsp_planner.forecasting.statistical import MSTLForecaster

        other.facts.mstl = MSTLForecaster(horizon=H, period=PERIOD).fit(other.train, errors=False)
    return f.fit_pool(x[:n_train], [other]), x


@pytest.mark.parametrize("statistical", [False, True])
def test_every_feature_at_origin_o_comes_from_values_before_o(statistical):
    f, x = fitted({"statistical": statistical})
    rng = np.random.default_rng(1)
    for o in (f._min_origin(), 50, 199, 200, 201, 260, 333):
        changed = x.copy()
        changed[o:] += rng.normal(0, 20, len(x) - o)  # everything at or after the origin
        np.testing.assert_array_equal(f.features(x, np.array([o])), f.features(changed, np.array([o])))


def test_a_forecast_at_o_is_unchanged_when_values_at_and_after_o_change_even_across_refits():
    f, x = fitted()
    assert f._refit_point(260) > f.fit_length_  # a refit on the test half lies between
    rng = np.random.default_rng(2)
    for o in (200, 223, 224, 260, 333):
        changed = x.copy()
        changed[o:] = rng.uniform(0, 100, len(x) - o)
        a = f.predict_origins(x, np.array([o]))
        b = f.predict_origins(changed, np.array([o]))
        np.testing.assert_array_equal(a, b)
    q = f.predict_origins(x, np.arange(200, 390))
    assert np.all(np.diff(q, axis=0) >= 0)  # quantiles ordered


def test_refits_use_the_past_and_follow_a_level_the_training_half_never_reached():
    x = series(400)
    x[200:] += 15.0  # the test half moves up: a model relative to the last value follows it
    f, _ = fitted()
    pred = f.predict_median(x, np.arange(250, 390))
    truth = x[np.arange(250, 390)[:, None] + np.arange(H)]
    assert np.sqrt(np.mean((pred - truth) ** 2)) < 2.0
    # refitted every 24 steps after the training half, only at steps the forecasts have reached
    assert sorted(r for r, _ in f._models) == list(range(248, 390, 24))


def test_gbm_beats_the_seasonal_naive_forecast_on_a_daily_plus_weekly_series():
    from bsp_planner.forecasting.baselines import SeasonalNaiveForecaster

    f, x = fitted({"n_estimators": 80})
    o = np.arange(200, 390)
    truth = x[o[:, None] + np.arange(H)]
    sn = SeasonalNaiveForecaster(H, period=PERIOD).fit(x[:200])
    rmse = np.sqrt(np.mean((f.predict_median(x, o) - truth) ** 2))
    assert rmse < 0.8 * np.sqrt(np.mean((sn.predict_median(x, o) - truth) ** 2))


def test_training_is_seeded():
    a, x = fitted()
    b, _ = fitted()
    o = np.arange(200, 300)
    np.testing.assert_array_equal(a.predict_median(x, o), b.predict_median(x, o))


def test_a_pool_never_holds_a_later_piece_of_the_same_source_series(pieces_job):
    ws = workspace(pieces_job)
    got = {p.task: obtain(ws, "gbm", p)[0] for p in ws.prepared}
    assert got["early"].info["pool"] == ["other"]  # 'late' continues the file after 'early'
    assert got["late"].info["pool"] == ["early", "other"]  # an earlier piece lies wholly in the past
    assert got["other"].info["pool"] == ["early", "late"]
    # the rule is in the data: the same pieces in separate files would all be in each other's pool
    early, late, other = ws.prepared
    assert [q.task for q in ws.prepared if q.source == early.source] == ["early", "late"]
    assert early.first_row == 0 and late.first_row == 400


def test_ensemble_is_the_weighted_mean_of_its_members_and_shares_their_fits(pieces_job):
    ws = workspace(pieces_job, {"gbm": dict(SMALL), "ensemble:mstl,gbm": {"weights": "3,1"}})
    p = ws.prepared[0]
    mstl, _ = obtain(ws, "mstl", p)
    gbm, _ = obtain(ws, "gbm", p)
    eq, how = obtain(ws, "ensemble:gbm,mstl", p)
    assert how == "fitted+fitted" and eq.parts[0] is gbm and eq.parts[1] is mstl  # fitted once, shared
    o = np.arange(p.n_train, len(p.rows) - H + 1)
    a, b = gbm.predict_median(p.grid, o), mstl.predict_median(p.grid, o)
    np.testing.assert_allclose(eq.predict_median(p.grid, o), (a + b) / 2)
    weighted, _ = obtain(ws, "ensemble:mstl,gbm", p)
    np.testing.assert_allclose(weighted.predict_median(p.grid, o), 0.75 * b + 0.25 * a)
    q = eq.predict_origins(p.grid, o)
    assert np.all(np.diff(q, axis=0) >= 0)


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("ensemble:lstm", "two or more"),
        ("ensemble:lstm,lstm", "two or more"),
        ("ensemble:lstm,arima", "unknown forecaster 'arima'"),
        ("ensemble:lstm,ensemble", "cannot be an ensemble"),
    ],
)
def test_bad_ensemble_names_are_refused_in_one_line(name, needle):
    with pytest.raises(InputError, match=needle):
        FORECASTERS.get(name)


def test_ensemble_weights_must_match_its_members(pieces_job):
    ws = workspace(pieces_job, {"ensemble:mstl,gbm": {"weights": "1,2,3"}})
    with pytest.raises(InputError, match="expected 2 weights, one per member"):
        obtain(ws, "ensemble:mstl,gbm", ws.prepared[0])


def test_ensemble_and_gbm_are_forecast_sources_offline_and_online_alike(pieces_job, monkeypatch, tmp_path):
    from bsp_planner.forecasting.provider import forecast_matrix
    from bsp_planner.simulate.online import online_forecasts

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    job = load_job(pieces_job / "job.toml")
    js = load_job_series(job)
    name = "ensemble:gbm,seasonal-naive"
    fc, label = forecast_matrix(name, js, 3, 8, H, job=job, say=lambda m: None)
    assert fc.shape == (3, 8, H) and label.startswith(name) and np.isfinite(fc).all()
    online = online_forecasts(name, js, 3, H, job=job, say=lambda m: None)
    for t in range(8):
        np.testing.assert_allclose(online.forecast(), fc[:, t], atol=1e-9)
        online.observe(js.workloads(3 + t, 1)[:, 0])


def test_evaluate_reports_gbm_and_an_ensemble_beside_the_others_with_progress(pieces_job):
    import json

    from typer.testing import CliRunner

    from bsp_planner.cli import app

    out = pieces_job / "ev"
    args = ["forecast", "evaluate", "-e", str(pieces_job / "exp.toml"), "-o", str(out)]
    args += ["-f", "seasonal-naive", "-f", "gbm", "-f", "ensemble:gbm,seasonal-naive"]
    args += ["--set", "gbm.n_estimators=30", "--set", "gbm.learning_rate=0.1", "--set", "gbm.num_leaves=7"]
    r = CliRunner().invoke(app, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "pool leaves out late" in r.output and "refit at step" in r.output  # progress, as it goes
    data = json.loads((out / "evaluation.json").read_text())
    assert set(data["overall"]) == {"seasonal-naive", "gbm", "ensemble:gbm,seasonal-naive"}
    assert data["per_task"]["ensemble:gbm,seasonal-naive"]["early"]["model"] == "fitted+fitted"
    r = CliRunner().invoke(app, ["forecast", "train", "-e", str(pieces_job / "exp.toml"), "-f", "gbm"])
    assert isinstance(r.exception, InputError) and "fitted on the job's series when used" in str(r.exception)
