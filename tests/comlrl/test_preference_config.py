"""Configs of the preference trainers: public CoMLRL 1.4.3 defaults and aliases, every rejected combination
(with a message naming the field), the command line and the dict round trip used by checkpoints."""

from __future__ import annotations

import dataclasses
import json
import re
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import HfArgumentParser

from comlrl.trainers.preference.config import (
    MADPOConfig,
    MADPOIterConfig,
    MARLHFConfig,
    MARLHFIterConfig,
    _IterativePreferenceConfig,
)

ALL = (MADPOConfig, MARLHFConfig, MADPOIterConfig, MARLHFIterConfig)
ITER = (MADPOIterConfig, MARLHFIterConfig)
RLHF = (MARLHFConfig, MARLHFIterConfig)

# --------------------------------------------------------------------------------------------------
# Defaults: the public library's (reference notes §1.4, §1.5, §1.7), written out here independently
# --------------------------------------------------------------------------------------------------

PUBLIC_MADPO_DEFAULTS = {
    "num_train_epochs": 20,
    "agent_learning_rate": 5e-6,
    "logging_steps": 50,
    "num_agents": 2,
    "collaboration_mode": "decentralized",
    "parallel_training": "none",
    "agent_devices": None,
    "max_new_tokens": 256,
    "temperature": 0.6,
    "top_p": 0.6,
    "top_k": 50,
    "num_turns": 1,
    "discount": 1.0,
    "joint_mode": "aligned",
    "early_termination_threshold": None,
    "external_prompt_passthrough": False,
    "eval_interval": 16,
    "eval_num_samples": 4,
    "eval_batch_size": 1,
    "rollout_buffer_size": 2,
    "train_batch_size": 2,  # None -> rollout_buffer_size, filled in place as the public library does
    "advantage_normalization": True,
    "advantage_mode": "mean",
    "reference_kl_enabled": False,
    "reference_kl_coef": 0.1,
    "reference_devices": None,
    "preference_num_candidates": 80,
    "preference_pairs_per_sample": 16,
    "pair_selection": "reward_gap",
    "dpo_beta": 0.1,
    "use_environment_step": True,
    "environment_steps_per_pair": 2,
}
PUBLIC_MARLHF_DEFAULTS = {
    "rl_algorithm": "magrpo",
    "num_generations": 4,
    "reward_model_name": None,
    "reward_learning_rate": 1e-5,
    "reward_num_train_epochs": 1,
    "reward_train_batch_size": 1,
    "reward_max_length": None,
    "reward_freeze_backbone": False,
    "critic_model_name": None,
    "critic_learning_rate": None,
    "critic_devices": None,
    "use_separate_critic": True,
    "critic_type": "v",
    "value_loss_coef": 0.6,
    "value_clip_range": 0.2,
    "critic_value_head_hidden_dim": None,
    "value_head_hidden_dim": None,
}
PUBLIC_ITERATIVE_DEFAULTS = {
    "num_iterations": 6,
    "preference_replay_mode": "current",
    "preference_replay_k": None,
    "preference_replay_lambda": None,
    "preference_replay_sample_size": None,
    "preference_replay_dir": None,
    "log_reward_distribution": False,
    "policy_checkpoint_dir": None,
    "comparator_policy": "current",
    "comparator_generation_mode": "decentralized",
    "comparator_centralized_agent_index": 0,
    "comparator_model_name": None,
    "comparator_agents": None,
    "comparator_devices": None,
    "comparator_num_candidates": None,
    "comparator_history_k": None,
    "comparator_api_url": None,
    "comparator_api_format": "generic",
    "comparator_api_model": None,
    "comparator_api_max_n_per_request": None,
    "comparator_api_timeout": 120.0,
    "comparator_api_headers": None,
    "comparator_api_key": None,
    "comparator_api_key_env": None,
    "comparator_api_key_header": "Authorization",
    "comparator_api_key_prefix": "Bearer",
    "comparator_api_response_field": "completions",
    "comparator_api_extra_body": None,
    "preference_num_candidates": 20,
    "preference_pairs_per_sample": 4,
    "pair_selection": "comparator_reward",
}
PUBLIC_DEFAULTS = {
    MADPOConfig: PUBLIC_MADPO_DEFAULTS,
    MARLHFConfig: {**PUBLIC_MADPO_DEFAULTS, **PUBLIC_MARLHF_DEFAULTS},
    MADPOIterConfig: {**PUBLIC_MADPO_DEFAULTS, **PUBLIC_ITERATIVE_DEFAULTS, "num_train_epochs": 1},
    MARLHFIterConfig: {
        **PUBLIC_MADPO_DEFAULTS,
        **PUBLIC_MARLHF_DEFAULTS,
        **PUBLIC_ITERATIVE_DEFAULTS,
        "num_train_epochs": 2,
        "reward_num_train_epochs": 2,
        "preference_scoring_reward": "task",
    },
}


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_defaults_equal_the_public_library(cls):
    cfg = cls()
    expected = PUBLIC_DEFAULTS[cls]
    actual = {name: getattr(cfg, name) for name in expected}
    assert actual == expected


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_our_additions_and_deliberate_differences(cls):
    cfg = cls()
    default_dirs = {
        MADPOConfig: "outputs/madpo",
        MARLHFConfig: "outputs/marlhf",
        MADPOIterConfig: "outputs/madpo_iter",
        MARLHFIterConfig: "outputs/marlhf_iter",
    }
    assert cfg.output_dir == default_dirs[cls]
    assert cfg.seed == 42
    assert cfg.report_to == []
    assert cfg.save_total_limit is None
    assert cfg.exclude_last_completion_token is False  # every sampled token, EOS included, is scored
    assert cfg.max_nonfinite_losses_in_a_row == 10
    assert cfg.disable_dropout is True
    if cls in RLHF:
        assert cfg.reward_model_device is None  # the public "cuda:0" fails on CPU-only machines
        assert cfg.loss_type == "sequence_sum"  # the public library's -A * sum_t log pi, mean over sequences
        assert cfg.reference_kl_estimator == "k3"
        assert cfg.reward_eval_fraction == 0.1
    if cls in ITER:
        assert cfg.comparator_api_max_retries == 3
        assert cfg.comparator_api_max_failure_rate == 0.5
    if cls is MARLHFIterConfig:
        assert cfg.reward_warm_start is False


