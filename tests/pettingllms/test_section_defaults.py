"""The ``at_grpo``, ``grpo`` and ``rollout`` sections of ``pettingllms/config/defaults.yaml`` cannot drift from the
dataclasses they are read into: every key is a field (or a documented stage / backend key) with the field's
default, and a field the section lacks is one the pipeline sets itself.

- ``at_grpo`` / ``grpo``: :class:`~pettingllms.trainer.at_grpo_config.ATGRPOConfig` fields, plus the stage keys
  :data:`~pettingllms.stages.at_grpo.STAGE_KEYS` (the limits of
  :class:`~pettingllms.stages.at_grpo.TrainingLimits` and ``update_policy``). A few defaults are the stage's own
  (a pipeline stage is short and checkpoints; a trainer built in Python keeps TRL-like defaults): they are named
  here, so a new difference fails.
- ``rollout``: :class:`~pettingllms.config.rollout_section.RolloutConfig` fields, ``backend``, the ``vllm_*``
  fields of :class:`comlrl.rollout.VLLMSettings` and the ``api_*`` keys of
  :data:`~pettingllms.config.rollout_section.API_KEYS` (arguments of :class:`comlrl.rollout.APIBackend`).
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from pettingllms.config.loader import schema_defaults
from pettingllms.config.rollout_section import API_KEYS, GENERATION_BACKENDS, RolloutConfig
from pettingllms.stages.at_grpo import LIMIT_KEYS, STAGE_KEYS, ATGRPOStageSettings, TrainingLimits
from pettingllms.trainer.at_grpo_config import ATGRPOConfig

# The stage's defaults where they differ from ATGRPOConfig's (the section comment points here).
STAGE_DEFAULTS = {"max_steps": 20, "learning_rate": 1e-4, "save_steps": 10, "save_total_limit": 2}
# ATGRPOConfig fields that are no section key: the pipeline sets them (from `run`, the stage folder, --resume,
# run.progress; grpo's sampling_mode is independent)...
SET_BY_PIPELINE = {"output_dir", "seed", "report_to", "resume_from_checkpoint", "disable_tqdm"}
# ... and the optimizer-step knobs ATGRPOConfig inherits from comlrl's OptimizerStepFields that the sections do
# not offer yet (a config cannot set them; adding them to defaults.yaml at their defaults is allowed).
NOT_YET_KEYS = {"lr_scheduler_kwargs", "warmup_steps"}


def section(name):
    return schema_defaults()[name]


def field_defaults(cls) -> dict:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


@pytest.mark.parametrize("stage", ["at_grpo", "grpo"])
def test_the_rl_sections_are_atgrpo_config_fields_at_their_defaults_and_the_stage_keys(stage):
    keys, fields = section(stage), field_defaults(ATGRPOConfig)
    assert set(keys) - set(fields) == set(STAGE_KEYS), "a key that is neither a field nor a stage key"
    assert not set(STAGE_KEYS) & set(fields)
    differing = {k: v for k, v in keys.items() if k in fields and v != fields[k]}
    assert differing == STAGE_DEFAULTS, "a default drifted from ATGRPOConfig's (or name it in STAGE_DEFAULTS)"
    missing = set(fields) - set(keys)
    expected = SET_BY_PIPELINE | ({"sampling_mode"} if stage == "grpo" else set())
    assert expected <= missing <= expected | NOT_YET_KEYS
    # The stage keys at the defaults of the settings that read them.
    limits = field_defaults(TrainingLimits)
    assert set(limits) == set(LIMIT_KEYS) and {k: keys[k] for k in LIMIT_KEYS} == limits
    assert keys["update_policy"] is field_defaults(ATGRPOStageSettings)["update_policy"]


def test_grpo_is_at_grpo_without_sampling_mode():
    at_grpo, grpo = section("at_grpo"), section("grpo")
    assert set(grpo) == set(at_grpo) - {"sampling_mode"}
    assert {k: at_grpo[k] for k in grpo} == grpo


def test_the_rollout_section_is_rollout_config_the_vllm_settings_and_the_api_keys_at_their_defaults():
    from comlrl.rollout.api import APIBackend
    from comlrl.rollout.vllm.settings import VLLMSettings

    keys = section("rollout")
    rollout, vllm = field_defaults(RolloutConfig), field_defaults(VLLMSettings)
    assert all(name.startswith("vllm_") for name in vllm) and not set(rollout) & (set(vllm) | set(API_KEYS))
    assert set(keys) == set(rollout) | set(vllm) | set(API_KEYS) | {"backend"}
    assert {k: keys[k] for k in rollout} == rollout
    assert {k: keys[k] for k in vllm} == vllm
    assert keys["backend"] == GENERATION_BACKENDS[0] == "hf"
    parameters = inspect.signature(APIBackend).parameters
    assert set(API_KEYS.values()) <= set(parameters)
    for key, argument in API_KEYS.items():
        default = parameters[argument].default
        if default is not inspect.Parameter.empty:  # format and url are required by the backend
            assert keys[key] == default, key
    assert keys["api_url"] is None and keys["api_format"] == "openai"  # set when backend is api (checked)
    assert RolloutConfig.from_section(keys) == RolloutConfig()
