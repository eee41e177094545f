"""`bsp-planner simulate --actual DIR` for a job whose workloads are observed (its tasks have no series):
perfect mode from a recorded trace's raw workloads, and a bad trace refused naming its file and line."""

import json
import shutil

import numpy as np
import pytest

from bsp_planner.inputs.experiment import load_experiment
from bsp_planner.inputs.profiles import load_profile
from bsp_planner.inputs.shipped import data_dir, find_experiment
from bsp_planner.model.performance import PerformanceModel

from cli_run import run_cli

TRACE = data_dir() / "traces" / "particles-8"
RANKS = [f"p{r}" for r in range(8)]


def raw_trace(folder, steps):
    """(tasks, steps) the recorded workloads, read with nothing but numpy."""
    return np.stack([np.loadtxt(folder / f"{r}.csv", skiprows=1)[:steps] for r in RANKS])


def test_an_observed_workload_job_is_simulated_from_its_recorded_trace(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    code, stdout, err = run_cli(
        ["simulate", "particles-8", "-q", "--mode", "perfect", "--actual", TRACE, "-o", out], monkeypatch, capsys
    )
    assert code == 0, err
    assert "perfect knowledge" in stdout
    results = {r["strategy"]: r for r in json.loads((out / "comparison.json").read_text())["results"]}
    assert set(results) == {"mpc", "exppo", "static:4", "floor"}
    # exppo on one shared profile is the even split (1600m / 8 = 200m each, never reconfigured): its total
    # is the slowest rank's profiled duration at the raw recorded count, summed over the steps
    exp = load_experiment(find_experiment("particles-8"))
    model = PerformanceModel(load_profile(exp.profile_path), RANKS, exp.interpolation, exp.out_of_grid).at_levels(
        np.array([200.0])
    )
    w = raw_trace(TRACE, exp.steps)
    assert w.max() > 1000 and not np.allclose(w, w[:1]), "a raw trace: counts in the thousands, ranks differ"
    expected = model.durations(w)[:, 0, :].max(axis=0).sum()
    assert results["exppo"]["total_s"] == pytest.approx(expected, abs=5e-4)  # comparison.json keeps ms
    # knowing the trace, mpc moves CPU to the busy ranks: close to the floor, far below the even split
    assert results["floor"]["total_s"] <= results["mpc"]["total_s"] < 0.5 * results["exppo"]["total_s"]


def test_without_a_trace_an_observed_workload_job_says_what_to_give(tmp_path, monkeypatch, capsys):
    code, _, err = run_cli(
        ["simulate", "particles-8", "-q", "--mode", "perfect", "--set", "online=false", "-o", tmp_path / "out"],
        monkeypatch,
        capsys,
    )
    assert code == 2 and "Traceback" not in err
    assert "particles-8.toml" in err and "task 'p0' has no series" in err and "simulate --actual DIR" in err, err
    assert not (tmp_path / "out").exists()


def corrupt(folder, rank, line, text):
    path = folder / f"{rank}.csv"
    lines = path.read_text().splitlines()
    lines[line - 1] = text
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    "damage, needle",
    [
        (lambda d: (d / "p3.csv").unlink(), "p3.csv: trace file not found"),
        (lambda d: corrupt(d, "p2", 5, "many"), "p2.csv, line 5, field 'workload': expected a number, got 'many'"),
        (lambda d: corrupt(d, "p1", 7, "-3"), "p1.csv, line 7, field 'workload': expected a workload >= 0, got -3"),
        (lambda d: corrupt(d, "p0", 4, "nan"), "p0.csv, line 4, field 'workload': expected a finite number"),
        (lambda d: corrupt(d, "p6", 1, "particles"), "p6.csv, line 1: expected the header workload"),
        (lambda d: corrupt(d, "p4", 3, "12,13"), "p4.csv, line 3: expected 1 columns, got 2"),
        (
            lambda d: (d / "p5.csv").write_text("workload\n" + "1000\n" * 10),
            "p5.csv: has 10 steps but the experiment needs 30",
        ),
    ],
)
def test_a_bad_trace_is_refused_naming_file_and_line(tmp_path, monkeypatch, capsys, damage, needle):
    trace = tmp_path / "trace"
    shutil.copytree(TRACE, trace)
    damage(trace)
    code, _, err = run_cli(
        ["simulate", "particles-8", "-q", "--mode", "perfect", "--actual", trace, "-o", tmp_path / "out"],
        monkeypatch,
        capsys,
    )
    assert code == 2 and "Traceback" not in err
    assert needle in err, err
    assert not (tmp_path / "out").exists(), "nothing written for a refused trace"


def test_a_file_given_as_the_trace_folder_is_said_to_be_no_folder(tmp_path, monkeypatch, capsys):
    (tmp_path / "trace.csv").write_text("workload\n1000\n")
    code, _, err = run_cli(
        [
            "simulate",
            "particles-8",
            "-q",
            "--mode",
            "perfect",
            "--actual",
            tmp_path / "trace.csv",
            "-o",
            tmp_path / "o",
        ],
        monkeypatch,
        capsys,
    )
    assert code == 2 and "trace.csv" in err and "not a folder" in err and "--actual" in err, err
    assert not (tmp_path / "o").exists()


def test_replayed_values_outside_the_workload_range_are_clipped_with_one_warning(tmp_path, monkeypatch, capsys):
    """particles-8's workload_range is [500, 20000]: two values of p2 and one of p5 lie outside it."""
    trace = tmp_path / "trace"
    shutil.copytree(TRACE, trace)
    corrupt(trace, "p2", 2, "1e12")
    corrupt(trace, "p2", 3, "100")
    corrupt(trace, "p5", 4, "25000")
    args = ["simulate", "particles-8", "-q", "--mode", "perfect", "-s", "exppo", "--actual", trace]
    code, _, err = run_cli([*args, "-o", tmp_path / "o"], monkeypatch, capsys)
    assert code == 0, err
    assert err.count("warning:") == 1, err
    assert "3 replayed workload(s) outside workload_range [500, 20000] clipped to it: p2 (2), p5 (1)" in err, err
    # the shipped trace lies inside the range: no warning
    code, _, err = run_cli([*args[:-1], TRACE, "-o", tmp_path / "o2"], monkeypatch, capsys)
    assert code == 0 and "warning" not in err, err
