"""Running the docs' snippets and the example scripts as a user would: a fresh process, one CPU thread."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

__all__ = ["REPO", "run_checked", "script_env", "tail"]


def script_env(model_cache: str, **extra: str) -> dict[str, str]:
    """The test process's environment (offline hub settings included) with one thread per process, the
    session's model cache (presets are built once per session, not per script), the repository importable
    and ``PYTHON`` naming the interpreter that runs the tests (the example scripts prefer it)."""
    path = os.environ.get("PYTHONPATH")
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "COMLRL_MODEL_CACHE": model_cache,
        "PYTHONPATH": str(REPO) + (os.pathsep + path if path else ""),
        "PYTHON": sys.executable,
        "MPLBACKEND": "Agg",
        **extra,
    }


def tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def run_checked(
    command: Sequence[str], where: str, *, cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess:
    """Run ``command``; fail the test, naming ``where`` with the output's tail, unless it exits 0 within
    ``timeout`` seconds. The wall time is kept on the result as ``seconds``."""
    start = time.perf_counter()
    try:
        done = subprocess.run(list(command), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        out = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        pytest.fail(f"{where} did not finish within {timeout:.0f} s; output so far:\n{tail(out)}")
    done.seconds = time.perf_counter() - start
    if done.returncode != 0:
        pytest.fail(
            f"{where} exited with status {done.returncode} after {done.seconds:.1f} s\n"
            f"--- stdout (tail)\n{tail(done.stdout)}\n--- stderr (tail)\n{tail(done.stderr)}"
        )
    return done
