"""completion_logprobs against a naive one-sequence-at-a-time loop, in every padding case."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from comlrl.scoring import PADDING_SIDES, completion_logprobs, layout, score_chunks

EOS, PAD = 2, 3  # the built tokenizers' <|im_end|> and <|pad|>


@pytest.fixture(scope="module")
def model(tiny_model_path):
    from comlrl.models import load_model

    return load_model(tiny_model_path).eval()


def make_batch(seed: int, with_empty: bool = True):
    rng = random.Random(seed)
    prompts = [[rng.randrange(4, 512) for _ in range(rng.randint(1, 14))] for _ in range(7)]
    completions = [[rng.randrange(4, 512) for _ in range(rng.randint(1, 10))] for _ in range(7)]
    completions[0].append(EOS)  # a sampled EOS is a real token
    completions[1][0:0] = [PAD, EOS]  # pad / eos ids inside a completion are real tokens too
    if with_empty:
        completions[2] = []
    return prompts, completions


def naive_logprobs(model, prompts, completions, temperature):
    rows = []
    with torch.no_grad():
        for prompt, completion in zip(prompts, completions):
            if not completion:
                rows.append([])
                continue
            logits = model(torch.tensor([prompt + completion])).logits[0].double() / temperature
            logp = torch.log_softmax(logits, dim=-1)
            rows.append([logp[len(prompt) - 1 + j, token].item() for j, token in enumerate(completion)])
    return rows


@pytest.mark.parametrize("padding_side", PADDING_SIDES)
@pytest.mark.parametrize("pad_token_id", [PAD, EOS], ids=["pad!=eos", "pad==eos"])
@pytest.mark.parametrize("exclude_last_token", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_matches_naive_loop(model, padding_side, pad_token_id, exclude_last_token, temperature):
    prompts, completions = make_batch(seed=len(padding_side) + pad_token_id)
    expected = naive_logprobs(model, prompts, completions, temperature)
    for budget in (None, 30):
        logprobs, mask = completion_logprobs(
            model, prompts, completions, pad_token_id=pad_token_id, temperature=temperature,
            padding_side=padding_side, token_budget=budget, exclude_last_token=exclude_last_token,
        )
        longest = max(len(c) for c in completions)
        assert logprobs.shape == mask.shape == (len(prompts), longest)
        assert mask.dtype == torch.bool and logprobs.dtype == torch.float32
        for i, completion in enumerate(completions):
            kept = len(completion) - (1 if exclude_last_token and completion else 0)
            assert mask[i].tolist() == [True] * kept + [False] * (longest - kept)
            got = logprobs[i, :kept].double()
            assert torch.allclose(got, torch.tensor(expected[i][:kept], dtype=torch.float64), atol=1e-5)
            assert torch.all(logprobs[i, kept:] == 0)


def test_gradients_flow_and_match_across_chunking(model):
    prompts, completions = make_batch(seed=5, with_empty=False)
    grads = []
    for budget in (None, 25):
        model.zero_grad()
        logprobs, mask = completion_logprobs(
            model, prompts, completions, pad_token_id=PAD, token_budget=budget, requires_grad=True
        )
        assert logprobs.requires_grad
        (logprobs * mask).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    model.zero_grad()
    assert grads[0].abs().sum() > 0
    assert torch.allclose(grads[0], grads[1], atol=1e-5)
    logprobs, _ = completion_logprobs(model, prompts, completions, pad_token_id=PAD)
    assert not logprobs.requires_grad


def test_all_empty_completions(model):
    logprobs, mask = completion_logprobs(model, [[5, 6], [7]], [[], []], pad_token_id=PAD)
    assert logprobs.shape == mask.shape == (2, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompt_ids": [[1]], "completion_ids": [[1], [2]]}, "`prompt_ids` and `completion_ids` must have"),
        ({"prompt_ids": [[]], "completion_ids": [[1]]}, r"`prompt_ids\[0\]` is empty"),
        ({"padding_side": "middle"}, "`padding_side` must be one of"),
        ({"temperature": 0.0}, "`temperature` must be > 0"),
        ({"token_budget": 0}, "`token_budget` must be >= 1"),
    ],
)
def test_bad_arguments_name_the_field(model, kwargs, message):
    arguments = {"prompt_ids": [[5]], "completion_ids": [[6]], "pad_token_id": PAD, **kwargs}
    with pytest.raises(ValueError, match=message):
        completion_logprobs(model, **arguments)


def test_layout_positions():
    width, prompt_starts, completion_starts = layout([3, 1], [2, 4], "split")
    assert (width, prompt_starts, completion_starts) == (7, [0, 2], [3, 3])
    assert layout([3, 1], [2, 4], "left") == (5, [0, 0], [3, 1])
    assert layout([3, 1], [2, 4], "right") == (5, [0, 0], [3, 1])
    assert layout([2, 1], [1, 1], "left") == (3, [0, 1], [2, 2])


@given(st.lists(st.integers(1, 60), min_size=1, max_size=30), st.one_of(st.none(), st.integers(1, 200)))
def test_score_chunks_cover_every_row_once_within_budget(lengths, budget):
    chunks = score_chunks(lengths, budget)
    assert sorted(i for chunk in chunks for i in chunk) == list(range(len(lengths)))
    for chunk in chunks:
        if budget is not None and len(chunk) > 1:
            assert len(chunk) * max(lengths[i] for i in chunk) <= budget


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_per_token_logps_is_completion_logprobs_on_the_same_padded_batch(model, temperature):
    """Both score through one padded forward (``last_position_logits``): on TRL's split layout with the same
    padding the numbers are equal, not just close."""
    from comlrl.scoring import per_token_logps

    prompts, completions = make_batch(seed=9, with_empty=False)
    expected, mask = completion_logprobs(model, prompts, completions, pad_token_id=PAD, temperature=temperature)
    p, c = max(map(len, prompts)), max(map(len, completions))
    rows = {name: torch.full((len(prompts), p if "prompt" in name else c), PAD if "ids" in name else 0)
            for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")}
    for i, (prompt, completion) in enumerate(zip(prompts, completions)):
        rows["prompt_ids"][i, p - len(prompt):] = torch.tensor(prompt)
        rows["prompt_mask"][i, p - len(prompt):] = 1
        rows["completion_ids"][i, : len(completion)] = torch.tensor(completion)
        rows["completion_mask"][i, : len(completion)] = 1
    with torch.no_grad():
        logps, entropy = per_token_logps(model, rows, temperature, with_entropy=True)
    assert torch.equal(logps, expected)
    assert torch.equal(rows["completion_mask"].bool(), mask)
    assert entropy.ndim == 0 and float(entropy) > 0
