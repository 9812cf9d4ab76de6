#!/usr/bin/env bash
# Plan-Path, L0: the single-agent GRPO baseline (one agent plans alone, with no tool; K independent
# trajectories per problem, one group per problem). It evaluates as the quickstart and
# train_plan_path_L1.sh do (4 samples per instance at temperature 1, the same 50 held-out instances), so
# its numbers compare with theirs. On this task single-agent GRPO does not improve on its warm start
# (benchmarks/results/learning.json: 17% -> 15%, 3 seeds) while AT-GRPO with the tool + plan team does
# (26% -> 47%).
# Usage: bash examples/train_plan_path_L0_grpo.sh [section.key=value ...]   (SHORT, OUT, PYTHON: examples/_common.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
source examples/_common.sh

MODEL=${MODEL:-$(pick small test-tiny)}
STEPS=${STEPS:-$(pick 50 2)}
SEED=${SEED:-0}
run_overrides "runs/plan_path_L0_seed${SEED}" "${SHORT_SIZES[@]}" grpo.problems_per_step=2

"${PETTINGLLMS[@]}" train plan_path/L0 \
  model.name="$MODEL" \
  grpo.max_steps="$STEPS" \
  eval.num_samples=4 eval.temperature=1.0 \
  run.seed="$SEED" \
  "${RUN_OVERRIDES[@]}" \
  "$@"

say "What this showed: the single-agent baseline (L0, GRPO on independent trajectories). It is not expected to gain" \
    "here: benchmarks/results/learning.json measured 17% -> 15% for it and 26% -> 47% for AT-GRPO L1, evaluated" \
    "this same way; run examples/train_plan_path_L1.sh to compare."
