"""The public CoMLRL 1.4.3 helpers comlrl provides (docs/compatibility.md §8) mean what they mean there:
the reward-function helpers, prompt formatters, team keywords, device placement, reference KL, the one-process
context, the public ``CentralizedCollaboration``, ``JointRewardModel(backbone)``, and the trainer attributes
user code reads. Expected values are computed here independently (by hand, or from the model's own forward);
the cases of the public ``tests/test_utils.py`` (which pytest cannot collect against ours: it imports an
internal, §11) are repeated where they apply."""

from __future__ import annotations

import inspect
import json
import math
import subprocess
import sys
import types
from types import SimpleNamespace

import pytest
import torch

from comlrl.schedulers import DeviceScheduler
from comlrl.trainers.preference.collaboration import CentralizedCollaboration
from comlrl.trainers.preference.distribution import reward_range
from comlrl.utils import (
    DistributedContext,
    RewardProcessors,
    apply_tokenizer_specials,
    build_formatters,
    call_reward_function,
    clone_reference_models,
    ensure_pad_token,
    ensure_tokenizer,
    infer_model_name,
    load_reference_models_from_sources,
    local_context,
    normalize_reward_lengths,
    reference_kl_coef,
    reference_kl_enabled,
    reference_kl_for_sequence,
    resolve_model_sources,
    resolve_reference_devices,
    resolve_reward_range,
    resolve_tokenizers,
    set_reward_range,
    unwrap_model,
    validate_reference_kl_config,
)
from tests.helpers.trainer_helpers import plan_items, varied_reward

# ------------------------------------------------------------------------------------ reward functions


@pytest.mark.parametrize("inspectable", [True, False])
@pytest.mark.parametrize(
    "raw, expected",
    [
        (2, [2.0]),
        ([1, -2], [1.0, -2.0]),
        ((1.5, 2.5), [1.5, 2.5]),
        ([], []),
        (torch.tensor([1.5, -2.0], requires_grad=True), [1.5, -2.0]),
    ],
)
def test_call_reward_function_returns_floats_from_any_result_type(inspectable, raw, expected):
    calls = []

    class Reward:
        @property
        def __signature__(self):
            if not inspectable:
                raise ValueError("No signature")
            return inspect.signature(self.__call__)

        def __call__(self, first, second):
            calls.append((first, second))
            return raw

    completions = [["first"], ["second"]]
    assert call_reward_function(Reward(), ["prompt"], completions, num_agents=2) == expected
    assert calls == [(completions[0], completions[1])]


def test_call_reward_function_chooses_the_arguments_from_the_signature():
    completions, prompts, items = [["a"], ["bb"]], ["the prompt"], [{"id": 7}]
    seen = []

    def per_agent(a, b):
        seen.append(("per_agent", a, b))
        return 1.0

    def prompts_first(p, a, b):
        seen.append(("prompts_first", p, a, b))
        return 2.0

    def joint(lists):
        seen.append(("joint", lists))
        return 3.0

    def keywords(a, b, *, batch_items=None, prompts=None):
        seen.append(("keywords", batch_items, prompts))
        return 4.0

    def star(*lists, **kwargs):
        seen.append(("star", lists, sorted(kwargs)))
        return 5.0

    results = [
        call_reward_function(f, prompts, completions, num_agents=2, batch_items=items)
        for f in (per_agent, prompts_first, joint, keywords, star)
    ]
    assert results == [[1.0], [2.0], [3.0], [4.0], [5.0]]
    assert seen == [
        ("per_agent", ["a"], ["bb"]),
        ("prompts_first", prompts, ["a"], ["bb"]),
        ("joint", completions),
        ("keywords", items, prompts),
        ("star", (["a"], ["bb"]), ["batch_items", "prompts"]),
    ]
    # One agent: one parameter takes its completions, two take the prompts first.
    assert call_reward_function(lambda c: [len(c[0])], prompts, [["abc"]], num_agents=1) == [3.0]
    assert call_reward_function(lambda p, c: [len(p[0])], prompts, [["abc"]], num_agents=1) == [10.0]


