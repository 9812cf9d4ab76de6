#!/usr/bin/env bash
# One short GPU check (docs/gpu.md): the GPU tests, bf16 generation and scoring, one AT-GRPO step and one
# MADPO round on CUDA with the HF backend, the HF side of benchmarks/rollout_engine.py, and the vLLM tests
# where vllm imports. Under 8 minutes on one H200; one JSON report (and a log beside it). The logic is in
# scripts/gpu_check.py; this script picks the interpreter, installs carried wheels and sets PYTHONPATH.
#
#   bash scripts/gpu_check.sh                     # the GPU run (report: $OUT/gpu_check.json, else
#                                                 #   benchmarks/results/gpu_check.json; or --report PATH)
#   bash scripts/gpu_check.sh --dry-run           # every part on CPU at tiny sizes, float32 (CI, < 1 min)
#   bash scripts/gpu_check.sh --fetch-wheels      # HERE, with the package registry: wheels into .whl/
#   bash scripts/gpu_check.sh --parts at_grpo_step,gpu_tests   # a subset (names: --help)
#
# On a lent GPU machine, through the device tool, after `bash scripts/gpu_check.sh --fetch-wheels` here:
#
#   run(command="bash scripts/gpu_check.sh", carry=[".whl"], timeout_s=480)
#
# (carry: [".whl"]. The check keeps to its own 420 s budget, about 4 minutes expected, and rewrites its
# report after every part, so even a run stopped at the timeout returns one; the device time left after
# it allows one rerun of a subset on the still-warm machine, e.g. `bash scripts/gpu_check.sh --parts
# at_grpo_step`.)
#
# Environment: PYTHON (the interpreter; default .venv/bin/python, else /opt/torch/.venv/bin/python3, else
# python3), GPU_CHECK_WHEELS (the wheel folder, default .whl), GPU_CHECK_SITE (where they are installed,
# default /tmp/site). Exit status: 0 when no part failed, 1 when one did, 2 for a usage error.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"  # paths given as arguments stay relative to the caller

if [[ -n "${PYTHON:-}" ]]; then
  PY="$PYTHON"
elif [[ -x "$ROOT/.venv/bin/python" ]]; then
  PY="$ROOT/.venv/bin/python"
elif [[ -x /opt/torch/.venv/bin/python3 ]]; then
  PY=/opt/torch/.venv/bin/python3
else
  PY=python3
fi

fetch=0 dry=0 with_wheels=0
for arg in "$@"; do
  case "$arg" in
    --fetch-wheels) fetch=1 ;;
    --dry-run) dry=1 ;;
    --with-wheels) with_wheels=1 ;;
    -h|--help) fetch=1 ;;  # nothing to install either
  esac
done
if (( fetch )); then
  exec "$PY" "$ROOT/scripts/gpu_check.py" "$@"
fi

# The project is not installed there: the tree itself goes on the path, then the carried wheels' site.
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
WHEELS="${GPU_CHECK_WHEELS:-$ROOT/.whl}"
SITE="${GPU_CHECK_SITE:-/tmp/site}"
export GPU_CHECK_WHEELS_DIR="$WHEELS" GPU_CHECK_SITE="$SITE"
if ! compgen -G "$WHEELS/*.whl" > /dev/null; then
  export GPU_CHECK_WHEELS_STATUS=absent
elif (( dry && ! with_wheels )); then
  export GPU_CHECK_WHEELS_STATUS=dry-run
else
  export GPU_CHECK_WHEELS_LOG="${TMPDIR:-/tmp}/gpu_check_wheels.$$.log"
  started=$(date +%s.%N)
  if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
      "$WHEELS"/*.whl > "$GPU_CHECK_WHEELS_LOG" 2>&1; then
    export GPU_CHECK_WHEELS_STATUS=installed
    export PYTHONPATH="$ROOT:$SITE${PYTHONPATH#"$ROOT"}"
    rm -f "$GPU_CHECK_WHEELS_LOG"
  else
    export GPU_CHECK_WHEELS_STATUS=failed  # recorded as the failed part `wheels`; the others still run
    cat "$GPU_CHECK_WHEELS_LOG" >&2
  fi
  GPU_CHECK_WHEELS_SECONDS=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  export GPU_CHECK_WHEELS_SECONDS
fi

export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$PY" "$ROOT/scripts/gpu_check.py" "$@"
