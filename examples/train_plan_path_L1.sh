#!/usr/bin/env bash
# Plan-Path, L1 (tool + plan agents share one model): warm start, AT-GRPO, held-out eval.
# Usage: bash examples/train_plan_path_L1.sh [section.key=value ...]
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${MODEL:-small}           # preset (test-tiny | tiny | small | smollm2-135m-instruct), local folder or hub id
GRID=${GRID:-4}                 # Plan-Path is GRID x GRID
STEPS=${STEPS:-50}              # AT-GRPO training steps
K=${K:-4}                       # tree width: candidates per (problem, turn, agent)
SEED=${SEED:-0}

.venv/bin/pettingllms train plan_path/L1 \
  model.name="$MODEL" \
  env.rows="$GRID" env.cols="$GRID" \
  rollout.num_generations="$K" \
  at_grpo.max_steps="$STEPS" \
  at_grpo.problems_per_step=4 \
  at_grpo.learning_rate=1e-4 \
  run.seed="$SEED" \
  run.output_dir="runs/plan_path_L1_${GRID}x${GRID}_seed${SEED}" \
  "$@"
