"""Ensemble weights fitted per task on the validation period (the training half's last part): they
never read the test half, they follow the validation data, and the validation refit of the lstm is
the same model as the one used."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bsp_planner.core.errors import InputError
from bsp_planner.forecasting.pipeline import Workspace, obtain
from bsp_planner.forecasting.registry import FORECASTERS
from bsp_planner.forecasting.validation import fit_weights, validation_forecasts, validation_part, weight_grid
from bsp_planner.inputs.job import load_job
from bsp_planner.inputs.series import load_job_series

H = 6
PERIOD = 12  # 2-hourly data
NAME = "ensemble:mstl,persistence"
FIT = {NAME: {"fit_weights": "true"}}


def seasonal(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return 30 + 10 * np.sin(2 * np.pi * t / PERIOD) + rng.normal(0, 0.5, n)


def write_job(folder, values: np.ndarray) -> Workspace:
    """A one-task job on `values` (2-hourly): training half rows 0..n/2-1, validation its last quarter."""
    folder.mkdir(parents=True, exist_ok=True)
    t0 = np.datetime64("2024-01-01T00:00:00", "s")
    rows = [f"{str(t0 + np.timedelta64(i * 7200, 's')).replace('T', ' ')},{v}" for i, v in enumerate(values)]
    (folder / "one.csv").write_text("timestamp,value\n" + "\n".join(rows) + "\n")
    (folder / "job.toml").write_text(
        'name = "one"\n[[task]]\nname = "a"\nstressor = "cpu"\nops_per_unit = 1\nseries = { file = "one.csv" }\n'
    )
    job = load_job(folder / "job.toml")
    return Workspace.from_series(job, load_job_series(job), horizon=H, settings=FIT)


def weights_of(ws: Workspace) -> np.ndarray:
    f, how = obtain(ws, NAME, ws.prepared[0])
    assert how == "fitted+fitted"
    return f.weights_


def test_fitted_weights_never_read_the_test_half_but_follow_the_validation_period(tmp_path):
    x = seasonal(480, 0)  # training half 0..239, validation 180..239, test half 240..479
    w = weights_of(write_job(tmp_path / "a", x))
    assert w[0] >= 0.8  # on a clean daily cycle the seasonal model carries the combination
    # any test half at all: the same weights
    y = x.copy()
    y[240:] = np.random.default_rng(5).normal(80, 20, 240)
    np.testing.assert_array_equal(weights_of(write_job(tmp_path / "b", y)), w)
    # a validation period where the daily cycle stops and the level walks: persistence takes over
    z = x.copy()
    z[180:240] = 30 + np.cumsum(np.random.default_rng(6).normal(0, 1.0, 60))
    assert weights_of(write_job(tmp_path / "c", z))[1] >= 0.8


def test_fitted_weights_minimise_the_validation_error_and_are_used(tmp_path):
    ws = write_job(tmp_path, seasonal(480, 1) + np.linspace(0, 15, 480))
    p = ws.prepared[0]
    a, truth = validation_forecasts(ws, "mstl", p, obtain)
    b, _ = validation_forecasts(ws, "persistence", p, obtain)
    assert a.shape == truth.shape == (60 - H + 1, H)
    best = min(weight_grid(2, 0.1), key=lambda w: np.mean((w[0] * a + w[1] * b - truth) ** 2))
    f, _ = obtain(ws, NAME, p)
    np.testing.assert_allclose(f.weights_, best)
    assert f.info["validation_origins"] == len(truth) and set(f.info["validation_rmse"]) == {"mstl", "persistence"}
    o = np.arange(p.n_train, len(p.rows) - H + 1)
    members = [obtain(ws, m, p)[0].predict_median(p.grid, o) for m in ("mstl", "persistence")]
    np.testing.assert_allclose(f.predict_median(p.grid, o), best[0] * members[0] + best[1] * members[1])


def test_the_validation_part_is_the_training_half_alone(tmp_path):
    ws = write_job(tmp_path, seasonal(480, 2))
    p = ws.prepared[0]
    v = validation_part(p, 0.25)
    assert len(v.rows) == p.n_train == 240 and v.n_train == 180
    np.testing.assert_array_equal(v.rows, p.rows[:240])


def test_weight_grid_and_ties():
    g = weight_grid(3, 0.5)
    assert g.shape == (6, 3) and np.allclose(g.sum(axis=1), 1)
    same = np.ones((4, H))
    np.testing.assert_allclose(fit_weights([same, same], same), [0.5, 0.5])  # a tie: the even weights
    with pytest.raises(InputError, match="divides 1"):
        weight_grid(2, 0.3)


def test_the_lstm_validation_refit_keeps_the_lags_of_its_whole_training_half():
    cls = FORECASTERS.get("lstm")
    f = cls(horizon=20, period=48)
    # 999 half-hourly steps: a week's lag fits; three quarters of them alone would shrink it to two days
    assert f.resolved_lags(999) == (1, 7) and f.resolved_lags(749) == (1, 2)
    assert f.validation_settings(999) == {"lags": [1, 7]}


def test_ensemble_fit_is_registered_with_fitted_weights_and_refuses_weights_beside_them():
    cls = FORECASTERS.get("ensemble-fit")
    assert cls.members == ("lstm", "gbm") and cls.settings_type().fit_weights
    assert not FORECASTERS.get("ensemble").settings_type().fit_weights  # the plain ensemble stays equal
    with pytest.raises(InputError, match="either weights or fit_weights"):
        cls.settings_type.from_dict({"weights": "1,1"})
    with pytest.raises(InputError, match="cannot be an ensemble"):
        FORECASTERS.get("ensemble:gbm,ensemble-fit")


def test_evaluate_reports_a_fitted_ensemble_with_its_validation_progress(tmp_path):
    from typer.testing import CliRunner

    from bsp_planner.cli import app

    write_job(tmp_path, seasonal(480, 3))
    (tmp_path / "exp.toml").write_text(
        'job = "job.toml"\nprofile = "p.csv"\nsteps = 20\nworkload_range = [10, 50]\n'
        f"[planner]\nhorizon = {H}\n[forecast]\nhorizon = {H}\n"
    )
    out = tmp_path / "ev"
    args = ["forecast", "evaluate", "-e", str(tmp_path / "exp.toml"), "-o", str(out), "-f", "mstl", "-f", NAME]
    r = CliRunner().invoke(app, [*args, "--set", "fit_weights=true"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "validation (55 origins)" in r.output and "weights mstl" in r.output
    data = json.loads((out / "evaluation.json").read_text())
    assert set(data["overall"]) == {"mstl", NAME}
