"""MADPOTrainer on the test-tiny model: updates, early return, non-finite skips, metrics, sampling,
save_model, evaluation and the constructor's checks."""

from __future__ import annotations

import logging
import sys

import pytest
import torch

from comlrl.seeding import derive_seed
from comlrl.trainers.preference import MADPOConfig, MADPOTrainer
from tests.helpers.trainer_helpers import agent_snapshots as snapshot
from tests.helpers.trainer_helpers import madpo_values, plan_items, records, varied_reward

NAMES = [
    "loss",
    "joint_margin",
    "preference_accuracy",
    "pairs_built",
    "pairs_skipped",
    "nonfinite_losses_skipped",
    "turn_1/reward_mean",
    "turn_1/expected_return",
    "eval/turn_1/reward_mean",
    "eval/turn_1/expected_return",
]


def items(n=4):
    return plan_items(n)


def config(tmp_path, **overrides):
    return MADPOConfig(**madpo_values(tmp_path / "out", **{"num_train_epochs": 1, **overrides}))


def test_train_updates_every_agent_and_logs_the_metrics(tiny_model_path, tmp_path):
    trainer = MADPOTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=varied_reward,
        train_dataset=items(),
        eval_dataset=items(2),
        args=config(tmp_path, eval_interval=2),
    )
    before = snapshot(trainer)
    trainer.train()
    after = snapshot(trainer)
    for agent_before, agent_after in zip(before, after):
        assert all(not torch.equal(b, a) for b, a in zip(agent_before, agent_after))
    assert trainer.pairs_built == len(trainer.rounds.pairs) > 0
    assert trainer.updates_seen == -(-len(trainer.rounds.pairs) // 2)
    assert trainer.env_step == 2 * len(trainer.rounds.pairs)
    logged = set().union(*(r.keys() for r in records(trainer)))
    assert set(NAMES) <= logged
    assert all(trainer.policy.version(n) == trainer.updates_seen for n in trainer.policy.policies)


def test_no_pairs_returns_without_touching_the_policies(tiny_model_path, tmp_path, caplog):
    trainer = MADPOTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=lambda a, b: 1.0,
        train_dataset=items(3),
        args=config(tmp_path),
    )
    before = snapshot(trainer)
    with caplog.at_level(logging.WARNING):
        assert trainer.train() is None
    assert trainer.no_pairs and trainer.updates_seen == 0
    assert "no training item yielded a non-tied pair" in caplog.text
    for agent_before, agent_after in zip(before, snapshot(trainer)):
        assert all(torch.equal(b, a) for b, a in zip(agent_before, agent_after))
    assert all(not opt.state for opt in trainer.optimizers)
    assert trainer.pairs_skipped == 3 * 6  # every one of C(4, 2) comparisons per item tied


class NaNFirst(MADPOTrainer):
    """Margins of the first ``bad`` batches are NaN (as a diverged model's would be)."""

    bad = 2

    def compute_margins(self, batch):
        margins = super().compute_margins(batch)
        self.calls = getattr(self, "calls", 0) + 1
        return margins * float("nan") if self.calls <= self.bad else margins


def test_nonfinite_losses_are_skipped_counted_and_logged(tiny_model_path, tmp_path):
    trainer = NaNFirst(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=varied_reward,
        train_dataset=items(),
        args=config(tmp_path, train_batch_size=1, max_nonfinite_losses_in_a_row=3),
    )
    trainer.train()
    assert trainer.nonfinite_losses_skipped == 2
    assert trainer.updates_seen == len(trainer.rounds.pairs) - 2
    assert max(r.get("nonfinite_losses_skipped", 0) for r in records(trainer)) == 2
    assert all(math_finite(r["loss"]) for r in records(trainer) if "loss" in r)


def math_finite(x):
    return x == x and abs(x) != float("inf")


