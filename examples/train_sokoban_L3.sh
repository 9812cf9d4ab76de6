#!/usr/bin/env bash
# Sokoban, L3 (one model per agent: the tool agent and the plan agent train separately): warm start,
# AT-GRPO, held-out eval before and after (4 samples per instance at temperature 1). Each policy updates
# only on its own agent's samples.
# Usage: bash examples/train_sokoban_L3.sh [section.key=value ...]   (SHORT, OUT, PYTHON: examples/_common.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
source examples/_common.sh

MODEL=${MODEL:-$(pick small test-tiny)}
STEPS=${STEPS:-$(pick 50 2)}
K=${K:-$(pick 4 2)}
SEED=${SEED:-0}
run_overrides "runs/sokoban_L3_seed${SEED}" "${SHORT_SIZES[@]}" at_grpo.problems_per_step=2

"${PETTINGLLMS[@]}" train sokoban/L3 \
  model.name="$MODEL" \
  env.rows=5 env.cols=5 env.num_boxes=1 \
  rollout.num_generations="$K" \
  at_grpo.max_steps="$STEPS" \
  eval.num_samples=4 eval.temperature=1.0 \
  run.seed="$SEED" \
  "${RUN_OVERRIDES[@]}" \
  "$@"

say "What this showed: AT-GRPO with one model per agent (L3) on Sokoban 5x5 with one box; the success line above is" \
    "held-out success before and after it, and $RUN_DIR/policies/ holds one model folder per agent."
