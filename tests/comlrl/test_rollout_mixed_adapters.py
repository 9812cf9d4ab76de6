"""HFBackend on a LoRA arrangement (L2): rows of several adapters of one peft model share ``generate`` calls
through peft's mixed-batch inference (``adapter_names``), and each row still samples exactly what its own
adapter samples alone.

Tolerance: sampled ids are compared exactly; log-probs to ``atol=1e-5``. Measured on the test-tiny model
(float32, CPU, one thread): a mixed batch and the same rows served one adapter at a time agree bitwise, and
a row in a mixed batch and the same request alone differ by at most ~5e-7 (batch shape and padding change
float rounding, as for a plain model; see ``tests/comlrl/test_rollout_hf.py``).
"""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig

import comlrl.rollout.hf as hf
from comlrl.policy import MultiAgentPolicy
from comlrl.rollout import GenerationRequest, HFBackend, PolicyHandle, SamplingParams
from comlrl.rollout.hf import micro_batches, mixed_adapter_problem
from comlrl.scoring import distinct_rows, encode_shared_prompts
from comlrl.seeding import derive_seed

AGENTS = ["ann", "bob", "cat"]
ATOL = 1e-5
PARAMS = SamplingParams(n=2, max_new_tokens=10, temperature=1.0)


def lora_config(**overrides) -> LoraConfig:
    values = dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, task_type="CAUSAL_LM")
    values.update(overrides)
    return LoraConfig(**values)


def perturb_adapters(policy: MultiAgentPolicy, seed: int = 0) -> None:
    """LoRA B starts at 0 (every adapter is the base); seeded noise makes the adapters really differ (the
    test-tiny model's distributions are nearly flat, so it takes this much to change greedy picks)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name in policy.policies:
            for parameter in policy.trainable_parameters(name):
                parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))


def lora_policy(path: str, agents=AGENTS, **config) -> MultiAgentPolicy:
    policy = MultiAgentPolicy.lora(path, list(agents), lora_config(**config))
    perturb_adapters(policy)
    return policy


@pytest.fixture(scope="module", params=["CAUSAL_LM", None], ids=["causal-lm", "plain-peft-model"])
def policy(request, tiny_model_path) -> MultiAgentPolicy:
    """Three perturbed adapters on one base (PeftModelForCausalLM, and a bare PeftModel as the trainers'
    ``lora_config`` without a task type builds); tests leave its state as they found it."""
    return lora_policy(tiny_model_path, task_type=request.param)


def requests_for(agents, count: int = 4, same_prompt: bool = False) -> list[GenerationRequest]:
    """``count`` prompts of varied lengths for every agent, each request with its own seed."""
    out = []
    for i in range(count):
        for agent in agents:
            prompt = "Task 0: plan the route." if same_prompt else f"Task {i}: plan the route" + " again" * i
            out.append(GenerationRequest(prompt, policy=agent, seed=derive_seed(5, i, agent)))
    return out


def flat(results):
    return [c for group in results for c in group]


def assert_rows_match(got, expected):
    """Same ids, texts and finish reasons; log-probs within ``ATOL``."""
    got, expected = flat(got), flat(expected)
    assert [(c.token_ids, c.text, c.finish_reason, c.seed) for c in got] == [
        (c.token_ids, c.text, c.finish_reason, c.seed) for c in expected
    ]
    for a, b in zip(got, expected):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=ATOL, rtol=0)


class GenerateSpy:
    """Records the ``adapter_names`` (or None) of every real ``model.generate`` call on ``model``."""

    def __init__(self, model, monkeypatch):
        self.calls: list[list[str] | None] = []
        original = model.generate

        def generate(*args, **kwargs):
            self.calls.append(kwargs.get("adapter_names"))
            return original(*args, **kwargs)

        monkeypatch.setattr(model, "generate", generate)


# ----------------------------------------------------------------------------------------- call counts
def test_mixed_adapters_share_one_generate_call_instead_of_one_per_adapter(policy, monkeypatch):
    model = policy.handle("ann").model
    requests = requests_for(AGENTS)
    spy = GenerateSpy(model, monkeypatch)
    mixed = HFBackend(policy.handles)
    mixed.generate(requests, PARAMS)
    assert mixed.generate_calls == 1 == len(spy.calls)
    (names,) = spy.calls
    assert sorted(names) == sorted(r.policy for r in requests for _ in range(PARAMS.n))
    separate = HFBackend(policy.handles, mixed_adapters="off")  # what every call made before
    separate.generate(requests, PARAMS)
    assert separate.generate_calls == len(AGENTS)
    assert spy.calls[1:] == [None] * len(AGENTS)


def test_token_budget_cuts_the_mixed_group_like_one_policy(policy):
    """Micro-batches are cut over all adapters' rows together, by the unchanged token-budget rule."""
    requests = requests_for(AGENTS)
    backend = HFBackend(policy.handles, token_budget=200)
    got = backend.generate(requests, PARAMS)
    lengths = sorted(len(c.prompt_token_ids) for c in flat(got))
    assert backend.generate_calls == len(list(micro_batches(lengths, PARAMS.max_new_tokens, 200, None))) > 1
    per_adapter = HFBackend(policy.handles, token_budget=200, mixed_adapters="off")
    assert_rows_match(got, per_adapter.generate(requests, PARAMS))
    assert backend.generate_calls < per_adapter.generate_calls