def test_call_reward_function_falls_back_in_order_without_a_signature():
    calls = []

    class Reward:
        @property
        def __signature__(self):
            raise ValueError("No signature")

        def __call__(self, *args, **kwargs):
            calls.append((args, kwargs))
            if kwargs or len(args) != 1:
                raise TypeError("Expected one joint completion list")
            return (3,)

    completions, items = [["first"], ["second"]], [{"prompt": "prompt"}]
    assert call_reward_function(Reward(), ["prompt"], completions, num_agents=2, batch_items=items) == [3.0]
    assert calls == [
        (tuple(completions), {"batch_items": items}),
        (tuple(completions), {}),
        ((completions,), {}),
    ]


def test_call_reward_function_retries_a_type_error_once_then_raises_the_first():
    calls = []
    original = TypeError("Reward rejected batch metadata")

    def reward(*completions, **kwargs):
        calls.append(kwargs)
        if kwargs:
            raise original
        raise TypeError("Fallback failed")

    items = [{"prompt": "prompt"}]
    with pytest.raises(TypeError) as error:
        call_reward_function(reward, ["prompt"], [["first"], ["second"]], num_agents=2, batch_items=items)
    assert error.value is original
    assert calls == [{"batch_items": items, "prompts": ["prompt"]}, {}]


@pytest.mark.parametrize(
    "rewards, num_agents, num_generations, expected",
    [
        ([1.5], 1, 4, [1.5]),
        ([1, 2, 3], 1, 4, [1.0, 2.0, 3.0]),  # one agent keeps whatever it got
        ([2], 3, 4, [2.0, 2.0, 2.0]),  # one value for every agent
        ([1, 2, 3], 3, 4, [1.0, 2.0, 3.0]),  # one per agent
        ([1, 2, 3, 4], 2, 4, [1.0, 2.0, 3.0, 4.0]),  # one per generation
    ],
)
def test_normalize_reward_lengths_spreads_rewards(rewards, num_agents, num_generations, expected):
    kept = normalize_reward_lengths(
        rewards, num_agents=num_agents, num_generations=num_generations, algorithm="X"
    )
    assert kept == expected and all(isinstance(v, float) for v in kept)


def test_normalize_reward_lengths_names_the_algorithm_and_the_count():
    with pytest.raises(ValueError, match=r"either 1 or 2 values per prompt for multi-agent MAGRPO\.$"):
        normalize_reward_lengths([1, 2, 3], num_agents=2, num_generations=4, algorithm="MAGRPO")
    with pytest.raises(ValueError, match="num_generations must be >= 1."):
        normalize_reward_lengths([1, 2], num_agents=2, num_generations=0, algorithm="X")


def test_set_reward_range_declares_what_log_reward_distribution_reads():
    def reward(a, b):
        return 0.0

    assert set_reward_range(reward, 0, 2) is reward
    assert reward.reward_range == (0.0, 2.0)
    assert resolve_reward_range(reward) == (0.0, 2.0)
    assert reward_range(reward) == (0.0, 2.0)  # the iterative trainers' check of log_reward_distribution
    assert resolve_reward_range(lambda: 0) is None
    cases = [
        ("ab", "must be a two-item sequence"),
        ((0, 1, 2), "must be a two-item sequence"),
        ((0, math.inf), "values must be finite"),
        ((2, 1), "minimum must be less than maximum"),
    ]
    for declared, message in cases:
        reward.reward_range = declared
        with pytest.raises(ValueError, match=f"reward_func.reward_range {message}"):
            resolve_reward_range(reward)
    with pytest.raises(ValueError, match="minimum must be less than maximum"):
        set_reward_range(lambda: 0, 1, 1)


def test_reward_processors_scale_and_shift():
    assert RewardProcessors.scale(factor=100.0)(0.25) == 25.0
    assert RewardProcessors.shift(value=-1.0)(0.25) == -0.75
    assert RewardProcessors.scale()(3.0) == RewardProcessors.shift()(3.0) == 3.0


# ------------------------------------------------------------------------------------ formatters and team keywords


