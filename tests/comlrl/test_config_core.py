"""The config core: the validator vocabulary (both wordings), the one strict ``from_dict`` of every config in
both packages, the shared fields declared once, and ``report_to="all"``."""

from __future__ import annotations

import dataclasses
import json
import re
import warnings

import pytest
from transformers import HfArgumentParser

from comlrl import reporting
from comlrl.trainers.actor_critic.config import ActorCriticConfig, IACConfig, MAACConfig
from comlrl.trainers.core.config import (
    FIELD_RULES,
    CriticFields,
    RLStageFields,
    TrainerConfig,
    ValueHeadFields,
)
from comlrl.trainers.core.training_knobs import TrainingKnobFields
from comlrl.trainers.online_rl.config import OnlineRLConfig
from comlrl.trainers.preference.config import MADPOConfig, MADPOIterConfig, MARLHFConfig, MARLHFIterConfig
from comlrl.trainers.reinforce.config import MAGRPOConfig
from comlrl.validation import (
    StrictFromDict,
    canonical_choice,
    check_bool,
    check_choice,
    check_device_count,
    check_devices,
    check_float,
    check_int,
    check_str,
    help_field,
    normalize_devices,
    normalize_mapping,
    override_field,
    strict_from_dict,
)
from pettingllms.envs.base import EnvConfig
from pettingllms.execution.engine import EngineConfig
from pettingllms.execution.policies import PolicyConfig
from pettingllms.trainer.at_grpo_config import ATGRPOConfig

TRAINER_CONFIGS = (
    MADPOConfig,
    MARLHFConfig,
    MADPOIterConfig,
    MARLHFIterConfig,
    MAGRPOConfig,
    IACConfig,
    MAACConfig,
)
ONLINE = (MAGRPOConfig, IACConfig, MAACConfig)
ALL_CONFIGS = (*TRAINER_CONFIGS, ATGRPOConfig, EngineConfig, PolicyConfig, EnvConfig)


def raises(message: str):
    return pytest.raises(ValueError, match=re.escape(message))


# --------------------------------------------------------------------------------------------------
# The vocabulary
# --------------------------------------------------------------------------------------------------


def test_check_int_in_both_wordings():
    check_int("n", 3, 1)
    check_int("n", None, 1, optional=True)
    with raises("`n` must be an integer, got True"):
        check_int("n", True, 1)
    with raises("`n` must be an integer or None, got 2.0"):
        check_int("n", 2.0, 1, optional=True)
    with raises("`n` must be >= 1, got 0"):
        check_int("n", 0, 1)
    with raises("`n` must be >= 1 or None, got 0"):
        check_int("n", 0, 1, optional=True)
    # pettingllms' wording names the kind and the bound in every message
    with raises("`n` must be an integer >= 1, got 0"):
        check_int("n", 0, 1, spell_out=True)
    with raises("`n` must be an integer >= 0, got '1'"):
        check_int("n", "1", 0, spell_out=True)
    check_int("n", None, 1, optional=True, spell_out=True)


def test_check_float_in_both_wordings():
    check_float("x", 0.5, gt=0, le=1)
    check_float("x", 3)  # an int is a real number
    with raises("`x` must be a finite number, got nan"):
        check_float("x", float("nan"), gt=0)
    with raises("`x` must be a finite number or None, got True"):
        check_float("x", True, optional=True)
    with raises("`x` must be > 0, got 0"):
        check_float("x", 0, gt=0)
    with raises("`x` must be > 0 or None, got 0.0"):
        check_float("x", 0.0, gt=0, optional=True)
    with raises("`x` must be in [0, 1), got 1.0"):
        check_float("x", 1.0, ge=0, lt=1)
    with raises("`x` must be <= 2, got 3"):
        check_float("x", 3, le=2)
    with raises("`x` must be a finite number > 0.0, got 0.0"):
        check_float("x", 0.0, gt=0.0, spell_out=True)
    with raises("`x` must be a finite number in [0.0, 1.0], got 1.5"):
        check_float("x", 1.5, ge=0.0, le=1.0, spell_out=True)
    with raises("`x` must be a finite number in (0.0, 1.0], got inf"):
        check_float("x", float("inf"), gt=0.0, le=1.0, spell_out=True)


