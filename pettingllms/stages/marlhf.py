"""The ``marlhf`` stage: comlrl's :class:`~comlrl.trainers.preference.MARLHFIterTrainer` with the environment
as the oracle (:mod:`pettingllms.stages.env_oracle`); the section holds ``MARLHFIterConfig`` fields plus
``num_problems`` / ``seed_start``, and the reward model starts from ``model.name`` unless it names one."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pettingllms.stages.context import StageContext, check_one_process
from pettingllms.stages.env_oracle import oracle_trainer_config, run_oracle_trainer

__all__ = ["marlhf_settings", "run_marlhf"]


def marlhf_settings(
    stage: str, config: Mapping[str, Any], stage_dir: str | Path, progress: bool = True, num_agents: int | None = None
):
    """The :class:`~comlrl.trainers.preference.MARLHFIterConfig` of section ``stage`` (``marlhf``); a ConfigError
    under a data-parallel launch (the trainer runs data-parallel, the stage's wiring not yet)."""
    from comlrl.trainers.preference import MARLHFIterConfig

    check_one_process(stage)
    defaults = {"reward_model_name": config["model"]["name"]}
    return oracle_trainer_config(MARLHFIterConfig, stage, config, stage_dir, progress, defaults, num_agents)


def run_marlhf(context: StageContext) -> dict[str, float]:
    """Iterative MARLHF over the run's policy; returns the pairs built / skipped and the last ``iter/*``."""
    from comlrl.trainers.preference import MARLHFIterTrainer

    check_one_process(context.stage)  # settings built outside the pipeline skip the check
    return run_oracle_trainer(context, MARLHFIterTrainer, context.settings_or(marlhf_settings))