@pytest.mark.parametrize("pass_none", [True, False])
def test_build_formatters_default_and_external_prompts(pass_none):
    item = {"prompt": "original"}
    default = build_formatters(None, 2, pass_none_external_prompts=pass_none)
    assert [formatter(item) for formatter in default] == ["original", "original"]
    assert default[0]({}, external_prompts="external") == "external"
    assert default[0](item, external_prompts="") == ""
    assert default[0]({}) == ""
    seen = []

    def accepts_external(value, external_prompts="default-argument"):
        seen.append((value, external_prompts))
        return external_prompts

    wrapped = build_formatters(accepts_external, 1, pass_none_external_prompts=pass_none)[0]
    expected_default = None if pass_none else "default-argument"
    assert wrapped(item) == expected_default
    assert wrapped(item, external_prompts="external") == "external"
    assert seen == [(item, expected_default), (item, "external")]
    assert (
        build_formatters(lambda value: value["prompt"], 1)[0](item, external_prompts="ignored") == "original"
    )


def test_build_formatters_counts_and_types():
    assert len(build_formatters([str.upper, str.lower], 2)) == 2
    with pytest.raises(
        ValueError, match=r"^Number of formatters must match num_agents when providing a sequence\.$"
    ):
        build_formatters([str], 2)
    with pytest.raises(
        ValueError, match=r"^formatters must be None, a callable, or a sequence of callables\.$"
    ):
        build_formatters("prompt", 2)


def test_infer_model_name_prefers_the_given_name_then_the_config():
    assert infer_model_name(None) is None
    assert infer_model_name("org/model") == "org/model"
    assert (
        infer_model_name(SimpleNamespace(config=SimpleNamespace(_name_or_path="/ckpt", model_type="gpt2")))
        == "/ckpt"
    )
    assert (
        infer_model_name(SimpleNamespace(config=SimpleNamespace(_name_or_path="", model_type="gpt2")))
        == "gpt2"
    )
    peft = SimpleNamespace(
        base_model=SimpleNamespace(config=SimpleNamespace(model_type="qwen2", _name_or_path="/p"))
    )
    assert (
        infer_model_name(peft) == "qwen2"
    )  # a PEFT model: its base model's type first, as in the public library
    assert infer_model_name(torch.nn.Linear(1, 1)) == "Linear"


def test_resolve_model_sources_rules_and_sentences():
    assert resolve_model_sources(kind="agents", model="m", models=None, expected_count=2) == (["m", "m"], "m")
    assert resolve_model_sources(kind="agents", model="m", models=["m", "m"], expected_count=2) == (
        ["m", "m"],
        "m",
    )
    cases = [
        (dict(model=None, models=None, expected_count=2), "Either agent_model or agents must be provided."),
        (
            dict(model="a", models=["a", "b"], expected_count=2),
            "agent_model and agents conflict: a != ['a', 'b'].",
        ),
        (dict(model=None, models=["a"], expected_count=2), "agents length (1) must match num_agents (2)."),
        (dict(model=None, models="a", expected_count=1), "agents must be a non-empty sequence."),
        (dict(model=None, models=["a", None], expected_count=2), "agents entries must be non-null."),
        (
            dict(model="a", models="a", expected_count=2),
            "Cannot provide both agent_model and agents unless agents is a list of num_agents (2) model names.",
        ),
    ]
    for kwargs, sentence in cases:
        with pytest.raises(ValueError) as error:
            resolve_model_sources(kind="agents", model_label="agent_model", **kwargs)
        assert str(error.value) == sentence


