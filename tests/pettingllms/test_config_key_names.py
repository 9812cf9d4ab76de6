"""One name per knob (TRL's) in a run config, mapped to the public CoMLRL names at one edge
(:mod:`pettingllms.config.key_names`): the preference sections' schemas are renamed from the public classes and
build them back; a key of an earlier version is refused in a config or override (one line, exit status 2) and
renamed, with a notice, in a run folder's saved config (``--resume``, ``eval --checkpoint``)."""

from __future__ import annotations

import dataclasses
import logging
import shutil

import pytest
import torch
import yaml

from comlrl.trainers.preference import MADPOIterConfig, MARLHFIterConfig
from pettingllms.cli import main
from pettingllms.config import ConfigError, find_config, key_names, load_config
from pettingllms.config.key_names import (
    EARLIER_KEYS,
    PUBLIC_NAMES,
    UNREAD_FIELDS,
    migrate_saved_config,
    public_arguments,
    section_key,
)
from pettingllms.scripts.guard import EXIT_USAGE

torch.set_num_threads(1)

CLASSES = {"madpo": MADPOIterConfig, "marlhf": MARLHFIterConfig, "madpo_from_trees": MADPOIterConfig}


def test_the_table_maps_trl_names_to_public_fields_both_ways():
    assert PUBLIC_NAMES["beta"] == {"madpo": "dpo_beta", "madpo_from_trees": "dpo_beta", "marlhf": "reference_kl_coef"}
    for key, stages in PUBLIC_NAMES.items():
        for stage, field in stages.items():
            assert field in {f.name for f in dataclasses.fields(CLASSES[stage])}, (stage, field)
            assert section_key(stage, field) == key
            assert public_arguments(stage, {key: 1}) == {field: 1}
            assert EARLIER_KEYS[stage][field] == key
    for stage, fields in UNREAD_FIELDS.items():
        assert all(section_key(stage, field) is None for field in fields)
    assert EARLIER_KEYS["sft"] == {"epochs": "num_train_epochs", "batch_size": "per_device_train_batch_size"}


@pytest.mark.parametrize("stage", sorted(CLASSES))
def test_a_preference_section_uses_trl_names_and_leaves_out_what_its_trainer_never_reads(stage):
    section = load_config("plan_path/L1")[stage]
    for old in ("agent_learning_rate", "train_batch_size", "eval_batch_size", "max_new_tokens", "num_iterations",
                "dpo_beta", "reference_kl_coef"):
        assert old not in section
    for new in ("learning_rate", "per_device_train_batch_size", "per_device_eval_batch_size",
                "max_completion_length", "beta"):
        assert new in section
    assert ("reference_kl_enabled" in section) == (stage == "marlhf")
    # madpo_from_trees trains once on the trees' pairs: no rounds, no comparator
    rounds = ("num_rounds", "comparator_policy", "comparator_history_k", "policy_checkpoint_dir")
    assert all((key in section) == (stage != "madpo_from_trees") for key in rounds), stage


def test_a_round_loop_key_in_madpo_from_trees_is_refused_naming_why(tmp_path):
    from pettingllms.config.loader import ConfigError

    with pytest.raises(ConfigError, match=r"madpo_from_trees\.num_rounds is no key of this section: it would have "
                                          r"no effect, the stage trains once"):
        load_config("plan_path/L1", ["madpo_from_trees.num_rounds=2"])
    with pytest.raises(ConfigError, match=r"madpo_from_trees\.comparator_policy was removed: it had no effect"):
        load_config("plan_path/L1", ["madpo_from_trees.comparator_policy=history"])
    with pytest.raises(ConfigError, match=r"madpo_from_trees\.num_iterations was removed: it had no effect, the "
                                          r"stage trains once on the pairs of the at_grpo trees"):
        load_config("plan_path/L1", ["madpo_from_trees.num_iterations=2"])


def test_beta_is_the_dpo_temperature_in_madpo_and_the_kl_weight_in_marlhf():
    from pettingllms.stages.preference import preference_config

    config = load_config("plan_path/L1", ["madpo.beta=0.3", "marlhf.beta=0.05", "madpo.learning_rate=2e-4",
                                          "madpo.num_rounds=3", "madpo.per_device_train_batch_size=5",
                                          "madpo.max_completion_length=9"])
    madpo = preference_config("madpo", config, "out", num_agents=2)
    assert (madpo.dpo_beta, madpo.agent_learning_rate, madpo.num_iterations) == (0.3, 2e-4, 3)
    assert (madpo.train_batch_size, madpo.max_new_tokens) == (5, 9)
    marlhf = preference_config("marlhf", config, "out", num_agents=2)
    assert (marlhf.reference_kl_coef, marlhf.dpo_beta) == (0.05, MARLHFIterConfig().dpo_beta)


