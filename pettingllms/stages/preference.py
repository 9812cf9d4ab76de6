"""The ``madpo`` / ``marlhf`` stages under their earlier names: the oracle lives in
:mod:`pettingllms.stages.env_oracle`, each stage in :mod:`pettingllms.stages.madpo` /
:mod:`pettingllms.stages.marlhf`; these names pick the stage by its name."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from comlrl.validation import check_choice
from pettingllms.stages.context import StageContext
from pettingllms.stages.env_oracle import STAGE_ONLY_KEYS as STAGE_ONLY_KEYS  # re-exported: it lived here
from pettingllms.stages.env_oracle import EnvOracle, preference_items
from pettingllms.stages.madpo import madpo_settings, run_madpo
from pettingllms.stages.marlhf import marlhf_settings, run_marlhf

__all__ = ["PREFERENCE_STAGES", "EnvOracle", "preference_config", "preference_items", "run_preference_stage"]

PREFERENCE_STAGES = ("madpo", "marlhf")
_SETTINGS = {"madpo": madpo_settings, "marlhf": marlhf_settings}
_RUNNERS = {"madpo": run_madpo, "marlhf": run_marlhf}


def preference_config(
    stage: str, config: Mapping[str, Any], output_dir: str | Path, num_agents: int, progress: bool = True
) -> Any:
    """The comlrl config of ``stage`` (``MADPOIterConfig`` / ``MARLHFIterConfig``) from a resolved run config
    (:func:`pettingllms.stages.env_oracle.oracle_trainer_config`)."""
    check_choice("stage", stage, PREFERENCE_STAGES)
    return _SETTINGS[stage](stage, config, output_dir, progress, num_agents)


def run_preference_stage(context: StageContext) -> dict[str, float]:
    """Run ``madpo`` or ``marlhf`` (``context.stage``) over ``context.policy``; returns summary metrics."""
    check_choice("stage", context.stage, PREFERENCE_STAGES)
    return _RUNNERS[context.stage](context)