# ----------------------------------------------------------------------------------------- equality
@pytest.mark.parametrize(
    "params",
    [
        PARAMS,
        SamplingParams(n=3, max_new_tokens=12, temperature=0.7, top_k=30, top_p=0.9),
        SamplingParams(n=1, max_new_tokens=12, temperature=0.0),
    ],
    ids=["t1", "t0.7-k30-p0.9", "greedy"],
)
def test_every_row_samples_what_its_adapter_samples_alone(policy, params):
    requests = requests_for(AGENTS)
    mixed = HFBackend(policy.handles).generate(requests, params)
    assert_rows_match(mixed, HFBackend(policy.handles, mixed_adapters="off").generate(requests, params))
    for request, group in zip(requests, mixed):
        alone = HFBackend(policy.handles).generate([request], params)  # one adapter: set_adapter path
        assert_rows_match([group], alone)


def test_adapters_really_differ_on_the_same_prompt(policy):
    """The same prompt and seed through each adapter, in one mixed batch: different greedy ids and
    different log-probs, so the equality tests above would catch a row run through the wrong adapter."""
    requests = [GenerationRequest("Task 0: plan the route.", policy=agent, seed=11) for agent in AGENTS]
    greedy = HFBackend(policy.handles).generate(requests, SamplingParams(max_new_tokens=10, temperature=0.0))
    ids = [group[0].token_ids for group in greedy]
    assert len({tuple(i) for i in ids}) == len(AGENTS), ids
    groups = HFBackend(policy.handles).generate(requests, PARAMS)
    # Scored by hand: each row's log-probs are its own adapter's and measurably not another's.
    model = policy.handle("ann").model
    for request, group in zip(requests, groups):
        completion = group[0]
        for adapter in AGENTS:
            with policy.activate(adapter):
                scored = score(model, completion)
            gap = (torch.tensor(completion.logprobs) - scored).abs().max()
            assert gap < ATOL if adapter == request.policy else gap > 1e-3
    assert model.active_adapter == "ann"


def score(model, completion) -> torch.Tensor:
    from comlrl.scoring import completion_logprobs

    scored, _ = completion_logprobs(model, [completion.prompt_token_ids], [completion.token_ids], pad_token_id=0)
    return scored[0]


def test_one_adapter_group_takes_the_unchanged_set_adapter_path(policy, monkeypatch):
    """All rows of one adapter: no ``adapter_names``, the same call as a per-policy backend, bitwise."""
    model = policy.handle("ann").model
    spy = GenerateSpy(model, monkeypatch)
    requests = [r for r in requests_for(AGENTS) if r.policy == "bob"]
    got = HFBackend(policy.handles).generate(requests, PARAMS)
    alone = HFBackend({"bob": policy.handle("bob")}).generate(requests, PARAMS)
    assert spy.calls == [None, None]
    assert [(c.token_ids, c.logprobs) for c in flat(got)] == [(c.token_ids, c.logprobs) for c in flat(alone)]
    assert model.active_adapter == "ann"


# ----------------------------------------------------------------------------------------- adapter=None
def test_adapter_none_rows_run_the_models_active_adapter_in_a_mixed_batch(tiny_model_path, monkeypatch):
    """A handle with ``adapter=None`` runs the model as is (its active adapter): in a mixed batch its rows
    are named after the active adapter, whichever that is at generate time."""
    policy = lora_policy(tiny_model_path)
    model, tokenizer = policy.handle("ann").model, policy.handle("ann").tokenizer
    handles = {**policy.handles, "as_is": PolicyHandle("as_is", model, tokenizer, adapter=None)}
    spy = GenerateSpy(model, monkeypatch)
    requests = requests_for(["as_is", "bob", "cat"], count=2)
    for active in ("ann", "cat"):
        model.set_adapter(active)
        backend = HFBackend(handles)
        got = backend.generate(requests, PARAMS)
        assert backend.generate_calls == 1 and model.active_adapter == active
        names = spy.calls[-1]
        assert sorted(set(names)) == sorted({active, "bob", "cat"})
        for request, group in zip(requests, got):
            if request.policy == "as_is":
                twin = GenerationRequest(request.prompt, policy=active, seed=request.seed)
                assert_rows_match([group], HFBackend(handles).generate([twin], PARAMS))
                alone = HFBackend({"as_is": handles["as_is"]}).generate([request], PARAMS)
                assert_rows_match([group], alone)  # what the handle gave on its own before
            assert all(c.policy == request.policy for c in group)


