"""The HF backend: seeded, batch-independent generation whose ids and log-probs trainers can rescore."""

from __future__ import annotations

import copy
import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from transformers import GenerationConfig, LogitsProcessorList

from comlrl.rollout import (
    FINISH_LENGTH,
    FINISH_STOP,
    GenerationRequest,
    HFBackend,
    PolicyHandle,
    RolloutBackend,
    SamplingParams,
)
from comlrl.rollout.hf import micro_batches, stop_string_cut
from comlrl.rollout.prompts import render_prompt, request_seed
from comlrl.rollout.sampling import SeededSampler, sample_step
from comlrl.scoring import completion_logprobs
from comlrl.seeding import derive_seed


@pytest.fixture(scope="module")
def model(tiny_model_path):
    from comlrl.models import load_model

    return load_model(tiny_model_path).eval()


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    from comlrl.models import load_tokenizer

    return load_tokenizer(tiny_model_path)


@pytest.fixture()
def backend(model, tokenizer):
    return HFBackend.from_model(model, tokenizer)


def mixed_requests(count: int = 8) -> list[GenerationRequest]:
    """Prompts of mixed kinds and lengths, each with its own seed."""
    rng = random.Random(0)
    requests = []
    for i in range(count):
        if i % 3 == 0:
            prompt = f"Question {i}: " + " ".join(rng.choice(["plan", "move", "the", "box"]) for _ in range(i))
        elif i % 3 == 1:
            prompt = [{"role": "user", "content": f"Solve step {i}" + "!" * i}]
        else:
            prompt = [rng.randrange(4, 512) for _ in range(1 + 3 * i)]
        requests.append(GenerationRequest(prompt, seed=derive_seed(7, "test", i)))
    return requests


def flatten(results):
    """Everything a completion holds but its log-probs (see :func:`assert_same`)."""
    return [
        (c.token_ids, c.text, c.finish_reason, c.seed, c.prompt_token_ids, len(c.logprobs))
        for group in results
        for c in group
    ]


def assert_same(got, expected):
    """Identical completions; log-probs to 1e-5, since padding and batch shape change float rounding
    (never the sampled ids)."""
    assert flatten(got) == flatten(expected)
    for a, b in zip([c for g in got for c in g], [c for g in expected for c in g]):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)


def test_backend_satisfies_protocol(backend):
    assert isinstance(backend, RolloutBackend)


def test_deterministic_under_a_seed(backend):
    params = SamplingParams(n=2, max_new_tokens=12, temperature=0.9)
    first = backend.generate(mixed_requests(), params)
    second = backend.generate(mixed_requests(), params)
    assert_same(first, second)
    reseeded = [GenerationRequest(r.prompt, seed=r.seed + 1) for r in mixed_requests()]
    third = backend.generate(reseeded, params)
    assert [c.token_ids for g in first for c in g] != [c.token_ids for g in third for c in g]


@pytest.mark.parametrize(
    "params",
    [SamplingParams(n=2, max_new_tokens=10), SamplingParams(n=2, max_new_tokens=10, temperature=0.7, top_p=0.9,
                                                             top_k=40)],
    ids=["plain", "truncated"],
)
def test_independent_of_batch_partners_and_batch_cuts(model, tokenizer, params):
    requests = mixed_requests()
    reference = HFBackend.from_model(model, tokenizer).generate(requests, params)
    order = list(range(len(requests)))
    random.Random(3).shuffle(order)
    for kwargs in ({"token_budget": 120}, {"max_batch_size": 1}, {}):
        backend = HFBackend.from_model(model, tokenizer, **kwargs)
        shuffled = backend.generate([requests[i] for i in order], params)
        assert_same([shuffled[order.index(i)] for i in range(len(requests))], reference)
        if kwargs:
            assert backend.generate_calls > 1
    # A request alone, or next to unrelated requests with other sampling parameters.
    alone = HFBackend.from_model(model, tokenizer).generate([requests[4]], params)
    assert_same(alone, [reference[4]])
    other = GenerationRequest("unrelated", seed=1, params=params.with_(temperature=0.0))
    mixed = HFBackend.from_model(model, tokenizer).generate([other, requests[4]], params)
    assert_same([mixed[1]], [reference[4]])