def test_class_tree_and_one_shared_iterative_mixin():
    assert issubclass(MARLHFConfig, MADPOConfig)
    assert issubclass(MADPOIterConfig, MADPOConfig) and issubclass(MARLHFIterConfig, MARLHFConfig)
    assert not issubclass(MADPOConfig, MARLHFConfig)

    def names(c):
        return {f.name for f in dataclasses.fields(c)}

    mixin = names(_IterativePreferenceConfig)
    assert names(MADPOIterConfig) - names(MADPOConfig) == mixin - names(MADPOConfig)
    assert names(MARLHFIterConfig) - names(MARLHFConfig) == (mixin - names(MADPOConfig)) | {
        "preference_scoring_reward",
        "reward_warm_start",
    }
    # The iterative classes declare no comparator / replay field of their own: all come from the mixin.
    for cls in ITER:
        own = set(cls.__dict__.get("__annotations__", {}))
        assert not {n for n in own if n.startswith(("comparator_", "preference_replay_"))}


# --------------------------------------------------------------------------------------------------
# Aliases (reference notes §1.9), written out here independently
# --------------------------------------------------------------------------------------------------

ALIASES = {
    "comparator_policy": {
        "current": ["self", "online"],
        "current_copy": ["copy", "online_copy", "current-offload", "current_offload"],
        "model": ["external", "comparator", "reference", "ref"],
        "history": ["checkpoint", "previous", "previous_iteration"],
        "api": ["http", "endpoint"],
    },
    "comparator_generation_mode": {
        "decentralized": ["decentralised", "multi_agent", "multi-agent"],
        "centralized": ["centralised", "single_agent", "single-agent"],
    },
    "preference_replay_mode": {
        "current": ["latest", "new"],
        "nearest_k": ["recent_k", "last_k", "k"],
        "lambda_decay": ["lambda", "td_lambda", "td-lambda"],
    },
    "comparator_api_format": {
        "openai": ["openai_chat", "chat"],
        "anthropic": ["anthropic_messages", "messages"],
        "openai_responses": ["responses", "codex"],
    },
    "preference_scoring_reward": {
        "task": ["oracle", "environment", "env"],
        "reward_model": ["model", "learned"],
    },
    "rl_algorithm": {"mareinforce": ["mareforce"]},
    "collaboration_mode": {"decentralized": ["decentralised"], "centralized": ["centralised"]},
    "parallel_training": {"none": ["null"]},
    "joint_mode": {"aligned": ["align"]},
}

# Companion fields that make a canonical value valid on its own.
COMPANIONS = {
    ("comparator_policy", "model"): {"comparator_model_name": "some/model"},
    ("comparator_policy", "api"): {
        "comparator_api_url": "http://127.0.0.1:8000/v1",
        "comparator_api_model": "m",
    },
    ("comparator_api_format", "*"): {
        "comparator_policy": "api",
        "comparator_api_url": "http://127.0.0.1:8000/v1",
        "comparator_api_model": "m",
    },
    ("preference_replay_mode", "nearest_k"): {"preference_replay_k": 2},
    ("preference_replay_mode", "lambda_decay"): {"preference_replay_lambda": 0.5},
}

ALIAS_CASES = [
    (name, alias, canonical)
    for name, table in ALIASES.items()
    for canonical, aliases in table.items()
    for alias in [*aliases, canonical.upper(), f"  {canonical}  "]
]


def _class_for(name):
    if name == "preference_scoring_reward":
        return MARLHFIterConfig
    if name == "rl_algorithm":
        return MARLHFConfig
    if name.startswith(("comparator_", "preference_replay_")):
        return MADPOIterConfig
    return MADPOConfig


@pytest.mark.parametrize(("name", "alias", "canonical"), ALIAS_CASES, ids=lambda v: str(v))
def test_aliases_normalise_to_canonical_values(name, alias, canonical):
    extra = COMPANIONS.get((name, canonical), COMPANIONS.get((name, "*"), {}))
    cfg = _class_for(name)(**{name: alias, **extra})
    assert getattr(cfg, name) == canonical


@settings(max_examples=40, deadline=None)
@given(
    policy=st.sampled_from(["Current", "SELF", "Online", "copy", "History", "previous_iteration"]),
    pad_left=st.text(" \t", max_size=3),
    pad_right=st.text(" \t\n", max_size=3),
)
def test_alias_lookup_ignores_case_and_surrounding_space(policy, pad_left, pad_right):
    cfg = MADPOIterConfig(comparator_policy=f"{pad_left}{policy}{pad_right}")
    expected = {"current": "current", "self": "current", "online": "current", "copy": "current_copy"}
    assert cfg.comparator_policy == expected.get(policy.lower(), "history")


