#!/usr/bin/env bash
# Run every test. Installs the Python environment (scripts/setup.sh) and the system packages the
# tests need for real components (stress-ng, a ZooKeeper server and its Java runtime): as root it
# installs them with apt-get, otherwise it prints the exact command and stops.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v stress-ng >/dev/null 2>&1 || need+=(stress-ng)
dpkg -s zookeeper >/dev/null 2>&1 || need+=(zookeeper)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing system packages: ${need[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "the tests need: ${need[*]}. Run this, then again:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y ${need[*]}" >&2
    exit 1
  fi
fi
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
