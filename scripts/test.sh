#!/usr/bin/env bash
# The test command of the README: installs what it needs, then runs the whole suite. `-rs` lists every
# skipped test with its reason (e.g. the install command of an optional model).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -rs --durations=25 "$@"