def test_pair_selection_and_small_normalisations():
    assert MADPOConfig(pair_selection=" Random ").pair_selection == "random"
    assert MADPOConfig(pair_selection="ALL", preference_pairs_per_sample=None).pair_selection == "all"
    assert MADPOConfig(parallel_training=None).parallel_training == "none"
    mp = MADPOConfig(parallel_training="MP", agent_devices="cpu, cpu")
    assert mp.parallel_training == "mp" and mp.agent_devices == ["cpu", "cpu"]
    assert MADPOConfig(agent_devices="auto").agent_devices == "auto"
    assert MADPOConfig(report_to="wandb").report_to == ["wandb"]
    assert MADPOConfig(report_to="tensorboard, WandB,wandb").report_to == ["tensorboard", "wandb"]
    assert MADPOConfig(report_to=["none"]).report_to == []
    assert MADPOConfig(report_to=None).report_to == []


def test_report_to_all_means_every_installed_integration(monkeypatch):
    from comlrl import reporting

    assert MADPOConfig(report_to="all").report_to == reporting.installed_reporters()
    monkeypatch.setattr(reporting, "installed_reporters", lambda: ["tensorboard"])
    assert MADPOConfig(report_to=" ALL ").report_to == ["tensorboard"]
    assert MARLHFIterConfig(report_to="all,wandb").report_to == ["tensorboard", "wandb"]
    monkeypatch.setattr(reporting, "installed_reporters", lambda: [])
    assert MADPOConfig(report_to=["all"]).report_to == []
    cfg = MADPOConfig(report_to="all")
    assert MADPOConfig.from_dict(cfg.to_dict()) == cfg


def test_rl_algorithm_sets_the_baseline():
    expected = {"magrpo": "mean", "mareinforce": "raw", "marloo": "rloo", "maremax": "max"}
    for algorithm, mode in expected.items():
        assert MARLHFConfig(rl_algorithm=algorithm).advantage_mode == mode
    # The actor-critic backends keep whatever advantage_mode says (it is unused there).
    assert MARLHFConfig(rl_algorithm="maac", advantage_mode="max").advantage_mode == "max"
    # Restating the baseline that rl_algorithm implies is fine.
    assert MARLHFConfig(rl_algorithm="maremax", advantage_mode="max").advantage_mode == "max"


def test_centralized_collaboration_forces_centralized_comparator_generation():
    cfg = MADPOIterConfig(collaboration_mode="centralized", num_agents=3)
    assert cfg.comparator_generation_mode == "centralized"
    assert cfg.is_centralized
    # A decentralized team may still let one agent's model write centralized comparator answers.
    cfg = MADPOIterConfig(
        num_agents=3, comparator_generation_mode="centralized", comparator_centralized_agent_index=2
    )
    assert cfg.comparator_centralized_agent_index == 2 and not cfg.is_centralized


# --------------------------------------------------------------------------------------------------
# Rejections: every combination the reference notes list (§1.4, §1.5, §1.7, §1.8) plus ours
# --------------------------------------------------------------------------------------------------

API = {"comparator_policy": "api", "comparator_api_url": "http://127.0.0.1:8000/v1"}

