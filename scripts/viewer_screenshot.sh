#!/usr/bin/env bash
# Remakes docs/images/viewer_plan_path.png, the episode viewer's screenshot in docs/viewer.md: one Plan-Path
# episode (held-out seed 1000023, the random scripted policy: blocked moves, then the goal in turn 2) played
# by `pettingllms eval`, rendered by `pettingllms show --html` and shot in headless Chromium
# (apt-get install -y chromium). Deterministic: the same seed gives the same page.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
.venv/bin/pettingllms eval plan_path/L1 --policy random eval.seed_start=1000023 eval.num_instances=1 \
  eval.transcripts_rate=1.0 run.output_dir="$tmp/run" --no-progress
.venv/bin/pettingllms show "$tmp/run" --html "$tmp/episode.html"
.venv/bin/python -m pettingllms.viewer.browser "$tmp/episode.html" --screenshot docs/images/viewer_plan_path.png \
  --width 1200 --max-height 1500