@pytest.mark.parametrize(
    "params",
    [SamplingParams(n=3, max_new_tokens=16), SamplingParams(n=3, max_new_tokens=16, temperature=0.7, top_p=0.9)],
    ids=["t1", "t0.7-p0.9"],
)
def test_logprobs_match_scoring_and_ids_replay_under_teacher_forcing(backend, model, tokenizer, params):
    requests = mixed_requests(6)
    completions = [c for group in backend.generate(requests, params) for c in group]
    prompts = [c.prompt_token_ids for c in completions]
    ids = [c.token_ids for c in completions]
    scored, mask = completion_logprobs(
        model, prompts, ids, pad_token_id=tokenizer.pad_token_id, temperature=params.temperature
    )
    for i, completion in enumerate(completions):
        assert len(completion.logprobs) == len(completion.token_ids) == int(mask[i].sum())
        assert torch.allclose(torch.tensor(completion.logprobs), scored[i, : len(ids[i])], atol=1e-5)
    # Replaying the sampler on teacher-forced logits draws the same ids: they are what was sampled.
    for completion in completions:
        sequence = torch.tensor([completion.prompt_token_ids + completion.token_ids])
        with torch.no_grad():
            logits = model(sequence).logits[0, len(completion.prompt_token_ids) - 1 : -1]
        count = logits.shape[0]
        steps = [
            sample_step(logits[j : j + 1], torch.tensor([completion.seed]), j,
                        torch.tensor([params.temperature]), torch.tensor([params.top_k]),
                        torch.tensor([params.top_p]))[0].item()
            for j in range(count)
        ]
        assert steps == completion.token_ids


def test_ids_equal_an_independent_generate_call(backend, model, tokenizer):
    request = GenerationRequest("The agent moves the box", seed=99)
    [[completion]] = backend.generate([request], SamplingParams(max_new_tokens=15))
    prompt = torch.tensor([completion.prompt_token_ids])
    sampler = SeededSampler(
        torch.tensor([completion.seed]), torch.ones(1), torch.zeros(1, dtype=torch.long), torch.ones(1),
        prompt_width=prompt.shape[1],
    )
    output = model.generate(
        prompt, attention_mask=torch.ones_like(prompt), logits_processor=LogitsProcessorList([sampler]),
        generation_config=GenerationConfig(do_sample=False, max_new_tokens=15, pad_token_id=tokenizer.pad_token_id,
                                           eos_token_id=tokenizer.eos_token_id),
    )
    generated = output[0, prompt.shape[1] :].tolist()
    assert generated[: len(completion.token_ids)] == completion.token_ids
    assert completion.seed == derive_seed(99, 0)


def test_prompt_kinds_render_once_with_the_tokenizer(backend, tokenizer):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Plan a path"}]
    chat_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                             return_dict=False)
    text_ids = tokenizer("Plan a path")["input_ids"]
    params = SamplingParams(max_new_tokens=6)
    chat, text, token_ids = backend.generate(
        [GenerationRequest(messages, seed=5), GenerationRequest("Plan a path", seed=5),
         GenerationRequest(list(text_ids), seed=5)],
        params,
    )
    assert chat[0].prompt_token_ids == list(chat_ids)
    assert text[0].prompt_token_ids == list(text_ids)
    assert text[0].token_ids == token_ids[0].token_ids  # same ids, same seed: same completion
    assert text[0].text == tokenizer.decode(text[0].token_ids, skip_special_tokens=True)


def test_bad_prompts_are_named(backend, tokenizer):
    with pytest.raises(ValueError, match="renders to no tokens"):
        backend.generate([GenerationRequest([], seed=1)])
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 512\)"):
        backend.generate([GenerationRequest([1, 9999], seed=1)])
    with pytest.raises(ValueError, match="needs 'role' and 'content'"):
        render_prompt([{"role": "user"}], tokenizer)
    with pytest.raises(KeyError, match="unknown policy 'critic'; this backend serves \\['default'\\]"):
        backend.generate([GenerationRequest("hi", policy="critic")])


