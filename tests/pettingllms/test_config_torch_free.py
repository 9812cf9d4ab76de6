"""Reading and checking a run config needs neither torch nor transformers: every shipped config (with its
``base:`` chain and ``imports``) is loaded and validated in a fresh process, the contract of its commands
checked too, and neither module is imported. What a config validates against (comlrl's trainer configs, the
RL names, the rollout, placement and instance checks) lives in torch-free modules; the models load later."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pettingllms.config.loader import CONFIG_DIR, DEFAULTS_FILE, read_chain, shipped_configs

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys
from pettingllms.config import load_config, validate_config, shipped_configs
from pettingllms.config.contract import check_command

checked = []
for path in shipped_configs():
    # (the APPS fixture's seventh problem has no reference solution for the sft oracle to play)
    config = load_config(path, ["sft.num_problems=6"] if path.parent.name == "code" else [])
    validate_config(config)
    check_command(config, "eval", "oracle")
    check_command(config, "plan")
    checked.append(str(path))
heavy = sorted(name for name in ("torch", "transformers") if name in sys.modules)
print(json.dumps({"checked": checked, "heavy": heavy}))
"""


def test_every_shipped_yaml_is_a_config_a_base_or_the_defaults():
    """So that checking every shipped config reads every YAML file under pettingllms/config/."""
    reached = {DEFAULTS_FILE.resolve()}
    for path in shipped_configs():
        reached |= {file for file, _ in read_chain(path)}
    assert set(CONFIG_DIR.rglob("*.yaml")) == reached


def test_loading_and_validating_every_shipped_config_leaves_torch_out(search_data_root):
    # The code, math and search configs play dataset splits: the fixtures' stand in for the real ones.
    env = {**os.environ, "PETTINGLLMS_DATA": search_data_root, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["checked"] == [str(p) for p in shipped_configs()]
    assert report["heavy"] == [], f"reading and validating the configs imported {report['heavy']}"