def test_too_many_nonfinite_losses_in_a_row_stop_the_run(tiny_model_path, tmp_path):
    class AlwaysNaN(NaNFirst):
        bad = 10**9

    trainer = AlwaysNaN(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=varied_reward,
        train_dataset=items(),
        args=config(tmp_path, train_batch_size=1, max_nonfinite_losses_in_a_row=2),
    )
    before = snapshot(trainer)
    with pytest.raises(RuntimeError, match="max_nonfinite_losses_in_a_row"):
        trainer.train()
    for agent_before, agent_after in zip(before, snapshot(trainer)):
        assert all(torch.equal(b, a) for b, a in zip(agent_before, agent_after))


def test_one_generate_call_per_batch_with_derived_seeds_and_overrides(tiny_model_path, tmp_path):
    trainer = MADPOTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=varied_reward,
        train_dataset=items(3),
        args=config(tmp_path, seed=7),
    )
    calls = []
    original = trainer.backend.generate

    def spy(requests, params=None):
        calls.append((list(requests), params))
        return original(requests, params)

    trainer.backend.generate = spy
    trainer.train(max_new_tokens=3, temperature=0.8)
    assert len(calls) == 1  # three items x two agents x four candidates in one call
    requests, params = calls[0]
    assert params.n == 4 and params.max_new_tokens == 3 and params.temperature == 0.8
    assert [(r.policy, r.seed) for r in requests] == [
        (f"agent_{a}", derive_seed(7, "candidates", 0, i, a)) for i in range(3) for a in range(2)
    ]
    lengths = [len(ids) for p in trainer.rounds.pairs for ids in p.winner_token_ids + p.loser_token_ids]
    assert max(lengths) <= 3
    assert trainer.sampling_params(1).max_new_tokens == 6  # overrides last for one call only


def test_train_rejects_unknown_keywords_and_bad_checkpoint_interval(tiny_model_path, tmp_path):
    trainer = MADPOTrainer(
        agent_model=tiny_model_path, reward_func=varied_reward, train_dataset=items(2), args=config(tmp_path)
    )
    with pytest.raises(TypeError, match="repetition_penalty"):
        trainer.train(repetition_penalty=1.2)
    with pytest.raises(ValueError, match="checkpoint_interval"):
        trainer.train(checkpoint_interval=True)
    with pytest.raises(ValueError, match="do_sample"):
        trainer.train(do_sample=False)


def test_save_model_writes_one_loadable_folder_per_agent(tiny_model_path, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from comlrl.policy import MultiAgentPolicy

    trainer = MADPOTrainer(
        agent_model=tiny_model_path, num_agents=2, reward_func=varied_reward, args=config(tmp_path)
    )
    with torch.no_grad():
        trainer.agents[1].lm_head.weight.add_(1.0)  # tell the agents apart
    out = trainer.save_model(tmp_path / "saved")
    for i in range(2):
        model = AutoModelForCausalLM.from_pretrained(out / f"agent_{i}")
        AutoTokenizer.from_pretrained(out / f"agent_{i}")
        torch.testing.assert_close(model.lm_head.weight, trainer.agents[i].lm_head.weight)
    assert MultiAgentPolicy.load(out).agents == ["agent_0", "agent_1"]


def test_save_model_with_lora_adapters_and_shared_model(tiny_model_path, tmp_path):
    from peft import LoraConfig

    from comlrl.policy import MultiAgentPolicy

    lora = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"], lora_dropout=0.0)
    trainer = MADPOTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=varied_reward,
        args=config(tmp_path),
        lora_config=lora,
    )
    out = trainer.save_model(tmp_path / "lora")
    for i in range(2):
        assert (out / f"agent_{i}" / "adapter_config.json").is_file()
        assert (out / f"agent_{i}" / "tokenizer_config.json").is_file()
    assert (out / "base" / "config.json").is_file()
    shared = MADPOTrainer(
        policy=MultiAgentPolicy.shared(tiny_model_path, 2), reward_func=varied_reward, args=config(tmp_path)
    )
    out = shared.save_model(tmp_path / "shared")
    assert all((out / f"agent_{i}" / "config.json").is_file() for i in range(2))


