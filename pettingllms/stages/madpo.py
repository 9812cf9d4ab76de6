"""The ``madpo`` stage: comlrl's :class:`~comlrl.trainers.preference.MADPOIterTrainer` with the environment as
the oracle (:mod:`pettingllms.stages.env_oracle`); the section holds ``MADPOIterConfig`` fields plus
``num_problems`` / ``seed_start``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pettingllms.stages.context import StageContext, check_one_process
from pettingllms.stages.env_oracle import oracle_trainer_config, run_oracle_trainer

__all__ = ["madpo_settings", "run_madpo"]


def madpo_settings(
    stage: str, config: Mapping[str, Any], stage_dir: str | Path, progress: bool = True, num_agents: int | None = None
):
    """The :class:`~comlrl.trainers.preference.MADPOIterConfig` of section ``stage`` (``madpo``); a ConfigError
    under a data-parallel launch (the trainer runs data-parallel, the stage's wiring not yet)."""
    from comlrl.trainers.preference import MADPOIterConfig

    check_one_process(stage)
    return oracle_trainer_config(MADPOIterConfig, stage, config, stage_dir, progress, num_agents=num_agents)


def run_madpo(context: StageContext) -> dict[str, float]:
    """Iterative MADPO over the run's policy; returns the pairs built / skipped and the last ``iter/*``."""
    from comlrl.trainers.preference import MADPOIterTrainer

    check_one_process(context.stage)  # settings built outside the pipeline skip the check
    return run_oracle_trainer(context, MADPOIterTrainer, context.settings_or(madpo_settings))
