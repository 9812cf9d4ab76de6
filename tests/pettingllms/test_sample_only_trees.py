"""MADPO from trees alone, and repeated ``at_grpo`` stages at an equal budget.

Checked: ``at_grpo.update_policy=false`` makes an ``at_grpo`` stage sample its trees and write their pairs
without changing a parameter, so the ``madpo_from_trees`` stage after it alone trains; the key is checked
(a bool, an ``at_grpo`` stage followed by ``madpo_from_trees``, never ``grpo``) with messages naming it; the
``n``-th repeat of a stage gets what is left of ``n * max_completions``, so ``n`` repeats sample the
whole budget within one step however the steps fall; a ``madpo_from_trees`` stage in a historical replay
mode without a sample size draws as many pairs as every step of the stage before holds, not one step's.
"""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from safetensors.torch import load_file

from pettingllms.config import ConfigError, load_config
from pettingllms.pipeline import Pipeline, check_pipeline
from pettingllms.stages.at_grpo import earlier_repeat_completions, repeat_budget, repeat_number
from pettingllms.stages.madpo_from_trees import tree_replay_sample_size

TINY = [
    "env.max_turns=1",
    "rollout.num_generations=2",
    "rollout.max_completion_length=6",
    "rollout.transcripts_rate=0.0",
    "at_grpo.problems_per_step=2",
    "at_grpo.save_steps=0",
    "eval.num_instances=2",
    "eval.before_training=false",
    "run.progress=false",
]


# ---- the repeat rule (pure) ----------------------------------------------------------------------------

def test_repeat_numbers_follow_the_pipeline_s_folder_names():
    assert [repeat_number("at_grpo", f) for f in ("at_grpo", "at_grpo_2", "at_grpo_10")] == [1, 2, 10]
    for folder in ("at_grpo_1", "grpo_2", "at_grpo_x", "madpo_from_trees"):
        with pytest.raises(ValueError, match="is not a repeat of stage 'at_grpo'"):
            repeat_number("at_grpo", folder)


@given(st.integers(96, 400), st.integers(1, 6), st.lists(st.integers(1, 96), min_size=200, max_size=200))
def test_repeats_sample_the_whole_budget_within_one_step(share, repeats, step_sizes):
    # Each repeat runs steps of the given sizes until its budget is reached (a stage checks after a step); a
    # share is at least one step.
    sizes = iter(step_sizes * 20)
    total = 0
    for repeat in range(1, repeats + 1):
        budget, done = repeat_budget(share, repeat, total), 0
        assert budget >= 1
        while done < budget:
            done += next(sizes)
        total += done
    assert repeats * share <= total < repeats * share + max(step_sizes)


def test_repeat_budget_without_a_budget_and_bad_inputs():
    assert repeat_budget(0, 3, 500) == 0  # no budget: max_steps alone, as before
    assert repeat_budget(100, 1, 0) == 100 and repeat_budget(100, 2, 130) == 70 and repeat_budget(100, 2, 260) == 1
    with pytest.raises(ValueError, match="`repeat` >= 1"):
        repeat_budget(100, 0, 0)


