"""The reinforcement-learning planner: environment, agents, `bsp-planner rl` and its bad inputs.

Everything runs on a seeded synthetic profile and short step ranges, so the file takes well under a
minute; the training runs are short but real (stable-baselines3 DQN).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
pytest.importorskip("stable_baselines3")

from bsp_planner.core.errors import InputError  # noqa: E402
from bsp_planner.inputs.shipped import data_dir  # noqa: E402
from bsp_planner.planners.base import Decision, Planner, make_planner  # noqa: E402
from bsp_planner.rl.data import build_data  # noqa: E402
from bsp_planner.rl.settings import ENV_ID, load_env_settings  # noqa: E402
from bsp_planner.simulate.simulation import simulate  # noqa: E402

from cli_run import run_cli  # noqa: E402

DATA = data_dir()  # the shipped defaults (package data)
TASKS = ["affinity", "atomic", "bsearch", "cap", "chmod", "memcpy", "vecmath", "zero"]


def write_profile(path: Path, seed: int = 0) -> Path:
    """duration = base * (w / 10) * (2000 / c) ** alpha per task, with 3% noise (seeded)."""
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["task", "workload", "cpu_millicores", "duration_s", "repeat"])
        for t in TASKS:
            base, alpha = 0.3 * (1 + 0.5 * rng.random()), 0.8 + 0.3 * rng.random()
            for wl in (10, 20, 30, 40, 50):
                for c in (250, 500, 750, 1000, 1500, 2000):
                    for r in range(2):
                        d = base * wl / 10 * (2000 / c) ** alpha * (1 + 0.03 * rng.standard_normal())
                        w.writerow([t, wl, c, f"{d:.5f}", r])
    return path


def write_setup(
    folder: Path, penalty_s: float = 1.0, env_lines: tuple[str, ...] = (), agent_lines: tuple[str, ...] = ()
) -> Path:
    """An experiment on the shipped thesis-8 job and an environment file on it; returns the env file."""
    folder.mkdir(parents=True, exist_ok=True)
    prof = folder / "profile.csv"
    if not prof.exists():
        write_profile(prof)
    (folder / "exp.toml").write_text(
        f'job = "{DATA / "jobs" / "thesis-8.toml"}"\nprofile = "{prof}"\nsteps = 100\npenalty_s = {penalty_s!r}\n'
        f'strategies = ["mpc"]\noutput = "{folder / "out"}"\n'
        "[cpu]\nbudget_millicores = 8000\nmin_millicores = 250\nstep_millicores = 50\nmax_millicores = 2000\n"
        '[planner]\nhorizon = 10\ndp_max_segment = 20\n[forecast]\nsource = "seasonal-naive"\nhorizon = 20\n'
    )
    env = folder / "env.toml"
    env.write_text(
        'experiment = "exp.toml"\nepisode_steps = 40\n'
        + "".join(line + "\n" for line in env_lines)
        + "[train]\nstart = 100\nsteps = 200\n[eval]\nstart = 0\nsteps = 100\n"
        + "[agent]\nlearning_starts = 200\nbuffer_size = 5000\neval_every = 1000\ncheckpoint_every = 1000\n"
        + "target_update_interval = 250\nexploration_fraction = 0.5\n"
        + "".join(line + "\n" for line in agent_lines)
    )
    return env


@pytest.fixture(scope="module")
def setup_dir(tmp_path_factory):
    return write_setup(tmp_path_factory.mktemp("rl"))


@pytest.fixture(scope="module")
def train_data(setup_dir):
    return build_data(load_env_settings(setup_dir), "train")


# ------------------------------------------------------------------------------- environment


def test_check_env_and_registration(train_data):
    from gymnasium.utils.env_checker import check_env

    from bsp_planner.rl.env import ReconfigureEnv

    env = ReconfigureEnv(data=train_data)
    check_env(env, skip_render_check=True)  # render modes are checked below, through gym.make
    assert env.observation_space.shape == (4, 6)  # the thesis's setting: m = 6, a0..a3
    assert env.action_space.n == 4
    made = gym.make(ENV_ID, data=train_data)
    check_env(made.unwrapped)
    obs, _ = made.reset(seed=3)
    assert made.observation_space.contains(obs)
    for mode in ("ansi", "rgb_array"):
        r = ReconfigureEnv(data=train_data, render_mode=mode)
        r.reset(seed=0)
        r.step(1)
        frame = r.render()
        assert "step" in frame if mode == "ansi" else frame.shape == (4 * 8, 6 * 8, 3)
    # stable-baselines3's own checker (it only remarks that a 2-D observation gets flattened)
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    with pytest.warns(UserWarning, match="unconventional shape"):
        sb3_check_env(ReconfigureEnv(data=train_data))


def test_default_settings_are_the_thesis_setting():
    from bsp_planner.rl.settings import EnvSettings

    s = EnvSettings()  # the environment's own defaults: m = 6, a0..a3
    assert (s.window, s.actions, s.obs_shape) == (6, 4, (4, 6))
    shipped = load_env_settings()  # envs/default.toml: the shipped agent's environment
    assert shipped.obs_shape == (4, 6)
    assert load_env_settings(DATA / "envs" / "wide.toml").obs_shape == (11, 10)
    assert not shipped.train.overlaps(shipped.eval)
    assert shipped.eval.start == 0 and shipped.eval.steps == 400  # the default experiment's own steps
    assert shipped.experiment_path == DATA / "experiments" / "default.toml"
    import bsp_planner.rl.env  # noqa: F401  (registers the id)

    env = gym.make(ENV_ID)  # no settings: the thesis's setting on the default experiment
    assert env.observation_space.shape == (4, 6) and env.action_space.n == 4


def test_observation_rows_are_the_planners_predictions(train_data):
    from bsp_planner.rl.env import ReconfigureEnv

    env = ReconfigureEnv(data=train_data)
    ctx, scale, m, n = train_data.ctx, train_data.obs_scale, 6, 3
    rng = np.random.default_rng(0)
    for t in (0, 17, 120):
        current = rng.integers(0, 20, size=ctx.n_tasks)
        obs, _ = env.reset(options={"start": t, "config": current, "steps": 10})
        cfgs, window_times = ctx.configs.row(t, n)
        assert obs[0].sum() * scale == pytest.approx(ctx.configs.predicted_time(t, current, m), rel=1e-5)
        for i in range(1, n + 1):
            # row i: the configuration a_i builds, as the ConfigTable (every planner's source) holds it
            assert obs[i].sum() * scale == pytest.approx(ctx.configs.predicted_time(t, cfgs[i - 1], m), rel=1e-5)
            # its first i steps are the frame a_i was built for: the table's own window time
            assert obs[i, :i].sum() * scale == pytest.approx(window_times[i - 1], rel=1e-5)
            for k in range(m):
                assert obs[i, k] * scale == pytest.approx(
                    ctx.configs.predicted_time(t + 0, cfgs[i - 1], k + 1)
                    - ctx.configs.predicted_time(t, cfgs[i - 1], k),
                    rel=1e-4,
                    abs=1e-6,
                )
    # the planner computes the same observation from the context alone
    from bsp_planner.rl.features import observation

    obs, _ = env.reset(options={"start": 5, "config": cfgs[0], "steps": 10})
    assert np.array_equal(observation(ctx, 5, cfgs[0], n, m, scale, train_data.settings.obs_high), obs)


class Replay(Planner):
    """Plays back the levels an environment run chose."""

    name = "replay"

    def __init__(self, levels):
        self.levels = levels

    def decide(self, t, current):
        return Decision(1, self.levels[t])


def test_reward_is_minus_the_simulators_step_cost(train_data):
    from bsp_planner.rl.env import ReconfigureEnv

    env = ReconfigureEnv(data=train_data)
    env.reset(options={"full": True})
    rng = np.random.default_rng(1)
    rewards, levels, costs = [], [], []
    done = False
    while not done:
        a = int(rng.choice(4, p=[0.7, 0.1, 0.1, 0.1]))
        _, r, term, trunc, info = env.step(a)
        rewards.append(r)
        costs.append(info["cost_s"])
        levels.append(env.current.copy())
        done = term or trunc
    assert len(rewards) == train_data.steps
    res = simulate(Replay(levels), train_data.ctx, train_data.actual, "forecast")
    sim_cost = res.step_s + res.penalty_s * res.reconfigured
    assert 0 < res.checkpoints < train_data.steps
    assert np.allclose(-np.array(rewards) * train_data.reward_scale, sim_cost)
    assert np.allclose(costs, sim_cost)


def test_penalty_scale_only_changes_the_charged_penalty(setup_dir):
    from bsp_planner.rl.env import ReconfigureEnv

    s = load_env_settings(setup_dir, ["penalty_scale=3", "episode_steps=20"])
    env = ReconfigureEnv(data=build_data(s, "train"))
    env.reset(seed=0, options={"start": 10, "config": np.zeros(8, dtype=int)})
    _, r, *_, info = env.step(1)
    assert info["reconfigured"]
    assert -r * env.data.reward_scale == pytest.approx(info["step_s"] + 3 * env.data.penalty_s)


def test_training_baseline_shifts_rewards_by_the_step_alone(train_data):
    # What the learner sees differs from the environment's reward by an amount that depends on the
    # step only, never on the action: every policy's return moves by the same amount.
    from bsp_planner.rl.env import BaselineShaping, ReconfigureEnv

    shifts = []
    for action in range(4):
        raw, shaped = ReconfigureEnv(data=train_data), BaselineShaping(ReconfigureEnv(data=train_data))
        opts = {"start": 30, "config": train_data.cfg[20, 2], "steps": 5}
        raw.reset(options=opts)
        shaped.reset(options=opts)
        shifts.append([shaped.step(action)[1] - raw.step(action)[1] for _ in range(3)])
    assert np.allclose(shifts, shifts[0])


def test_reset_is_deterministic_under_a_seed(train_data):
    from bsp_planner.rl.env import ReconfigureEnv

    def trajectory(seed):
        env = ReconfigureEnv(data=train_data)
        obs, _ = env.reset(seed=seed)
        env.action_space.seed(seed)
        out = [obs]
        for _ in range(100):
            obs, r, term, trunc, info = env.step(env.action_space.sample())
            out += [obs, np.array([r, info["t"]])]
            if term or trunc:
                obs, _ = env.reset()
                out.append(obs)
        return np.concatenate([o.ravel() for o in out])

    assert np.array_equal(trajectory(7), trajectory(7))
    assert not np.array_equal(trajectory(7), trajectory(8))


def test_sb3_vectorised_environments(train_data):
    from stable_baselines3.common.env_util import make_vec_env

    from bsp_planner.rl.env import ReconfigureEnv

    venv = make_vec_env(ReconfigureEnv, n_envs=3, seed=0, env_kwargs={"data": train_data})
    obs = venv.reset()
    assert obs.shape == (3, 4, 6)
    # by id, in a form that also works in subprocesses (the module registers the id on import)
    by_id = make_vec_env(f"bsp_planner.rl.env:{ENV_ID}", n_envs=2, seed=0, env_kwargs={"data": train_data})
    assert by_id.reset().shape == (2, 4, 6)
    by_id.close()
    ended = 0
    for _ in range(train_data.settings.episode_steps + 5):  # across an automatic reset
        obs, rewards, dones, infos = venv.step(np.array([0, 1, 3]))
        ended += int(dones.sum())
        for done, info in zip(dones, infos, strict=True):
            if done:  # truncated, not terminated: the job goes on after the segment
                assert info["TimeLimit.truncated"] and info["terminal_observation"].shape == (4, 6)
    assert obs.shape == (3, 4, 6) and rewards.shape == (3,)
    assert ended == 3
    venv.close()


# ------------------------------------------------------------------------------- training


def train(env_file, tmp, *extra, timesteps=3000):
    from bsp_planner.rl.train import train_agent

    s = load_env_settings(env_file, [f"agent.timesteps={timesteps}", *extra])
    return train_agent(
        s, tmp / "run", tmp / "agent" / "dqn.zip", plot=False, tensorboard=False, checkpoints=False, compare=None
    )


@pytest.mark.slow
def test_huge_penalty_agent_learns_never_to_reconfigure(tmp_path):
    env_file = write_setup(tmp_path / "setup", penalty_s=1000.0)
    result = train(env_file, tmp_path, timesteps=3000)
    from bsp_planner.rl.agent import load_agent
    from bsp_planner.rl.train import run_policy

    agent = load_agent(result.agent_path)
    data = build_data(load_env_settings(env_file), "train", scales=(agent.obs_scale, agent.meta["reward_scale"]))
    run = run_policy(agent.act, data)
    assert run.reconfigurations == 0  # the first configuration is free; every later one costs 1000 s
    assert result.evals[-1]["reconfigurations"] == 0  # and on the held-out steps


@pytest.mark.slow
def test_free_reconfiguration_agent_learns_to_follow_the_workload(tmp_path):
    # Perfect predictions and no penalty: a1's configuration is the best for every step, so an agent
    # that learned anything reconfigures often and beats keeping its first configuration.
    env_file = write_setup(tmp_path / "setup", penalty_s=0.0, env_lines=('mode = "perfect"',))
    result = train(env_file, tmp_path, timesteps=3000)
    from bsp_planner.rl.agent import load_agent
    from bsp_planner.rl.train import run_policy

    agent = load_agent(result.agent_path)
    data = build_data(load_env_settings(env_file), "train", scales=(agent.obs_scale, agent.meta["reward_scale"]))
    learned = run_policy(agent.act, data)
    keep = run_policy(lambda o: 0, data)
    always_a1 = run_policy(lambda o: 1, data)
    assert learned.reconfigurations > 20
    assert learned.total_s < keep.total_s - 0.5 * (keep.total_s - always_a1.total_s)


@pytest.mark.slow
def test_training_is_deterministic_under_a_seed(tmp_path):
    env_file = write_setup(tmp_path / "setup")
    a = train(env_file, tmp_path / "a", timesteps=1200)
    b = train(env_file, tmp_path / "b", timesteps=1200)
    assert a.evals == b.evals
    import zipfile

    za, zb = zipfile.ZipFile(a.agent_path), zipfile.ZipFile(b.agent_path)
    assert za.read("policy.pth") == zb.read("policy.pth")


def test_cli_train_json_is_the_held_out_results_alone_on_stdout(tmp_path, monkeypatch, capsys):
    env_file = write_setup(tmp_path / "setup")
    agent = tmp_path / "agents" / "dqn.zip"
    args = ["rl", "train", env_file, "-n", "300", "--agent", agent, "--run-dir", tmp_path / "run", "-q", "--json"]
    code, out, err = run_cli(args, monkeypatch, capsys)
    assert code == 0, err
    doc = json.loads(out)  # nothing else on stdout: the messages went to stderr
    assert set(doc["results"]) >= {"dqn", "mpc"} and doc["agent"] == str(agent)
    assert {"total_s", "compute_s", "reconfigurations"} <= set(doc["results"]["dqn"])
    assert doc["eval_range"] == {"start": 0, "steps": 100} and doc["train_range"] == {"start": 100, "steps": 200}
    assert "training DQN" in err and "trained in" in err


@pytest.mark.slow
def test_cli_train_then_simulate_end_to_end(tmp_path, monkeypatch, capsys):
    env_file = write_setup(tmp_path / "setup")
    agent = tmp_path / "agents" / "dqn.zip"
    run_dir = tmp_path / "run"
    code, out, err = run_cli(
        [
            "rl",
            "train",
            str(env_file),
            "-n",
            "1500",
            "--agent",
            str(agent),
            "--run-dir",
            str(run_dir),
            "--strict",
            "-q",
        ],
        monkeypatch,
        capsys,
    )
    assert code == 0, err
    assert "dqn" in out and "mpc" in out
    for name in ("eval.csv", "learning_curve.png", "summary.json"):
        assert (run_dir / name).stat().st_size > 0
    assert list((run_dir / "checkpoints").glob("dqn_*_steps.zip"))
    assert list((run_dir / "tb").rglob("events.out.tfevents.*"))
    meta = json.loads(agent.with_suffix(".json").read_text())
    assert meta["train_range"] == {"start": 100, "steps": 200} and meta["seed"] == 0 and meta["timesteps"] == 1500
    assert (meta["env"]["window"], meta["env"]["actions"]) == (6, 4)
    assert agent.stat().st_size < 1_000_000

    # the agent is a planner: `dqn` (here through the override variable) and rl:PATH
    monkeypatch.setenv("BSP_PLANNER_DQN_AGENT", str(agent))
    out_dir = tmp_path / "sim"
    code, out, err = run_cli(
        [
            "simulate",
            str(tmp_path / "setup" / "exp.toml"),
            "-q",
            "-m",
            "forecast",
            "-s",
            f"dqn,rl:{agent},mpc",
            "-o",
            str(out_dir),
        ],
        monkeypatch,
        capsys,
    )
    assert code == 0, err
    results = {r["strategy"]: r for r in json.loads((out_dir / "comparison.json").read_text())["results"]}
    assert results["dqn"]["total_s"] == results[f"rl:{agent}"]["total_s"]
    # the same run as the training's held-out evaluation (steps 0..99 are the experiment's steps)
    assert results["dqn"]["total_s"] == pytest.approx(meta["eval"]["total_s"], abs=1e-3)

    code, out, err = run_cli(
        ["rl", "evaluate", "--agent", str(agent), "--strict", "-o", str(tmp_path / "ev.json")], monkeypatch, capsys
    )
    assert code == 0, err
    ev = json.loads((tmp_path / "ev.json").read_text())
    assert ev["out_of_sample"] and ev["results"]["dqn"]["total_s"] == pytest.approx(meta["eval"]["total_s"], abs=1e-3)
    assert "mpc" in ev["results"]
    code, out, err = run_cli(["rl", "info", str(agent)], monkeypatch, capsys)
    assert code == 0 and "(4, 6)" in out


def test_simulate_without_an_agent_imports_no_torch():
    code = (
        "import sys; from bsp_planner import cli; from bsp_planner.planners.base import make_planner; "
        "make_planner('mpc'); import bsp_planner.rl.cli, bsp_planner.rl.planner; "
        "heavy = [m for m in ('torch', 'stable_baselines3', 'gymnasium') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------------- bad inputs


def test_training_without_tensorboard_writes_nothing_to_the_system_temp_dir(tmp_path, monkeypatch):
    import tempfile

    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    train(write_setup(tmp_path / "setup"), tmp_path, timesteps=200)
    assert list(system_tmp.iterdir()) == []  # SB3's default logger would make an SB3-<time> folder here
    assert (tmp_path / "run" / "eval.csv").is_file()


@pytest.fixture(scope="module")
def tiny_agent(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("agent")
    env_file = write_setup(tmp / "setup")
    return train(env_file, tmp, timesteps=300).agent_path, env_file


def test_agent_trained_on_another_shape_is_refused(tiny_agent, monkeypatch, capsys, tmp_path):
    agent, env_file = tiny_agent
    code, out, err = run_cli(
        ["rl", "evaluate", "--agent", str(agent), "--env", str(env_file), "--env-set", "window=8"], monkeypatch, capsys
    )
    assert code == 2
    assert "shape (4, 6)" in err and "(4, 8)" in err and "retrain" in err
    code, out, err = run_cli(
        ["rl", "evaluate", "--agent", str(agent), "--env", str(env_file), "--env-set", "actions=6"], monkeypatch, capsys
    )
    assert code == 2 and "4 actions" in err and "6 actions" in err
    # metadata that does not match the model (a model swapped under another agent's metadata)
    bad = tmp_path / "bad.zip"
    bad.write_bytes(Path(agent).read_bytes())
    meta = json.loads(Path(agent).with_suffix(".json").read_text())
    meta["env"]["window"] = 5
    bad.with_suffix(".json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match="do not belong together"):
        make_planner(f"rl:{bad}")


@pytest.mark.parametrize(("forecast_horizon", "refused"), [(10, False), (5, True)])
def test_agent_needing_more_forecast_than_given(tiny_agent, tmp_path, monkeypatch, capsys, forecast_horizon, refused):
    """The agent observes 6 steps ahead: a forecast of 10 covers that, one of 5 is refused."""
    agent, env_file = tiny_agent
    args = ["simulate", str(env_file.parent / "exp.toml"), "-q", "-m", "forecast", "-s", f"rl:{agent}"]
    args += ["--set", f"forecast.horizon={forecast_horizon}", "--set", "planner.horizon=4", "-o", str(tmp_path / "o")]
    code, out, err = run_cli(args, monkeypatch, capsys)
    if refused:
        assert code == 2 and "cover 5 steps ahead" in err
    else:
        assert code == 0, err


def test_overlapping_ranges_with_strict(tmp_path, monkeypatch, capsys, tiny_agent):
    env_file = write_setup(tmp_path / "setup")
    code, out, err = run_cli(
        [
            "rl",
            "train",
            str(env_file),
            "-n",
            "300",
            "--train-range",
            "50:250",
            "--strict",
            "-q",
            "--run-dir",
            str(tmp_path / "run"),
            "--agent",
            str(tmp_path / "a.zip"),
        ],
        monkeypatch,
        capsys,
    )
    assert code == 2 and "50..249 overlaps the evaluation range 0..99" in err
    assert not (tmp_path / "a.zip").exists()
    agent, env_file = tiny_agent
    code, out, err = run_cli(
        ["rl", "evaluate", "--agent", str(agent), "--eval-range", "150:250", "--strict"], monkeypatch, capsys
    )
    assert code == 2 and "100..299" in err and "not out of sample" in err


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--seed", "-1"], ["field 'agent.seed'", "expected a number >= 0", "--seed"]),  # was a numpy traceback
        (["--seed", str(2**32)], ["field 'agent.seed'", "expected a number <= 4.29497e+09"]),
        (["--algo", "sac"], ["field 'agent.algo'", "expected one of dqn, ppo, a2c", "(from --algo"]),
        (["-n", "0"], ["field 'agent.timesteps'", ">= 1", "(from --timesteps"]),
        (["--set", "penalty_s=nan"], ["field 'penalty_s'", "finite", "--set"]),
        (["--set", "bogus=1"], ["unknown setting in --set bogus=1"]),
        (["--run-dir", "A_FILE"], ["field '--run-dir'", "existing file"]),  # was a FileExistsError traceback
    ],
)
def test_rl_train_shipped_refuses_bad_options_before_any_training(args, needles, tmp_path, monkeypatch, capsys):
    from bsp_planner.rl.settings import DEFAULT_AGENT_DIR

    (tmp_path / "a-file").write_text("x")
    args = [str(tmp_path / "a-file") if a == "A_FILE" else a for a in args]
    shipped = {p.name: p.read_bytes() for p in DEFAULT_AGENT_DIR.iterdir() if p.is_file()}
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["rl", "train", "--shipped", "-q", *args], monkeypatch, capsys)
    assert code == 2 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert "training" not in out and not (tmp_path / "out").exists(), "refused before any training or folder"
    assert {p.name: p.read_bytes() for p in DEFAULT_AGENT_DIR.iterdir() if p.is_file()} == shipped


def test_missing_and_corrupt_agent_files(tiny_agent, tmp_path, monkeypatch, capsys):
    agent, _ = tiny_agent
    with pytest.raises(InputError, match="agent file not found"):
        make_planner(f"rl:{tmp_path / 'nothing.zip'}")
    monkeypatch.setenv("BSP_PLANNER_DQN_AGENT", str(tmp_path / "nothing.zip"))
    with pytest.raises(InputError, match="agent file not found"):
        make_planner("dqn")
    with pytest.raises(InputError, match="expected rl:PATH"):
        make_planner("rl")
    corrupt = tmp_path / "corrupt.zip"
    corrupt.write_bytes(b"not a zip at all" * 10)
    corrupt.with_suffix(".json").write_text(Path(agent).with_suffix(".json").read_text())
    with pytest.raises(InputError, match="not a readable DQN agent"):
        make_planner(f"rl:{corrupt}")
    truncated = tmp_path / "truncated.zip"
    data = Path(agent).read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    truncated.with_suffix(".json").write_text(Path(agent).with_suffix(".json").read_text())
    with pytest.raises(InputError, match="not a readable DQN agent"):
        make_planner(f"rl:{truncated}")
    nometa = tmp_path / "nometa.zip"
    nometa.write_bytes(data)
    with pytest.raises(InputError, match="metadata not found"):
        make_planner(f"rl:{nometa}")
    badmeta = tmp_path / "badmeta.zip"
    badmeta.write_bytes(data)
    badmeta.with_suffix(".json").write_text("{ not json")
    with pytest.raises(InputError, match="corrupt agent metadata"):
        make_planner(f"rl:{badmeta}")
    # through the CLI: a plain error, exit status 2
    code, out, err = run_cli(["simulate", "-q", "-s", f"rl:{corrupt}"], monkeypatch, capsys)
    assert code == 2 and "not a readable DQN agent" in err


@pytest.mark.parametrize(
    "setting", ["penalty_scale=0", "penalty_scale=-1", "reward_scale=0", "obs_scale=-2", "obs_high=0"]
)
def test_non_positive_scales(setting, setup_dir):
    key = setting.split("=")[0]
    with pytest.raises(InputError, match=f"field '{key}'.*expected a number > 0"):
        load_env_settings(setup_dir, [setting])


def test_non_positive_scale_in_an_environment_file(tmp_path, monkeypatch, capsys):
    env_file = write_setup(tmp_path / "setup", env_lines=("penalty_scale = -0.5",))
    code, out, err = run_cli(["rl", "train", str(env_file), "-q"], monkeypatch, capsys)
    assert code == 2 and "env.toml" in err and "penalty_scale" in err and "> 0" in err
