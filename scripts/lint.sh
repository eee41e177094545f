#!/usr/bin/env bash
# The lint gate: ruff's rules, ruff's formatting, mypy's types and the import layers (lint-imports), settings
# in pyproject.toml, in the environment scripts/setup.sh builds. Exits non-zero on the first check that fails.
# To apply the formatting instead of checking it: .venv/bin/ruff format
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check
.venv/bin/ruff format --check
.venv/bin/mypy
.venv/bin/lint-imports --no-cache
