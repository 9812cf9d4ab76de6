#!/usr/bin/env bash
# Plan-Path, L0: the single-agent GRPO baseline (one agent plans alone; K independent trajectories per
# problem, one group per problem). Compare with train_plan_path_L1.sh at equal samples.
# Usage: bash examples/train_plan_path_L0_grpo.sh [section.key=value ...]
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${MODEL:-small}
STEPS=${STEPS:-50}
SEED=${SEED:-0}

.venv/bin/pettingllms train plan_path/L0 \
  model.name="$MODEL" \
  grpo.max_steps="$STEPS" \
  run.seed="$SEED" \
  run.output_dir="runs/plan_path_L0_seed${SEED}" \
  "$@"