def test_tokenizer_helpers(tiny_model_path):
    tokenizer = SimpleNamespace(pad_token=None, eos_token="</s>", pad_token_id=None, eos_token_id=None)
    with pytest.raises(ValueError, match=r"^Tokenizer must expose pad_token_id\.$"):
        ensure_pad_token(tokenizer)
    assert tokenizer.pad_token == "</s>"  # set before the id check, as in the public library
    ready = SimpleNamespace(pad_token="<pad>", eos_token="</s>", pad_token_id=0, eos_token_id=2)
    assert resolve_tokenizers("m", [ready, ready], [object(), object()]) == [ready, ready]
    with pytest.raises(ValueError, match=r"^tokenizers length must match agents\.$"):
        resolve_tokenizers("m", [ready], [object(), object()])
    with pytest.raises(
        ValueError, match=r"^Tokenizer\(s\) must be provided when agents are model objects\.$"
    ):
        resolve_tokenizers(None, None, [object()])
    with pytest.raises(
        ValueError, match="Tokenizer must be provided when model is a PreTrainedModel instance."
    ):
        ensure_tokenizer(None, None)
    loaded = ensure_tokenizer(tiny_model_path, None)  # a named model's own tokenizer
    assert loaded.pad_token_id is not None and len(loaded) > 10
    wrapper = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace()))
    plain = SimpleNamespace(config=SimpleNamespace())
    no_eos = SimpleNamespace(pad_token="p", eos_token="e", pad_token_id=5, eos_token_id=None)
    apply_tokenizer_specials(no_eos, [wrapper, None, plain])
    assert vars(wrapper.model.config) == vars(plain.config) == {"pad_token_id": 5, "eos_token_id": 5}


# ------------------------------------------------------------------------------------ devices, reference KL, context


def test_device_scheduler_resolves_specs_with_the_public_sentences():
    cpu = torch.device("cpu")
    assert DeviceScheduler.resolve_devices("cpu", 2) == [cpu, cpu]
    assert DeviceScheduler.resolve_devices(["cuda:1"], 2) == [torch.device("cuda:1")] * 2
    assert DeviceScheduler.resolve_devices(["cpu", "cuda:3"], 2) == [cpu, torch.device("cuda:3")]
    assert DeviceScheduler.resolve_single_device(None, ["cuda:2", "cpu"]) == torch.device("cuda:2")
    agents, critics = DeviceScheduler.assign_devices(2, "cpu", ["cuda:1"], use_separate_critic=True)
    assert agents == [cpu, cpu] and critics == [torch.device("cuda:1")] * 2
    assert DeviceScheduler.assign_devices(2, "cpu", "cuda:0", use_separate_critic=False)[1] == [cpu, cpu]
    if not torch.cuda.is_available():
        assert (
            DeviceScheduler.resolve_devices(None, 3)
            == [cpu] * 3
            == DeviceScheduler.resolve_devices("auto", 3)
        )
    for spec, count, sentence in [
        (["cpu"] * 3, 2, "reference_devices length (3) must be 1 or 2."),
        ([], 2, "reference_devices must be a non-empty list or 'auto'."),
        ("cpu", 0, "reference_devices count must be >= 1."),
        (5, 1, "Unsupported reference_devices spec: 5."),
    ]:
        with pytest.raises(ValueError) as error:
            DeviceScheduler.resolve_devices(spec, count, kind="reference_devices")
        assert str(error.value) == sentence


def test_reference_kl_config_helpers():
    args = SimpleNamespace(reference_kl_enabled=True, reference_kl_coef=0.25, reference_devices=["cuda:1"])
    assert reference_kl_enabled(args) and reference_kl_coef(args) == 0.25
    assert not reference_kl_enabled(SimpleNamespace()) and reference_kl_coef(SimpleNamespace()) == 0.1
    fallback = [torch.device("cpu")]
    assert resolve_reference_devices(args, fallback, 1) == [torch.device("cuda:1")]
    assert resolve_reference_devices(SimpleNamespace(), fallback, 1) == fallback
    with pytest.raises(ValueError, match=r"^reference_kl_coef must be >= 0\.$"):
        validate_reference_kl_config(SimpleNamespace(reference_kl_coef=-1.0), 1)
    bad = SimpleNamespace(reference_kl_enabled=True, reference_devices=["cpu"] * 3)
    with pytest.raises(ValueError, match=r"reference_devices length \(3\) must be 1 or 2\."):
        validate_reference_kl_config(bad, 2)
    validate_reference_kl_config(
        SimpleNamespace(reference_kl_enabled=False, reference_devices=["cpu"] * 3), 2
    )


def _tiny_gpt2(seed: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=1, n_head=2))