REJECTIONS = [
    # §1.4 MADPOConfig
    (MADPOConfig, {"num_train_epochs": 0}, "`num_train_epochs` must be >= 1, got 0"),
    (MADPOConfig, {"logging_steps": 0}, "`logging_steps` must be >= 1, got 0"),
    (MADPOConfig, {"num_agents": 0}, "`num_agents` must be >= 1, got 0"),
    (
        MADPOConfig,
        {"collaboration_mode": "hybrid"},
        "`collaboration_mode` must be one of: decentralized, centralized",
    ),
    (MADPOConfig, {"parallel_training": "ddp"}, "`parallel_training` must be one of: none, mp"),
    (MADPOConfig, {"parallel_training": "mp"}, "`agent_devices` is required when `parallel_training='mp'`"),
    (MADPOConfig, {"agent_devices": "gpu0"}, "`agent_devices` holds an invalid device 'gpu0'"),
    (MADPOConfig, {"agent_devices": ["cpu", "cpu", "cpu"]}, "`agent_devices` must have 1 or 2 entries"),
    (MADPOConfig, {"max_new_tokens": 0}, "`max_new_tokens` must be >= 1, got 0"),
    (MADPOConfig, {"temperature": 0.0}, "`temperature` must be > 0, got 0.0"),
    (MADPOConfig, {"top_p": 1.5}, "`top_p` must be in (0, 1], got 1.5"),
    (MADPOConfig, {"top_k": -1}, "`top_k` must be >= 0 or None, got -1"),
    (
        MADPOConfig,
        {"num_turns": 2},
        "`num_turns` must be 1: MADPO, MADPOIter, MARLHF and MARLHFIter currently",
    ),
    (MADPOConfig, {"num_turns": 0}, "`num_turns` must be 1"),
    (
        MADPOConfig,
        {"joint_mode": "crossed"},
        "`joint_mode` must be 'aligned' (alias 'align'): MADPO, MADPOIter",
    ),
    (MADPOConfig, {"discount": 1.5}, "`discount` must be in [0, 1], got 1.5"),
    (MADPOConfig, {"eval_interval": -1}, "`eval_interval` must be >= 0, got -1"),
    (MADPOConfig, {"eval_num_samples": -1}, "`eval_num_samples` must be >= 0, got -1"),
    (MADPOConfig, {"eval_batch_size": 0}, "`eval_batch_size` must be >= 1, got 0"),
    (MADPOConfig, {"rollout_buffer_size": 0}, "`rollout_buffer_size` must be >= 1, got 0"),
    (MADPOConfig, {"train_batch_size": 0}, "`train_batch_size` must be >= 1, got 0"),
    (MADPOConfig, {"advantage_mode": "median"}, "`advantage_mode` must be one of: mean, raw, rloo, max"),
    (MADPOConfig, {"reference_kl_coef": -0.1}, "`reference_kl_coef` must be >= 0, got -0.1"),
    (MADPOConfig, {"reference_devices": ["cpu"] * 3}, "`reference_devices` must have 1 or 2 entries"),
    (MADPOConfig, {"preference_num_candidates": 1}, "`preference_num_candidates` must be >= 2, got 1"),
    (
        MADPOConfig,
        {"preference_pairs_per_sample": 0},
        "`preference_pairs_per_sample` must be >= 1 or None, got 0",
    ),
    (
        MADPOConfig,
        {"pair_selection": "all"},
        "`preference_pairs_per_sample` must be None when `pair_selection` is 'all'",
    ),
    (MADPOConfig, {"pair_selection": "x"}, "`pair_selection` must be one of reward_gap, all, random"),
    (MADPOConfig, {"pair_selection": "comparator_reward"}, "'comparator_reward' needs an iterative trainer"),
    (MADPOConfig, {"dpo_beta": 0}, "`dpo_beta` must be > 0, got 0"),
    (MADPOConfig, {"dpo_beta": float("nan")}, "`dpo_beta` must be a finite number, got nan"),
    (MADPOConfig, {"environment_steps_per_pair": 0}, "`environment_steps_per_pair` must be >= 1, got 0"),
    # ours (MADPOConfig)
    (MADPOConfig, {"num_agents": True}, "`num_agents` must be an integer, got True"),
    (MADPOConfig, {"num_agents": 2.0}, "`num_agents` must be an integer, got 2.0"),
    (MADPOConfig, {"agent_learning_rate": -1e-5}, "`agent_learning_rate` must be >= 0, got -1e-05"),
    (
        MADPOConfig,
        {"max_nonfinite_losses_in_a_row": 0},
        "`max_nonfinite_losses_in_a_row` must be >= 1, got 0",
    ),
    (
        MADPOConfig,
        {"exclude_last_completion_token": "yes"},
        "`exclude_last_completion_token` must be True or False",
    ),
    (MADPOConfig, {"output_dir": ""}, "`output_dir` must be a non-empty string"),
    (MADPOConfig, {"seed": "1"}, "`seed` must be an integer, got '1'"),
    (
        MADPOConfig,
        {"report_to": "mlflow"},
        "`report_to` must be 'none' or any of: tensorboard, wandb, got 'mlflow'",
    ),
    (MADPOConfig, {"report_to": ["all", "mlflow"]}, "`report_to` must be 'none' or any of"),
    (MADPOConfig, {"report_to": 3}, "`report_to` must be a string or a list of strings, got 3"),
    (MADPOConfig, {"save_total_limit": 0}, "`save_total_limit` must be >= 1 or None, got 0"),
    # §1.5 MARLHFConfig
    (
        MARLHFConfig,
        {"rl_algorithm": "x"},
        "`rl_algorithm` must be one of: magrpo, mareinforce, maremax, marloo",
    ),
    (MARLHFConfig, {"num_generations": 1}, "`num_generations` must be >= 2 for rl_algorithm='magrpo'"),
    (
        MARLHFConfig,
        {"rl_algorithm": "iac", "num_generations": 0},
        "`num_generations` must be >= 1 for maac/iac",
    ),
    (MARLHFConfig, {"reward_learning_rate": 0}, "`reward_learning_rate` must be > 0, got 0"),
    (MARLHFConfig, {"reward_num_train_epochs": 0}, "`reward_num_train_epochs` must be >= 1, got 0"),
    (MARLHFConfig, {"reward_train_batch_size": 0}, "`reward_train_batch_size` must be >= 1, got 0"),
    (MARLHFConfig, {"reward_max_length": 0}, "`reward_max_length` must be >= 1 or None, got 0"),
    (MARLHFConfig, {"critic_learning_rate": 0.0}, "`critic_learning_rate` must be > 0 or None, got 0.0"),
    (MARLHFConfig, {"critic_type": "a"}, "`critic_type` must be one of: v, q, got 'a'"),
    (MARLHFConfig, {"value_loss_coef": 0}, "`value_loss_coef` must be > 0, got 0"),
    (MARLHFConfig, {"value_clip_range": 0}, "`value_clip_range` must be > 0 or None, got 0"),
    # ours (MARLHFConfig)
    (MARLHFConfig, {"rl_algorithm": "magrpo", "advantage_mode": "max"}, "`advantage_mode` 'max' contradicts"),
    (MARLHFConfig, {"loss_type": "sum"}, "`loss_type` must be one of: grpo, bnpo, token, dr_grpo, dapo"),
    (MARLHFConfig, {"reference_kl_estimator": "k4"}, "`reference_kl_estimator` must be one of: k1, k2, k3"),
    (MARLHFConfig, {"reward_eval_fraction": 1.0}, "`reward_eval_fraction` must be in [0, 1), got 1.0"),
    (MARLHFConfig, {"reward_model_device": "tpu:x"}, "`reward_model_device` holds an invalid device"),
    (
        MARLHFConfig,
        {"critic_value_head_hidden_dim": 0},
        "`critic_value_head_hidden_dim` must be >= 1 or None",
    ),
    # §1.7 iterative configs
    (MADPOIterConfig, {"num_iterations": 0}, "`num_iterations` must be >= 1, got 0"),
    (
        MADPOIterConfig,
        {"comparator_policy": "best"},
        "`comparator_policy` must be one of: current, current_copy",
    ),
    (MADPOIterConfig, {"comparator_generation_mode": "x"}, "`comparator_generation_mode` must be one of"),
    (
        MADPOIterConfig,
        {"comparator_generation_mode": "centralized", "comparator_centralized_agent_index": 2},
        "`comparator_centralized_agent_index` must be < num_agents (2), got 2",
    ),
    (
        MADPOIterConfig,
        {"comparator_centralized_agent_index": -1},
        "`comparator_centralized_agent_index` must be >= 0",
    ),
    (
        MADPOIterConfig,
        {"collaboration_mode": "centralized", "comparator_centralized_agent_index": 1},
        "`comparator_centralized_agent_index` must be 0 with collaboration_mode='centralized'",
    ),
    (
        MADPOIterConfig,
        {"comparator_policy": "model"},
        "`comparator_model_name` or `comparator_agents` is required when comparator_policy='model'",
    ),
    (
        MADPOIterConfig,
        {"comparator_history_k": 2},
        "`comparator_history_k` is only valid when comparator_policy='history', "
        "got comparator_policy='current'",
    ),
    (
        MADPOIterConfig,
        {"comparator_policy": "history", "comparator_history_k": 0},
        "`comparator_history_k` must be >= 1",
    ),
    (
        MADPOIterConfig,
        {"comparator_policy": "history", "comparator_model_name": "m"},
        "`comparator_model_name` is only valid when comparator_policy='model'",
    ),
    (
        MADPOIterConfig,
        {"comparator_policy": "current_copy", "comparator_agents": ["a", "b"]},
        "`comparator_agents` is only valid when comparator_policy='model'",
    ),
    (
        MADPOIterConfig,
        {**API, "comparator_model_name": "m"},  # the public library accepts this silently
        "`comparator_model_name` is only valid when comparator_policy='model', got comparator_policy='api'",
    ),
    (
        MADPOIterConfig,
        {"comparator_policy": "api"},
        "`comparator_api_url` is required when comparator_policy='api'",
    ),
    (
        MADPOIterConfig,
        {"comparator_num_candidates": 0},
        "`comparator_num_candidates` must be >= 1 or None, got 0",
    ),
    (
        MADPOIterConfig,
        {**API, "comparator_api_max_n_per_request": 0},
        "`comparator_api_max_n_per_request` must be >= 1 or None, got 0",
    ),
    (
        MARLHFIterConfig,
        {"preference_scoring_reward": "gold"},
        "`preference_scoring_reward` must be one of: task",
    ),
    (MARLHFConfig, {"pair_selection": "comparator_reward"}, "'comparator_reward' needs an iterative trainer"),
    # ours (iterative)
    (
        MADPOIterConfig,
        {**API, "comparator_api_format": "grpc"},
        "`comparator_api_format` must be one of: generic",
    ),
    (
        MADPOIterConfig,
        {**API, "comparator_api_format": "anthropic"},
        "`comparator_api_model` is required with comparator_api_format='anthropic'",
    ),
    (
        MADPOIterConfig,
        {**API, "comparator_api_url": "ftp://x"},
        "`comparator_api_url` must be an http(s) URL",
    ),
    (MADPOIterConfig, {**API, "comparator_api_timeout": 0}, "`comparator_api_timeout` must be > 0, got 0"),
    (
        MADPOIterConfig,
        {**API, "comparator_api_headers": "{nope"},
        "`comparator_api_headers` must be a dict or a JSON",
    ),
    (
        MADPOIterConfig,
        {**API, "comparator_api_headers": {"X": 1}},
        "`comparator_api_headers` must map strings",
    ),
    (
        MADPOIterConfig,
        {**API, "comparator_api_extra_body": "[1]"},
        "`comparator_api_extra_body` must be a dict",
    ),
    (MADPOIterConfig, {**API, "comparator_api_max_retries": -1}, "`comparator_api_max_retries` must be >= 0"),
    (
        MADPOIterConfig,
        {"comparator_api_max_failure_rate": 1.5},
        "`comparator_api_max_failure_rate` must be in [0, 1], got 1.5",
    ),
    (
        MADPOIterConfig,
        {"comparator_policy": "model", "comparator_model_name": "m", "comparator_agents": ["a", "b"]},
        "give one of `comparator_model_name` (one model for all agents) and `comparator_agents`",
    ),
    (
        MADPOIterConfig,
        {"comparator_policy": "model", "comparator_agents": ["a", "b", "c"]},
        "`comparator_agents` must have 2 entries (one per agent), got 3",
    ),
    (
        MADPOIterConfig,
        {
            "comparator_policy": "model",
            "comparator_agents": ["a", "b"],
            "comparator_generation_mode": "centralized",
        },
        "`comparator_agents` must have 1 entries (one comparator model under centralized generation), got 2",
    ),
    (MADPOIterConfig, {"comparator_devices": ["cpu"] * 3}, "`comparator_devices` must have 1 or 2 entries"),
    (MARLHFIterConfig, {"reward_warm_start": 1}, "`reward_warm_start` must be True or False, got 1"),
    # §1.8 replay options (validated by comlrl.trainers.preference.replay.validate_replay_options)
    (MADPOIterConfig, {"preference_replay_mode": "fifo"}, "`preference_replay_mode` must be one of"),
    (MADPOIterConfig, {"preference_replay_k": 2}, "`preference_replay_k` must be None or 1 when"),
    (MADPOIterConfig, {"preference_replay_lambda": 0.5}, "`preference_replay_lambda` is only valid when"),
    (
        MADPOIterConfig,
        {"preference_replay_sample_size": 8},
        "`preference_replay_sample_size` is only valid when",
    ),
    (MADPOIterConfig, {"preference_replay_mode": "nearest_k"}, "`preference_replay_k` is required when"),
    (
        MADPOIterConfig,
        {"preference_replay_mode": "nearest_k", "preference_replay_k": 0},
        "`preference_replay_k` must be >= 1, got 0",
    ),
    (
        MADPOIterConfig,
        {"preference_replay_mode": "nearest_k", "preference_replay_k": 2, "preference_replay_lambda": 0.5},
        "`preference_replay_lambda` is only valid when",
    ),
    (
        MADPOIterConfig,
        {"preference_replay_mode": "nearest_k", "preference_replay_k": 2, "preference_replay_sample_size": 0},
        "`preference_replay_sample_size` must be >= 1 or None, got 0",
    ),
    (
        MADPOIterConfig,
        {"preference_replay_mode": "all_history", "preference_replay_k": 2},
        "`preference_replay_k` is only valid when `preference_replay_mode` is 'nearest_k'",
    ),
    (
        MADPOIterConfig,
        {"preference_replay_mode": "all_history", "preference_replay_lambda": 0.5},
        "`preference_replay_lambda` is only valid when",
    ),
    (
        MADPOIterConfig,
        {"preference_replay_mode": "lambda_decay"},
        "`preference_replay_lambda` is required when",
    ),
    (
        MARLHFIterConfig,
        {"preference_replay_mode": "lambda_decay", "preference_replay_lambda": 1.5},
        "`preference_replay_lambda` must be in [0, 1], got 1.5",
    ),
    (
        MADPOIterConfig,
        {"preference_replay_mode": "lambda_decay", "preference_replay_lambda": 0.5, "preference_replay_k": 1},
        "`preference_replay_k` is only valid when",
    ),
    (
        MADPOIterConfig,
        {"preference_replay_mode": "nearest_k", "preference_replay_k": True},
        "`preference_replay_k` must be an integer or None, got True",
    ),
]


