"""The shipped live job and experiments: they load, fit a 2-core machine, and their tasks are thesis-8's
(the profile measured thesis-8's tasks, so a live task must be the very same stressor, ops and workers)."""

from __future__ import annotations

import pytest

from bsp_planner.inputs.experiment import load_experiment
from bsp_planner.inputs.job import load_job
from bsp_planner.inputs.shipped import data_dir

DATA = data_dir()  # the shipped defaults (package data)
LIVE_EXPERIMENTS = sorted((DATA / "experiments").glob("live*.toml"))


def test_live_jobs_are_made_of_thesis_8_tasks():
    thesis = {t.name: t for t in load_job(DATA / "jobs" / "thesis-8.toml").tasks}
    jobs = sorted((DATA / "jobs").glob("live-*.toml"))
    assert jobs
    for path in jobs:
        for t in load_job(path).tasks:
            assert t.name in thesis, f"{path.name}: {t.name} is not a thesis-8 task"
            ref = thesis[t.name]
            assert (t.stressor, t.ops_per_unit, t.workers, t.series) == (
                ref.stressor,
                ref.ops_per_unit,
                ref.workers,
                ref.series,
            ), f"{path.name}: task {t.name} differs from thesis-8's, so the profile does not describe it"


@pytest.mark.parametrize("path", LIVE_EXPERIMENTS, ids=lambda p: p.name)
def test_live_experiments_fit_a_two_core_machine(path):
    exp = load_experiment(path)
    assert exp.cpu.budget_millicores <= 2000
    assert exp.cpu.max_millicores <= exp.cpu.budget_millicores
    n = len(load_job(exp.job_path).tasks)
    assert n * exp.cpu.min_millicores <= exp.cpu.budget_millicores
    assert exp.job_path.is_file()


@pytest.mark.parametrize("path", LIVE_EXPERIMENTS, ids=lambda p: p.name)
def test_live_experiments_build_their_planning_context(path, tmp_path):
    """What `bsp-planner run` does before starting anything: the scenario from the shipped profile."""
    from bsp_planner.runtime.coordinator import Coordinator, RunSettings

    exp = load_experiment(path)
    if not exp.profile_path.is_file():
        pytest.skip(f"the profile {exp.profile_path} is not measured yet (`bsp-planner profile run`)")
    coord = Coordinator(RunSettings(experiment=str(path), planner="mpc"), "check", tmp_path)
    coord._load()
    assert coord.scen.actual.shape[0] == n_tasks(exp) and coord.scen.actual.shape[2] == exp.steps
    assert (coord.scen.actual > 0).all()


def n_tasks(exp) -> int:
    return len(load_job(exp.job_path).tasks)


def test_a_job_whose_tasks_differ_from_the_profiled_ones_is_refused(tmp_path):
    """The profile's metadata names what it timed; a live run of other tasks would compare them with
    predictions for something else."""
    import json

    from bsp_planner.core.errors import InputError
    from bsp_planner.runtime.coordinator import Coordinator, RunSettings

    from zk_fixtures import tiny_experiment

    exp = tiny_experiment(tmp_path / "exp")
    meta = {
        "tasks": {
            "a": {"stressor": "zero", "ops_per_unit": 20, "workers": 1},
            "b": {"stressor": "memcpy", "ops_per_unit": 0.5, "workers": 1},
        }
    }
    (tmp_path / "exp" / "profile.meta.json").write_text(json.dumps(meta))
    Coordinator(RunSettings(experiment=str(exp)), "ok", tmp_path / "runs")._load()  # the same tasks: fine
    meta["tasks"]["b"]["ops_per_unit"] = 0.7
    (tmp_path / "exp" / "profile.meta.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match=r"task 'b' is .* but the profile timed .*'ops_per_unit': 0.7"):
        Coordinator(RunSettings(experiment=str(exp)), "bad", tmp_path / "runs")._load()
