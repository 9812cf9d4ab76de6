"""The ``sft``, ``eval``, ``policy`` (with ``model``) and ``env`` sections of ``pettingllms/config/defaults.yaml``
cannot drift from the dataclasses they are read into: every key is a field (or a named stage key) with the
field's default (or a named difference), and every field is offered by the section (or named as one the
pipeline sets itself). ``at_grpo`` / ``grpo`` / ``rollout``: test_section_defaults.py; ``madpo`` / ``marlhf`` /
``madpo_from_trees`` are generated from their classes (pettingllms/config/stage_sections.py).

- ``sft``: :class:`~pettingllms.trainer.sft.SFTWarmStartConfig` (the stage reads nothing else of its section).
- ``eval``: :class:`~pettingllms.stages.eval.EvalSettings`; a benchmark entry may set
  :data:`~pettingllms.config.benchmarks.EVAL_KEYS` of them, the others are run-wide.
- ``policy`` and ``model``: :class:`~pettingllms.execution.PolicyConfig` (built by
  :func:`~pettingllms.stages.context.run_policy_config`) and the LoRA config it builds from ``policy.lora``.
- ``env``: its own keys :data:`~pettingllms.config.env_section.ENV_KEYS` plus every field of each registered
  environment's config class, filled in by the loader at its default.
"""

from __future__ import annotations

import sys
import types

import pytest

from pettingllms.config.benchmarks import EVAL_KEYS
from pettingllms.config.env_section import ENV_KEYS, STAGE_SET_ENV_FIELDS, env_arguments
from pettingllms.config.loader import (
    NULLABLE_KEYS,
    env_field_defaults,
    load_config,
    schema_defaults,
    section_to_dataclass,
)
from tests.pettingllms.test_section_defaults import field_defaults

# Keys of the sft section that are no SFTWarmStartConfig field: none (stages/sft.py reads the section into it whole).
SFT_STAGE_KEYS: frozenset[str] = frozenset()
# SFTWarmStartConfig fields the sft section does not offer: none (the seed is run.seed, passed to sft_warm_start).
SFT_SET_BY_PIPELINE: frozenset[str] = frozenset()
# Eval keys a benchmark entry cannot set: they hold for the whole run (docs/pettingllms.md#several-benchmarks).
RUN_WIDE_EVAL_KEYS = frozenset({"before_training", "before_training_instances", "allow_contamination", "benchmarks"})
# Eval keys whose non-null default may be set to null (null num_instances: the dataset split's whole rest).
NULLABLE_EVAL_KEYS = frozenset({"num_instances"})

# `model` / `policy` key -> the PolicyConfig field run_policy_config fills from it.
POLICY_FIELD_OF = {
    ("model", "name"): "model",
    ("model", "device"): "device",
    ("model", "dtype"): "dtype",
    ("policy", "level"): "policy_level",
    ("policy", "agents"): "agent_policies",
    ("policy", "lora", "r"): "lora_r",
    ("policy", "lora", "alpha"): "lora_alpha",
    ("policy", "lora", "dropout"): "lora_dropout",
    ("policy", "lora", "target_modules"): "lora_target_modules",
}
# YAML spellings of PolicyConfig's None: `{}` agents (the level's own mapping) and dtype `auto`.
POLICY_YAML_NONE = {("policy", "agents"): {}, ("model", "dtype"): "auto"}
# Run configs adapt the attention projections; a PolicyConfig built in Python keeps PEFT's all-linear
# (defaults.yaml's comment on policy.lora.target_modules says so).
POLICY_DEFAULT_DIFFERENCES = {("policy", "lora", "target_modules"): ["q_proj", "k_proj", "v_proj", "o_proj"]}
# PolicyConfig fields no policy / model key sets: seed is run.seed ...
POLICY_SET_BY_PIPELINE = frozenset({"seed"})
# ... and L3's per-policy models, which run configs do not offer yet (every policy loads model.name).
POLICY_NOT_YET_KEYS = frozenset({"models"})
# policy.lora key -> the LoraConfig argument PolicyConfig.lora_config passes it as (task_type is fixed).
LORA_ARGUMENT_OF = {"r": "r", "alpha": "lora_alpha", "dropout": "lora_dropout", "target_modules": "target_modules"}
LORA_FIXED_ARGUMENTS = {"task_type": "CAUSAL_LM"}


def get(mapping, path):
    for key in path:
        mapping = mapping[key]
    return mapping


@pytest.fixture(scope="module")
def resolved(tmp_path_factory):
    """The resolved config of an empty file: defaults.yaml with the env section filled in by the loader."""
    path = tmp_path_factory.mktemp("config") / "empty.yaml"
    path.write_text("", encoding="utf-8")
    return load_config(path)


def test_the_sft_section_is_sft_warm_start_config_at_its_defaults():
    from pettingllms.trainer.sft import SFTWarmStartConfig

    keys, fields = schema_defaults()["sft"], field_defaults(SFTWarmStartConfig)
    assert set(keys) - set(fields) == SFT_STAGE_KEYS, "a key that is neither a field nor a stage key"
    assert set(fields) - set(keys) == SFT_SET_BY_PIPELINE, "a field the section does not offer"
    # Lists are read as tuples (section_to_dataclass), so `workflows: []` is the default ().
    differing = {k: v for k, v in keys.items() if k in fields and (tuple(v) if isinstance(v, list) else v) != fields[k]}
    assert differing == {}, "a default drifted from SFTWarmStartConfig's"
    assert section_to_dataclass(SFTWarmStartConfig, keys, "sft") == SFTWarmStartConfig()


