"""Pipelines: the stage plan, the config mapping into the trainers, the environment as comlrl's oracle, a
tiny run's folder layout, exact resume after an interruption, and a MADPO stage over Plan-Path.

The runs use the test-tiny model on Plan-Path 4x4 with one turn. The untrained model never writes a
parseable answer, so the tiny warm start (12 problems, 6 epochs) is what gives the MADPO stage candidates
whose rewards differ (and so preference pairs).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from pettingllms.config import ConfigError, load_config
from pettingllms.pipeline import (
    Pipeline,
    at_grpo_config,
    check_pipeline,
    config_differences,
    plan_stages,
    success_summary,
)
from pettingllms.plots import select_series
from pettingllms.stages.at_grpo import CompletionCounter, TrainingLimits, at_grpo_settings
from pettingllms.stages.preference import EnvOracle, preference_config, preference_items

TINY = [
    "env.max_turns=1",
    "rollout.num_generations=2",
    "rollout.max_completion_length=16",
    "rollout.transcripts_rate=0.0",
    "sft.num_problems=12",
    "sft.num_train_epochs=6",
    "sft.learning_rate=1e-2",
    "at_grpo.max_steps=2",
    "at_grpo.problems_per_step=2",
    "at_grpo.save_steps=1",
    "at_grpo.learning_rate=1e-3",
    "eval.num_instances=3",
    "run.progress=false",
]


def tiny_config(model_path, run_dir, *extra, level="plan_path/L1"):
    return load_config(level, [f"model.name={model_path}", f"run.output_dir={run_dir}", *TINY, *extra])


def run(config):
    out = io.StringIO()
    result = Pipeline(config, out=out).run()
    return result, out.getvalue()


# ---- the plan and the config mapping (pure) -----------------------------------------------------------

def test_plan_inserts_the_before_eval_ahead_of_the_first_rl_stage_and_numbers_repeats():
    config = load_config("plan_path/L1", ["pipeline=[sft, at_grpo, eval, madpo, eval]"])
    assert plan_stages(config) == [
        ("sft", "sft"), ("eval", "eval_before"), ("at_grpo", "at_grpo"), ("eval", "eval"),
        ("madpo", "madpo"), ("eval", "eval_2"),
    ]
    # an eval already in place, the switch off, or no RL stage: nothing inserted
    assert plan_stages(load_config("plan_path/L1", ["pipeline=[sft, eval, at_grpo, eval]"]))[1] == ("eval", "eval")
    assert ("eval", "eval_before") not in plan_stages(load_config("plan_path/L1", ["eval.before_training=false"]))
    assert plan_stages(load_config("plan_path/L1", ["pipeline=[sft, eval]"])) == [("sft", "sft"), ("eval", "eval")]


def test_success_summary_takes_the_evals_around_the_rl_stages():
    plan = [("sft", "sft"), ("eval", "eval_before"), ("at_grpo", "at_grpo"), ("eval", "eval"), ("eval", "eval_2")]
    stages = {"eval_before": {"success_rate": 0.25}, "eval": {"success_rate": 0.5}, "eval_2": {"success_rate": 0.75}}
    assert success_summary(plan, stages) == (0.25, 0.75)
    assert success_summary(plan, {"eval_before": {"success_rate": 0.25}}) == (0.25, None)  # interrupted before the end
    assert success_summary([("sft", "sft"), ("eval", "eval")], {"eval": {"success_rate": 0.4}}) == (0.4, 0.4)
    assert success_summary([("at_grpo", "at_grpo")], {}) == (None, None)


def test_config_differences_names_dotted_keys():
    old = {"run": {"seed": 0, "resume": False}, "env": {"rows": 4, "turn_order": ["tool", "plan"]}}
    new = {"run": {"seed": 1, "resume": True}, "env": {"rows": 4, "turn_order": ("tool", "plan")}, "x": {"y": 1}}
    assert config_differences(old, new, ignore=["run.resume"]) == ["run.seed", "x.y"]


def test_at_grpo_config_takes_policy_rollout_and_run_sections():
    config = load_config(
        "plan_path/L2",
        ["rollout.num_generations=3", "rollout.greedy_branch=false", "rollout.transcripts_rate=0.5",
         "run.seed=7", "at_grpo.loss_type=grpo", "at_grpo.train_seed_range=[10, 20]"],
    )
    settings = at_grpo_settings("at_grpo", config, "/tmp/x/at_grpo", progress=False)
    args, rollout = settings.trainer, settings.rollout
    # The config holds the section's own fields; policy, rollout and env settings stay in their own objects.
    assert not {"policy_level", "agent_policies", "num_generations", "turn_order", "max_turns"} & set(vars(args))
    assert (rollout.num_generations, rollout.greedy_branch, rollout.transcripts_rate) == (3, False, 0.5)
    assert (args.seed, args.loss_type, args.train_seed_range) == (7, "grpo", [10, 20])
    assert (args.output_dir, args.disable_tqdm, args.sampling_mode) == ("/tmp/x/at_grpo", True, "tree")
    assert args == at_grpo_config("at_grpo", config, "/tmp/x/at_grpo", progress=False)
    grpo = at_grpo_config("grpo", load_config("plan_path/L0"), "out")
    assert grpo.sampling_mode == "independent"


@pytest.mark.parametrize(
    ("level", "overrides", "pattern"),
    [
        ("plan_path/L1", ["at_grpo.loss_type=ppo"], r"section `at_grpo`: `loss_type` must be one of"),
        ("plan_path/L1", ["rollout.temperature=0"], r"section `rollout`: `temperature` must be .* > 0"),
        ("plan_path/L1", ["pipeline=[grpo]"], r"`grpo` .* needs `policy.level` L0, got 'L1'"),
        ("plan_path/L1", ["pipeline=[madpo]", "madpo.beta=0"], r"section `madpo`: .*dpo_beta"),
        ("plan_path/L1", ["eval.num_samples=0"], r"`eval.num_samples` must be an integer >= 1"),
        ("plan_path/L1", ["at_grpo.train_seed_range=[0, 2000000]"], r"`at_grpo.train_seed_range` / `eval.seed_start`"),
        ("plan_path/L1", ["at_grpo.max_completions=-1"], r"section `at_grpo`: `max_completions` must be an integer >= 0"),
        ("plan_path/L1", ["at_grpo.max_minutes=-2"], r"section `at_grpo`: `max_minutes` must be >= 0"),
        ("plan_path/L1", ["at_grpo.eval_every_completions=10", "at_grpo.logging_steps=2"], r"need `at_grpo.logging_steps` 1"),
        ("plan_path/L1", ["pipeline=[at_grpo]", "at_grpo.eval_every_completions=10", "eval.seed_start=5"],
         r"`at_grpo.eval_every_completions`: `at_grpo.train_seed_range` / `eval.seed_start`: at_grpo seeds and eval seeds must be disjoint"),
        ("plan_path/L1", ["sft.late_turn_fraction=1.5"], r"section `sft`: `late_turn_fraction` must be a finite number in \[0, 1\]"),
        ("plan_path/L3", ["sft.workflows=[[single], [tool, plan]]"], r"`sft.workflows` names role\(s\) \['single'\]"),
        ("plan_path/L1", ["sft.workflows=[[tool, critic]]"], r"`sft.workflows` \['tool', 'critic'\]"),
    ],
)
def test_check_pipeline_errors_name_the_key(level, overrides, pattern):
    with pytest.raises(ConfigError, match=pattern):
        check_pipeline(load_config(level, overrides))


def test_check_pipeline_builds_each_stage_s_settings_once_for_the_run():
    config = load_config("plan_path/L1", ["run.output_dir=/tmp/x", "at_grpo.max_completions=300"])
    settings = check_pipeline(config)
    assert list(settings) == ["sft", "eval_before", "at_grpo", "eval"]
    assert settings["at_grpo"].trainer.output_dir == "/tmp/x/at_grpo"  # the stage folder, as it runs
    assert settings["at_grpo"].limits == TrainingLimits(max_completions=300)
    assert settings["eval"] == settings["eval_before"] and settings["sft"].num_problems == 200
    # the stage keys are the stage's, not ATGRPOConfig fields
    assert not hasattr(at_grpo_config("at_grpo", config, "out"), "max_completions")


def test_completion_counter_stops_at_the_budget_and_spaces_evaluations():
    step = {"num_samples": 40.0, "dropped_samples": 2.0}
    counter = CompletionCounter(TrainingLimits(max_completions=120, eval_every_completions=50))
    assert [counter.count(step) for _ in range(2)] == [False, True]  # 42, then 84 >= 50
    assert counter.next_eval == 100 and not counter.budget_spent
    assert counter.count(step) is False and counter.budget_spent  # 126: the budget, no evaluation
    # a resumed run replays its logged steps (not its eval records) and lands where the first one was
    replayed = CompletionCounter(TrainingLimits(max_completions=120, eval_every_completions=50),
                                 [{"step": 1, **step}, {"step": 2, **step}, {"step": 2, "eval/success_rate": 0.5}])
    assert (replayed.completions, replayed.next_eval) == (84, 100)
    unlimited = CompletionCounter(TrainingLimits())
    assert not any(unlimited.count(step) for _ in range(5)) and not unlimited.budget_spent


def test_preference_config_maps_rollout_and_run():
    config = load_config("plan_path/L1", ["rollout.max_completion_length=12", "run.seed=3", "madpo.beta=0.2"])
    args = preference_config("madpo", config, "out/madpo", num_agents=2)
    assert (args.max_new_tokens, args.temperature, args.seed, args.dpo_beta) == (12, 1.0, 3, 0.2)
    assert (args.num_agents, args.output_dir, args.num_iterations) == (2, "out/madpo", 2)
    assert preference_items({"seed_start": 5, "num_problems": 3}) == [{"seed": 5}, {"seed": 6}, {"seed": 7}]
    marlhf = preference_config("marlhf", load_config("plan_path/L1", ["model.name=tiny"]), "o", num_agents=2)
    assert marlhf.reward_model_name == "tiny"


def test_select_series_labels_agents_and_orders_steps():
    records = [
        {"step": 2, "success_rate": 0.5, "agent/tool/reward_mean": 0.2, "agent/tool/turn_0/reward_mean": 9.0},
        {"step": 1, "success_rate": 0.0, "agent/tool/reward_mean": 0.1, "agent/plan/reward_mean": -1.0},
    ]
    reward = select_series(records, (r"^agent/([^/]+)/reward_mean$",))
    assert reward == {"tool": ([1.0, 2.0], [0.1, 0.2]), "plan": ([1.0], [-1.0])}
    assert select_series(records, (r"^success_rate$",)) == {"team (training rollouts)": ([1.0, 2.0], [0.0, 0.5])}


# ---- the environment as comlrl's oracle -----------------------------------------------------------------

def test_env_oracle_prompts_come_from_the_reset_state_and_reward_executes_the_joint_action():
    config = load_config("plan_path/L1", ["env.max_turns=1"])
    from pettingllms.config import env_arguments

    name, fields, options = env_arguments(config)
    oracle = EnvOracle(name, fields, options)
    try:
        item = {"seed": 11}
        tool_prompt, plan_prompt = (f(item) for f in oracle.formatters)
        assert tool_prompt != plan_prompt
        assert "tool agent" in tool_prompt[0]["content"] and "plan agent" in plan_prompt[0]["content"]
        assert oracle.formatters[1](item) == plan_prompt  # deterministic
        assert oracle.formatters[1]({"seed": 12}) != plan_prompt  # another instance, another prompt

        env = oracle.env
        import asyncio

        asyncio.run(env.reset(11))
        path = env.oracle_answer(env.state)  # a shortest path
        tool, plan = oracle.agents
        solved = [[tool.format_response(path)], [plan.format_response(path)]]
        assert oracle.reward(*solved, batch_items=[item]) == 1.0
        one_step = [["nonsense"], [plan.format_response(path[:1])]]
        assert oracle.reward(*one_step, batch_items=[item]) == pytest.approx(0.5 * (1 / len(path)))
        assert oracle.reward(["nonsense"], ["#### nowhere"], batch_items=[item]) == 0.0
        with pytest.raises(ValueError, match="batch_items"):
            oracle.reward(*solved)
        with pytest.raises(ValueError, match=r"an item must be \{'seed'"):
            oracle.formatters[0]({"prompt": "x"})
    finally:
        oracle.close()


# ---- tiny runs ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_run(tiny_model_path, tmp_path_factory):
    """sft -> eval_before -> at_grpo (2 steps, a checkpoint each) -> eval, uninterrupted."""
    run_dir = tmp_path_factory.mktemp("pipeline") / "run"
    result, printed = run(tiny_config(tiny_model_path, run_dir))
    return run_dir, result, printed


def test_a_run_folder_holds_config_metrics_checkpoints_policies_and_plots(tiny_run):
    run_dir, result, printed = tiny_run
    assert load_config(run_dir / "config.yaml")["at_grpo"]["max_steps"] == 2
    state = json.loads((run_dir / "pipeline_state.json").read_text())
    assert [e["folder"] for e in state["completed"]] == ["sft", "eval_before", "at_grpo", "eval"]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert records[1]["eval_before/success_rate"] == result.success_before
    steps = [json.loads(line)["step"] for line in (run_dir / "at_grpo" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    assert sorted(p.name for p in (run_dir / "at_grpo").glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    for folder in ("policies", "sft/policies", "at_grpo/policies"):
        layout = json.loads((run_dir / folder / "policy_layout.json").read_text())
        assert layout["agent_to_policy"] == {"tool": "shared", "plan": "shared"}
        assert (run_dir / folder / "shared" / "model.safetensors").is_file()
    report = json.loads((run_dir / "eval" / "eval.json").read_text())
    assert report["seeds"] == [1000000, 1000003] and len(report["per_problem"]) == 3
    assert report["metrics"]["success_rate"] == result.success_after
    names = sorted(p.name for p in (run_dir / "plots").iterdir())
    assert {"at_grpo_success.png", "at_grpo_reward.png", "sft_loss.png", "held_out_success.png"} <= set(names)
    assert "eval_success.png" not in names  # one point per eval stage: summarised in held_out_success.png
    assert all((run_dir / "plots" / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in names)
    assert f"success before {result.success_before:.3f} -> after {result.success_after:.3f}" in printed
    # a fresh run into a folder that holds a run is refused unless asked to overwrite
    with pytest.raises(ConfigError, match=r"already holds a pipeline run; continue it with --resume"):
        Pipeline(load_config(run_dir / "config.yaml"))._prepare()


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "shared" / "model.safetensors"))


def _without_timings(path: Path) -> list[dict]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


def test_an_interrupted_pipeline_resumes_and_ends_equal(tiny_run, tiny_model_path, tmp_path, monkeypatch):
    from pettingllms.trainer.at_grpo import ATGRPOTrainer

    reference_dir, reference, _ = tiny_run
    run_dir = tmp_path / "run"
    step = ATGRPOTrainer.step

    def interrupted_step(self):
        metrics = step(self)
        if self.global_step == 1:  # checkpoint-1 is on disk
            raise KeyboardInterrupt
        return metrics

    monkeypatch.setattr(ATGRPOTrainer, "step", interrupted_step)
    with pytest.raises(KeyboardInterrupt):
        run(tiny_config(tiny_model_path, run_dir))
    monkeypatch.setattr(ATGRPOTrainer, "step", step)
    state = json.loads((run_dir / "pipeline_state.json").read_text())
    assert [e["folder"] for e in state["completed"]] == ["sft", "eval_before"]

    with pytest.raises(ConfigError, match=r"differs from the one .* at \['at_grpo.learning_rate'\]"):
        run(tiny_config(tiny_model_path, run_dir, "run.resume=true", "at_grpo.learning_rate=0.5"))
    result, printed = run(tiny_config(tiny_model_path, run_dir, "run.resume=true"))
    assert "[1/4] sft: done (resumed run)" in printed
    assert result.stages == reference.stages
    assert (result.success_before, result.success_after) == (reference.success_before, reference.success_after)
    for folder in ("policies", "at_grpo/policies"):
        mine, theirs = _weights(run_dir / folder), _weights(reference_dir / folder)
        assert mine.keys() == theirs.keys()
        assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert _without_timings(run_dir / "at_grpo" / "metrics.jsonl") == _without_timings(
        reference_dir / "at_grpo" / "metrics.jsonl"
    )


def test_completion_budget_held_out_curve_and_greedy_success(tiny_run, tmp_path):
    warm = tiny_run[0] / "sft" / "policies" / "shared"
    curve_dir = tmp_path / "curve"
    result, _ = run(tiny_config(
        warm, curve_dir, "pipeline=[at_grpo, eval]", "at_grpo.save_steps=0", "at_grpo.eval_every_completions=1",
        "eval.greedy=true",
    ))
    records = [json.loads(line) for line in (curve_dir / "at_grpo" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "num_samples" in r]
    points = [r for r in records if "eval/completions" in r]
    assert [r["step"] for r in steps] == [1, 2] and [p["step"] for p in points] == [1, 2]
    totals = [sum(s["num_samples"] + s["dropped_samples"] for s in steps[: i + 1]) for i in range(2)]
    assert [p["eval/completions"] for p in points] == totals
    assert {"eval/success_rate", "eval/greedy_success_rate"} <= set(points[0])
    report = json.loads((curve_dir / "eval" / "eval.json").read_text())
    assert report["metrics"]["greedy_success_rate"] == result.stages["eval"]["greedy_success_rate"]
    assert len(report["greedy"]["per_problem"]) == 3
    assert "greedy_success_rate" not in tiny_run[1].stages["eval"]  # off by default
    # the budget ends the stage after the step that reaches it, however many steps max_steps allows
    budget_dir = tmp_path / "budget"
    result, _ = run(tiny_config(warm, budget_dir, "pipeline=[at_grpo]", "at_grpo.max_steps=5",
                                "at_grpo.max_completions=1", "at_grpo.save_steps=0"))
    assert result.stages["at_grpo"]["steps"] == 1


def test_madpo_stage_trains_through_comlrl_with_the_environment_as_oracle(tiny_run, tmp_path):
    from comlrl.trainers.preference import read_round

    warm = tiny_run[0] / "sft" / "policies" / "shared"  # the warm-started model: parseable answers
    run_dir = tmp_path / "madpo_run"
    config = tiny_config(
        warm, run_dir, "pipeline=[madpo]", "madpo.num_problems=8", "madpo.num_rounds=1",
        "madpo.preference_num_candidates=4", "madpo.per_device_train_batch_size=2",
    )
    before = _weights(warm.parent)
    result, _ = run(config)
    assert result.stages["madpo"]["pairs_built"] > 0
    pairs = read_round(run_dir / "madpo" / "preference_replay" / "iteration_0001.json").pairs
    assert len(pairs) == result.stages["madpo"]["pairs_built"]
    from pettingllms.config import env_arguments

    oracle = EnvOracle(*env_arguments(config))
    try:
        # the user message of each agent's prompt, per training instance
        users = {
            item["seed"]: [f(item)[-1]["content"] for f in oracle.formatters] for item in preference_items(config["madpo"])
        }
        for pair in pairs:
            assert len(pair.prompts) == 2  # one prompt per agent
            assert "tool agent" in pair.prompts[0] and "plan agent" in pair.prompts[1]
            (seed,) = [s for s, (tool, plan) in users.items() if tool in pair.prompts[0] and plan in pair.prompts[1]]
            assert pair.winner_reward > pair.loser_reward
            # the recorded rewards are the environment's rewards of the joint actions
            assert oracle.joint_reward({"seed": seed}, pair.winner_completions) == pytest.approx(pair.winner_reward)
            assert oracle.joint_reward({"seed": seed}, pair.loser_completions) == pytest.approx(pair.loser_reward)
    finally:
        oracle.close()
    after = _weights(run_dir / "policies")
    assert any(not torch.equal(before[k], after[k]) for k in before)  # the policy was updated
