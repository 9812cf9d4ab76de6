#!/usr/bin/env bash
# The test command of the README: installs what it needs, then runs the whole suite. `-rs` lists every
# skipped test with its reason (e.g. the install command of an optional model).
#
# Two worker processes (pytest-xdist), one test file each at a time (`--dist loadfile`: a file's module
# fixtures, e.g. the Ray cluster, start once): every test process runs one torch thread (tests/conftest.py),
# so two of them use the machine's 2 cores. PYTEST_WORKERS=0 runs everything in this process (what a
# debugger or `-x` on one test wants); extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
workers=${PYTEST_WORKERS:-2}
parallel=()
if [ "$workers" != "0" ]; then
  parallel=(-n "$workers" --dist loadfile)
fi
exec .venv/bin/python -m pytest -q -rs --durations=25 "${parallel[@]}" "$@"
