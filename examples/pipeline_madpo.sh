#!/usr/bin/env bash
# Plan-Path, L2 (one LoRA adapter per agent on a frozen base): warm start, then iterative MADPO
# (comlrl's MADPOIterTrainer: the two agents answer each instance's reset state at once, the environment
# plays the joint action and its task reward ranks the joint responses), then AT-GRPO, then eval.
# Held-out success (4 samples per instance at temperature 1) is measured right before MADPO and at the end.
# Usage: bash examples/pipeline_madpo.sh [section.key=value ...]   (SHORT, OUT, PYTHON: examples/_common.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
source examples/_common.sh

MODEL=${MODEL:-$(pick small test-tiny)}
SEED=${SEED:-0}
run_overrides "runs/plan_path_L2_madpo_seed${SEED}" "${SHORT_SIZES[@]}" at_grpo.problems_per_step=2

"${PETTINGLLMS[@]}" train plan_path/L2 \
  model.name="$MODEL" \
  "pipeline=[sft, madpo, at_grpo, eval]" \
  madpo.num_rounds="$(pick 3 1)" \
  madpo.num_problems="$(pick 32 4)" \
  madpo.preference_num_candidates="$(pick 4 2)" \
  madpo.beta=0.1 \
  at_grpo.max_steps="$(pick 20 2)" \
  eval.num_samples=4 eval.temperature=1.0 \
  run.seed="$SEED" \
  "${RUN_OVERRIDES[@]}" \
  "$@"

say "What this showed: MADPO and AT-GRPO as stages of one pipeline on per-agent LoRA adapters; the madpo line above" \
    "counts the preference pairs the environment's reward ranked; the success line compares held-out success right" \
    "after the warm start (before MADPO) with the end."