def test_lora_agents_each_train_their_own_adapter(tiny_model_path, tmp_path):
    from peft import LoraConfig

    lora = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    trainer = MADPOTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=varied_reward,
        train_dataset=items(),
        args=config(tmp_path),
        lora_config=lora,
    )
    base = {n: p.detach().clone() for n, p in trainer.agents[0].named_parameters() if "lora_" not in n}
    before = snapshot(trainer)
    trainer.train()
    for agent_before, agent_after in zip(before, snapshot(trainer)):
        assert any(not torch.equal(b, a) for b, a in zip(agent_before, agent_after))
    for n, p in trainer.agents[0].named_parameters():
        if n in base:
            assert torch.equal(base[n], p)


def test_evaluate_uses_the_task_reward_and_the_eval_hooks(tiny_model_path, tmp_path):
    seen = []

    def eval_logger(**kwargs):
        seen.append(kwargs)
        return [
            {"chars": float(len(kwargs["agent_completions_turns"][0][i][0]))}
            for i in range(len(kwargs["prompts"]))
        ]

    trainer = MADPOTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=lambda a, b: 2.0,
        eval_dataset=items(3),
        eval_logger=eval_logger,
        eval_aggregator=lambda m, num_turns: {"turn_1/chars": sum(x["chars"] for x in m)},
        args=config(tmp_path, eval_batch_size=2),
    )
    result = trainer.evaluate(num_eval_samples=3)
    assert result["eval/turn_1/reward_mean"] == 2.0 == result["eval/turn_1/expected_return"]
    kwargs = seen[0]
    assert len(kwargs["agent_completions_turns"]) == 2 and len(kwargs["agent_completions_turns"][0]) == 3
    assert kwargs["batch_items"] == items(3) and kwargs["prompts"] == [it["prompt"] for it in items(3)]
    assert "eval/turn_1/chars" in result
    assert records(trainer)[-1]["eval/turn_1/reward_mean"] == 2.0
    no_eval_data = MADPOTrainer(agent_model=tiny_model_path, reward_func=varied_reward, args=config(tmp_path))
    with pytest.warns(UserWarning, match="built without an `eval_dataset`"):
        assert no_eval_data.evaluate() == {}


def test_hf_dataset_chat_formatters_and_batch_items_reward(tiny_model_path, tmp_path):
    from datasets import Dataset

    seen_items = []

    def reward(a, b, batch_items=None):
        seen_items.append(batch_items[0]["id"])
        return float(len(a[0]) % 4)

    formatters = [
        lambda item: [{"role": "user", "content": f"Plan {item['id']}"}],
        lambda item: f"Check {item['id']}",
    ]
    trainer = MADPOTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=reward,
        formatters=formatters,
        train_dataset=Dataset.from_list([{"id": i} for i in range(3)]),
        args=config(tmp_path),
    )
    trainer.train()
    assert seen_items[:4] == [0, 0, 0, 0] and set(seen_items) == {0, 1, 2}
    pair = trainer.rounds.pairs[0]
    assert pair.prompts[0].startswith("<|im_start|>user\nPlan") and pair.prompts[1].startswith("Check")
    assert pair.prompt_token_ids[0] == trainer.tokenizers[0].apply_chat_template(
        [{"role": "user", "content": pair.prompts[0].split("\n")[1].split("<")[0]}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(agent_model="M", reward_func=None), ValueError, "reward_func"),
        (dict(reward_func=varied_reward), ValueError, "Either agent_model or agents must be provided"),
        (dict(agent_model="a", agents=["b", "b"], reward_func=varied_reward), ValueError, "conflict"),
        (
            dict(agent_model="M", reward_func=varied_reward, external_transition=object()),
            ValueError,
            "external_transition",
        ),
        (dict(agent_model="M", reward_func=varied_reward, formatters=[str]), ValueError, "formatters"),
        (
            dict(agent_model="M", reward_func=varied_reward, tokenizer=[None, None, None]),
            ValueError,
            "tokenizer",
        ),
        (dict(agent_model="M", reward_func=varied_reward, args=object()), TypeError, "args"),
    ],
)
def test_constructor_rejects_bad_keywords_naming_them(kwargs, error, match, tiny_model_path, tmp_path):
    kwargs = {k: (tiny_model_path if v == "M" else v) for k, v in kwargs.items()}
    kwargs.setdefault("args", config(tmp_path))
    with pytest.raises(error, match=match):
        MADPOTrainer(**kwargs)


