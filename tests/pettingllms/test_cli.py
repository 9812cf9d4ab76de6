"""The ``pettingllms`` command line: envs, train, eval from a checkpoint, dataprocess, and clean errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pettingllms.cli import main
from pettingllms.registry import list_agents, list_envs

REPO = Path(__file__).resolve().parents[2]
TINY_L0 = [
    "env.max_turns=1",
    "rollout.num_generations=2",
    "rollout.max_completion_length=12",
    "rollout.transcripts_rate=0.0",
    "sft.num_problems=4",
    "sft.num_train_epochs=2",
    "grpo.max_steps=1",
    "grpo.problems_per_step=2",
    "grpo.save_steps=1",
    "eval.num_instances=3",
]


def run_module(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "pettingllms", *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=120
    )


def test_envs_lists_every_registered_environment_with_its_agent_roles(capsys):
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert sorted(lines) == sorted(list_envs())
    for env in list_envs():
        roles = [name.split(".", 1)[1] for name in list_agents(env)]
        assert lines[env].split(None, 1)[1] == ", ".join(roles)
    assert "env workers: sandbox" in out


def test_python_dash_m_pettingllms_runs_the_cli():
    done = run_module("envs")
    assert done.returncode == 0, done.stderr
    assert "plan_path" in done.stdout and "tool" in done.stdout


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["at_grpo.lr=1"], "unknown key `at_grpo.lr`"),
        (["sft.num_train_epochs=many"], "`sft.num_train_epochs` must be int"),
        (["at_grpo.loss_type=ppo"], "section `at_grpo`: `loss_type` must be one of"),
        (["env.name=chess"], "chess"),
        (["run.backend=slurm"], "`run.backend` must be one of ['local', 'ray'], got 'slurm'"),
        (["placement.nobody.colocate=true"], "`placement.nobody`: unknown policy 'nobody'; the run's policies are ['shared']"),
    ],
)
def test_bad_config_input_exits_2_naming_the_key_without_a_traceback(overrides, named, capsys, tmp_path):
    code = main(["train", "plan_path/L1", f"run.output_dir={tmp_path}", *overrides])
    err = capsys.readouterr().err
    assert code == 2
    assert named in err and err.startswith("pettingllms: error: ") and "Traceback" not in err


def test_plan_is_a_command_of_the_cli(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "plan" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    out = capsys.readouterr().out
    assert "--json" in out and "--device-memory" in out and "--resources" in out


def test_bad_override_through_python_dash_m_exits_2():
    done = run_module("train", "plan_path/L1", "at_grpo.lr=1")
    assert done.returncode == 2
    assert "unknown key `at_grpo.lr`" in done.stderr and "Traceback" not in done.stderr


def test_eval_of_a_missing_checkpoint_exits_2(tmp_path, capsys):
    assert main(["eval", "plan_path/L1", "--checkpoint", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_train_then_eval_from_the_checkpoint(tiny_model_path, tmp_path, capsys):
    run_dir = tmp_path / "run"
    common = [f"model.name={tiny_model_path}", *TINY_L0]
    assert main(["train", "plan_path/L0", f"run.output_dir={run_dir}", *common, "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "success before" in printed and "-> after" in printed
    for path in ("config.yaml", "metrics.jsonl", "grpo/checkpoint-1/policy_layout.json", "policies/single",
                 "grpo/metrics.jsonl", "eval/eval.json"):
        assert (run_dir / path).exists(), path
    assert list((run_dir / "plots").glob("*.png"))
    # a second train into the same folder is refused (resume or overwrite it instead)
    assert main(["train", "plan_path/L0", f"run.output_dir={run_dir}", *common, "--no-progress"]) == 2
    assert "--resume" in capsys.readouterr().err

    # eval of the saved checkpoint reproduces the pipeline's final eval (same policy, same instances)
    pipeline_eval = json.loads((run_dir / "eval" / "eval.json").read_text())
    out_file = tmp_path / "report.json"
    assert main(["eval", "plan_path/L0", "--checkpoint", str(run_dir), *common, "--output", str(out_file)]) == 0
    assert "held-out instances" in capsys.readouterr().out
    report = json.loads(out_file.read_text())
    assert report["metrics"] == pipeline_eval["metrics"] and report["per_problem"] == pipeline_eval["per_problem"]
    assert report["policy"] == str(run_dir / "policies")
    # a checkpoint folder of the RL stage works too (the same weights as the final policies here); the
    # report goes to the run folder, not into the checkpoint
    assert main(["eval", "plan_path/L0", "--checkpoint", str(run_dir / "grpo" / "checkpoint-1"), *common]) == 0
    again = json.loads((run_dir / "eval_results.json").read_text())
    assert again["metrics"] == pipeline_eval["metrics"]
    assert not (run_dir / "grpo" / "checkpoint-1" / "eval_results.json").exists()
    # a config of another level than the run's is an error naming both
    assert main(["eval", "plan_path/L1", "--checkpoint", str(run_dir), f"model.name={tiny_model_path}"]) == 2
    assert "`policy.level` is 'L1' in plan_path/L1 but 'L0' in the run" in capsys.readouterr().err


def test_dataprocess_writes_a_sudoku_bank_and_demonstrations(tmp_path, capsys):
    from pettingllms.envs.sudoku.generator import load_bank

    bank = tmp_path / "bank.json"
    assert main(["dataprocess", "sudoku-bank", "--size", "4", "--count", "3", "--output", str(bank)]) == 0
    assert len(load_bank(str(bank), 4)) == 3
    demos = tmp_path / "demos.jsonl"
    assert main(["dataprocess", "demos", "plan_path/L1", "sft.num_problems=2", "--output", str(demos)]) == 0
    records = [json.loads(line) for line in demos.read_text().splitlines()]
    assert {r["role"] for r in records} == {"tool", "plan"}
    plan = [r for r in records if r["role"] == "plan"]
    assert all(r["response"].startswith("#### ") for r in plan)
    assert "wrote" in capsys.readouterr().out
