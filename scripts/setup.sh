#!/usr/bin/env bash
# Create .venv (Python >= 3.11) and install bsp-planner with every optional part. Re-running is
# instant unless pyproject.toml changed. torch is pinned to the CPU build the machine provides
# (an unpinned torch pulls several GB of CUDA packages).
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-}"
if [ -z "$py" ]; then
  for c in python3.11 python3.12 python3.13 python3; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then py="$c"; break; fi
  done
fi
if [ -z "$py" ]; then
  echo "bsp-planner needs Python >= 3.11; install it (Debian: apt-get install -y python3 python3-venv)" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv || { echo "could not create .venv; on Debian run: apt-get install -y python3-venv" >&2; exit 1; }
fi
stamp=.venv/.bsp-planner-installed
want="$(sha256sum pyproject.toml | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  echo "installing bsp-planner and its dependencies into .venv (first time: a few minutes)" >&2
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q "torch==2.13.0" -e ".[all]"
  echo "$want" > "$stamp"
fi
