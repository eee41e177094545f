"""The package runs outside its checkout: shipped defaults are package data, `bsp-planner init` writes an
editable copy, outputs name their inputs without a machine's absolute paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bsp_planner.inputs.experiment import load_experiment
from bsp_planner.inputs.job import load_job
from bsp_planner.inputs.shipped import data_dir, default_experiment, experiment_names, find_experiment, is_shipped

from cli_run import run_cli

# perfect mode only and strategies that need neither TensorFlow nor torch: the point is where files are
# read from and written to, not the figures
QUICK = ["--steps", "12", "--mode", "perfect", "-s", "exppo,static:2,mpc,floor", "-q"]


def _no_absolute_paths(text: str, *roots) -> None:
    for root in roots:
        assert str(root) not in text


def test_the_shipped_default_runs_from_an_empty_directory_and_writes_there(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["simulate", *QUICK], monkeypatch, capsys)
    assert code == 0, err
    out_dir = tmp_path / "experiments" / "out" / "default"
    for name in ("comparison.md", "comparison.csv", "comparison.json", "steps.csv", "comparison.png"):
        assert (out_dir / name).is_file(), name
    assert {p.name for p in tmp_path.iterdir()} == {"experiments"}  # nothing else written here
    meta = json.loads((out_dir / "comparison.json").read_text())["meta"]
    assert meta["experiment"] == "default.toml (shipped)"
    assert meta["profile"] == "../profiles/local-2core/profile.csv"  # as the experiment names it
    for name in ("comparison.json", "comparison.md", "comparison.csv"):
        _no_absolute_paths((out_dir / name).read_text(), tmp_path, data_dir())
    assert not any(p.name == "out" for p in (data_dir() / "experiments").iterdir())  # the package is not written


def test_shipped_experiments_are_package_data_and_can_be_named():
    assert default_experiment().is_file() and is_shipped(default_experiment())
    assert {"default", "large", "live-default"} <= set(experiment_names())
    assert find_experiment(None) == default_experiment()
    assert find_experiment("large") == data_dir() / "experiments" / "large.toml"
    exp = load_experiment(find_experiment(None))
    for path in (exp.job_path, exp.profile_path):
        assert path.is_file() and is_shipped(path)


def test_an_unknown_experiment_names_the_shipped_ones_and_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["simulate", "nosuch"], monkeypatch, capsys)
    assert code == 2
    assert "nosuch" in err and "experiment file not found" in err and "large" in err
    assert "Traceback" not in err


def test_init_writes_an_editable_copy_that_simulate_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["init", "mine"], monkeypatch, capsys)
    assert code == 0, err
    copy = tmp_path / "mine"
    experiment = copy / "experiments" / "default.toml"
    assert experiment.read_text() == default_experiment().read_text()
    exp = load_experiment(experiment)
    # the experiment's relative paths (and the job's series) point at the copies, not at the package
    assert exp.job_path == (copy / "jobs" / "thesis-8.toml").resolve()
    assert exp.profile_path == (copy / "profiles" / "local-2core" / "profile.csv").resolve()
    for task in load_job(exp.job_path).tasks:
        assert task.series.file.is_relative_to(copy.resolve())
    assert (copy / "datasets" / "LICENSE-NAB.txt").is_file()

    # an edit to the copy changes the run: a smaller budget makes every strategy slower
    def totals(path):
        data = json.loads(path.read_text())
        return {r["strategy"]: r["total_s"] for r in data["results"]}

    code, _, err = run_cli(["simulate", "--experiment", str(experiment), *QUICK], monkeypatch, capsys)
    assert code == 0, err
    result = copy / "experiments" / "out" / "default" / "comparison.json"
    before = totals(result)
    meta = json.loads(result.read_text())["meta"]
    assert meta["experiment"] == "../../default.toml"  # relative to the output folder
    _no_absolute_paths(result.read_text(), tmp_path, data_dir())
    experiment.write_text(experiment.read_text().replace("budget_millicores = 8000", "budget_millicores = 6000"))
    code, _, err = run_cli(["simulate", "--experiment", str(experiment), *QUICK], monkeypatch, capsys)
    assert code == 0, err
    after = totals(result)
    assert after.keys() == before.keys()
    assert all(after[s] > before[s] for s in before)


@pytest.mark.parametrize("existing", ["file", "non-empty folder"])
def test_init_refuses_an_existing_file_or_non_empty_folder(tmp_path, monkeypatch, capsys, existing):
    target = tmp_path / "target"
    if existing == "file":
        target.write_text("mine\n")
    else:
        target.mkdir()
        (target / "notes.txt").write_text("mine\n")
    code, _, err = run_cli(["init", str(target)], monkeypatch, capsys)
    assert code == 2
    assert str(target) in err and ("not empty" in err or "found a file" in err)
    assert "Traceback" not in err
    # nothing was written or changed
    if existing == "file":
        assert target.read_text() == "mine\n"
    else:
        assert [p.name for p in target.iterdir()] == ["notes.txt"]


def test_init_accepts_an_empty_folder(tmp_path, monkeypatch, capsys):
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli(["init", str(tmp_path / "empty")], monkeypatch, capsys)
    assert code == 0, err
    assert (tmp_path / "empty" / "experiments" / "default.toml").is_file()


def test_shipped_agents_and_environments_are_found_by_their_place_in_the_package(tmp_path, monkeypatch):
    from bsp_planner.rl.agent import agent_file
    from bsp_planner.rl.settings import load_env_settings

    monkeypatch.chdir(tmp_path)
    shipped = data_dir() / "agents" / "default" / "dqn.zip"
    assert agent_file("agents/default/dqn.zip") == shipped
    assert agent_file("agents/default/dqn") == shipped
    assert agent_file("agents/none/dqn.zip") == Path("agents/none/dqn.zip")  # nothing there: as given
    (tmp_path / "agents" / "default").mkdir(parents=True)
    (tmp_path / "agents" / "default" / "dqn.zip").write_bytes(b"mine")
    assert agent_file("agents/default/dqn.zip").resolve() == (
        tmp_path / "agents" / "default" / "dqn.zip"
    )  # a local file wins
    assert load_env_settings("wide").path == (data_dir() / "envs" / "wide.toml").resolve()
    assert load_env_settings().experiment_path == default_experiment()


def test_init_where_nothing_can_be_written_is_a_plain_error(tmp_path, monkeypatch, capsys):
    (tmp_path / "a-file").write_text("mine\n")
    code, _, err = run_cli(["init", str(tmp_path / "a-file" / "copy")], monkeypatch, capsys)
    assert code == 2
    assert "a-file" in err and "not a folder" in err and "Traceback" not in err
    assert (tmp_path / "a-file").read_text() == "mine\n"