def test_choices_bools_and_strings():
    assert canonical_choice("m", " Align ", ("aligned",), {"align": "aligned"}) == "aligned"
    with raises("`m` must be one of: a, b (aliases: c -> a), got 'x'"):
        canonical_choice("m", "x", ("a", "b"), {"c": "a"})
    with raises("`m` must be one of: a, b, got 3"):
        canonical_choice("m", 3, ("a", "b"))
    check_choice("level", "L1", ("L0", "L1"))
    with raises("`level` must be one of ['L0', 'L1'], got 'l1'"):
        check_choice("level", "l1", ("L0", "L1"))  # exact: no case folding
    with raises("`b` must be True or False, got 1"):
        check_bool("b", 1)
    check_str("s", "", allow_empty=True)
    check_str("s", None, optional=True)
    with raises("`s` must be a non-empty string or None, got ' '"):
        check_str("s", " ", optional=True)


def test_devices_and_mappings():
    assert normalize_devices("d", "cpu, cpu") == ["cpu", "cpu"]
    assert normalize_devices("d", "auto") == "auto"
    assert normalize_devices("d", ("cpu",)) == ["cpu"]
    with raises("`d` must be None, 'auto', a device string or a list"):
        normalize_devices("d", 3)
    check_devices("d", "auto")
    with raises("`d` holds an invalid device 'auto'"):
        check_devices("d", ["auto"])  # "auto" only as the whole value
    with raises("`d` must not be an empty list"):
        check_devices("d", [])
    check_device_count("d", ["cpu"], 3)
    with raises("`d` must have 1 or 3 entries (one device, or one per agent), got 2"):
        check_device_count("d", ["cpu", "cpu"], 3)
    with raises("`d` must have 1 entry (one actor model), got 2"):
        check_device_count("d", ["cpu", "cpu"], 1)
    assert normalize_mapping("h", '{"a": "b"}') == {"a": "b"}
    with raises("`h` must be a dict or a JSON object string, got '[1]'"):
        normalize_mapping("h", "[1]")


def test_field_helpers_carry_help_and_keep_it_on_override():
    @dataclasses.dataclass
    class Base:
        size: int = help_field("How big.", 1)
        items: list[int] = help_field("Some items.", default_factory=lambda: [1])

    @dataclasses.dataclass
    class Child(Base):
        size: int = override_field(Base, "size", 2, "(child: 2)")

    (size, items) = dataclasses.fields(Child)
    assert size.default == 2 and size.metadata["help"] == "How big. (child: 2)"
    assert Child().items == [1] and items.metadata["help"] == "Some items."


def test_warnings_point_at_the_code_that_built_the_config():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        MARLHFIterConfig(critic_model_name="critic")
        (cfg,) = HfArgumentParser(MADPOConfig).parse_args_into_dataclasses(["--reference_kl_enabled"])
    assert cfg.reference_kl_enabled
    assert caught[0].filename == __file__
    assert caught[1].filename.endswith("hf_argparser.py")


# --------------------------------------------------------------------------------------------------
# One strict from_dict
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Point(StrictFromDict):
    x: int = 0
    y: int = 0


def test_strict_from_dict_names_the_class_the_unknown_keys_and_the_known_fields():
    assert Point.from_dict({"x": 1}, y=2) == Point(1, 2)
    assert Point.from_dict() == Point() and Point.from_dict(values={"y": 3}) == Point(0, 3)
    with raises("unknown Point field(s) ['w', 'z']; known fields: ['x', 'y']"):
        Point.from_dict({"z": 1}, w=2)