def test_candidates_are_seeded_by_index(backend):
    request = GenerationRequest("Sort the list", seed=1234)
    [five] = backend.generate([request], SamplingParams(n=5, max_new_tokens=8))
    [three] = backend.generate([request], SamplingParams(n=3, max_new_tokens=8))
    assert [c.token_ids for c in five[:3]] == [c.token_ids for c in three]
    assert [c.seed for c in five] == [derive_seed(1234, j) for j in range(5)]
    assert len({tuple(c.token_ids) for c in five}) == 5


def test_unseeded_requests_derive_the_seed_from_the_prompt(backend, tokenizer):
    params = SamplingParams(max_new_tokens=6, seed=11)
    a, b = backend.generate([GenerationRequest("same"), GenerationRequest("other")], params)
    [c] = backend.generate([GenerationRequest("same")], params)
    assert a[0].token_ids == c[0].token_ids
    ids = tokenizer("same")["input_ids"]
    assert a[0].seed == derive_seed(request_seed(GenerationRequest("same"), 11, ids), 0)
    assert b[0].seed != a[0].seed


def test_greedy_matches_plain_greedy_generate(backend, model, tokenizer):
    requests = [GenerationRequest("Move left", seed=1), GenerationRequest([10, 11, 12, 13, 14, 15], seed=2)]
    results = backend.generate(requests, SamplingParams(temperature=0.0, max_new_tokens=10, n=2))
    for group in results:
        assert group[0].token_ids == group[1].token_ids  # greedy ignores the seed
        prompt = torch.tensor([group[0].prompt_token_ids])
        output = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=10,
                                pad_token_id=tokenizer.pad_token_id)
        plain = output[0, prompt.shape[1] :].tolist()
        assert plain[: len(group[0].token_ids)] == group[0].token_ids
        ids = [group[0].token_ids]
        scored, _ = completion_logprobs(model, [group[0].prompt_token_ids], ids,
                                        pad_token_id=tokenizer.pad_token_id)
        assert torch.allclose(torch.tensor(group[0].logprobs), scored[0], atol=1e-5)


@pytest.mark.parametrize("stop_length", [1, 2])
def test_stop_strings_cut_after_the_completing_token(backend, tokenizer, stop_length):
    requests = mixed_requests(6)
    params = SamplingParams(n=2, max_new_tokens=24)
    free = [c for g in backend.generate(requests, params) for c in g]
    # Stop at a string that appears in several free-running completions (a frequent 1- or 2-character
    # piece, which may span two tokens).
    counts: dict[str, int] = {}
    for c in free:
        pieces = {c.text[i : i + stop_length] for i in range(len(c.text) - stop_length + 1)}
        for piece in pieces:
            if piece.isalnum():
                counts[piece] = counts.get(piece, 0) + 1
    stop = max(sorted(counts), key=counts.get)
    stopped = [c for g in backend.generate(requests, params.with_(stop=(stop, "\x00never"))) for c in g]
    hits = 0
    for full, cut in zip(free, stopped):
        assert full.token_ids[: len(cut.token_ids)] == cut.token_ids
        assert full.logprobs[: len(cut.logprobs)] == cut.logprobs
        if stop in tokenizer.decode(full.token_ids, skip_special_tokens=False):
            hits += 1
            assert cut.finish_reason == FINISH_STOP
            assert stop in tokenizer.decode(cut.token_ids, skip_special_tokens=False)
            assert stop not in tokenizer.decode(cut.token_ids[:-1], skip_special_tokens=False)
        else:
            assert cut.token_ids == full.token_ids and cut.finish_reason == full.finish_reason
    assert hits >= 2


