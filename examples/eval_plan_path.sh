#!/usr/bin/env bash
# Held-out success of saved policies: a run folder (its policies/), a policies/ folder or a checkpoint-N/.
# Usage: bash examples/eval_plan_path.sh RUN_OR_CHECKPOINT_DIR [section.key=value ...]
#   e.g. bash examples/eval_plan_path.sh runs/quickstart eval.num_instances=200 eval.num_samples=4 eval.temperature=1.0
set -euo pipefail
cd "$(dirname "$0")/.."

CHECKPOINT=${1:?usage: eval_plan_path.sh RUN_OR_CHECKPOINT_DIR [overrides]}
shift
LEVEL=${LEVEL:-L1}              # must match the level the policies were trained at

.venv/bin/pettingllms eval "plan_path/${LEVEL}" --checkpoint "$CHECKPOINT" \
  eval.num_instances=100 \
  eval.seed_start=1000000 \
  "$@"