@pytest.mark.parametrize(("cls", "kwargs", "message"), REJECTIONS, ids=lambda v: str(v)[:60])
def test_rejected_combinations_name_the_field(cls, kwargs, message):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(ValueError, match=re.escape(message)):
            cls(**kwargs)


def test_rejection_table_covers_every_validated_field_of_the_notes():
    """The fields with a rule in the notes' tables (§1.4, §1.5, §1.7, §1.8) all have a rejection case."""
    ruled = {
        "num_train_epochs", "logging_steps", "num_agents", "collaboration_mode", "parallel_training",
        "num_turns", "joint_mode", "eval_interval", "eval_num_samples", "eval_batch_size",
        "rollout_buffer_size", "train_batch_size", "advantage_mode", "reference_kl_coef", "reference_devices",
        "preference_num_candidates", "preference_pairs_per_sample", "pair_selection", "dpo_beta",
        "environment_steps_per_pair", "comparator_centralized_agent_index", "rl_algorithm", "num_generations",
        "reward_learning_rate", "reward_num_train_epochs", "reward_train_batch_size", "reward_max_length",
        "critic_learning_rate", "critic_type", "value_loss_coef", "value_clip_range", "num_iterations",
        "comparator_policy", "comparator_generation_mode", "comparator_model_name", "comparator_agents",
        "comparator_history_k", "comparator_api_url", "comparator_num_candidates",
        "comparator_api_max_n_per_request", "comparator_api_format", "preference_scoring_reward",
        "preference_replay_mode", "preference_replay_k", "preference_replay_lambda",
        "preference_replay_sample_size",
    }  # fmt: skip
    named = {m.group(1) for _, _, message in REJECTIONS for m in re.finditer(r"`(\w+)`", message)}
    assert ruled - named == set()