def test_finish_reasons_eos_kept_and_padding_stripped(model, tokenizer):
    requests = mixed_requests(6)
    params = SamplingParams(n=2, max_new_tokens=20)
    free = [c for g in HFBackend.from_model(model, tokenizer).generate(requests, params) for c in g]
    for c in free:
        ended = c.token_ids[-1] == tokenizer.eos_token_id
        assert (c.finish_reason, len(c.token_ids) == 20 or ended) == (FINISH_STOP if ended else FINISH_LENGTH, True)
        assert tokenizer.eos_token_id not in c.token_ids[:-1]
    # Declare a token that several completions sample as an extra EOS: rows end there, others run on
    # and HF pads the finished ones.
    counts: dict[int, int] = {}
    for c in free:
        for t in set(c.token_ids[:15]):
            counts[t] = counts.get(t, 0) + 1
    eos = max(sorted(counts), key=counts.get)
    eos_model = copy.deepcopy(model)
    eos_model.generation_config.eos_token_id = [tokenizer.eos_token_id, eos]
    for pad_equals_eos in (False, True):
        tok = copy.deepcopy(tokenizer)
        if pad_equals_eos:
            tok.pad_token = tok.eos_token
        ended = [c for g in HFBackend.from_model(eos_model, tok).generate(requests, params) for c in g]
        stops = 0
        for full, cut in zip(free, ended):
            if eos in full.token_ids:
                stops += 1
                end = full.token_ids.index(eos) + 1
                assert cut.token_ids == full.token_ids[:end] and cut.token_ids[-1] == eos
                assert cut.logprobs == full.logprobs[:end]
                assert cut.finish_reason == FINISH_STOP
            else:
                assert cut.token_ids == full.token_ids and cut.finish_reason == full.finish_reason
        assert 0 < stops < len(free)
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id


def test_multiple_policies_in_one_call(model, tokenizer, tiny_model_path, model_cache):
    from comlrl.models import build_preset, load_model

    other = load_model(build_preset("test-tiny", seed=1, cache_dir=model_cache)).eval()
    handles = {"solver": PolicyHandle("solver", model, tokenizer, version=3), "critic": (other, tokenizer)}
    backend = HFBackend(handles)
    requests = [GenerationRequest(r.prompt, policy="solver" if i % 2 else "critic", seed=r.seed)
                for i, r in enumerate(mixed_requests(6))]
    params = SamplingParams(n=2, max_new_tokens=8)
    together = backend.generate(requests, params)
    assert backend.generate_calls == 2  # one generate call per policy
    solo = {
        "solver": HFBackend.from_model(model, tokenizer, name="solver"),
        "critic": HFBackend.from_model(other, tokenizer, name="critic"),
    }
    for request, group in zip(requests, together):
        [expected] = solo[request.policy].generate([request], params)
        assert [c.token_ids for c in group] == [c.token_ids for c in expected]
        assert all(c.policy == request.policy for c in group)
        assert all(c.policy_version == (3 if request.policy == "solver" else 0) for c in group)
    handles["solver"].version = 4  # the policy layer bumps it; completions read it at generate time
    assert backend.generate(requests[1:2], params)[0][0].policy_version == 4
    backend.sync_weights("solver")
    with pytest.raises(KeyError, match="unknown policy"):
        backend.sync_weights("nobody")


def test_model_state_is_restored_and_model_defaults_never_leak(model, tokenizer):
    backend = HFBackend.from_model(model, tokenizer)
    request, params = GenerationRequest("abc", seed=1), SamplingParams(max_new_tokens=6)
    [[clean]] = backend.generate([request], params)
    saved = model.generation_config
    model.train()
    try:
        # Model defaults that would add logits processors in front of the sampler if they leaked in.
        model.generation_config.suppress_tokens = list(clean.token_ids)
        model.generation_config.repetition_penalty = 5.0
        [[again]] = backend.generate([request], params)
        assert model.training and model.generation_config is saved
        assert model.generation_config.suppress_tokens == list(clean.token_ids)
    finally:
        model.generation_config.suppress_tokens = None
        model.generation_config.repetition_penalty = None
        model.eval()
    assert again.token_ids == clean.token_ids
    assert torch.allclose(torch.tensor(again.logprobs), torch.tensor(clean.logprobs), atol=1e-6)