@pytest.mark.parametrize(("override", "message"), [
    ("madpo.agent_learning_rate=1e-4", "madpo.agent_learning_rate was renamed: use madpo.learning_rate"),
    ("madpo.dpo_beta=0.2", "madpo.dpo_beta was renamed: use madpo.beta"),
    ("marlhf.reference_kl_coef=0.2", "marlhf.reference_kl_coef was renamed: use marlhf.beta"),
    ("marlhf.num_iterations=3", "marlhf.num_iterations was renamed: use marlhf.num_rounds"),
    ("madpo_from_trees.train_batch_size=3", "madpo_from_trees.train_batch_size was renamed: use "
                                            "madpo_from_trees.per_device_train_batch_size"),
    ("sft.epochs=2", "sft.epochs was renamed: use sft.num_train_epochs"),
    ("sft.batch_size=2", "sft.batch_size was renamed: use sft.per_device_train_batch_size"),
    ("madpo.reference_kl_coef=0.2", "madpo.reference_kl_coef was removed: it had no effect"),
    ("marlhf.dpo_beta=0.2", "marlhf.dpo_beta was removed: it had no effect"),
])
def test_an_earlier_key_in_an_override_names_the_new_one(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config("plan_path/L1", [override])


def test_an_earlier_key_in_a_user_file_exits_2_with_one_line(tmp_path, capsys):
    user = tmp_path / "mine.yaml"
    user.write_text(f"base: {find_config('plan_path/L1')}\nmadpo:\n  agent_learning_rate: 1.0e-4\n", encoding="utf-8")
    assert main(["train", str(user), f"run.output_dir={tmp_path / 'run'}"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("pettingllms: error: madpo.agent_learning_rate was renamed: use madpo.learning_rate (")
    assert not (tmp_path / "run").exists()
    assert main(["train", "plan_path/L1", "sft.epochs=2", f"run.output_dir={tmp_path / 'run'}"]) == EXIT_USAGE
    assert "sft.epochs was renamed: use sft.num_train_epochs" in capsys.readouterr().err


def _as_earlier_version(saved: dict) -> dict:
    """A saved config as an earlier version wrote it: the earlier keys, and the public fields no stage reads."""
    out = {}
    for section, values in saved.items():
        back = {new: old for old, new in EARLIER_KEYS.get(section, {}).items()}
        out[section] = {back.get(k, k): v for k, v in values.items()} if isinstance(values, dict) else values
        for field in UNREAD_FIELDS.get(section, {}):
            out[section][field] = dataclasses.asdict(CLASSES[section]())[field]
    out["madpo_from_trees"]["num_rounds"] = 1  # the key the round loop's rounds had there until 3fece9c
    return out


def test_an_earlier_saved_run_is_migrated_for_resume_and_eval(tiny_model_path, tmp_path, capsys, caplog, monkeypatch):
    run_dir = tmp_path / "run"
    quick = [f"run.output_dir={run_dir}", f"model.name={tiny_model_path}", "pipeline=[sft, eval]", "env.max_turns=1",
             "rollout.max_completion_length=8", "sft.num_problems=4", "sft.num_train_epochs=1",
             "eval.num_instances=2", "--no-progress"]
    assert main(["train", "plan_path/L1", *quick]) == 0
    saved_path = run_dir / "config.yaml"
    current = yaml.safe_load(saved_path.read_text())
    earlier = _as_earlier_version(current)
    assert earlier["sft"]["epochs"] == 1 and "agent_learning_rate" in earlier["madpo"]
    saved_path.write_text(yaml.safe_dump(earlier, sort_keys=False))
    shutil.copy(saved_path, tmp_path / "copy.yaml")
    capsys.readouterr()

    monkeypatch.setattr(key_names, "_notified", set())
    with caplog.at_level(logging.WARNING, logger="pettingllms.config.key_names"):
        assert main(["train", "plan_path/L1", *quick, "--resume"]) == 0
        assert main(["eval", "--checkpoint", str(run_dir), "--no-progress"]) == 0
        assert load_config(saved_path) == {**load_config("plan_path/L1", quick[:-1]), "run": load_config(saved_path)["run"]}
    notices = [r.getMessage() for r in caplog.records if "saved by an earlier version" in r.getMessage()]
    assert len(notices) == 1 and notices[0].startswith(f"{saved_path} was saved by an earlier version")
    assert "sft.epochs -> sft.num_train_epochs" in notices[0] and "madpo.reference_kl_coef (dropped)" in notices[0]
    assert "madpo_from_trees.num_rounds (dropped)" in notices[0]
    # the same file outside a run folder is a user's config: refused, naming the new key
    with pytest.raises(ConfigError, match="was renamed: use"):
        load_config(tmp_path / "copy.yaml")


def test_a_config_saved_now_is_read_back_unchanged_and_without_a_notice(caplog, monkeypatch):
    """Only keys of earlier versions move: e.g. madpo's `beta` stays although marlhf's `beta` is a field madpo
    never reads."""
    monkeypatch.setattr(key_names, "_notified", set())
    config = load_config("plan_path/L1")
    with caplog.at_level(logging.WARNING, logger="pettingllms.config.key_names"):
        assert migrate_saved_config(config, "now.yaml") == config
    assert not caplog.records