def test_model_objects_need_a_tokenizer_and_counts_are_reconciled(tiny_model_path, tmp_path, caplog):
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from comlrl.models import load_tokenizer

    fresh = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=512,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        )
    )
    with pytest.raises(ValueError, match="`tokenizer` must be provided"):
        MADPOTrainer(agents=[fresh], reward_func=varied_reward, args=config(tmp_path))
    loaded = AutoModelForCausalLM.from_pretrained(tiny_model_path)  # from a folder: its tokenizer is found
    with caplog.at_level(logging.WARNING):
        trainer = MADPOTrainer(
            agents=[loaded, fresh, fresh],
            reward_func=varied_reward,
            tokenizer=[load_tokenizer(tiny_model_path)] * 3,
            args=config(tmp_path),
        )
    assert trainer.num_agents == trainer.args.num_agents == 3
    assert "args.num_agents" in caplog.text
    assert trainer.agents[1] is fresh and trainer.agents[2] is not fresh  # one object: independent copies
    assert len(trainer.optimizers) == 3


class HalvesAdapter:
    """Centralized adapter for tests: the joint prompt lists the role prompts; a joint completion's first
    half is role 0's response, its second half role 1's; an empty completion cannot be parsed."""

    def build_prompt(self, item, agent_prompts):
        return " | ".join(agent_prompts)

    def parse_completion(self, completion, item, num_agents):
        if not completion:
            raise ValueError("empty joint completion")
        cut = len(completion) // 2
        return [completion[:cut], completion[cut:]]


def test_centralized_collaboration_trains_one_actor_on_role_rewards(tiny_model_path, tmp_path):
    seen = []

    def reward(left, right, batch_items=None, prompts=None):
        seen.append(prompts)
        return float(len(left[0]) % 4) + float(len(right[0]) % 3)

    trainer = MADPOTrainer(
        agents=[tiny_model_path],
        num_agents=2,
        reward_func=reward,
        train_dataset=items(3),
        eval_dataset=items(2),
        formatters=[lambda it: "plan " + it["prompt"], lambda it: "check " + it["prompt"]],
        centralized_comparator_adapter=HalvesAdapter(),
        args=config(tmp_path, collaboration_mode="centralized"),
    )
    assert trainer.num_agents == 1 and len(trainer.optimizers) == 1 and trainer.args.num_agents == 2
    before = snapshot(trainer)
    trainer.train()
    assert any(not torch.equal(b, a) for b, a in zip(before[0], snapshot(trainer)[0]))
    assert seen[0] == ["plan " + items(1)[0]["prompt"]]  # role 0's prompt, as in the public library
    assert trainer.rounds.pairs[0].prompts == [
        "plan Task 0: write a short plan. | check Task 0: write a short plan."
    ]
    logged = {}
    trainer.eval_logger = lambda **kw: logged.update(kw) or [{"x": 1.0}]
    trainer.evaluate()
    assert len(logged["agent_completions_turns"]) == 2  # roles split back out for the eval logger