def test_peft_adapters_are_activated_per_policy_and_restored(model, tokenizer):
    from peft import LoraConfig, get_peft_model

    def lora():
        return LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # init_lora_weights=False draws random (non-zero) A and B
        peft_model = get_peft_model(copy.deepcopy(model), lora(), adapter_name="solver")
        peft_model.add_adapter("critic", lora())
    peft_model.set_adapter("solver")
    flags = {name: p.requires_grad for name, p in peft_model.named_parameters()}
    backend = HFBackend({
        "agent_a": PolicyHandle("agent_a", peft_model, tokenizer, adapter="solver"),
        "agent_b": PolicyHandle("agent_b", peft_model, tokenizer, adapter="critic"),
    })
    request = mixed_requests(3)[2]
    params = SamplingParams(max_new_tokens=10)
    got = backend.generate(
        [GenerationRequest(request.prompt, policy="agent_a", seed=request.seed),
         GenerationRequest(request.prompt, policy="agent_b", seed=request.seed)], params,
    )
    assert peft_model.active_adapter == "solver"
    assert flags == {name: p.requires_grad for name, p in peft_model.named_parameters()}

    def score(adapter, completion):
        peft_model.set_adapter(adapter)
        try:
            scored, _ = completion_logprobs(peft_model, [completion.prompt_token_ids], [completion.token_ids],
                                            pad_token_id=tokenizer.pad_token_id)
        finally:
            peft_model.set_adapter("solver")
        return scored[0]

    # Each completion's log-probs are those of its own adapter, and measurably not the other one's.
    for completion, own, other in ((got[0][0], "solver", "critic"), (got[1][0], "critic", "solver")):
        returned = torch.tensor(completion.logprobs)
        assert torch.allclose(returned, score(own, completion), atol=1e-5)
        assert (returned - score(other, completion)).abs().max() > 1e-3


@given(st.lists(st.integers(1, 50), min_size=1, max_size=40).map(sorted), st.integers(1, 20),
       st.integers(1, 400), st.one_of(st.none(), st.integers(1, 8)))
def test_micro_batches_respect_the_budget(lengths, new_tokens, budget, max_rows):
    batches = list(micro_batches(lengths, new_tokens, budget, max_rows))
    assert [i for start, stop in batches for i in range(start, stop)] == list(range(len(lengths)))
    for start, stop in batches:
        rows = stop - start
        if rows > 1:
            assert rows * (lengths[stop - 1] + new_tokens) <= budget
            assert max_rows is None or rows <= max_rows


def test_stop_string_cut_finds_the_completing_token(tokenizer):
    ids = tokenizer("the box moves left then right")["input_ids"]
    cut = stop_string_cut(ids, tokenizer, ["left"])
    assert "left" in tokenizer.decode(ids[:cut]) and "left" not in tokenizer.decode(ids[: cut - 1])
    assert stop_string_cut(ids, tokenizer, ["down"]) is None
    assert stop_string_cut(ids, tokenizer, ["right", "moves"]) == stop_string_cut(ids, tokenizer, ["moves"])


def test_constructor_checks():
    with pytest.raises(ValueError, match="`policies` must name at least one policy"):
        HFBackend({})
    with pytest.raises(ValueError, match="`token_budget` must be >= 1"):
        HFBackend({"p": (object(), object())}, token_budget=0)
    with pytest.raises(TypeError, match="policy 'p' has no `model`"):
        HFBackend({"p": object()})


def test_shared_prompt_prefill_generates_what_per_row_prefill_does(model, tokenizer):
    shared = HFBackend.from_model(model, tokenizer)
    plain = HFBackend.from_model(model, tokenizer, share_prompts=False)
    assert shared.share_prompts and not plain.share_prompts
    params = SamplingParams(n=4, max_new_tokens=12, temperature=0.9)
    # Mixed prompt lengths put left padding under the shared cache; the one-token prompt's prefill row
    # (all but its last token) is padding only.
    requests = [*mixed_requests(), GenerationRequest([7], seed=5)]
    got, expected = shared.generate(requests, params), plain.generate(requests, params)
    assert_same(got, expected)
    assert len({tuple(c.token_ids) for c in got[3]}) > 1  # the candidates differ beyond the shared prefix
    [one] = shared.generate([GenerationRequest([7], seed=1)], params)  # a one-token prompt: nothing to share
    [one_plain] = plain.generate([GenerationRequest([7], seed=1)], params)
    assert [c.token_ids for c in one] == [c.token_ids for c in one_plain]
