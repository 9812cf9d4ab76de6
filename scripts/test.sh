#!/usr/bin/env bash
# The test command of the README: installs what it needs, then runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q --durations=25 "$@"