@pytest.mark.parametrize("cls", ALL_CONFIGS, ids=lambda c: c.__name__)
def test_every_config_of_both_packages_has_the_one_from_dict(cls):
    assert cls.from_dict.__func__ is strict_from_dict
    with pytest.raises(ValueError, match=rf"unknown (field\(s\) for {cls.__name__}|{cls.__name__} field\(s\))"):
        cls.from_dict({"no_such_field": 1})


def test_trainer_configs_keep_their_message_and_list_the_known_fields():
    with pytest.raises(ValueError) as info:
        MAGRPOConfig.from_dict({"beta": 0.1})
    message = str(info.value)
    assert message.startswith("unknown field(s) for MAGRPOConfig: beta; known fields: ")
    assert all(name in message for name in ("num_agents", "advantage_mode", "gradient_accumulation_steps"))


@pytest.mark.parametrize("cls", TRAINER_CONFIGS, ids=lambda c: c.__name__)
def test_dict_round_trip(cls):
    cfg = cls(seed=3, agent_devices="cpu", report_to="none")
    assert cls.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert cls(**cfg.to_dict()) == cfg


# --------------------------------------------------------------------------------------------------
# The shared fields, declared once
# --------------------------------------------------------------------------------------------------


def own_fields(cls) -> set[str]:
    return set(cls.__dict__.get("__annotations__", {}))


def test_shared_fields_are_declared_once_and_every_config_has_them():
    shared = {f.name for f in dataclasses.fields(TrainerConfig)}
    critic = {f.name for f in dataclasses.fields(CriticFields)}
    rl_stage = {f.name for f in dataclasses.fields(RLStageFields)}
    for cls in TRAINER_CONFIGS:
        names = {f.name for f in dataclasses.fields(cls)}
        assert shared <= names, cls
        # A config only redeclares a shared field to change its default (the help keeps the base's text).
        for name in own_fields(cls) & (shared | critic | rl_stage):
            base_help = next(
                f.metadata["help"]
                for base in (TrainerConfig, CriticFields, RLStageFields)
                for f in dataclasses.fields(base)
                if f.name == name
            )
            assert cls.__dataclass_fields__[name].metadata["help"].startswith(base_help), (cls, name)
    for cls in (MARLHFConfig, ActorCriticConfig, OnlineRLConfig, IACConfig):
        assert not own_fields(cls) & (critic - {"critic_learning_rate"}), cls
        assert not own_fields(cls) & (rl_stage - {"num_generations"}), cls
    assert critic <= {f.name for f in dataclasses.fields(MARLHFConfig)}
    assert critic <= {f.name for f in dataclasses.fields(MAACConfig)}
    value_heads = {f.name for f in dataclasses.fields(ValueHeadFields)}
    assert value_heads <= {f.name for f in dataclasses.fields(IACConfig)}
    assert not value_heads & {f.name for f in dataclasses.fields(MAACConfig)}  # class attributes there
    # Every field declared in the core has its rule (choices are checked where they are normalised).
    checked_elsewhere = {"parallel_training", "joint_mode", "report_to", "critic_type", "num_turns"}
    checked_elsewhere |= set(TrainingKnobFields.__dataclass_fields__)  # TrainingKnobFields._validate_training_knobs
    for group in (TrainerConfig, CriticFields, ValueHeadFields):
        assert {f.name for f in dataclasses.fields(group)} - checked_elsewhere <= set(FIELD_RULES)