def test_reference_kl_for_sequence_sums_k3_over_the_response_tokens():
    policy, reference = _tiny_gpt2(0), _tiny_gpt2(1)
    policy.train()  # dropout on: the KL must still be computed in eval mode, and the mode restored
    sequences = torch.tensor([[2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13]])
    mask = torch.ones_like(sequences)
    kl = reference_kl_for_sequence(policy, reference, sequences, mask, prompt_len=2, response_len=3)

    def response_logprobs(model):
        model.eval()
        with torch.no_grad():
            logits = model(input_ids=sequences, attention_mask=mask).logits.double()
        picked = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, sequences[:, 1:, None])[..., 0]
        return picked[:, 1:4]  # tokens 2, 3, 4: the three after the two-token prompt

    delta = response_logprobs(reference) - response_logprobs(policy)
    expected = (delta.exp() - delta - 1).sum(dim=-1)
    policy.train()
    assert kl.shape == (2,) and kl.device.type == "cpu"
    torch.testing.assert_close(kl.double(), expected, atol=1e-6, rtol=1e-5)
    assert bool((kl > 0).all()) and policy.training and not reference.training
    same = reference_kl_for_sequence(policy, policy, sequences, mask, prompt_len=2, response_len=3)
    assert torch.allclose(same, torch.zeros(2), atol=1e-7)


def test_reference_copies_are_frozen(tmp_path):
    policy = _tiny_gpt2(0)
    [copy] = clone_reference_models([policy], devices=[torch.device("cpu")])
    assert copy is not policy and not copy.training and not any(p.requires_grad for p in copy.parameters())
    assert all(torch.equal(a, b) for a, b in zip(copy.parameters(), policy.parameters()))
    policy.save_pretrained(tmp_path / "policy")
    [loaded] = load_reference_models_from_sources([str(tmp_path / "policy")], devices=[torch.device("cpu")])
    assert not loaded.training and not any(p.requires_grad for p in loaded.parameters())
    assert all(torch.equal(a, b) for a, b in zip(loaded.parameters(), policy.parameters()))


def test_local_context_and_unwrap_model():
    context = local_context(torch.device("cpu"))
    assert context == DistributedContext(is_main=True, device=torch.device("cpu"))
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert local_context().device.type == expected
    with pytest.raises(AttributeError):
        context.is_main = False  # a frozen record
    inner = torch.nn.Linear(1, 1)
    assert unwrap_model(SimpleNamespace(module=inner)) is inner and unwrap_model(inner) is inner


# ------------------------------------------------------------------------------------ public classes


class Adapter:
    """Role blocks written as ``<r0>..</r0>``; a text without any is unparsable."""

    def build_prompt(self, item, prompts):
        return f"JOINT[{item['id']}]: " + " | ".join(prompts)

    def parse_completion(self, completion, item, num_agents):
        from comlrl.trainers.preference.centralized import CentralizedComparatorParseError

        parts = [
            completion.split(f"<r{r}>")[1].split(f"</r{r}>")[0] if f"<r{r}>" in completion else None
            for r in range(num_agents)
        ]
        if all(p is None for p in parts):
            raise CentralizedComparatorParseError("no role block")
        return [p or "" for p in parts]


