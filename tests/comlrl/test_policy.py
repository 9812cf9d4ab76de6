"""The multi-agent policy layer: arrangements, addressing, per-adapter training, save / load."""

from __future__ import annotations

import json

import pytest
import torch
from peft import LoraConfig
from safetensors.torch import load_file

from comlrl.models import load_model
from comlrl.policy import LAYOUT_FILE, MultiAgentPolicy, PolicyHandle

IDS = torch.tensor([[5, 17, 42, 99, 7, 3], [11, 12, 13, 14, 15, 16]])


def lora_config() -> LoraConfig:
    return LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")


def build(arrangement: str, path: str) -> MultiAgentPolicy:
    """Every arrangement the trainers use, on the test-tiny checkpoint."""
    if arrangement == "single":
        return MultiAgentPolicy.single(path)
    if arrangement == "shared":
        return MultiAgentPolicy.shared(path, ["writer", "critic", "judge"])
    if arrangement == "per_agent":
        return MultiAgentPolicy.per_agent({"writer": path, "critic": path})
    if arrangement == "lora":
        return MultiAgentPolicy.lora(path, ["writer", "critic", "judge"], lora_config())
    if arrangement == "mapping":  # 3 agents, 2 full models
        return MultiAgentPolicy.from_mapping(
            {"writer": "author", "critic": "reviewer", "judge": "reviewer"},
            {"author": path, "reviewer": path},
        )
    if arrangement == "lora_mapping":  # 3 agents, 2 adapters on one base
        return MultiAgentPolicy.from_mapping(
            {"writer": "author", "critic": "reviewer", "judge": "reviewer"},
            base_model=path,
            lora_config=lora_config(),
        )
    raise AssertionError(arrangement)