def test_a_valid_value_next_to_each_boundary_is_accepted():
    MADPOConfig(preference_pairs_per_sample=None, pair_selection="all")
    MADPOConfig(pair_selection="random", preference_pairs_per_sample=None)
    MADPOConfig(top_k=0, top_p=1.0, temperature=1e-3, eval_interval=0, eval_num_samples=0, discount=0.0)
    MADPOConfig(agent_devices=["cpu", "cpu"], reference_devices="cpu", agent_learning_rate=0.0)
    MARLHFConfig(rl_algorithm="maac", num_generations=1, value_clip_range=None, reward_eval_fraction=0.0)
    MADPOIterConfig(preference_replay_mode="current", preference_replay_k=1)
    MADPOIterConfig(preference_replay_mode="lambda_decay", preference_replay_lambda=0.0)
    MADPOIterConfig(preference_replay_mode="lambda_decay", preference_replay_lambda=1.0)
    MADPOIterConfig(preference_replay_mode="all_history", preference_replay_sample_size=1)
    MADPOIterConfig(comparator_policy="history", comparator_history_k=1, comparator_num_candidates=1)
    MADPOIterConfig(comparator_api_max_failure_rate=0.0)
    MADPOIterConfig(**API)  # generic needs no model name
    cfg = MADPOIterConfig(
        comparator_policy="model", comparator_agents=["a"], comparator_generation_mode="centralized"
    )
    assert cfg.comparator_agents == ["a"]
    cfg = MADPOIterConfig(collaboration_mode="centralized", agent_devices=["cpu"], comparator_devices="cpu")
    assert cfg.agent_devices == ["cpu"]