def test_public_centralized_collaboration_splits_roles_and_scores_them():
    def reward(left, right, *, batch_items, prompts):
        return [10 * len(left[0]) + len(right[0]) + (100 if prompts == ["L7"] else 0)]

    set_reward_range(reward, 0, 200)
    collaboration = CentralizedCollaboration(
        Adapter(), [lambda i: f"L{i['id']}", lambda i: f"R{i['id']}"], reward, 2
    )
    item = {"id": 7}
    assert collaboration.reward_range == (0.0, 200.0)
    assert collaboration.build_prompt(item) == "JOINT[7]: L7 | R7"
    assert collaboration.split("<r0>ab</r0><r1>c</r1>", item) == ["ab", "c"]
    assert collaboration.split("no blocks", item) == ["", ""]
    # Called as a reward function: one task reward per joint completion (roles split, prompts = role 0's).
    assert collaboration(["<r0>ab</r0><r1>c</r1>", "no blocks"], batch_items=[item]) == [121.0, 100.0]
    with pytest.raises(ValueError, match="require batch_items"):
        collaboration(["x"])
    with pytest.raises(ValueError, match="must align with batch_items"):
        collaboration(["x", "y", "z"], batch_items=[item, item])
    assert collaboration.split_eval([[["<r0>a</r0>", "<r1>b</r1>"]]], [item]) == [[["a", ""]], [["", "b"]]]
    original = SimpleNamespace(agent_idx=0, completion="<r0>x</r0><r1>yy</r1>", metadata={"batch_item": item})
    per_role = collaboration.wrap_metrics_callback(lambda samples: samples)([original])
    assert [(s.agent_idx, s.completion) for s in per_role] == [(0, "x"), (1, "yy")]
    assert original.completion == "<r0>x</r0><r1>yy</r1>" and all(
        s.metadata is original.metadata for s in per_role
    )


def test_joint_reward_model_without_a_tokenizer_scores_ids():
    from comlrl.trainers.preference import JointRewardModel

    backbone = _tiny_gpt2(3).eval()
    model = JointRewardModel(backbone)
    ids = torch.tensor([[5, 6, 7, 0], [0, 0, 8, 9]])
    mask = torch.tensor([[1, 1, 1, 0], [0, 0, 1, 1]])
    scores = model(ids, mask)
    with torch.no_grad():  # the head on the hidden state of each row's last real token, rows scored alone
        first = backbone.transformer(input_ids=ids[:1, :3]).last_hidden_state[0, -1]
        second = backbone.transformer(input_ids=ids[1:, 2:]).last_hidden_state[0, -1]
    expected = model.head(torch.stack([first, second]).float()).squeeze(-1)
    torch.testing.assert_close(scores, expected, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="no `tokenizer`"):
        model.score([["prompt a", "prompt b"]], [["response a", "response b"]])
    frozen = JointRewardModel(backbone, freeze_backbone=True)
    assert not any(p.requires_grad for p in frozen.backbone.parameters()) and frozen.head.weight.requires_grad
    with pytest.raises(TypeError, match="pass freeze_backbone=..."):
        JointRewardModel(backbone, True)  # the public positional order would silently misread here


# ------------------------------------------------------------------------------------ trainer attributes


def test_trainer_attributes_user_code_reads(tiny_model_path, tmp_path):
    from comlrl.models import load_model, load_tokenizer
    from comlrl.trainers.actor_critic import IACConfig, IACTrainer
    from comlrl.trainers.preference import MADPOConfig, MADPOTrainer
    from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer

    common = dict(num_turns=1, output_dir=str(tmp_path), max_new_tokens=4, disable_tqdm=True)
    named = MAGRPOTrainer(
        agent_model=tiny_model_path,
        reward_func=varied_reward,
        args=MAGRPOConfig(reference_kl_enabled=True, **common),
    )
    assert named.model_name == tiny_model_path
    assert len(named.reference_models) == 2 and named.critic_optimizers == []
    for reference, agent in zip(named.reference_models, named.agents):
        assert reference is not agent and not reference.training
        assert not any(p.requires_grad for p in reference.parameters())
        assert all(torch.equal(a, b) for a, b in zip(reference.parameters(), agent.parameters()))

    unnamed = load_model(tiny_model_path)
    unnamed.name_or_path = ""  # built in memory: the public fallback names it by its config's model type
    objects = MAGRPOTrainer(
        agents=[unnamed, load_model(tiny_model_path)],
        tokenizer=load_tokenizer(tiny_model_path),
        reward_func=varied_reward,
        args=MAGRPOConfig(**common),
    )
    assert objects.model_name == unnamed.config.model_type and objects.reference_models == []

    iac = IACTrainer(
        agent_model=tiny_model_path,
        critic_model=tiny_model_path,
        reward_func=varied_reward,
        args=IACConfig(num_agents=2, **common),
    )
    assert len(iac.critic_optimizers) == 2 == len(iac.critics)
    assert [group["params"] for o in iac.critic_optimizers for group in o.param_groups] == [
        list(c.critic_parameters()) for c in iac.critics
    ]

    madpo = MADPOTrainer(
        agent_model=tiny_model_path, reward_func=varied_reward, args=MADPOConfig(output_dir=str(tmp_path))
    )
    assert madpo.reference_models == []  # reference-free loss (§11)
    dpo = MADPOTrainer(
        agent_model=tiny_model_path,
        reward_func=varied_reward,
        args=MADPOConfig(output_dir=str(tmp_path), preference_reference="initial"),
    )
    assert len(dpo.reference_models) == 2 and not any(
        p.requires_grad for p in dpo.reference_models[0].parameters()
    )


