"""The wheel: built from the package's own files, installed (not editable) into a fresh virtual
environment, it runs the shipped default from an empty directory.

The fresh environment gets bsp-planner from the wheel alone; its dependencies (numpy, TensorFlow,
torch, ...) are the running environment's, reached through a .pth line naming that environment's
site-packages. A path in a .pth file is only appended to sys.path, the .pth files inside it are not
run, so an editable install of the checkout there stays invisible, and nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "bsp_planner")

pytestmark = pytest.mark.slow


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "BSP_PLANNER_DQN_AGENT")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(wheel path, build output): the wheel built, with warnings as errors, from a copy of the sources."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    src.mkdir()
    for name in SOURCES:
        s = ROOT / name
        if s.is_dir():
            shutil.copytree(s, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(s, src / name)
    dist = base / "dist"
    # the build backend pip would call, in-process so that -W error turns any (deprecation) warning of
    # setuptools about pyproject.toml into a failure; no build isolation, hence no download
    build = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-c",
            f"from setuptools import build_meta as b; print(b.build_wheel({str(dist)!r}))",
        ],
        cwd=src,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return dist / build.stdout.strip().splitlines()[-1], build.stdout + build.stderr


@pytest.fixture(scope="module")
def venv(built, tmp_path_factory):
    """A fresh virtual environment with the wheel installed (non-editable): its python and bin folder."""
    wheel, _ = built
    root = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            "-q",
            str(wheel),
        ],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        env=_clean_env(),
    ).stdout.strip()
    shared = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    Path(purelib, "_shared_dependencies.pth").write_text("".join(f"{p}\n" for p in shared))
    return python, root / "bin"


def test_the_wheel_holds_the_shipped_defaults_and_the_licences(built):
    wheel, log = built
    assert "Deprecat" not in log
    names = set(zipfile.ZipFile(wheel).namelist())
    data = ROOT / "bsp_planner" / "data"
    shipped = {p.relative_to(ROOT).as_posix() for p in data.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert shipped and shipped <= names, sorted(shipped - names)[:10]
    for must in (
        "bsp_planner/data/experiments/default.toml",
        "bsp_planner/data/agents/default/dqn.zip",
        "bsp_planner/data/models/thesis-8/lstm/affinity.keras",
        "bsp_planner/testing/fake_apiserver.py",
    ):
        assert must in names
    licences = {n.split("/licenses/", 1)[1] for n in names if "/licenses/" in n}
    assert {"LICENSE", "bsp_planner/data/datasets/LICENSE-NAB.txt"} <= licences
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    assert "License-Expression: MIT" in zipfile.ZipFile(wheel).read(metadata).decode()


def test_the_installed_wheel_runs_the_shipped_default_from_an_empty_directory(venv, tmp_path):
    python, bin_dir = venv
    where = subprocess.run(
        [str(python), "-c", "import bsp_planner; print(bsp_planner.__file__)"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(bin_dir.parent) and not Path(where).is_relative_to(ROOT)

    work = tmp_path / "work"
    work.mkdir()
    # a cache of its own: forecasts for 20 steps are regenerated from the shipped models, not found elsewhere
    env = _clean_env(XDG_CACHE_HOME=str(tmp_path / "cache"), MPLCONFIGDIR=str(tmp_path / "mpl"))
    run = subprocess.run(
        [str(bin_dir / "bsp-planner"), "simulate", "--steps", "20", "-q"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    out = work / "experiments" / "out" / "default"
    assert sorted(p.name for p in work.rglob("*") if p.is_file()) == sorted(
        ["comparison.csv", "comparison.json", "comparison.md", "comparison.png", "steps.csv"]
    )
    result = json.loads((out / "comparison.json").read_text())
    strategies = result["meta"]["settings"]["strategies"]
    assert {"dqn", "optimum", "floor", "mpc"} <= set(strategies)
    assert [(r["mode"], r["strategy"]) for r in result["results"]] == [
        (m, s) for m in ("perfect", "forecast") for s in strategies
    ]
    assert result["meta"]["steps"] == 20
    assert result["meta"]["experiment"] == "default.toml (shipped)"
    # the default forecaster's forecasts, from the files inside the wheel
    from bsp_planner.forecasting.registry import DEFAULT_FORECASTER

    label = result["meta"]["forecasts"]["forecast"]
    assert label.startswith(DEFAULT_FORECASTER) and "shipped forecasts default/" in label
    floor = {r["mode"]: r["total_s"] for r in result["results"] if r["strategy"] == "floor"}
    assert all(r["total_s"] >= floor[r["mode"]] - 1e-9 for r in result["results"])
    for name in ("comparison.json", "comparison.md", "comparison.csv"):
        text = (out / name).read_text()
        assert str(tmp_path) not in text and str(ROOT) not in text

    # and the editable copy works from the installed package too
    init = subprocess.run(
        [str(bin_dir / "bsp-planner"), "init", "mine"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert init.returncode == 0, init.stderr
    assert (work / "mine" / "experiments" / "default.toml").is_file()
    assert (work / "mine" / "datasets" / "nyc_taxi.csv").is_file()
