#!/usr/bin/env bash
# Plan-Path, L1 (tool + plan agents share one model): warm start, AT-GRPO, held-out eval before and after.
# Success is the mean of 4 samples per instance at temperature 1 on the 50 held-out instances, as in the
# quickstart and in train_plan_path_L0_grpo.sh, so the three compare.
# Usage: bash examples/train_plan_path_L1.sh [section.key=value ...]   (SHORT, OUT, PYTHON: examples/_common.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
source examples/_common.sh

MODEL=${MODEL:-$(pick small test-tiny)}  # preset (test-tiny | tiny | small | smollm2-135m-instruct), local folder or hub id
GRID=${GRID:-4}                           # Plan-Path is GRID x GRID
STEPS=${STEPS:-$(pick 50 2)}              # AT-GRPO training steps
K=${K:-$(pick 4 2)}                       # tree width: candidates per (problem, turn, agent)
SEED=${SEED:-0}
run_overrides "runs/plan_path_L1_${GRID}x${GRID}_seed${SEED}" "${SHORT_SIZES[@]}" at_grpo.problems_per_step=2

"${PETTINGLLMS[@]}" train plan_path/L1 \
  model.name="$MODEL" \
  env.rows="$GRID" env.cols="$GRID" \
  rollout.num_generations="$K" \
  at_grpo.max_steps="$STEPS" \
  at_grpo.problems_per_step=4 \
  at_grpo.learning_rate=1e-4 \
  eval.num_samples=4 eval.temperature=1.0 \
  run.seed="$SEED" \
  "${RUN_OVERRIDES[@]}" \
  "$@"

say "What this showed: AT-GRPO on a tool agent and a plan agent sharing one model (L1); the success line above is" \
    "held-out success before and after it. Compare with examples/train_plan_path_L0_grpo.sh (one agent, no tool)."