def test_actor_critic_constructors_open_the_wandb_run(tiny_model_path, tmp_path, monkeypatch):
    from comlrl.trainers.actor_critic import MAACConfig, MAACTrainer
    from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer

    calls = []

    class Run:
        def log(self, metrics, step):
            pass

        def finish(self):
            pass

    fake = types.ModuleType("wandb")
    fake.init = lambda **kwargs: calls.append(kwargs) or Run()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    wandb_config = {"project": "project", "entity": "team"}
    common = dict(num_turns=1, num_agents=2, output_dir=str(tmp_path), disable_tqdm=True)
    MAACTrainer(
        agent_model=tiny_model_path,
        critic_model=tiny_model_path,
        reward_func=varied_reward,
        train_dataset=plan_items(1),
        wandb_config=wandb_config,
        args=MAACConfig(**common),
    )
    [kwargs] = calls  # once, in the constructor
    assert kwargs["project"] == "project" and kwargs["entity"] == "team"
    assert kwargs["config"]["num_agents"] == 2 and kwargs["config"]["reference_kl_enabled"] is False
    MAGRPOTrainer(
        agent_model=tiny_model_path,
        reward_func=varied_reward,
        wandb_config=wandb_config,
        args=MAGRPOConfig(**common),
    )
    assert len(calls) == 1  # the other trainers open it at their first log


# ------------------------------------------------------------------------------------ against the public library