def test_adapter_none_next_to_the_active_adapter_is_one_set_adapter_pass(tiny_model_path, monkeypatch):
    policy = lora_policy(tiny_model_path, agents=["ann", "bob"])
    model, tokenizer = policy.handle("ann").model, policy.handle("ann").tokenizer
    handles = {"ann": policy.handle("ann"), "as_is": PolicyHandle("as_is", model, tokenizer)}
    spy = GenerateSpy(model, monkeypatch)
    requests = requests_for(["ann", "as_is"], count=2)
    backend = HFBackend(handles)
    got = backend.generate(requests, PARAMS)
    assert spy.calls == [None]  # both run the active adapter "ann": nothing to mix
    for request, group in zip(requests, got):
        assert_rows_match([group], HFBackend(handles).generate([request], PARAMS))


# ----------------------------------------------------------------------------------------- stamping
def test_every_row_keeps_its_policy_and_that_policys_version(policy):
    versions = {name: policy.version(name) for name in AGENTS}
    try:
        for i, name in enumerate(AGENTS):
            policy.handle(name).version = 10 * (i + 1)
        backend = HFBackend(policy.handles)
        requests = requests_for(AGENTS, count=2)
        for request, group in zip(requests, backend.generate(requests, PARAMS)):
            assert [c.policy for c in group] == [request.policy] * PARAMS.n
            assert {c.policy_version for c in group} == {policy.version(request.policy)}
        policy.bump_version("bob")  # read at generate time
        for request, group in zip(requests, backend.generate(requests, PARAMS)):
            assert {c.policy_version for c in group} == {policy.version(request.policy)}
        assert policy.version("bob") == 21
    finally:
        for name, version in versions.items():
            policy.handle(name).version = version


# ----------------------------------------------------------------------------------------- shared prompts
def test_shared_prompt_prefill_is_per_adapter_and_changes_no_sample(policy, monkeypatch):
    """Two adapters on the same prompt never share a prefill (their KV caches differ); share_prompts on
    and off sample the same ids."""
    requests = requests_for(AGENTS, count=2, same_prompt=True)  # every agent, the same prompt twice
    params = SamplingParams(n=3, max_new_tokens=10)
    prefills: list[tuple[int, list[str] | None]] = []
    original = hf.encode_shared_prompts

    def spy(model, ids, mask, adapter_names=None):
        first, _ = distinct_rows(ids, mask, adapter_names)
        prefills.append((len(first), adapter_names))
        return original(model, ids, mask, adapter_names=adapter_names)

    monkeypatch.setattr(hf, "encode_shared_prompts", spy)
    shared = HFBackend(policy.handles).generate(requests, params)
    [(distinct, names)] = prefills
    assert distinct == len(AGENTS)  # one prefill per adapter, shared by its 2 requests x 3 candidates
    assert len(names) == len(requests) * params.n
    plain = HFBackend(policy.handles, share_prompts=False).generate(requests, params)
    assert len(prefills) == 1
    assert_rows_match(shared, plain)


def test_encode_shared_prompts_runs_each_distinct_row_through_its_adapter(policy):
    """The prefill's logits per row equal a forward through that row's adapter alone; rows with the same
    prompt and another adapter are kept apart."""
    model, tokenizer = policy.handle("ann").model, policy.handle("ann").tokenizer
    prompt = tokenizer("Task 3: plan the route again")["input_ids"]
    ids = torch.tensor([prompt] * 4)
    mask = torch.ones_like(ids)
    names = ["bob", "ann", "bob", "cat"]
    first, inverse = distinct_rows(ids, mask, names)
    assert first.tolist() == [0, 1, 3] and inverse.tolist() == [0, 1, 0, 2]
    assert distinct_rows(ids, mask)[0].tolist() == [0]  # without keys: one prompt
    was_training = model.training
    model.eval()  # peft takes `adapter_names` in eval mode only
    try:
        with torch.no_grad():
            logits, _ = encode_shared_prompts(model, ids, mask, adapter_names=names)
            for row, name in enumerate(names):
                with policy.activate(name):
                    alone = model(input_ids=ids[row : row + 1]).logits[:, -1:]
                torch.testing.assert_close(logits[row : row + 1], alone, atol=ATOL, rtol=0)
            assert (logits[0] - logits[1]).abs().max() > 1e-3
    finally:
        model.train(was_training)
    with pytest.raises(ValueError, match="one key per row"):
        distinct_rows(ids, mask, names[:2])


