"""Shared-prompt scoring: each distinct prompt encoded once, the same log-probs and gradients as one padded
forward per row (checked against a naive loop and against the plain forward, also through a LoRA model)."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from comlrl.scoring import (
    distinct_rows,
    gather_token_logprobs,
    per_token_logps,
    shared_prompt_completion_logits,
)

PAD = 3


@pytest.fixture(scope="module")
def model(tiny_model_path):
    from comlrl.models import load_model

    return load_model(tiny_model_path).eval()


@given(
    rows=st.lists(st.lists(st.integers(0, 3), min_size=4, max_size=4), min_size=1, max_size=12),
    pads=st.lists(st.integers(0, 3), min_size=12, max_size=12),
)
def test_distinct_rows_index_first_occurrences(rows, pads):
    ids = torch.tensor(rows)
    mask = (torch.arange(4).unsqueeze(0) >= torch.tensor(pads[: len(rows)]).unsqueeze(1)).long()
    first, inverse = distinct_rows(ids, mask)
    keys = [tuple(v for v, m in zip(r, k) if m) + (int(k.sum()),) for r, k in zip(ids.tolist(), mask)]
    expected_first = [i for i, key in enumerate(keys) if key not in keys[:i]]
    assert first.tolist() == expected_first
    assert [expected_first[j] for j in inverse.tolist()] == [keys.index(key) for key in keys]


def test_distinct_rows_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="`ids` and `mask` must be"):
        distinct_rows(torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 4, dtype=torch.long))


def grouped_batch(seed: int, groups: int = 3, k: int = 3, width: int = 6):
    """``groups`` left-padded prompts of different lengths, each repeated ``k`` times, rows shuffled, with
    right-padded completions of 1..width tokens."""
    rng = random.Random(seed)
    prompt_lengths = [rng.randint(1, 12) for _ in range(groups)]
    p = max(prompt_lengths)
    prompt_ids = torch.full((groups * k, p), PAD)
    prompt_mask = torch.zeros((groups * k, p), dtype=torch.long)
    completion_ids = torch.full((groups * k, width), PAD)
    completion_mask = torch.zeros((groups * k, width), dtype=torch.long)
    for g, length in enumerate(prompt_lengths):
        prompt = torch.tensor([rng.randrange(4, 512) for _ in range(length)])
        for row in range(g * k, (g + 1) * k):
            prompt_ids[row, p - length :] = prompt
            prompt_mask[row, p - length :] = 1
            c = rng.randint(1, width)
            completion_ids[row, :c] = torch.tensor([rng.randrange(4, 512) for _ in range(c)])
            completion_mask[row, :c] = 1
    order = torch.randperm(groups * k, generator=torch.Generator().manual_seed(seed))
    return {
        "prompt_ids": prompt_ids[order], "prompt_mask": prompt_mask[order],
        "completion_ids": completion_ids[order], "completion_mask": completion_mask[order],
    }


def naive(model, rows, temperature):
    """Row by row, unpadded, in float64."""
    out = torch.zeros(rows["completion_ids"].shape, dtype=torch.float64)
    with torch.no_grad():
        for i in range(len(rows["prompt_ids"])):
            prompt = rows["prompt_ids"][i][rows["prompt_mask"][i].bool()]
            completion = rows["completion_ids"][i][rows["completion_mask"][i].bool()]
            logits = model(torch.cat([prompt, completion]).unsqueeze(0)).logits[0].double() / temperature
            logp = torch.log_softmax(logits, dim=-1)
            for j, token in enumerate(completion.tolist()):
                out[i, j] = logp[len(prompt) - 1 + j, token]
    return out


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("width", [1, 6])
def test_shared_prompt_logprobs_match_a_naive_loop(model, temperature, width):
    rows = grouped_batch(seed=width, width=width)
    logits = shared_prompt_completion_logits(model, rows["prompt_ids"], rows["prompt_mask"], rows["completion_ids"])
    assert logits.shape[:2] == rows["completion_ids"].shape
    got = gather_token_logprobs(logits, rows["completion_ids"], temperature).masked_fill(
        rows["completion_mask"] == 0, 0.0
    )
    torch.testing.assert_close(got.double(), naive(model, rows, temperature), atol=1e-5, rtol=0)
    plain, _ = per_token_logps(model, rows, temperature)
    shared, _ = per_token_logps(model, rows, temperature, share_prompts=True)
    torch.testing.assert_close(shared, plain, atol=1e-5, rtol=0)


def gradients(model, rows, share: bool, weights: torch.Tensor) -> torch.Tensor:
    model.zero_grad()
    logps, _ = per_token_logps(model, rows, 1.0, share_prompts=share)
    (logps * weights).sum().backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad()
    return grads


def test_gradients_through_the_shared_prompt_equal_the_plain_forward(model):
    rows = grouped_batch(seed=11)
    weights = torch.randn(rows["completion_ids"].shape, generator=torch.Generator().manual_seed(0))
    plain, shared = gradients(model, rows, False, weights), gradients(model, rows, True, weights)
    assert plain.abs().sum() > 0
    torch.testing.assert_close(shared, plain, atol=1e-5, rtol=1e-4)
    # The prompt pass carries gradient: with prompts detached the embedding gradient would differ.
    embedding = model.get_input_embeddings().weight
    prompt_tokens = rows["prompt_ids"][rows["prompt_mask"].bool()].unique()
    model.zero_grad()
    logps, _ = per_token_logps(model, rows, 1.0, share_prompts=True)
    (logps * weights).sum().backward()
    assert embedding.grad[prompt_tokens].abs().sum() > 0
    model.zero_grad()


def test_shared_prompts_through_a_lora_adapter(tiny_model_path):
    from peft import LoraConfig, get_peft_model

    from comlrl.models import load_model

    base = load_model(tiny_model_path)
    lora = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    with torch.no_grad():
        for name, parameter in lora.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.05, generator=torch.Generator().manual_seed(1))
    lora.eval()
    rows = grouped_batch(seed=3)
    weights = torch.randn(rows["completion_ids"].shape, generator=torch.Generator().manual_seed(2))
    plain, shared = gradients(lora, rows, False, weights), gradients(lora, rows, True, weights)
    assert plain.abs().sum() > 0
    torch.testing.assert_close(shared, plain, atol=1e-5, rtol=1e-4)