def test_online_defaults_differ_only_where_the_public_library_does():
    magrpo, iac, maac = MAGRPOConfig(), IACConfig(), MAACConfig()
    for cfg in (magrpo, iac, maac):  # the public 1.4.3 multi-turn defaults (its source: discount 1.0)
        assert (cfg.num_turns, cfg.discount, cfg.early_termination_threshold, cfg.joint_mode) == (2, 1.0, -0.2, "aligned")
    assert (MADPOConfig().discount, MADPOConfig().early_termination_threshold) == (1.0, None)
    assert (magrpo.num_train_epochs, magrpo.num_generations, magrpo.rollout_buffer_size) == (20, 4, 2)
    assert (magrpo.top_k, magrpo.logging_steps, magrpo.output_dir) == (50, 50, "outputs/magrpo")
    for cfg in (iac, maac):
        assert (cfg.num_train_epochs, cfg.num_generations, cfg.rollout_buffer_size) == (40, 1, 8)
        assert (cfg.top_k, cfg.logging_steps, cfg.critic_learning_rate) == (None, 1, 5e-6)
    assert MARLHFConfig().critic_learning_rate is None
    assert (iac.output_dir, maac.output_dir) == ("outputs/iac", "outputs/maac")
    assert iac.use_separate_critic and maac.use_separate_critic and maac.value_head_hidden_dim is None


@pytest.mark.parametrize("cls", ONLINE, ids=lambda c: c.__name__)
def test_online_configs_have_help_documentation_and_a_command_line(cls):
    docs = "".join(c.__doc__ or "" for c in cls.__mro__ if dataclasses.is_dataclass(c))
    for f in dataclasses.fields(cls):
        assert f.metadata.get("help", "").strip(), f.name
        assert re.search(rf"^\s+{f.name} \(`", docs, re.MULTILINE), f"{f.name} is not documented"
    (parsed,) = HfArgumentParser(cls).parse_args_into_dataclasses([])
    assert parsed == cls()


def test_online_rules_name_the_field():
    with raises("`num_generations` must be >= 2 for MAGRPOConfig, got 1"):
        MAGRPOConfig(num_generations=1)
    # Multi-turn (the public default num_turns=2): the actor-critic trainers play one trajectory per item.
    with raises("Multi-turn IAC currently supports num_generations == 1: `num_generations` is 2 with `num_turns` 2"):
        IACConfig(num_turns=2, num_generations=2)
    with raises("`num_turns` must be >= 1, got 0"):
        MAGRPOConfig(num_turns=0)
    assert MAACConfig(joint_mode="Crossed").joint_mode == "cross"
    with raises("`joint_mode` must be one of: aligned, cross"):
        MAACConfig(joint_mode="diagonal")
    with raises("`joint_mode` must be 'aligned' (alias 'align'): MADPO, MADPOIter, MARLHF and MARLHFIter"):
        MADPOConfig(joint_mode="cross")
    with raises("`critic_devices` must have 1 or 2 entries"):
        IACConfig(critic_devices=["cpu"] * 3)
    with raises("`value_head_hidden_dim` must be >= 1 or None, got 0"):
        IACConfig(value_head_hidden_dim=0)
    # The first error reported stays the field it was: MAGRPO checks advantage_normalization before
    # exclude_last_completion_token, MADPO the other way round.
    with raises("`advantage_normalization`"):
        MAGRPOConfig(advantage_normalization=1, exclude_last_completion_token=1)
    with raises("`exclude_last_completion_token`"):
        MADPOConfig(advantage_normalization=1, exclude_last_completion_token=1)


# --------------------------------------------------------------------------------------------------
# report_to="all": every installed integration, in every config
# --------------------------------------------------------------------------------------------------


def test_report_to_all_is_accepted_by_every_config(monkeypatch):
    monkeypatch.setattr(reporting, "installed_reporters", lambda: ["wandb"])
    for cls in TRAINER_CONFIGS:
        assert cls(report_to="all").report_to == ["wandb"]
    # ATGRPOConfig keeps report_to as given (its checkpoints store it so); its metrics logger resolves it.
    config = ATGRPOConfig(report_to="all")
    assert config.report_to == "all" and reporting.normalize_report_to(config.report_to) == ["wandb"]
    with pytest.raises(ValueError, match="`report_to` must be 'none' or any of: tensorboard, wandb"):
        ATGRPOConfig(report_to="mlflow")