def test_earlier_repeats_count_their_logged_steps_not_their_eval_points(tmp_path):
    for folder, samples in (("at_grpo", [40, 40]), ("at_grpo_2", [33])):
        (tmp_path / folder).mkdir()
        records = [{"step": i + 1, "num_samples": float(n), "dropped_samples": 1.0} for i, n in enumerate(samples)]
        records.append({"step": len(samples), "eval/success_rate": 0.5, "eval/completions": 999.0})
        (tmp_path / folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert earlier_repeat_completions(tmp_path, "at_grpo", 1) == 0
    assert earlier_repeat_completions(tmp_path, "at_grpo", 3) == 41 + 41 + 34
    with pytest.raises(RuntimeError, match="metrics of repeat 3"):
        earlier_repeat_completions(tmp_path, "at_grpo", 4)


def test_the_tree_replay_draws_every_step_s_pairs_unless_told_otherwise():
    assert tree_replay_sample_size("all_history", None, [14, 18, 0, 28]) == 60  # not the newest round's 28
    assert tree_replay_sample_size("lambda_decay", None, [3]) == 3
    assert tree_replay_sample_size("all_history", 7, [14, 18]) == 7  # the section's own
    assert tree_replay_sample_size("current", None, [14, 18]) is None  # the whole newest round
    assert tree_replay_sample_size("nearest_k", None, [0, 0]) == 1  # nothing stored: the buffer draws nothing


# ---- update_policy is checked before the run -------------------------------------------------------------

@pytest.mark.parametrize(
    ("overrides", "pattern"),
    [
        (["pipeline=[at_grpo, eval]"], r"`at_grpo.update_policy` is false, so stage at_grpo only samples .* but eval follows"),
        (["pipeline=[at_grpo, madpo_from_trees, at_grpo]"],
         r"`at_grpo.update_policy` is false, so stage at_grpo_2 only samples .* but nothing follows"),
    ],
)
def test_a_sample_only_at_grpo_stage_needs_madpo_from_trees_after_it(overrides, pattern):
    with pytest.raises(ConfigError, match=pattern):
        check_pipeline(load_config("plan_path/L1", ["model.name=test-tiny", "at_grpo.update_policy=false", *overrides]))


def test_update_policy_must_be_a_bool_and_grpo_keeps_it_true():
    with pytest.raises(ConfigError, match=r"`at_grpo.update_policy` must be bool like its default True, got str 'sometimes'"):
        check_pipeline(load_config("plan_path/L1", ["model.name=test-tiny", "at_grpo.update_policy=sometimes"]))
    with pytest.raises(ConfigError, match=r"`grpo.update_policy` is false, but grpo's independent trajectories"):
        check_pipeline(load_config("plan_path/L0", ["model.name=test-tiny", "grpo.update_policy=false",
                                                    "pipeline=[grpo, eval]"]))
    settings = check_pipeline(load_config("plan_path/L1", [
        "model.name=test-tiny", "at_grpo.update_policy=false", "pipeline=[at_grpo, madpo_from_trees, eval]"]))
    assert settings["at_grpo"].update_policy is False
    assert not hasattr(settings["at_grpo"].trainer, "update_policy")  # a stage key, not an ATGRPOConfig field
    assert check_pipeline(load_config("plan_path/L1", ["model.name=test-tiny"]))["at_grpo"].update_policy is True


# ---- a run ---------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_sample_only_trees_leave_the_policy_alone_and_madpo_trains_it(tiny_model_path, tmp_path, monkeypatch):
    from pettingllms.trainer.at_grpo import ATGRPOTrainer

    original = ATGRPOTrainer.generate_and_score

    def bonus(self, problem_ids, step):  # an untrained model ties every group: give the candidates an order
        batch = original(self, problem_ids, step)
        for s in batch.samples:
            s.group_reward += 0.5 * s.candidate
        return batch

    monkeypatch.setattr(ATGRPOTrainer, "generate_and_score", bonus)
    run = tmp_path / "run"
    config = load_config("plan_path/L1", [
        f"model.name={tiny_model_path}", f"run.output_dir={run}", *TINY, "at_grpo.update_policy=false",
        "at_grpo.max_steps=3", "at_grpo.max_completions=12", "at_grpo.learning_rate=1e-2",
        "madpo_from_trees.learning_rate=1e-2", "pipeline=[at_grpo, madpo_from_trees, at_grpo, madpo_from_trees]",
    ])
    result = Pipeline(config, out=None, plots=False).run()
    initial = load_file(f"{tiny_model_path}/model.safetensors")
    sampled = load_file(run / "at_grpo" / "policies" / "shared" / "model.safetensors")
    trained = load_file(run / "madpo_from_trees" / "policies" / "shared" / "model.safetensors")
    assert all(torch.equal(initial[k], sampled[k]) for k in initial)  # sampling the trees changed nothing
    assert any(not torch.equal(sampled[k], trained[k]) for k in sampled)  # the preference stage trained
    records = [json.loads(line) for line in (run / "at_grpo" / "metrics.jsonl").read_text().splitlines()]
    assert records and not any(k.endswith(("/loss", "/optimizer_steps")) for r in records for k in r)
    # K=2, 2 problems, 2 agents, one turn: 8 completions a step; a share of 12: the first repeat takes 2 steps
    # (16), the second what is left of 24, 8: one step
    assert (result.stages["at_grpo"]["steps"], result.stages["at_grpo_2"]["steps"]) == (2, 1)
    assert sorted(p.name for p in (run / "at_grpo" / "tree_pairs").glob("*.json")) == [
        "iteration_0001.json", "iteration_0002.json"]
    stored = sum(json.loads(p.read_text())["num_pairs"] for p in (run / "at_grpo" / "tree_pairs").glob("*.json"))
    first = result.stages["madpo_from_trees"]
    assert first["pairs"] == first["pairs_stored"] == stored > 0  # both steps' worth, all_history, no sample size
    assert result.stages["madpo_from_trees_2"]["pairs"] > 0 and result.stages["madpo_from_trees_2"]["updates"] > 0


def test_a_hand_built_config_with_a_non_bool_update_policy_is_refused_by_the_stage():
    from pettingllms.stages.at_grpo import at_grpo_settings

    config = load_config("plan_path/L1", ["model.name=test-tiny"])
    config["at_grpo"]["update_policy"] = "no"
    with pytest.raises(ConfigError, match=r"`at_grpo.update_policy` must be true or false, got 'no'"):
        at_grpo_settings("at_grpo", config, "out", progress=False)
