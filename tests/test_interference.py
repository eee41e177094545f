"""Co-location interference: pair profiles (measured, written, read), the model's slowdown, the placement
that avoids the pairs that hurt, and what a simulation on nodes says about it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bsp_planner.core.errors import InputError
from bsp_planner.inputs.pair_profiles import COLUMNS, PairRow, load_pair_profile, write_pair_profile
from bsp_planner.model.cluster import improve_placement, place_balanced
from bsp_planner.model.interference import NONE_ASSUMED
from bsp_planner.model.performance import co_location_slowdown

from cli_run import run_cli
from synthetic import DATA

HEADER = ",".join(COLUMNS)


# -- pair profiles -----------------------------------------------------------------------------------
def test_a_written_pair_profile_reads_back_as_its_slowdown_matrix(tmp_path):
    rows = [PairRow("a", "b", 1.5, 1.0, 1.5, 3, 1000, 20), PairRow("b", "a", 1.1, 2.0, 2.2, 3, 1000, 20)]
    path = tmp_path / "pairs.csv"
    write_pair_profile(path, rows)
    prof = load_pair_profile(path)
    assert prof.rows == tuple(rows)
    m = prof.matrix(["b", "a", "c"])  # job order; c unmeasured: no interference assumed with it
    assert np.allclose(m, [[1.0, 1.1, 1.0], [1.5, 1.0, 1.0], [1.0, 1.0, 1.0]])
    assert prof.measured(["a", "b", "c"]) == 2 and prof.measured(["a", "c"]) == 0


@pytest.mark.parametrize(
    "text, line, needle",
    [
        ("task,slowdown\na,1\n", 1, "expected the header"),
        (f"{HEADER}\na,b,fast,1,1,3,1000,20\n", 2, "slowdown: expected a number"),
        (f"{HEADER}\na,b,-1,1,1,3,1000,20\n", 2, "slowdown: expected a positive number"),
        (f"{HEADER}\na,a,1.2,1,1,3,1000,20\n", 2, "two different task names"),
        (f"{HEADER}\na,b,1.2,1,1,3,1000,20\na,b,1.3,1,1,3,1000,20\n", 3, "also on line 2"),
        (f"{HEADER}\na,b,1.2,1,1,3,1000\n", 2, "expected 8 columns"),
        (f"{HEADER}\na,b,1.2,1,1,2.5,1000,20\n", 2, "runs: expected a whole number"),
    ],
)
def test_a_bad_pair_profile_is_refused_naming_its_file_and_line(tmp_path, text, line, needle):
    path = tmp_path / "pairs.csv"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_pair_profile(path)
    assert err.value.path == str(path) and err.value.line == line and needle in err.value.message


def test_a_missing_or_empty_pair_profile_says_how_to_make_one(tmp_path):
    with pytest.raises(InputError, match="profile pairs"):
        load_pair_profile(tmp_path / "none.csv")
    (tmp_path / "empty.csv").write_text(HEADER + "\n")
    with pytest.raises(InputError, match="no rows"):
        load_pair_profile(tmp_path / "empty.csv")


def test_profile_pairs_measures_co_runs_under_quotas_resumes_and_refuses_another_grid(tmp_path, monkeypatch, capsys):
    """Real stress-ng runs in cgroups: two tasks alone and beside each other, then a second call resumes
    (measures nothing), and a call at another CPU is refused without touching the files."""
    out = tmp_path / "p" / "pairs.csv"
    args = ["profile", "pairs", "--out", out, "--tasks", "memcpy,zero", "--workload", "2", "--repeats", "1"]
    code, stdout, err = run_cli([*args, "--cpu", "500"], monkeypatch, capsys)
    assert code == 0, stdout + err
    prof = load_pair_profile(out)
    assert {(r.task, r.co_task) for r in prof.rows} == {("memcpy", "zero"), ("zero", "memcpy")}
    for r in prof.rows:
        assert r.cpu_millicores == 500 and r.workload == 2 and r.runs == 1
        assert r.solo_s > 0 and r.slowdown == pytest.approx(r.co_s / r.solo_s, rel=1e-3)
    runs = (tmp_path / "p" / "pairs.runs.csv").read_text().splitlines()
    assert len(runs) == 1 + 4  # header, 2 alone, 2 beside
    assert (tmp_path / "p" / "pairs.meta.json").exists()
    code, stdout, _ = run_cli([*args, "--cpu", "500"], monkeypatch, capsys)
    assert code == 0 and "0 run(s) measured, 4 already in" in stdout
    meta = json.loads((tmp_path / "p" / "pairs.meta.json").read_text())
    assert [x["measured"] for x in meta["sessions"]] == [4, 0] and meta["pairs"] == 2
    before = out.read_text()
    code, _, err = run_cli([*args, "--cpu", "250"], monkeypatch, capsys)
    assert code == 2 and "pairs.runs.csv" in err and "not 250m" in err
    assert out.read_text() == before


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--tasks", "memcpy"], "at least two tasks"),
        (["--cpu", "1500"], "lower --cpu"),
        (["--repeats", "0"], "--repeats"),
        (["--workload", "-1"], "--workload"),
    ],
)
def test_bad_profile_pairs_flags_are_refused_with_one_line(tmp_path, extra, needle, monkeypatch, capsys):
    out = tmp_path / "pairs.csv"
    code, _, err = run_cli(["profile", "pairs", "--out", out, *extra], monkeypatch, capsys)
    assert code == 2 and needle in err and "Traceback" not in err
    assert not out.exists()


# -- the model -----------------------------------------------------------------------------------------
def test_a_task_is_slowed_by_the_product_of_its_co_located_pairs_and_only_theirs():
    s = np.array(
        [
            [1.0, 1.5, 2.0, 3.0],
            [0.9, 1.0, 1.2, 1.0],  # 0.9: noise, co-running never speeds a task up
            [1.0, 1.0, 1.0, 1.0],
            [1.0, 1.0, 1.0, 1.0],
        ]
    )
    f = co_location_slowdown(s, np.array([0, 0, 0, 1]))
    assert np.allclose(f, [1.5 * 2.0, 1.0 * 1.2, 1.0, 1.0])
    assert np.allclose(co_location_slowdown(s, np.arange(4)), 1.0)  # alone on its node: no slowdown


# -- placement --------------------------------------------------------------------------------------------
def test_placement_avoids_a_pair_that_hurts_and_still_balances():
    demand = np.full((5, 4), 1000.0)  # (steps, tasks): equal demand, 2 nodes of 4 CPU
    cap = np.array([4000.0, 4000.0])
    blind = place_balanced(demand, cap, 250)
    assert blind[0] == blind[2]  # balancing alone puts tasks 0 and 2 together...
    s = np.ones((4, 4))
    s[0, 2] = s[2, 0] = 3.0  # ...the pair that hurts
    aware = place_balanced(demand, cap, 250, s)
    assert aware[0] != aware[2]
    assert np.bincount(aware, minlength=2).tolist() == [2, 2]


def test_improving_a_placement_swaps_tasks_when_the_nodes_are_full():
    target = np.array([1, 0, 1, 0])
    calls = []

    def cost(where):
        calls.append(np.bincount(where, minlength=2).tolist())
        return float(np.abs(where - target).sum())

    got = improve_placement(np.array([0, 0, 1, 1]), np.array([2, 2]), cost)
    assert got.tolist() == target.tolist()
    assert all(c == [2, 2] for c in calls)  # a full node takes no third task: only swaps were tried


# -- simulation on nodes ------------------------------------------------------------------------------------
def _tight(tmp_path: Path, extra: str = "") -> Path:
    text = (DATA / "experiments" / "nodes-tight.toml").read_text().replace('"../', f'"{DATA}/')
    text = text.replace('source = "lstm"', 'source = "seasonal-naive"')
    path = tmp_path / "exp.toml"
    path.write_text(text.replace("[reconfigure_cost]", extra + "[reconfigure_cost]"))
    return path


def _pairs(tmp_path: Path, names: list[str], hurt: dict[tuple[str, str], float]) -> Path:
    rows = [PairRow(a, b, hurt.get((a, b), 1.0), 1.0, 1.0, 3, 1000, 20) for a in names for b in names if a != b]
    path = tmp_path / "pairs.csv"
    write_pair_profile(path, rows)
    return path


def test_without_a_pair_profile_the_summary_says_no_interference_is_assumed(tmp_path, monkeypatch, capsys):
    args = ["simulate", _tight(tmp_path), "--steps", "5", "--mode", "perfect", "--strategies", "static:3"]
    code, out, err = run_cli([*args, "--out", tmp_path / "o"], monkeypatch, capsys)
    assert code == 0, err
    assert " ".join(NONE_ASSUMED.split()) in out
    assert f"- {NONE_ASSUMED}" in (tmp_path / "o" / "comparison.md").read_text()
    assert json.loads((tmp_path / "o" / "comparison.json").read_text())["meta"]["interference"] == NONE_ASSUMED


def test_the_pair_slowdowns_multiply_the_co_located_tasks_durations(tmp_path):
    from bsp_planner.inputs.experiment import load_experiment
    from bsp_planner.simulate.scenario import build_scenario

    plain = build_scenario(load_experiment(_tight(tmp_path), ["steps=6", "modes=perfect"]))
    names = plain.task_names
    pairs = _pairs(tmp_path, names, {("memcpy", "zero"): 1.4, ("zero", "memcpy"): 1.2, ("cap", "chmod"): 2.0})
    given = "".join(  # a given placement: memcpy with zero, cap and chmod apart
        f'[[node]]\nname = "n{j}"\ncpu_millicores = 4000\ntasks = {ts}\n'
        for j, ts in enumerate([["memcpy", "zero", "cap"], ["chmod", "affinity", "atomic"], ["bsearch", "vecmath"]])
    )
    text = _tight(tmp_path).read_text()
    exp_path = tmp_path / "given.toml"
    exp_path.write_text(
        text[: text.index("[[node]]")].replace(
            "[reconfigure_cost]", f'[interference]\npairs = "{pairs}"\n\n[reconfigure_cost]'
        )
        + given
    )
    scen = build_scenario(load_experiment(exp_path, ["steps=6", "modes=perfect"]))
    expect = np.ones(len(names))
    expect[names.index("memcpy")], expect[names.index("zero")] = 1.4, 1.2
    assert np.allclose(scen.actual, plain.actual * expect[:, None, None])
    w = np.full((len(names), 1), 30.0)
    assert np.allclose(scen.model.durations(w), plain.model.durations(w) * expect[:, None, None])
    assert "placement given" in scen.interference and "worst x1.40 (memcpy)" in scen.interference


def test_interference_aware_placement_beats_blind_on_the_tight_cluster(tmp_path):
    """Both simulated with the same interference model; the aware placement keeps the pairs that hurt apart."""
    from bsp_planner.inputs.experiment import load_experiment
    from bsp_planner.simulate.runs import run_strategy
    from bsp_planner.simulate.scenario import build_scenario

    names = build_scenario(load_experiment(_tight(tmp_path), ["steps=2", "modes=perfect"])).task_names
    hurt = {(a, b): 2.5 for a in ("memcpy", "zero", "bsearch") for b in ("memcpy", "zero", "bsearch") if a != b}
    pairs = _pairs(tmp_path, names, hurt)
    totals = {}
    for placement in ("blind", "aware"):
        exp = load_experiment(
            _tight(tmp_path, f'[interference]\npairs = "{pairs}"\nplacement = "{placement}"\n\n'),
            ["steps=40", "modes=perfect"],
        )
        scen = build_scenario(exp)
        where = {n: scen.cluster.node_of[i] for i, n in enumerate(names)}
        if placement == "aware":
            assert len({where["memcpy"], where["zero"], where["bsearch"]}) == 3
        totals[placement] = run_strategy(scen, "mpc", "perfect").total_s
    assert totals["aware"] < totals["blind"]


@pytest.mark.parametrize(
    "extra, needles",
    [
        ('[interference]\npairs = "nope.csv"\n\n', ["nope.csv", "interference.pairs", "profile pairs"]),
        ('[interference]\nplacement = "smart"\n\n', ["interference.placement", "smart"]),
    ],
)
def test_bad_interference_settings_are_refused_with_one_line(tmp_path, extra, needles, monkeypatch, capsys):
    args = ["simulate", _tight(tmp_path, extra), "-q", "--steps", "5", "--out", tmp_path / "o"]
    code, _, err = run_cli(args, monkeypatch, capsys)
    assert code == 2 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not (tmp_path / "o").exists()


def test_a_pair_profile_without_nodes_is_refused(tmp_path, monkeypatch, capsys):
    pairs = _pairs(tmp_path, ["memcpy", "zero"], {})
    exp = (DATA / "experiments" / "default.toml").read_text().replace('"../', f'"{DATA}/')
    path = tmp_path / "exp.toml"
    path.write_text(exp + f'\n[interference]\npairs = "{pairs}"\n')
    code, _, err = run_cli(["simulate", path, "-q", "--steps", "5", "--out", tmp_path / "o"], monkeypatch, capsys)
    assert code == 2 and "interference.pairs" in err and "[[node]]" in err, err


def test_a_bad_row_in_the_experiments_pair_profile_names_the_file_line_and_field(tmp_path, monkeypatch, capsys):
    pairs = tmp_path / "pairs.csv"
    pairs.write_text(f"{HEADER}\nmemcpy,zero,1.2,1,1,3,1000,20\nzero,memcpy,x,1,1,3,1000,20\n")
    args = ["simulate", _tight(tmp_path, f'[interference]\npairs = "{pairs}"\n\n'), "-q", "--steps", "5"]
    code, _, err = run_cli([*args, "--out", tmp_path / "o"], monkeypatch, capsys)
    assert code == 2 and "Traceback" not in err, err
    for needle in (str(pairs), "line 3", "interference.pairs", "slowdown: expected a number"):
        assert needle in err, (needle, err)
    assert not (tmp_path / "o").exists()
