#!/usr/bin/env bash
# Plan-Path, L2 (one LoRA adapter per agent on a frozen base): warm start, then iterative MADPO
# (comlrl's MADPOIterTrainer: the two agents answer each instance's reset state at once, the environment
# plays the joint action and its task reward ranks the joint responses), then AT-GRPO, then eval.
# Usage: bash examples/pipeline_madpo.sh [section.key=value ...]
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${MODEL:-small}
SEED=${SEED:-0}

.venv/bin/pettingllms train plan_path/L2 \
  model.name="$MODEL" \
  "pipeline=[sft, madpo, at_grpo, eval]" \
  madpo.num_iterations=3 \
  madpo.num_problems=32 \
  madpo.preference_num_candidates=4 \
  madpo.dpo_beta=0.1 \
  at_grpo.max_steps=20 \
  run.seed="$SEED" \
  run.output_dir="runs/plan_path_L2_madpo_seed${SEED}" \
  "$@"