# --------------------------------------------------------------------------------------------------
# Warnings for settings that do nothing
# --------------------------------------------------------------------------------------------------


def test_settings_without_effect_warn_and_effective_ones_do_not():
    with pytest.warns(UserWarning, match="`reference_kl_enabled=True` has no effect on MADPO"):
        MADPOConfig(reference_kl_enabled=True)
    with pytest.warns(UserWarning, match="`comparator_api_url`, `comparator_api_model` only apply"):
        MADPOIterConfig(comparator_api_url="http://127.0.0.1:1", comparator_api_model="m")
    with pytest.warns(UserWarning, match="`critic_model_name` has no effect with rl_algorithm='magrpo'"):
        MARLHFConfig(critic_model_name="critic")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MARLHFConfig(reference_kl_enabled=True)
        MARLHFIterConfig(reference_kl_enabled=True, rl_algorithm="maac", critic_model_name="critic")
        MADPOIterConfig(**API, comparator_api_model="m", comparator_api_key_env="KEY")
        for cls in ALL:
            cls()


# --------------------------------------------------------------------------------------------------
# Derived values
# --------------------------------------------------------------------------------------------------


def test_derived_values():
    cfg = MADPOIterConfig(output_dir="run", preference_num_candidates=6)
    assert cfg.resolved_preference_replay_dir == "run/preference_replay"
    assert cfg.resolved_policy_checkpoint_dir == "run/policy_checkpoints"
    assert cfg.reward_distribution_dir == "run/reward_distributions"
    assert cfg.resolved_logging_dir == "run/logs"
    assert cfg.resolved_comparator_num_candidates == 6
    assert cfg.resolved_comparator_history_k == 1
    assert not cfg.saves_policy_snapshots
    cfg = MADPOIterConfig(
        comparator_policy="history",
        comparator_history_k=3,
        comparator_num_candidates=2,
        preference_replay_dir="elsewhere",
        logging_dir="tb",
    )
    assert cfg.resolved_comparator_history_k == 3 and cfg.resolved_comparator_num_candidates == 2
    assert cfg.resolved_preference_replay_dir == "elsewhere" and cfg.resolved_logging_dir == "tb"
    assert not cfg.saves_policy_snapshots  # the history comparator keeps its snapshots in memory
    assert MADPOIterConfig(policy_checkpoint_dir="snaps").saves_policy_snapshots
    assert MADPOConfig(rollout_buffer_size=5).train_batch_size == 5
    assert MADPOConfig(rollout_buffer_size=5, train_batch_size=3).train_batch_size == 3
    assert MADPOConfig(top_k=7).resolved_top_k(20) == 7
    assert MADPOConfig(top_k=None).resolved_top_k(20) == 20
    assert MADPOConfig(top_k=None).resolved_top_k() == 50
    rl = MARLHFConfig(agent_learning_rate=3e-4, advantage_normalization=False)
    assert rl.resolved_critic_learning_rate == 3e-4 and rl.scale_rewards == "none"
    assert MARLHFConfig(rl_algorithm="maac", critic_learning_rate=1e-3).resolved_critic_learning_rate == 1e-3
    assert MARLHFConfig().scale_rewards == "group"
    assert MARLHFConfig(rl_algorithm="iac").uses_critic and not MARLHFConfig().uses_critic


# --------------------------------------------------------------------------------------------------
# Command line (HfArgumentParser), documentation, dict round trip
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_every_field_has_help_and_is_documented_in_a_sectioned_docstring(cls):
    docs = "".join(c.__doc__ or "" for c in cls.__mro__ if dataclasses.is_dataclass(c))
    for f in dataclasses.fields(cls):
        assert f.metadata.get("help", "").strip(), f.name
        assert re.search(rf"^\s+{f.name} \(`", docs, re.MULTILINE), f"{f.name} is not documented"
    assert "> Parameters that control the model" in docs
    assert "> Parameters that control training" in docs
    assert "> Parameters that control logging and outputs" in docs
    if cls in ITER:
        assert "> Parameters that control the comparator" in (cls.__doc__ or "")
        assert "> Parameters that control the replay buffer" in (cls.__doc__ or "")


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_hf_argument_parser_defaults_equal_the_constructor(cls):
    (parsed,) = HfArgumentParser(cls).parse_args_into_dataclasses([])
    assert parsed == cls()


