import importlib.util
import json

import pytest
import torch

from comlrl import reporting
from comlrl.reporting import MetricsLogger, normalize_report_to


def test_report_to_normalisation_and_errors(monkeypatch):
    assert normalize_report_to(None) == []
    assert normalize_report_to("none") == []
    assert normalize_report_to(["None", "TensorBoard"]) == ["tensorboard"]
    assert normalize_report_to("wandb, tensorboard,wandb") == ["wandb", "tensorboard"]
    monkeypatch.setattr(reporting, "installed_reporters", lambda: ["tensorboard", "wandb"])
    assert normalize_report_to("all") == ["tensorboard", "wandb"]
    with pytest.raises(ValueError, match="`report_to` must be 'none' or any of: tensorboard, wandb, got 'mlflow'"):
        normalize_report_to("mlflow")
    with pytest.raises(ValueError, match="`report_to` must be a string or a list of strings, got 3"):
        normalize_report_to(3)


def test_report_to_all_means_the_installed_integrations(monkeypatch, tmp_path):
    """TRL's meaning: "all" turns on every installed integration (tensorboard needs the tensorboard package,
    which torch.utils.tensorboard imports), so it never asks for a package that is missing."""
    installed = {"tensorboard"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None: object() if name in installed else None)
    assert reporting.installed_reporters() == ["tensorboard"]
    assert normalize_report_to("all") == ["tensorboard"]
    assert normalize_report_to(["all", "wandb"]) == ["tensorboard", "wandb"]
    installed.clear()
    assert normalize_report_to("ALL") == []
    assert MetricsLogger(tmp_path, "all").reporters == []


def test_metrics_jsonl_skips_non_finite_and_truncates_on_resume(tmp_path):
    logger = MetricsLogger(tmp_path, "none")
    logger.log({"loss": torch.tensor(0.5), "acc": 1, "bad": float("nan"), "text": "x"}, step=1)
    logger.log({"loss": 0.25}, step=2)
    logger.log({"loss": 0.125}, step=3)
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[0] == {"step": 1, "loss": 0.5, "acc": 1.0, "format_version": 1}
    logger.truncate_after(2)
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2]
    assert [r["step"] for r in logger.history] == [1, 2]


def test_tensorboard_dir_is_configurable(tmp_path, model_cache):
    from comlrl.trainers.preference import MADPOConfig, MADPOTrainer

    assert MetricsLogger(tmp_path, "none").tensorboard_dir == tmp_path / "tensorboard"
    assert MetricsLogger(tmp_path, "none", tensorboard_dir=tmp_path / "tb").tensorboard_dir == tmp_path / "tb"
    args = MADPOConfig(output_dir=str(tmp_path / "run"), logging_dir=str(tmp_path / "logs"), report_to="none")
    trainer = MADPOTrainer(agent_model="test-tiny", num_agents=1, reward_func=lambda c: [0.0] * len(c),
                           train_dataset=[{"prompt": "x"}], args=args)
    assert trainer.metrics_logger.tensorboard_dir == tmp_path / "logs"
