"""The stage sections whose schema is a comlrl config class (``madpo``, ``marlhf``, ``madpo_from_trees``): every
field of the class is a key of the section at its default, generated here, except the fields the pipeline
sets itself (refused by the loader, naming the key that sets them), literal secrets (refused: the
resolved config is saved into the run folder) and the fields the stage's trainer never reads. A key is the
field's TRL name where the public CoMLRL name differs (``learning_rate`` for ``agent_learning_rate``, ...:
the one table, :data:`pettingllms.config.key_names.PUBLIC_NAMES`)."""

from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import Any

from pettingllms.config.key_names import section_key

__all__ = [
    "CONFIG_STAGES",
    "PIPELINE_FIELD_DEFAULTS",
    "PIPELINE_OWNED_FIELDS",
    "config_class_of",
    "config_stage_defaults",
    "secret_fields",
]

# Stage sections whose schema is a comlrl config class: every field of the class is a key of the section, at
# its default (generated, :func:`config_stage_defaults`), but the fields the pipeline sets itself.
CONFIG_STAGES: dict[str, tuple[str, str]] = {
    "madpo": ("comlrl.trainers.preference", "MADPOIterConfig"),
    "marlhf": ("comlrl.trainers.preference", "MARLHFIterConfig"),
    "madpo_from_trees": ("comlrl.trainers.preference", "MADPOIterConfig"),
}
# Fields of those classes the pipeline sets, and the key that sets them (a section key naming one is an error).
PIPELINE_OWNED_FIELDS: dict[str, str] = {
    "seed": "run.seed",
    "output_dir": "run.output_dir (the stage writes into <run.output_dir>/<stage folder>)",
    "logging_dir": "run.output_dir (the stage's logs stay in its folder)",
    "run_name": "run.output_dir",
    "report_to": "run.report_to",
    "num_agents": "env.turn_order (one agent per role)",
    "disable_tqdm": "run.progress",
}
# Fields whose default here is the pipeline's (null: take it from the rollout section, a number: the stage's);
# public field names, like the two tables above.
PIPELINE_FIELD_DEFAULTS: dict[str, Any] = {
    "max_new_tokens": None,  # null: rollout.max_completion_length
    "temperature": None,  # null: rollout.temperature
    "top_p": None,  # null: rollout.top_p
    "logging_steps": 1,
    "eval_interval": 0,  # the pipeline's eval stages measure success
}


def config_class_of(stage: str) -> type:
    """The comlrl config class of stage ``stage`` (imported on first use)."""
    module, name = CONFIG_STAGES[stage]
    return getattr(importlib.import_module(module), name)


def secret_fields(stage: str) -> tuple[str, ...]:
    """Fields of a stage's class that hold secrets (a literal API key): no config keys, since the resolved
    config is saved into the run folder."""
    return tuple(getattr(config_class_of(stage), "_secret_fields", ()))


@functools.cache
def config_stage_defaults(stage: str) -> dict[str, Any]:
    """Every field of stage ``stage``'s comlrl config class (:data:`CONFIG_STAGES`) at its default, under its
    section key (:func:`~pettingllms.config.key_names.section_key`), the pipeline's own defaults for
    :data:`PIPELINE_FIELD_DEFAULTS` and without :data:`PIPELINE_OWNED_FIELDS` or the fields the stage's
    trainer never reads (a copy is returned; the class is read once)."""
    config_class = config_class_of(stage)
    out: dict[str, Any] = {}
    for field in dataclasses.fields(config_class):
        key = section_key(stage, field.name)
        if not field.init or key is None or field.name in PIPELINE_OWNED_FIELDS or field.name in secret_fields(stage):
            continue
        if field.name in PIPELINE_FIELD_DEFAULTS:
            out[key] = PIPELINE_FIELD_DEFAULTS[field.name]
        elif field.default is not dataclasses.MISSING:
            out[key] = _yaml_value(field.default)
        elif field.default_factory is not dataclasses.MISSING:
            out[key] = _yaml_value(field.default_factory())
        else:
            out[key] = None
    return out


def _yaml_value(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_yaml_value(v) for v in value]
    return value