def test_the_eval_section_is_eval_settings_at_its_defaults(resolved):
    from pettingllms.stages.eval import EvalSettings, eval_settings

    keys, fields = schema_defaults()["eval"], field_defaults(EvalSettings)
    assert set(keys) == set(fields), "a key that is no EvalSettings field, or a field the section lacks"
    assert keys == fields, "a default drifted from EvalSettings'"
    # What a benchmark entry may set plus the run-wide keys are the whole section, nothing twice.
    assert set(EVAL_KEYS) | RUN_WIDE_EVAL_KEYS == set(fields) and not set(EVAL_KEYS) & RUN_WIDE_EVAL_KEYS
    assert {path[1] for path in NULLABLE_KEYS if path[0] == "eval"} == NULLABLE_EVAL_KEYS
    assert eval_settings("eval", resolved) == EvalSettings()


def test_the_policy_and_model_sections_are_policy_config_at_its_defaults(resolved):
    from pettingllms.execution import PolicyConfig
    from pettingllms.stages.context import run_policy_config

    defaults = schema_defaults()
    fields = field_defaults(PolicyConfig)
    # Every key of `model` and `policy` (lora's own keys, not the mapping) is named, and names a field.
    leaves = {("model", k) for k in defaults["model"]} | {("policy", k) for k in defaults["policy"] if k != "lora"}
    leaves |= {("policy", "lora", k) for k in defaults["policy"]["lora"]}
    assert leaves == set(POLICY_FIELD_OF), "a model / policy key that maps to no PolicyConfig field"
    assert set(POLICY_FIELD_OF.values()) <= set(fields)
    offered = set(POLICY_FIELD_OF.values())
    assert set(fields) - offered == POLICY_SET_BY_PIPELINE | POLICY_NOT_YET_KEYS, "a field no key offers"
    assert not POLICY_SET_BY_PIPELINE & POLICY_NOT_YET_KEYS
    # Defaults: the same, or None spelled the YAML way, or a named difference.
    differing = {}
    for path, name in POLICY_FIELD_OF.items():
        value = get(defaults, path)
        if path in POLICY_YAML_NONE:
            assert value == POLICY_YAML_NONE[path] and fields[name] is None, path
        elif value != fields[name]:
            differing[path] = value
    assert differing == POLICY_DEFAULT_DIFFERENCES, "a default drifted from PolicyConfig's (or name it)"
    # What the pipeline builds from the resolved sections: PolicyConfig's defaults but the named differences.
    built = run_policy_config(resolved)
    expected = PolicyConfig(
        seed=resolved["run"]["seed"],
        **{POLICY_FIELD_OF[path]: value for path, value in POLICY_DEFAULT_DIFFERENCES.items()},
    )
    assert built == expected


def test_the_lora_mapping_is_what_the_lora_config_gets(resolved, monkeypatch):
    from pettingllms.stages.context import run_policy_config

    received = {}
    fake = types.ModuleType("peft")  # records the arguments; importing peft itself takes seconds
    fake.LoraConfig = lambda **kwargs: received.update(kwargs)
    monkeypatch.setitem(sys.modules, "peft", fake)
    lora = resolved["policy"]["lora"]
    assert set(lora) == set(LORA_ARGUMENT_OF)
    run_policy_config(resolved).lora_config()
    assert received == {**{LORA_ARGUMENT_OF[k]: v for k, v in lora.items()}, **LORA_FIXED_ARGUMENTS}


def test_the_env_section_is_its_own_keys_and_every_field_of_each_environment_config():
    from pettingllms.registry import get_env_class, list_envs

    defaults = schema_defaults()["env"]
    assert set(defaults) == set(ENV_KEYS), "defaults.yaml's env section holds the env's own keys alone"
    assert defaults["tools"] is None and defaults["agent_options"] == {}  # the environment's own tool; no options
    envs = list(list_envs())
    assert defaults["name"] in envs
    for name in envs:
        config_class = get_env_class(name).config_class
        fields = field_defaults(config_class)
        assert set(STAGE_SET_ENV_FIELDS) <= set(fields), name
        filled = env_field_defaults(name)
        assert not set(filled) & set(ENV_KEYS), name
        assert set(filled) == set(fields) - set(STAGE_SET_ENV_FIELDS), name
        assert filled == {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items() if k in filled}, name


@pytest.mark.parametrize("purpose", ["train", "eval"])
def test_a_resolved_env_section_builds_each_environment_config_at_its_defaults(tmp_path, purpose):
    from pettingllms.registry import get_env_class, list_envs

    path = tmp_path / "empty.yaml"
    path.write_text("", encoding="utf-8")
    for name in list_envs():
        config = load_config(path, [f"env.name={name}"])
        env = config["env"]
        assert set(env) == set(ENV_KEYS) | set(env_field_defaults(name)), name
        env_name, fields, options = env_arguments(config, purpose=purpose)
        assert env_name == name and options == {}
        config_class = get_env_class(name).config_class
        assert config_class.from_dict(fields) == config_class(purpose=purpose), name
