#!/usr/bin/env bash
# Creates ./.venv with the CPU build of torch and the project in editable mode (idempotent).
# GPU users: skip this script and run `pip install -e ".[dev]"` (plus `.[vllm]` / `.[ray]`) in their env.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if ! .venv/bin/python -c "import comlrl, pettingllms, pytest, hypothesis" >/dev/null 2>&1; then
  # Pinning torch here (not in pyproject) takes the CPU wheel and never the multi-GB CUDA build.
  .venv/bin/pip install -q torch==2.13.0 -e ".[dev]"
fi