def test_centralized_collaboration_checks(tiny_model_path, tmp_path):
    with pytest.raises(ValueError, match="exactly one actor model"):
        MADPOTrainer(
            agents=[tiny_model_path, tiny_model_path],
            num_agents=2,
            reward_func=varied_reward,
            args=config(tmp_path, collaboration_mode="centralized"),
        )
    with pytest.raises(ValueError, match="num_agents"):
        MADPOTrainer(
            agents=[tiny_model_path],
            num_agents=3,
            reward_func=varied_reward,
            args=config(tmp_path, collaboration_mode="centralized"),
        )
    with pytest.raises(TypeError, match="centralized_comparator_adapter.build_prompt"):
        MADPOTrainer(
            agents=[tiny_model_path],
            num_agents=2,
            reward_func=varied_reward,
            centralized_comparator_adapter=object(),
            args=config(tmp_path, collaboration_mode="centralized"),
        )
    trainer = MADPOTrainer(
        agents=[tiny_model_path],
        num_agents=2,
        reward_func=varied_reward,
        args=config(tmp_path, collaboration_mode="centralized"),
    )
    # The default tagged adapter: an untagged joint completion is counted and scored as empty roles.
    scores = trainer.oracle.score(
        [["no tags at all", "<agent_0>ab</agent_0><agent_1>c</agent_1>"]],
        prompts=["joint"],
        item=items(1)[0],
        item_index=0,
    )
    assert trainer.collaboration.parse_failures == 1
    assert scores.raw == [varied_reward([""], [""]), varied_reward(["ab"], ["c"])]


def test_wandb_config_and_special_tokens(tiny_model_path, tmp_path):
    trainer = MADPOTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=varied_reward,
        wandb_config={"project": "p", "name": "run-1", "config_sections": {"output": {"verbose": False}}},
        model_config={"dtype": "float32", "special_tokens": ["<tool_a>", "<tool_b>"]},
        args=config(tmp_path, disable_tqdm=False),
    )
    assert (
        trainer.args.report_to == ["wandb"] and trainer.args.run_name == "run-1" and trainer.args.disable_tqdm
    )
    tok = trainer.tokenizers[0]
    assert tok.convert_tokens_to_ids("<tool_b>") < trainer.agents[0].get_input_embeddings().weight.shape[0]
    with pytest.raises(ValueError, match="model_config"):
        MADPOTrainer(
            agent_model=tiny_model_path,
            reward_func=varied_reward,
            model_config={"dtype": "float33"},
            args=config(tmp_path),
        )


def test_wandb_run_config_merges_config_sections():
    from comlrl.trainers.core.wandb_config import wandb_run_config

    args = {"learning_rate": 1e-5, "num_agents": 2}
    sections = {"dataset": {"name": "toy", "split": "train"}, "output": {"verbose": False}}
    merged = wandb_run_config(args, {"project": "p", "config_sections": sections})
    assert merged == {"learning_rate": 1e-5, "num_agents": 2, **sections}
    assert wandb_run_config(args, None) == args and wandb_run_config(args, {"project": "p"}) == args
    with pytest.raises(ValueError, match=r"keys \['num_agents'\] clash"):
        wandb_run_config(args, {"config_sections": {"num_agents": 3}})
    with pytest.raises(ValueError, match="must be a dict, got list"):
        wandb_run_config(args, {"config_sections": ["output"]})


def test_wandb_config_sections_clash_fails_at_construction(tiny_model_path, tmp_path):
    with pytest.raises(ValueError, match=r"keys \['temperature'\] clash with trainer arguments"):
        MADPOTrainer(
            agent_model=tiny_model_path,
            num_agents=2,
            reward_func=varied_reward,
            wandb_config={"project": "p", "config_sections": {"temperature": {"value": 0.7}}},
            args=config(tmp_path),
        )


def test_wandb_init_receives_the_merged_config(tiny_model_path, tmp_path, monkeypatch):
    import types

    calls = []
    fake = types.ModuleType("wandb")

    class Run:
        def log(self, *a, **k):
            pass

        def finish(self):
            pass

    def init(**kwargs):
        calls.append(kwargs)
        return Run()

    fake.init = init
    monkeypatch.setitem(sys.modules, "wandb", fake)
    trainer = MADPOTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=varied_reward,
        wandb_config={"project": "p", "name": "run-1", "config_sections": {"dataset": {"name": "toy"}}},
        args=config(tmp_path),
    )
    assert trainer.metrics_logger.path.exists()  # creating the logger starts the W&B run
    assert len(calls) == 1
    assert calls[0]["project"] == "p" and calls[0]["name"] == "run-1"
    assert calls[0]["config"]["dataset"] == {"name": "toy"}
    assert calls[0]["config"]["agent_learning_rate"] == trainer.args.agent_learning_rate