# ----------------------------------------------------------------------------------------- trainer
def test_l2_trainer_makes_one_generate_call_per_generation_step(tiny_model_path, tmp_path):
    from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer
    from tests.helpers.trainer_helpers import CountingReward, plan_items

    args = MAGRPOConfig(
        output_dir=str(tmp_path / "out"),
        num_turns=1,
        max_new_tokens=4,
        num_generations=2,
        num_train_epochs=1,
        rollout_buffer_size=2,
        logging_steps=1,
        eval_interval=0,
        disable_tqdm=True,
        seed=3,
    )
    trainer = MAGRPOTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=CountingReward(),
        train_dataset=plan_items(3),
        args=args,
        lora_config=LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0),
    )
    assert trainer.policy.arrangement == "lora"
    backend = trainer.backend
    steps: list[tuple[set[str], int]] = []
    original = backend.generate

    def recording(requests, params=None):
        before = backend.generate_calls
        out = original(requests, params)
        steps.append(({r.policy for r in requests}, backend.generate_calls - before))
        return out

    backend.generate = recording
    trainer.train()
    assert steps, "the trainer never generated"
    for policies, calls in steps:
        assert policies == set(trainer.policy.policies) and calls == 1  # both agents, one call


# ----------------------------------------------------------------------------------------- fallbacks
def test_mixed_adapter_problem_names_each_obstacle(tiny_model_path):
    from comlrl.models import load_model

    policy = lora_policy(tiny_model_path, agents=["ann", "bob"])
    model = policy.handle("ann").model
    assert mixed_adapter_problem(model, ["ann", "bob", None]) is None
    assert "not a peft PeftModel" in mixed_adapter_problem(load_model(tiny_model_path), ["ann", "bob"])
    assert "no adapter(s) ['zed']" in mixed_adapter_problem(model, ["ann", "zed"])
    with model.disable_adapter():
        assert "disabled" in mixed_adapter_problem(model, ["ann", "bob"])
    model.merge_adapter()
    try:
        assert "merged into its weights" in mixed_adapter_problem(model, ["ann", "bob"])
    finally:
        model.unmerge_adapter()
    assert mixed_adapter_problem(model, ["ann", "bob"]) is None
    dora = lora_policy(tiny_model_path, agents=["ann", "bob"], use_dora=True)
    assert "LoRA variants" in mixed_adapter_problem(dora.handle("ann").model, ["ann", "bob"])


def test_unmixable_model_falls_back_to_one_pass_per_adapter_or_raises_when_required(
    tiny_model_path, monkeypatch
):
    """DoRA adapters cannot take ``adapter_names``: ``"auto"`` serves them one adapter at a time (the
    per-policy path, same samples), ``"require"`` raises naming the problem."""
    policy = lora_policy(tiny_model_path, agents=["ann", "bob"], use_dora=True)
    model = policy.handle("ann").model
    spy = GenerateSpy(model, monkeypatch)
    requests = requests_for(["ann", "bob"], count=2)
    backend = HFBackend(policy.handles)
    got = backend.generate(requests, PARAMS)
    assert backend.generate_calls == 2 and spy.calls == [None, None]
    for request, group in zip(requests, got):
        assert_rows_match([group], HFBackend(policy.handles).generate([request], PARAMS))
        assert all(c.policy == request.policy for c in group)
    with pytest.raises(ValueError, match=r"policies \['ann', 'bob'\] .* LoRA variants .* mixed_adapters='auto'"):
        HFBackend(policy.handles, mixed_adapters="require").generate(requests, PARAMS)
    assert model.active_adapter == "ann"


def test_disabled_adapters_fall_back_to_what_per_adapter_calls_did(tiny_model_path):
    """Inside peft's ``disable_adapter()`` every row runs the base, as per-adapter calls made it."""
    from comlrl.models import load_model

    policy = lora_policy(tiny_model_path, agents=["ann", "bob"])
    model = policy.handle("ann").model
    requests = requests_for(["ann", "bob"], count=2)
    with model.disable_adapter():
        backend = HFBackend(policy.handles)
        got = backend.generate(requests, PARAMS)
        assert backend.generate_calls == 2
        with pytest.raises(ValueError, match="disabled"):
            HFBackend(policy.handles, mixed_adapters="require").generate(requests, PARAMS)
    base = load_model(tiny_model_path)  # the frozen base's own weights
    base_handles = {name: PolicyHandle(name, base, policy.handle(name).tokenizer) for name in ("ann", "bob")}
    assert_rows_match(got, HFBackend(base_handles).generate(requests, PARAMS))


def test_mixed_adapters_mode_is_checked(policy):
    with pytest.raises(ValueError, match="`mixed_adapters` must be one of"):
        HFBackend(policy.handles, mixed_adapters="sometimes")