def perturb(policy: MultiAgentPolicy, seed: int = 0) -> None:
    """Give every policy distinct non-trivial weights (LoRA B starts at zero, which would hide a loader
    that forgot the adapters)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name in policy.policies:
            for param in policy.trainable_parameters(name):
                param.add_(torch.randn(param.shape, generator=gen) * 0.3)


def logits_per_agent(policy: MultiAgentPolicy) -> dict[str, torch.Tensor]:
    out = {}
    with torch.no_grad():
        for agent in policy.agents:
            with policy.activate(agent) as handle:
                out[agent] = handle.model(IDS).logits
    return out


ARRANGEMENTS = ["single", "shared", "per_agent", "lora", "mapping", "lora_mapping"]


@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
def test_every_arrangement_saves_reloads_and_gives_identical_logits(arrangement, tiny_model_path, tmp_path):
    policy = build(arrangement, tiny_model_path)
    perturb(policy)
    for i, name in enumerate(policy.policies):
        for _ in range(i + 1):
            policy.bump_version(name)
    expected = logits_per_agent(policy)
    fresh = load_model(tiny_model_path)(IDS).logits.detach()
    for agent, logits in expected.items():  # the saved weights are not the preset's: the test can fail
        assert not torch.allclose(logits, fresh), agent

    policy.save(tmp_path / "saved")
    loaded = MultiAgentPolicy.load(tmp_path / "saved")

    assert loaded.arrangement == policy.arrangement
    assert loaded.agents == policy.agents
    assert [loaded.policy_name(a) for a in loaded.agents] == [policy.policy_name(a) for a in policy.agents]
    assert {p: loaded.version(p) for p in loaded.policies} == {p: policy.version(p) for p in policy.policies}
    got = logits_per_agent(loaded)
    for agent in policy.agents:
        assert torch.equal(got[agent], expected[agent]), agent
    layout = json.loads((tmp_path / "saved" / LAYOUT_FILE).read_text())
    assert layout["agent_to_policy"] == {a: policy.policy_name(a) for a in policy.agents}


@pytest.mark.parametrize("arrangement", ["lora", "lora_mapping"])
def test_lora_adapters_are_saved_one_folder_each(arrangement, tiny_model_path, tmp_path):
    policy = build(arrangement, tiny_model_path)
    perturb(policy, seed=3)
    policy.save(tmp_path)
    group = tmp_path / "lora"
    assert (group / "base" / "config.json").is_file()
    assert (group / "base" / "tokenizer_config.json").is_file()
    meta = json.loads((group / "lora_group.json").read_text())
    assert sorted(meta["adapters"]) == sorted(policy.policies)
    for name in policy.policies:
        saved = load_file(str(group / "adapters" / name / "adapter_model.safetensors"))
        live = dict(policy.named_trainable_parameters(name))
        assert len(saved) == len(live) > 0
        # peft drops the adapter name from the saved keys; match the tensors by their remaining path
        live_by_key = {k.replace(f".{name}.", "."): v for k, v in live.items()}
        for key, tensor in saved.items():
            assert torch.equal(tensor, live_by_key[key].detach()), (name, key)
    # the base is saved without any adapter weight
    base_keys = load_file(str(group / "base" / "model.safetensors")).keys()
    assert not any("lora_" in k or "base_layer" in k for k in base_keys)
    # distinct adapters give distinct logits after reload (a shared / missing adapter would not)
    got = logits_per_agent(MultiAgentPolicy.load(tmp_path))
    representatives = [policy.agents_of(p)[0] for p in policy.policies]
    for i, first in enumerate(representatives):
        for second in representatives[i + 1 :]:
            assert not torch.allclose(got[first], got[second]), (first, second)


def test_gradients_reach_only_the_active_adapter(tiny_model_path):
    policy = MultiAgentPolicy.lora(tiny_model_path, ["ann", "bob", "cat"], lora_config())
    perturb(policy)
    model = policy.handle("ann").model
    assert model.active_adapter == "ann"
    with policy.activate("bob") as handle:
        assert handle.adapter == "bob" and model.active_adapter == "bob"
        trainable = {n for n, p in model.named_parameters() if p.requires_grad}
        assert trainable == {n for n, _ in policy.named_trainable_parameters("bob")}
        handle.model(IDS, labels=IDS).loss.backward()
    assert model.active_adapter == "ann"  # restored on exit
    for name, param in policy.named_trainable_parameters("bob"):
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    own = {id(p) for agent in policy.agents for p in policy.trainable_parameters(agent)}
    for agent in ("ann", "cat"):
        assert all(p.grad is None for p in policy.trainable_parameters(agent)), agent
    assert all(p.grad is None for p in model.parameters() if id(p) not in own)  # the base too


def test_optimizer_step_for_one_agent_changes_only_its_adapter(tiny_model_path):
    policy = MultiAgentPolicy.lora(tiny_model_path, ["ann", "bob"], lora_config())
    perturb(policy)
    model = policy.handle("ann").model
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(policy.trainable_parameters("bob"), lr=1e-2)
    with policy.activate("bob") as handle:
        handle.model(IDS, labels=IDS).loss.backward()
    optimizer.step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed == {n for n, _ in policy.named_trainable_parameters("bob")}


def test_adapter_names_inside_the_peft_prefix_are_rejected(tiny_model_path):
    with pytest.raises(ValueError, match="adapter name 'a' is part of peft's key prefix"):
        MultiAgentPolicy.lora(tiny_model_path, ["a", "bob"], lora_config())


@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
def test_trainable_parameters_per_agent(arrangement, tiny_model_path):
    policy = build(arrangement, tiny_model_path)
    for agent in policy.agents:
        params = policy.trainable_parameters(agent)
        assert params, agent
        ids = {id(p) for p in params}
        for other in policy.agents:
            other_ids = {id(p) for p in policy.trainable_parameters(other)}
            same_policy = policy.policy_name(agent) == policy.policy_name(other)
            assert (ids == other_ids) if same_policy else not (ids & other_ids), (agent, other)
        handle = policy.handle(agent)
        if handle.adapter is None:
            assert ids == {id(p) for p in handle.model.parameters()}
        else:
            names = [n for n, _ in policy.named_trainable_parameters(agent)]
            assert all(f".{handle.adapter}." in n and "lora_" in n for n in names)
    if "lora" in arrangement:
        model = policy.models()[0]
        lora_ids = {id(p) for n, p in model.named_parameters() if "lora_" in n}
        assert (
            set().union(*({id(p) for p in policy.trainable_parameters(p)} for p in policy.policies))
            == lora_ids
        )


def test_agents_are_addressable_by_index_and_name(tiny_model_path):
    policy = build("mapping", tiny_model_path)
    assert policy.agents == ["writer", "critic", "judge"] and policy.num_agents == 3
    assert policy.policy_name(0) == policy.policy_name("writer") == "author"
    assert policy.policy_name(-1) == policy.policy_name(2) == "reviewer"
    assert policy.agents_of("reviewer") == ["critic", "judge"]
    assert policy.handle(1) is policy.handle("judge") is policy.handle("reviewer")
    assert policy.handle("writer") is not policy.handle("critic")
    assert policy.device("critic") == torch.device("cpu") and policy.dtype(0) == torch.float32
    with pytest.raises(IndexError, match="agent index 3 out of range for 3 agents"):
        policy.policy_name(3)
    with pytest.raises(KeyError, match="'nobody' is neither an agent"):
        policy.handle("nobody")
    with pytest.raises(KeyError, match="unknown agent 'author'"):
        policy.policy_name("author")  # a policy name is not an agent


def test_handles_are_policy_handles_for_the_backend(tiny_model_path):
    policy = build("lora_mapping", tiny_model_path)
    handles = policy.handles
    assert set(handles) == {"author", "reviewer"}
    for name, handle in handles.items():
        assert isinstance(handle, PolicyHandle)
        assert handle.name == name and handle.adapter == name and handle.version == 0
        assert handle.tokenizer.padding_side == "left" and handle.tokenizer.pad_token is not None
    assert handles["author"].model is handles["reviewer"].model
    with pytest.raises(TypeError):
        handles["x"] = handles["author"]  # read-only view


def test_versions_bump_per_policy_and_show_in_the_live_handles(tiny_model_path):
    policy = build("shared", tiny_model_path)
    handles = policy.handles
    assert policy.bump_version("critic") == 1  # an agent resolves to its policy
    assert policy.bump_version("shared") == 2
    assert handles["shared"].version == 2 == policy.version("judge")
    per_agent = build("per_agent", tiny_model_path)
    per_agent.bump_version("writer")
    assert (per_agent.version("writer"), per_agent.version("critic")) == (1, 0)


def test_models_may_be_objects_paths_or_presets(tiny_model_path, model_cache):
    obj = load_model(tiny_model_path)
    policy = MultiAgentPolicy.per_agent([obj, tiny_model_path], agent_names=["x", "y"])
    assert policy.handle("x").model is obj
    assert policy.handle("y").model is not obj
    assert policy.handle("x").tokenizer.vocab_size == policy.handle("y").tokenizer.vocab_size
    preset = MultiAgentPolicy.single("test-tiny")
    assert torch.equal(preset.handle(0).model(IDS).logits, obj(IDS).logits)
    assert MultiAgentPolicy.shared(tiny_model_path, 2).agents == ["agent_0", "agent_1"]


def test_model_object_without_folder_needs_a_tokenizer(tiny_model_path):
    from transformers import AutoModelForCausalLM

    config = load_model(tiny_model_path).config
    config._name_or_path = ""  # as if built in memory, not read from a folder
    bare = AutoModelForCausalLM.from_config(config)
    assert not bare.name_or_path
    with pytest.raises(ValueError, match="pass `tokenizer=`"):
        MultiAgentPolicy.single(bare)
    policy = MultiAgentPolicy.single(bare, tokenizer=tiny_model_path)
    assert policy.handle("agent").tokenizer is not None


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"agent_to_policy": {"a": "p"}, "policies": {"q": "M"}}, ValueError, "`policies` lacks a model for"),
        ({"agent_to_policy": {"a": "p"}, "policies": {"p": "M", "q": "M"}}, ValueError, "serve no agent"),
        ({"agent_to_policy": {"a": "p.x"}, "policies": {"p.x": "M"}}, ValueError, "policy name"),
        (
            {"agent_to_policy": {"a": "b", "b": "c"}, "policies": {"b": "M", "c": "M"}},
            ValueError,
            "a policy is also named 'b'",
        ),
        (
            {"agent_to_policy": {"a": "p"}, "base_model": "M"},
            ValueError,
            "`lora_config` must be given together",
        ),
        ({"agent_to_policy": {}}, ValueError, "`agent_to_policy` must be a non-empty mapping"),
        (
            {"agent_to_policy": {"a": "p"}, "policies": {"p": "M"}, "device": {"zz": "cpu"}},
            ValueError,
            "`device` names 'zz'",
        ),
    ],
)
def test_from_mapping_rejects_bad_input_naming_the_field(kwargs, error, message, tiny_model_path):
    kwargs = dict(kwargs)
    if "policies" in kwargs:
        kwargs["policies"] = {k: tiny_model_path for k in kwargs["policies"]}
    if "base_model" in kwargs:
        kwargs["base_model"] = tiny_model_path
    with pytest.raises(error, match=message):
        MultiAgentPolicy.from_mapping(**kwargs)


def test_one_model_object_cannot_be_two_policies(tiny_model_path):
    obj = load_model(tiny_model_path)
    with pytest.raises(ValueError, match="same model object"):
        MultiAgentPolicy.per_agent({"a": obj, "b": obj}, tokenizer=tiny_model_path)
    with pytest.raises(ValueError, match="exactly one name"):
        MultiAgentPolicy.single(obj, agent_names=["a", "b"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_unavailable_device_is_a_clear_error(tiny_model_path):
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        MultiAgentPolicy.single(tiny_model_path, device="cuda:0")


def test_load_refuses_a_folder_without_layout(tmp_path):
    with pytest.raises(FileNotFoundError, match=LAYOUT_FILE):
        MultiAgentPolicy.load(tmp_path)


@pytest.mark.parametrize("arrangement", ["per_agent", "lora"])
def test_load_weights_in_place_keeps_parameter_objects(arrangement, tiny_model_path, tmp_path):
    trained = build(arrangement, tiny_model_path)
    perturb(trained, seed=5)
    trained.bump_version(trained.policies[0])
    trained.save(tmp_path)
    target = build(arrangement, tiny_model_path)
    params = {p: target.trainable_parameters(p) for p in target.policies}
    target.load_weights_(tmp_path)
    for name in target.policies:
        assert all(a is b for a, b in zip(params[name], target.trainable_parameters(name)))
    got, expected = logits_per_agent(target), logits_per_agent(trained)
    assert all(torch.equal(got[a], expected[a]) for a in target.agents)
    assert target.version(target.policies[0]) == 1
    other = build("shared", tiny_model_path)
    with pytest.raises(ValueError, match="saved `(agents|agent_to_policy)`"):
        other.load_weights_(tmp_path)


def test_backend_serves_each_agent_with_its_adapter_and_version(tiny_model_path):
    from comlrl.rollout import GenerationRequest, HFBackend, SamplingParams

    policy = build("lora_mapping", tiny_model_path)
    perturb(policy, seed=7)
    policy.bump_version("reviewer")
    backend = HFBackend(policy.handles)
    policy.bump_version("judge")  # after the backend was built: it reads the live handle
    prompt = [3, 9, 27, 81]
    requests = [
        GenerationRequest(prompt, policy=policy.policy_name(a), seed=11) for a in ("writer", "critic")
    ]
    completions = [c[0] for c in backend.generate(requests, SamplingParams(max_new_tokens=6))]
    assert [c.policy_version for c in completions] == [0, 2]
    for agent, completion in zip(("writer", "critic"), completions):
        ids = torch.tensor([completion.prompt_token_ids + completion.token_ids])
        with torch.no_grad(), policy.activate(agent) as handle:
            logprobs = torch.log_softmax(handle.model(ids).logits[0, :-1].float(), dim=-1)
        n = len(completion.token_ids)
        recomputed = logprobs[-n:].gather(1, torch.tensor(completion.token_ids)[:, None])[:, 0]
        assert torch.allclose(recomputed, torch.tensor(completion.logprobs), atol=1e-5), agent
    assert policy.handle("writer").model.active_adapter == "author"  # the backend restored it
