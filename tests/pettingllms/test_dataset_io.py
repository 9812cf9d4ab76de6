"""The dataset environments share where their normalised files live (:mod:`pettingllms.envs.dataset_io`)
without importing one another: the math and search data modules (and their packages) load neither the
code environment nor the sandbox."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pettingllms.envs import dataset_io

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "module",
    ["pettingllms.envs.dataset_io", "pettingllms.envs.math.data", "pettingllms.envs.search.data",
     "pettingllms.envs.math", "pettingllms.envs.search"],
)
def test_data_modules_import_neither_the_sandbox_nor_the_code_env(module):
    probe = (
        f"import json, sys, {module}\n"
        "print(json.dumps(sorted(m for m in sys.modules\n"
        "    if m.split('.')[:2] == ['pettingllms', 'sandbox'] or m.startswith('pettingllms.envs.code'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [], f"importing {module} loaded them"


def test_every_env_names_its_files_under_one_root(monkeypatch, tmp_path):
    from pettingllms.envs.code import data as code_data
    from pettingllms.envs.math import data as math_data
    from pettingllms.envs.search import data as search_data

    monkeypatch.setenv(dataset_io.DATA_ENV, str(tmp_path))
    assert dataset_io.data_root() == tmp_path
    assert code_data.normalised_path("apps", "test") == tmp_path / "code" / "apps" / "test.jsonl"
    assert math_data.normalised_path("gsm8k", "train") == tmp_path / "math" / "gsm8k" / "train.jsonl"
    assert search_data.normalised_path("nq", "dev") == tmp_path / "search" / "nq" / "dev.jsonl"
    monkeypatch.delenv(dataset_io.DATA_ENV)
    assert dataset_io.data_root() == Path.home() / ".cache" / "pettingllms" / "data"
