#!/usr/bin/env bash
# The main job: a team of two agents (tool + plan, one shared `small` model) learns Plan-Path 4x4.
# Oracle warm start, held-out success, AT-GRPO, held-out success again; 8 to 25 minutes on 2 CPU cores, depending on the CPU.
# Prints the success before and after and writes runs/quickstart/ (config, metrics, checkpoints,
# policies, plots/*.png). Extra arguments are config overrides or flags, e.g. `at_grpo.max_steps=10`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
exec .venv/bin/pettingllms train plan_path/quickstart --overwrite "$@"
