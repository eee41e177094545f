import numpy as np
import pytest

from bsp_planner.core.errors import InputError
from bsp_planner.inputs.job import load_job
from bsp_planner.inputs.profiles import load_profile
from bsp_planner.inputs.series import WorkloadScaler, load_job_series
from bsp_planner.model.performance import PerformanceModel

from synthetic import CPUS, DATA, WORKLOADS, write_profile


@pytest.mark.parametrize("method", ["spline", "linear"])
def test_model_reproduces_the_grid_and_is_vectorised(synthetic_profile, method):
    profile = load_profile(synthetic_profile)
    m = PerformanceModel(profile, list(profile.tasks), method)
    p = profile.tasks["memcpy"]
    w, c = np.meshgrid(p.workloads, p.cpu_millicores, indexing="ij")
    assert np.allclose(m.predict("memcpy", w, c), p.duration_s, rtol=1e-9)
    dm = m.at_levels(np.array([250.0, 600.0, 2000.0]))
    table = dm.durations(np.full((8, 4), 25.0))
    assert table.shape == (8, 3, 4)
    expect = m.predict("memcpy", 25.0, 600.0)
    assert table[list(profile.tasks).index("memcpy"), 1, 0] == pytest.approx(float(expect))
    assert np.all(np.diff(table, axis=1) <= 0), "more CPU never makes a task slower"


def test_out_of_grid_error_clamp_extrapolate(synthetic_profile):
    profile = load_profile(synthetic_profile)
    names = list(profile.tasks)
    with pytest.raises(InputError, match=r"workload 60 is outside the profiled range \[10, 50\]"):
        PerformanceModel(profile, names, "spline", "error").predict("cap", 60, 1000)
    clamp = PerformanceModel(profile, names, "spline", "clamp")
    assert clamp.predict("cap", 60, 1000) == pytest.approx(clamp.predict("cap", 50, 1000))
    assert clamp.predict("cap", 30, 3000) == pytest.approx(clamp.predict("cap", 30, 2000))
    extra = PerformanceModel(profile, names, "linear", "extrapolate")
    # The linear interpolant's edge slope continues: work grows with workload beyond the grid.
    assert extra.predict("cap", 60, 1000) > extra.predict("cap", 50, 1000)
    with pytest.raises(InputError, match="interpolation"):
        PerformanceModel(profile, names, "cubic")


def test_profile_mean_over_repeats(tmp_path):
    path = write_profile(tmp_path / "p.csv", tasks=["a"], repeats=3)
    p = load_profile(path).tasks["a"]
    assert p.repeats == 3 and p.duration_s.shape == (len(WORKLOADS), len(CPUS))
    rows = [line.split(",") for line in path.read_text().splitlines()[1:] if line.startswith("a,10,250,")]
    assert p.duration_s[0, 0] == pytest.approx(np.mean([float(r[3]) for r in rows]))


def test_workload_scale_is_fitted_on_the_training_half_only():
    job = load_job(DATA / "jobs" / "thesis-8.toml")
    js = load_job_series(job, (10.0, 50.0))
    for s, sc in zip(js.series, js.scalers, strict=True):
        assert sc.raw_min == s.train.min() and sc.raw_max == s.train.max()
        w = sc.transform(s.test)
        assert w.min() >= 10 and w.max() <= 50  # test values beyond the training range are clipped
        assert np.isclose(sc.transform(s.train).min(), 10) and np.isclose(sc.transform(s.train).max(), 50)
    # Row ranges from the thesis's Table 4.2: nyc_taxi rows 0-1998 for the first task.
    assert len(js.series[0].values) == 1999 and js.series[0].period_steps == 48
    assert js.series[4].period_steps == 288 and js.series[5].period_steps == 24
    a = js.workloads(0, 5)
    assert a.shape == (8, 5)


def test_constant_training_half_is_refused():
    with pytest.raises(InputError, match="constant"):
        WorkloadScaler.fit(np.ones(10))
