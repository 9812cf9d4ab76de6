# Sourced by the example scripts (not an example itself): how pettingllms is called, and the SHORT and
# OUT settings every example takes. The scripts run from the repository root, so relative paths (OUT, a
# run folder, --output) are taken from there.
#
#   SHORT=1   a smoke run of the same pipeline: the random test-tiny model, a couple of steps, a few
#             problems and held-out instances (15-25 s on 2 cores); its numbers say nothing about learning
#   OUT=DIR   the run folder (default: the script's own; with SHORT=1 that folder plus `_short`, which a
#             rerun overwrites)
#   PYTHON=P  run pettingllms as `P -m pettingllms`; otherwise .venv/bin/pettingllms, else `pettingllms`
#             on PATH, else `python3 -m pettingllms`

if [[ -n "${PYTHON:-}" ]]; then
  PETTINGLLMS=("$PYTHON" -m pettingllms)
elif [[ -x .venv/bin/pettingllms ]]; then
  PETTINGLLMS=(.venv/bin/pettingllms)
elif command -v pettingllms >/dev/null 2>&1; then
  PETTINGLLMS=(pettingllms)
else
  PETTINGLLMS=("$(command -v python3 || command -v python)" -m pettingllms)
fi

SHORT=${SHORT:-0}

is_short() { [[ "$SHORT" != 0 ]]; }

# pick NORMAL SHORT_VALUE: the value for this mode.
pick() { if is_short; then echo "$2"; else echo "$1"; fi; }

# run_overrides DEFAULT_DIR [SHORT-only overrides ...]: sets RUN_DIR and RUN_OVERRIDES (the run folder, and
# in SHORT mode the given overrides; the default short folder is scratch, so a rerun overwrites it).
run_overrides() {
  local default=$1
  shift
  if is_short; then
    RUN_DIR=${OUT:-${default}_short}
    RUN_OVERRIDES=(run.output_dir="$RUN_DIR" "$@")
    [[ -n "${OUT:-}" ]] || RUN_OVERRIDES+=(run.overwrite=true)
  else
    RUN_DIR=${OUT:-$default}
    RUN_OVERRIDES=(run.output_dir="$RUN_DIR")
  fi
}

# SHORT mode's sizes, shared by the training examples.
SHORT_SIZES=(sft.num_problems=8 eval.num_instances=4)

# say LINE ...: the closing lines, after the run's own output; in SHORT mode SHORT_NOTE follows them.
SHORT_NOTE="(SHORT=1: a smoke run of this pipeline, a few steps on a few instances; its numbers say nothing about learning.)"
say() {
  echo
  printf '%s\n' "$@"
  if is_short; then
    echo "$SHORT_NOTE"
  fi
}
