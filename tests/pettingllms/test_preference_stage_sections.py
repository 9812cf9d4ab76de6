"""The ``madpo`` / ``marlhf`` pipeline sections take every field of ``MADPOIterConfig`` / ``MARLHFIterConfig``
their trainers read (generated from the classes, not listed by hand; TRL's names where the public ones
differ, :mod:`pettingllms.config.key_names`), validated by the classes with their own messages; the
fields the pipeline sets are refused naming the key that sets them, and a literal secret is refused."""

from __future__ import annotations

import dataclasses

import pytest

from comlrl.trainers.preference import MADPOIterConfig, MARLHFIterConfig
from pettingllms.config import ConfigError, load_config
from pettingllms.config.key_names import UNREAD_FIELDS, section_key
from pettingllms.config.stage_sections import PIPELINE_OWNED_FIELDS
from pettingllms.pipeline import check_pipeline

CLASSES = {"madpo": MADPOIterConfig, "marlhf": MARLHFIterConfig}
PIPELINE_SET = {"seed", "output_dir", "logging_dir", "run_name", "report_to", "num_agents", "disable_tqdm"}


def settings(stage, *overrides):
    config = load_config("plan_path/L1", ["model.name=test-tiny", f"pipeline=[{stage}, eval]", *overrides])
    return check_pipeline(config)[stage]


@pytest.mark.parametrize("stage", sorted(CLASSES))
def test_every_field_of_the_class_is_a_key_of_the_section_but_the_pipeline_s(stage):
    section = load_config("plan_path/L1")[stage]
    fields = {f.name for f in dataclasses.fields(CLASSES[stage]) if f.init}
    secrets = set(getattr(CLASSES[stage], "_secret_fields", ()))
    assert set(PIPELINE_OWNED_FIELDS) == PIPELINE_SET
    unread = set(UNREAD_FIELDS[stage])  # public fields the stage's trainer never reads: no keys
    keys = {section_key(stage, f) for f in fields - PIPELINE_SET - secrets - unread}  # TRL's names (key_names)
    assert set(section) == keys | {"num_problems", "seed_start"}
    # a field the stage does not set keeps the class's default; sampling left null comes from `rollout`
    made = settings(stage)
    assert made.preference_replay_mode == CLASSES[stage]().preference_replay_mode
    assert made.max_new_tokens == load_config("plan_path/L1")["rollout"]["max_completion_length"]


def test_a_section_reaches_every_knob_of_the_trainer_config():
    made = settings("madpo", "madpo.comparator_policy=history", "madpo.preference_replay_mode=lambda_decay",
                    "madpo.preference_replay_lambda=0.5",
                    "madpo.pair_selection=random", "madpo.max_completion_length=12", "madpo.top_p=0.9")
    assert (made.comparator_policy, made.preference_replay_mode, made.pair_selection) == ("history", "lambda_decay", "random")
    assert (made.max_new_tokens, made.top_p, made.seed) == (12, 0.9, 0)
    rl = settings("marlhf", "marlhf.rl_algorithm=maac", "marlhf.reference_kl_enabled=true", "run.seed=7")
    assert (rl.rl_algorithm, rl.reference_kl_enabled, rl.seed, rl.num_agents) == ("maac", True, 7, 2)


@pytest.mark.parametrize(("key", "owner"), [("seed", "run.seed"), ("num_agents", "env.turn_order"),
                                             ("output_dir", "run.output_dir"), ("report_to", "run.report_to")])
def test_a_field_the_pipeline_sets_is_refused_naming_the_key_that_sets_it(key, owner):
    with pytest.raises(ConfigError, match=rf"`madpo.{key}` is the pipeline's: it is set from `{owner}"):
        load_config("plan_path/L1", [f"madpo.{key}=1"])


def test_a_literal_api_key_is_refused_and_a_misspelling_gets_a_suggestion():
    with pytest.raises(ConfigError, match=r"`madpo.comparator_api_key` would be written into the run's config.yaml"):
        load_config("plan_path/L1", ["madpo.comparator_api_key=secret"])
    with pytest.raises(ConfigError, match=r"unknown key `madpo.pairs_selection`.*did you mean `madpo.pair_selection`"):
        load_config("plan_path/L1", ["madpo.pairs_selection=random"])


def test_a_bad_value_gets_the_class_s_own_message():
    with pytest.raises(ValueError) as direct:
        MADPOIterConfig(preference_replay_lambda=1.5)
    with pytest.raises(ConfigError) as staged:
        settings("madpo", "madpo.preference_replay_lambda=1.5")
    assert str(direct.value) in str(staged.value) and str(staged.value).startswith("section `madpo`")
