#!/usr/bin/env bash
# Held-out success of a finished run, evaluated the way the run evaluated itself.
#
# `pettingllms eval --checkpoint RUN_DIR` (no CONFIG) reads the run's resolved config RUN_DIR/config.yaml:
# its environment, level and model, and its eval section (held-out instances, samples per instance,
# temperature, seed), and plays RUN_DIR/policies/. So on runs/quickstart it reproduces the success the run
# printed. It prints a summary line with the settings used and writes RUN_DIR/eval_results.json (--output
# FILE writes elsewhere). Extra arguments are config overrides, e.g. 200 fresh instances from an unused seed
# range:
#   bash examples/eval_plan_path.sh runs/quickstart eval.num_instances=200 eval.seed_start=2000000
# Usage: bash examples/eval_plan_path.sh RUN_DIR [section.key=value ...] [--output FILE]
#   SHORT=1 evaluates the first 4 of the run's held-out instances only; PYTHON: see examples/_common.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source examples/_common.sh

if [[ $# -lt 1 || "$1" == -* ]]; then
  echo "usage: bash examples/eval_plan_path.sh RUN_DIR [section.key=value ...] [--output FILE]" >&2
  exit 2
fi
RUN=$1
shift
if is_short; then
  set -- eval.num_instances=4 "$@"  # first, so that an explicit eval.num_instances still wins
  SHORT_NOTE="(SHORT=1: only the first 4 of the run's held-out instances.)"
fi

"${PETTINGLLMS[@]}" eval --checkpoint "$RUN" "$@"

say "What this showed: the held-out success of the policies in $RUN under that run's own config and eval settings" \
    "(overrides: ${*:-none}); the JSON report holds the settings and every instance's result."
