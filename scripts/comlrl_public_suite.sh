#!/usr/bin/env bash
# The public CoMLRL 1.4.3 test suite, unchanged, against this project's comlrl (docs/compatibility.md,
# section 11). It downloads the library's source distribution (its tests ship inside: 720 items on tiny
# local GPT-2 models), checks its sha256, runs the suite from the sdist's own folder with WANDB_MODE=disabled
# and checks every test id against scripts/comlrl_public_suite.json: exit 1 when a test classified "pass"
# fails. Not part of the README's test command (it needs a download and wandb); CI does not run it.
#
#   bash scripts/comlrl_public_suite.sh                         # download, install a venv once, run
#   bash scripts/comlrl_public_suite.sh --sdist comlrl-1.4.3.tar.gz   # offline: a copy of the sdist
#   bash scripts/comlrl_public_suite.sh --python /path/to/python      # an env with this project + wandb
#   bash scripts/comlrl_public_suite.sh -- -x -k trainer_init         # extra pytest arguments after --
#
# Everything it writes (the sdist, its extracted folder, the venv, results.xml, report.json) goes to
# .comlrl-public/ (ignored by git). The logic is in scripts/comlrl_public_suite.py (standard library only).
# Environment: PYTHON, the interpreter that runs that file (default .venv/bin/python, else python3).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"  # paths given as arguments stay relative to the caller
if [[ -n "${PYTHON:-}" ]]; then
  PY="$PYTHON"
elif [[ -x "$ROOT/.venv/bin/python" ]]; then
  PY="$ROOT/.venv/bin/python"
else
  PY=python3
fi
exec "$PY" "$ROOT/scripts/comlrl_public_suite.py" "$@"
