"""One name per knob in a run config: TRL's names, mapped to the public CoMLRL field names at the stage edge.

The ``madpo``, ``marlhf`` and ``madpo_from_trees`` sections hold the fields of comlrl's public preference
configs (:data:`pettingllms.config.stage_sections.CONFIG_STAGES`), whose names are the public CoMLRL ones
(``agent_learning_rate``, ``train_batch_size``, ``dpo_beta``, ...). A run config names each knob once, with
TRL's name, whatever section it is in: :data:`PUBLIC_NAMES` is the one table between the two vocabularies.
It renames the generated section schemas (:func:`section_key`) and builds the public config back from a
section (:func:`public_arguments`). :data:`UNREAD_FIELDS` are public fields a stage's trainer never reads:
they are no keys of its section.

Keys of earlier versions (:data:`EARLIER_KEYS`): in a config file or an override they are an error naming
the new key (:func:`earlier_key_message`); in a run folder's saved ``config.yaml`` (what ``--resume`` and
``pettingllms eval --checkpoint RUN`` read) they are renamed on read, with one notice
(:func:`migrate_saved_config`), so earlier runs keep working. Torch-free, like all of config loading.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "EARLIER_KEYS",
    "PUBLIC_NAMES",
    "UNREAD_FIELDS",
    "earlier_key_message",
    "is_saved_run_config",
    "migrate_saved_config",
    "public_arguments",
    "public_name_note",
    "section_key",
]

logger = logging.getLogger(__name__)

# The one table: section key (TRL's name) -> {stage: the public CoMLRL field it sets}. A field of a stage's
# class not named here keeps its public name as its key.
PUBLIC_NAMES: dict[str, dict[str, str]] = {
    "learning_rate": {"madpo": "agent_learning_rate", "marlhf": "agent_learning_rate",
                      "madpo_from_trees": "agent_learning_rate"},
    "per_device_train_batch_size": {"madpo": "train_batch_size", "marlhf": "train_batch_size",
                                    "madpo_from_trees": "train_batch_size"},
    "per_device_eval_batch_size": {"madpo": "eval_batch_size", "marlhf": "eval_batch_size",
                                   "madpo_from_trees": "eval_batch_size"},
    "max_completion_length": {"madpo": "max_new_tokens", "marlhf": "max_new_tokens",
                              "madpo_from_trees": "max_new_tokens"},
    # Preference rounds (at_grpo's num_iterations is TRL GRPOConfig's: PPO epochs per rollout batch).
    "num_rounds": {"madpo": "num_iterations", "marlhf": "num_iterations"},
    # TRL's beta: DPOConfig's temperature in MADPO, GRPOConfig's KL weight in MARLHF's RL stage (and at_grpo).
    "beta": {"madpo": "dpo_beta", "madpo_from_trees": "dpo_beta", "marlhf": "reference_kl_coef"},
}

_MADPO_UNREAD = {
    "reference_kl_coef": "MADPO's loss has no reference KL (`{stage}.preference_reference=initial` adds DPO's "
                         "reference; `{stage}.beta` is the DPO temperature)",
    "reference_kl_enabled": "MADPO's loss has no reference KL (`{stage}.preference_reference=initial` adds "
                            "DPO's reference)",
}
# madpo_from_trees trains once on the at_grpo trees' pairs: the iterative round loop's fields do nothing there.
_TREES_NO_ROUNDS = ("the stage trains once on the pairs of the at_grpo trees before it: no rounds, no comparator, "
                    "its replay in its own folder")
_TREES_UNREAD = {
    **_MADPO_UNREAD,
    **{name: _TREES_NO_ROUNDS for name in (
        "num_iterations", "comparator_policy", "comparator_generation_mode", "comparator_centralized_agent_index",
        "comparator_model_name", "comparator_agents", "comparator_devices", "comparator_num_candidates",
        "comparator_history_k", "comparator_api_url", "comparator_api_format", "comparator_api_model",
        "comparator_api_max_n_per_request", "comparator_api_timeout", "comparator_api_headers",
        "comparator_api_key_env", "comparator_api_key_header", "comparator_api_key_prefix",
        "comparator_api_response_field", "comparator_api_extra_body", "comparator_api_max_retries",
        "comparator_api_max_failure_rate", "preference_replay_dir", "policy_checkpoint_dir", "log_reward_distribution",
    )},
}
# Public fields a stage's trainer never reads (the class accepts them, at no effect): no keys of its section.
UNREAD_FIELDS: dict[str, dict[str, str]] = {
    "madpo": _MADPO_UNREAD,
    "madpo_from_trees": _TREES_UNREAD,
    "marlhf": {
        "dpo_beta": "MARLHF trains by RL against its reward model (`marlhf.beta` is the RL stage's KL weight)",
        "preference_reference": "MARLHF trains by RL against its reward model (`marlhf.reference_kl_enabled` "
                                "is its reference)",
    },
}

# Keys of earlier versions: section -> {earlier key: key now}. The preference sections' earlier keys were
# the public names; sft's were its own.
EARLIER_KEYS: dict[str, dict[str, str]] = {
    "sft": {"epochs": "num_train_epochs", "batch_size": "per_device_train_batch_size"},
}
for _key, _stages in PUBLIC_NAMES.items():
    for _stage, _field in _stages.items():
        EARLIER_KEYS.setdefault(_stage, {})[_field] = _key

# The file a pipeline writes into its run folder beside the config (pettingllms.pipeline.PIPELINE_STATE_FILE;
# not imported: config loading stays torch-free).
_PIPELINE_STATE_FILE = "pipeline_state.json"
_SAVED_CONFIG_FILE = "config.yaml"  # pettingllms.config.loader.RESOLVED_CONFIG_FILE
_notified: set[str] = set()


def section_key(stage: str, field: str) -> str | None:
    """The key of stage ``stage``'s section that sets public field ``field`` (None: a field its trainer
    never reads, :data:`UNREAD_FIELDS`)."""
    if field in UNREAD_FIELDS.get(stage, {}):
        return None
    return next((key for key, stages in PUBLIC_NAMES.items() if stages.get(stage) == field), field)


def public_arguments(stage: str, section: Mapping[str, Any]) -> dict[str, Any]:
    """``section``'s values under the public field names of stage ``stage``'s comlrl config."""
    return {PUBLIC_NAMES.get(key, {}).get(stage, key): value for key, value in section.items()}


def public_name_note(stage: str, message: str) -> str:
    """``" (madpo.beta sets dpo_beta)"`` for each public field of stage ``stage`` that ``message`` (a check of
    the public class) names under another key of the section; ``""`` when it names none."""
    notes = [f"{stage}.{key} sets {stages[stage]}" for key, stages in PUBLIC_NAMES.items()
             if stage in stages and re.search(rf"(?<![A-Za-z_]){stages[stage]}(?![A-Za-z_])", message)]
    return f" ({'; '.join(notes)})" if notes else ""


def earlier_key_message(section: str, key: str) -> str | None:
    """What to say about ``section.key`` when it is a key of an earlier version (None when it is not)."""
    new = EARLIER_KEYS.get(section, {}).get(key)
    if new is not None:
        return f"{section}.{key} was renamed: use {section}.{new}"
    why = UNREAD_FIELDS.get(section, {}).get(key)
    if why is not None:
        return f"{section}.{key} was removed: it had no effect, {why.format(stage=section)}"
    why = _unread_elsewhere_named(section, key)
    if why is not None:
        return f"{section}.{key} is no key of this section: it would have no effect, {why.format(stage=section)}"
    return None


def _unread_elsewhere_named(section: str, key: str) -> str | None:
    """Why ``key``, another section's name of a field ``section`` never reads (madpo's ``num_rounds`` in
    madpo_from_trees), does nothing here; None when it is not one."""
    stages = PUBLIC_NAMES.get(key, {})
    if section in stages:  # a key of this section (madpo's beta is dpo_beta, marlhf's reference_kl_coef)
        return None
    unread = UNREAD_FIELDS.get(section, {})
    return next((unread[field] for field in stages.values() if field in unread), None)


def is_saved_run_config(path: str | Path) -> bool:
    """Whether ``path`` is the config a pipeline saved into its run folder (``config.yaml`` beside the
    pipeline state)."""
    path = Path(path)
    return path.name == _SAVED_CONFIG_FILE and (path.parent / _PIPELINE_STATE_FILE).is_file()


def migrate_saved_config(config: Mapping[str, Any], source: str | Path | None = None) -> dict[str, Any]:
    """A copy of a saved run config with the keys of earlier versions renamed (in place in their section) and
    those no stage reads any more left out; one notice per ``source`` when anything changed."""
    out = copy.deepcopy(dict(config))
    changed = []
    for section, renames in EARLIER_KEYS.items():
        values = out.get(section)
        if not isinstance(values, dict):
            continue
        unread = UNREAD_FIELDS.get(section, {})
        dropped = {key for key in values if key in unread or _unread_elsewhere_named(section, key) is not None}
        if not dropped and not any(key in renames for key in values):
            continue
        migrated: dict[str, Any] = {}
        for key, value in values.items():
            if key in dropped:
                changed.append(f"{section}.{key} (dropped)")
            elif key in renames:
                changed.append(f"{section}.{key} -> {section}.{renames[key]}")
                migrated.setdefault(renames[key], value)
            else:
                migrated[key] = value
        out[section] = migrated
    name = str(source) if source is not None else "a saved run config"
    if changed and name not in _notified:
        _notified.add(name)
        logger.warning("%s was saved by an earlier version; read with its keys renamed: %s", name, ", ".join(changed))
    return out