def test_hf_argument_parser_parses_every_kind_of_field():
    args = [
        "--dpo_beta", "0.2",
        "--num_agents", "3",
        "--top_k", "5",
        "--report_to", "tensorboard,wandb",
        "--agent_devices", "cpu,cpu,cpu",
        "--no_disable_dropout",
        "--exclude_last_completion_token",
        "--comparator_policy", "model",
        "--comparator_agents", "a", "b", "c",
        "--preference_replay_mode", "td-lambda",
        "--preference_replay_lambda", "0.8",
        "--preference_replay_sample_size", "256",
        "--rl_algorithm", "MAREFORCE",
        "--preference_scoring_reward", "learned",
        "--reward_model_device", "cpu",
        "--output_dir", "runs/x",
    ]  # fmt: skip
    (cfg,) = HfArgumentParser(MARLHFIterConfig).parse_args_into_dataclasses(args)
    assert cfg.dpo_beta == 0.2 and cfg.num_agents == 3 and cfg.top_k == 5
    assert cfg.report_to == ["tensorboard", "wandb"]
    assert cfg.agent_devices == ["cpu", "cpu", "cpu"]
    assert cfg.disable_dropout is False and cfg.exclude_last_completion_token is True
    assert cfg.comparator_agents == ["a", "b", "c"]
    assert cfg.preference_replay_mode == "lambda_decay" and cfg.preference_replay_lambda == 0.8
    assert cfg.preference_replay_sample_size == 256
    assert cfg.rl_algorithm == "mareinforce" and cfg.advantage_mode == "raw"
    assert cfg.preference_scoring_reward == "reward_model"
    assert cfg.output_dir == "runs/x"

    api_args = [
        "--comparator_policy", "endpoint",
        "--comparator_api_url", "http://127.0.0.1:8000/v1/chat/completions",
        "--comparator_api_format", "chat",
        "--comparator_api_model", "m",
        "--comparator_api_headers", '{"X-Team": "blue"}',
        "--comparator_api_extra_body", '{"max_tokens": null}',
    ]  # fmt: skip
    (cfg,) = HfArgumentParser(MADPOIterConfig).parse_args_into_dataclasses(api_args)
    assert cfg.comparator_policy == "api" and cfg.comparator_api_format == "openai"
    assert cfg.comparator_api_headers == {"X-Team": "blue"}
    assert cfg.comparator_api_extra_body == {"max_tokens": None}

    with pytest.raises(ValueError, match=re.escape("`num_turns` must be 1")):
        HfArgumentParser(MADPOConfig).parse_args_into_dataclasses(["--num_turns", "2"])


NON_DEFAULT = {
    MADPOConfig: dict(
        num_agents=3, agent_devices=["cpu", "cpu", "cpu"], report_to="wandb", pair_selection="RANDOM",
        preference_pairs_per_sample=None, seed=7, save_total_limit=2, top_k=None,
    ),
    MARLHFConfig: dict(
        rl_algorithm="marloo", reward_model_name="tiny", reward_max_length=64, loss_type="dapo",
        reference_kl_enabled=True, reference_devices="cpu", joint_mode="align",
    ),
    MADPOIterConfig: dict(
        comparator_policy="api", comparator_api_url="http://127.0.0.1:9/x", comparator_api_format="codex",
        comparator_api_model="m", comparator_api_headers='{"a": "b"}', comparator_api_key="secret-key",
        preference_replay_mode="recent_k", preference_replay_k=3, num_iterations=4,
    ),
    MARLHFIterConfig: dict(
        collaboration_mode="centralised", num_agents=3, comparator_policy="model",
        comparator_agents=["x"], preference_scoring_reward="env", reward_warm_start=True,
        preference_replay_mode="lambda", preference_replay_lambda=0.25, preference_replay_sample_size=9,
    ),
}  # fmt: skip


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_dict_round_trip_gives_an_equal_config(cls):
    cfg = cls(**NON_DEFAULT[cls])
    assert cls(**dataclasses.asdict(cfg)) == cfg
    restored = cls.from_dict(json.loads(json.dumps(cfg.to_dict(redact_secrets=False))))
    assert restored == cfg
    assert cls.from_dict(cls().to_dict()) == cls()


def test_api_key_stays_out_of_checkpoints_and_repr():
    cfg = MADPOIterConfig(**NON_DEFAULT[MADPOIterConfig])
    assert cfg.comparator_api_key == "secret-key"
    assert "secret-key" not in repr(cfg)
    assert cfg.to_dict()["comparator_api_key"] is None
    assert MADPOIterConfig.from_dict(cfg.to_dict()).comparator_api_key is None
    assert cfg.to_dict(redact_secrets=False)["comparator_api_key"] == "secret-key"


def test_from_dict_rejects_unknown_fields_by_name():
    values = {**MADPOConfig().to_dict(), "wandb_config": {}, "beta": 0.1}
    with pytest.raises(ValueError, match="unknown field\\(s\\) for MADPOConfig: beta, wandb_config"):
        MADPOConfig.from_dict(values)
    # MARLHF-only fields are unknown to MADPOConfig.
    with pytest.raises(ValueError, match="rl_algorithm"):
        MADPOConfig.from_dict(MARLHFConfig().to_dict())


def test_to_dict_does_not_copy_model_objects():
    class FakeModel:
        pass

    model = FakeModel()
    cfg = MADPOIterConfig(comparator_policy="model", comparator_agents=[model, "b"])
    out = cfg.to_dict()
    assert out["comparator_agents"][0] is model and out["comparator_agents"] is not cfg.comparator_agents