# Runs in two interpreters, ours and the public library's, and prints every helper's result (or error type and
# message) on the same inputs as JSON.
SAME_INPUTS = """
import json, torch
from types import SimpleNamespace as NS
from comlrl.schedulers import DeviceScheduler
from comlrl.utils import (
    apply_tokenizer_specials, build_formatters, call_reward_function, infer_model_name, local_context,
    normalize_reward_lengths, resolve_model_sources, resolve_reference_devices, resolve_reward_range,
    resolve_tokenizers, set_reward_range, validate_reference_kl_config, RewardProcessors,
)
out = {}
def record(name, fn):
    try:
        out[name] = ["ok", repr(fn())]
    except Exception as error:
        out[name] = [type(error).__name__, str(error)]
rewards = {
    "two": lambda a, b: [len(a[0]) + 10 * len(b[0])], "prompts": lambda p, a, b: [len(p[0]) + len(a[0])],
    "one": lambda c: [len(c)], "star": lambda *c: [len(c)], "three": lambda a, b, c: [3.0],
    "keywords": lambda a, b, *, batch_items=None, prompts=None: [(batch_items is not None) + 2 * (prompts is not None)],
    "kwargs": lambda a, b, **k: [len(k)], "default": lambda a, b=None: [1.0 if b is None else 2.0],
    "tensor": lambda a, b: torch.tensor([0.5, 1.5]), "int": lambda a, b: 7,
    "raises": lambda a, b: (_ for _ in ()).throw(TypeError("boom")),
}
for name, f in rewards.items():
    for n in (1, 2, 3):
        lists = [[f"c{i}"] for i in range(n)]
        record(f"call:{name}:{n}", lambda: call_reward_function(f, ["pp"], lists, num_agents=n, batch_items=[{"x": 1}]))
        record(f"call-no-items:{name}:{n}", lambda: call_reward_function(f, ["pp"], lists, num_agents=n))
for r in ([1.0], [1.0, 2.0], [1, 2, 3], [1, 2, 3, 4], []):
    for n in (1, 2, 3):
        for g in (0, 1, 3, 4):
            record(f"lengths:{r}:{n}:{g}", lambda: normalize_reward_lengths(r, num_agents=n, num_generations=g, algorithm="X"))
for declared in (None, (0, 1), (1, 0), (0, float("inf")), "ab", (1, 2, 3)):
    f = lambda: 0
    if declared is not None:
        f.reward_range = declared
    record(f"range:{declared}", lambda: resolve_reward_range(f))
record("set-range", lambda: set_reward_range(lambda: 0, 3, 1))
model = NS(config=NS(_name_or_path="path/x", model_type="gpt2"))
for name, source in {"none": None, "str": "abc", "model": model, "bare": NS(), "typed": NS(config=NS(_name_or_path="", model_type="t"))}.items():
    record(f"infer:{name}", lambda: infer_model_name(source))
for m in (None, "a", model):
    for ms in (None, ["a", "a"], ["a"], ["a", "b"], "a", ["a", None], [model, model], []):
        for count in (1, 2):
            record(f"sources:{m!r}:{ms!r}:{count}", lambda: resolve_model_sources(
                kind="agents", model=m, models=ms, expected_count=count, model_label="agent_model"))
for spec in (None, "auto", "cpu", ["cpu"], ["cpu", "cpu"], ["cpu"] * 3, [], 5, "cuda:1"):
    for n in (0, 1, 2):
        record(f"devices:{spec!r}:{n}", lambda: DeviceScheduler.resolve_devices(spec, n, kind="k"))
    record(f"single:{spec!r}", lambda: DeviceScheduler.resolve_single_device(spec))
record("assign", lambda: DeviceScheduler.assign_devices(2, "cpu", None, use_separate_critic=True))
record("reference-devices", lambda: resolve_reference_devices(NS(reference_devices=["cpu"] * 3), [], 2))
record("validate", lambda: validate_reference_kl_config(NS(reference_kl_coef=-1), 1))
record("processors", lambda: (RewardProcessors.scale(3)(2), RewardProcessors.shift(-1)(2)))
record("context", lambda: local_context(torch.device("cpu")))
ready = NS(pad_token="p", eos_token="e", pad_token_id=0, eos_token_id=None)
record("tokenizers", lambda: resolve_tokenizers("m", [ready], [NS(), NS()]))
record("tokenizers-objects", lambda: resolve_tokenizers(None, None, [NS()]))
plain = NS(config=NS())
record("specials", lambda: (apply_tokenizer_specials(ready, [plain]), vars(plain.config)))
def external(item, external_prompts="default"):
    return (item["prompt"], external_prompts)
for passes in (True, False):
    g = build_formatters(external, 1, pass_none_external_prompts=passes)[0]
    record(f"formatters:{passes}", lambda: [g({"prompt": "p"}), g({"prompt": "p"}, external_prompts="e")])
record("formatters-count", lambda: build_formatters([str], 2))
print(json.dumps(out))
"""


@pytest.mark.slow  # two subprocesses importing torch and transformers
def test_helpers_match_the_public_library_on_the_same_inputs(tmp_path):
    from tests.comlrl.test_public_parity import public_python

    public, public_env = public_python()
    if public is None:
        pytest.skip(
            "no interpreter imports the public CoMLRL 1.4.3 (run scripts/comlrl_public_suite.sh once)"
        )
    script = tmp_path / "same_inputs.py"
    script.write_text(SAME_INPUTS)
    ours_env = {k: v for k, v in public_env.items() if k != "PYTHONPATH"}
    results = []
    for python, env in ((sys.executable, ours_env), (str(public), public_env)):
        done = subprocess.run(
            [python, str(script)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
        )
        assert done.returncode == 0, done.stderr[-2000:]
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    ours, theirs = results
    assert len(theirs) > 200 and {status for status, _ in theirs.values()} == {
        "ok",
        "ValueError",
        "TypeError",
    }
    differ = {key: (ours.get(key), theirs[key]) for key in theirs if ours.get(key) != theirs[key]}
    assert not differ, differ
