#!/usr/bin/env bash
# Sokoban, L3 (one model per agent: the tool agent and the plan agent train separately): warm start,
# AT-GRPO, held-out eval. Each policy updates only on its own agent's samples.
# Usage: bash examples/train_sokoban_L3.sh [section.key=value ...]
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${MODEL:-small}
STEPS=${STEPS:-50}
K=${K:-4}
SEED=${SEED:-0}

.venv/bin/pettingllms train sokoban/L3 \
  model.name="$MODEL" \
  env.rows=5 env.cols=5 env.num_boxes=1 \
  rollout.num_generations="$K" \
  at_grpo.max_steps="$STEPS" \
  run.seed="$SEED" \
  run.output_dir="runs/sokoban_L3_seed${SEED}" \
  "$@"
