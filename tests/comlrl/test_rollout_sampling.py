"""The seeded sampler: counter-based noise, Gumbel-max frequencies, top-k / top-p kept sets."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from comlrl.rollout.sampling import (
    SeededSampler,
    gumbel_noise,
    kept_candidates,
    noise_bits,
    sample_step,
    splitmix64,
    step_keys,
    truncation_keep,
    uniform_from_bits,
)

MASK64 = (1 << 64) - 1


def reference_splitmix64(x: int) -> int:
    """Textbook splitmix64 finaliser on Python ints (uint64)."""
    x &= MASK64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & MASK64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def as_int64(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def naive_kept(logits: np.ndarray, temperature: float, top_k: int, top_p: float, slack: float = 1e-5):
    """(surely kept, possibly kept) token sets by the documented rule, in float64; tokens within ``slack``
    of the top-p threshold may go either way under float32 rounding."""
    z = logits / temperature
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    vocab = len(logits)
    in_k = order[:top_k] if 0 < top_k < vocab else order
    mass = probs[in_k].sum() if 0 < top_k < vocab else 1.0
    sure, maybe, above = set(), set(), 0.0
    for token in in_k:
        if above < top_p * mass - slack or token == order[0]:
            sure.add(int(token))
        if above < top_p * mass + slack or token == order[0]:
            maybe.add(int(token))
        above += probs[token]
    return sure, maybe


def rows(value, count, dtype):
    return torch.full((count,), value, dtype=dtype)


# ----------------------------------------------------------------------------------------- noise


@given(st.lists(st.integers(min_value=0, max_value=MASK64), min_size=1, max_size=50))
def test_splitmix64_matches_reference_bits(values):
    out = splitmix64(torch.tensor([as_int64(v) for v in values], dtype=torch.long)).tolist()
    assert [o & MASK64 for o in out] == [reference_splitmix64(v) for v in values]


@given(st.integers(min_value=0, max_value=2**63 - 1), st.integers(min_value=0, max_value=10_000))
def test_noise_bits_are_the_documented_counter_hash(seed, step):
    golden = 0x9E3779B97F4A7C15
    key = reference_splitmix64(seed + (step + 1) * golden)
    assert step_keys(torch.tensor([seed]), step).item() & MASK64 == key
    bits = noise_bits(step_keys(torch.tensor([seed]), step), torch.tensor([0, 7, 511])).tolist()[0]
    assert [b & MASK64 for b in bits] == [reference_splitmix64(key + v * golden) for v in (0, 7, 511)]


def test_noise_of_a_token_does_not_depend_on_batch_or_subset():
    seeds = torch.tensor([3, 2**62 + 5, 17, 123456789])
    keys = step_keys(seeds, 4)
    full = gumbel_noise(keys, torch.arange(300))
    subset = torch.tensor([[5, 299, 0], [1, 2, 3], [250, 100, 7], [8, 9, 10]])
    assert torch.equal(gumbel_noise(keys, subset), full.gather(1, subset))
    alone = gumbel_noise(step_keys(seeds[2:3], 4), torch.arange(300))
    assert torch.equal(alone[0], full[2])


def test_uniform_is_open_interval_and_exact_at_the_ends():
    bits = torch.tensor([0, -1, as_int64(1 << 63)], dtype=torch.long)
    u = uniform_from_bits(bits).tolist()
    assert u[0] == 0.5 * 2**-23
    assert u[1] == 1 - 0.5 * 2**-23
    assert u[2] == 0.5 + 0.5 * 2**-23


def test_uniform_noise_is_uniform():
    keys = step_keys(torch.arange(200), 0)
    u = uniform_from_bits(noise_bits(keys, torch.arange(500))).flatten().double()
    counts = torch.histc(u, bins=20, min=0, max=1)
    expected = u.numel() / 20
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 60  # chi-square with 19 dof: p < 1e-5 beyond ~50
    assert abs(float(u.mean()) - 0.5) < 0.005


# ------------------------------------------------------------------------------ Gumbel-max draws


@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.6])
def test_gumbel_max_frequencies_match_softmax(temperature):
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    count = 40_000
    tokens, _ = sample_step(
        logits.expand(count, -1),
        torch.arange(count),
        step=3,
        temperature=rows(temperature, count, torch.float32),
        top_k=rows(0, count, torch.long),
        top_p=rows(1.0, count, torch.float32),
    )
    probs = torch.softmax(logits.double() / temperature, dim=0)
    freq = torch.bincount(tokens, minlength=6).double() / count
    tolerance = 5 * torch.sqrt(probs * (1 - probs) / count) + 1e-4
    assert torch.all((freq - probs).abs() < tolerance), (freq, probs)


def test_truncated_frequencies_match_renormalised_softmax():
    logits = torch.tensor([1.5, 1.2, 0.3, 0.0, -0.5, -2.0, -4.0])
    count = 40_000
    temperature, top_p = 0.8, 0.75
    tokens, _ = sample_step(
        logits.expand(count, -1),
        torch.arange(count) * 7 + 1,
        step=0,
        temperature=rows(temperature, count, torch.float32),
        top_k=rows(0, count, torch.long),
        top_p=rows(top_p, count, torch.float32),
    )
    sure, maybe = naive_kept(logits.numpy().astype(np.float64), temperature, 0, top_p)
    assert sure == maybe
    probs = torch.softmax(logits.double() / temperature, dim=0)
    kept = torch.zeros(7, dtype=torch.bool)
    kept[list(sure)] = True
    target = torch.where(kept, probs, torch.zeros_like(probs))
    target /= target.sum()
    freq = torch.bincount(tokens, minlength=7).double() / count
    assert torch.all((freq - target).abs() < 5 * torch.sqrt(target * (1 - target) / count) + 1e-4)


def test_sample_step_logprob_is_before_truncation_and_greedy_uses_temperature_one():
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(0)) * 2
    temperature = torch.tensor([0.0, 0.7, 0.7, 1.0, 1.3, 0.0])
    top_k = torch.tensor([0, 5, 0, 3, 0, 4])
    top_p = torch.tensor([1.0, 1.0, 0.9, 0.5, 1.0, 0.3])
    tokens, logprobs = sample_step(logits, torch.arange(6) + 11, 2, temperature, top_k, top_p)
    for i in range(6):
        scale = 1.0 if temperature[i] == 0 else float(temperature[i])
        expected = torch.log_softmax(logits[i] / scale, dim=0)[tokens[i]]
        assert logprobs[i].item() == pytest.approx(expected.item(), abs=1e-6)
    assert tokens[0] == logits[0].argmax() and tokens[5] == logits[5].argmax()


def test_sample_step_rows_are_independent_of_their_batch():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(5, 300, generator=gen)
    seeds = torch.tensor([9, 8, 7, 6, 5])
    temperature = torch.tensor([1.0, 0.5, 0.0, 1.0, 0.9])
    top_k = torch.tensor([0, 10, 0, 0, 40])
    top_p = torch.tensor([1.0, 1.0, 1.0, 0.8, 0.95])
    together = sample_step(logits, seeds, 5, temperature, top_k, top_p)
    for i in range(5):
        alone = sample_step(logits[i : i + 1], seeds[i : i + 1], 5, temperature[i : i + 1], top_k[i : i + 1],
                            top_p[i : i + 1])
        assert alone[0].item() == together[0][i].item()
        assert alone[1].item() == together[1][i].item()


def test_different_steps_and_seeds_draw_differently():
    logits = torch.zeros(1, 512)
    draws = {
        int(sample_step(logits, torch.tensor([seed]), step, torch.ones(1), torch.zeros(1, dtype=torch.long),
                        torch.ones(1))[0])
        for seed in range(4)
        for step in range(4)
    }
    assert len(draws) > 12  # 16 draws from a uniform over 512 tokens


# ---------------------------------------------------------------------------- top-k / top-p sets

unique_logits = st.lists(st.integers(-600, 600), min_size=2, max_size=40, unique=True).map(
    lambda xs: np.array(xs, dtype=np.float64) / 100
)


@settings(max_examples=60)
@given(
    unique_logits,
    st.sampled_from([0.3, 0.7, 1.0, 2.0]),
    st.integers(0, 45),
    st.sampled_from([0.05, 0.3, 0.6, 0.9, 0.99, 1.0]),
)
def test_top_k_top_p_never_sample_outside_the_kept_set(logits, temperature, top_k, top_p):
    sure, maybe = naive_kept(logits, temperature, top_k, top_p)
    count = 64
    tensor = torch.tensor(logits, dtype=torch.float32).expand(count, -1)
    tokens, _ = sample_step(
        tensor, torch.arange(count) * 31 + 5, 1, rows(temperature, count, torch.float32),
        rows(top_k, count, torch.long), rows(top_p, count, torch.float32),
    )
    assert set(tokens.tolist()) <= maybe
    logp = torch.log_softmax(tensor[:1] / temperature, dim=-1)
    ids, _, keep = kept_candidates(logp, rows(top_k, 1, torch.long), rows(top_p, 1, torch.float32))
    kept = set(ids[0][keep[0]].tolist())
    assert sure <= kept <= maybe


def test_kept_candidates_widens_past_the_first_prefix():
    # A flat distribution: top-p 0.9 keeps ~90% of 1000 tokens, far beyond the first top-64 prefix.
    logits = torch.randn(3, 1000, generator=torch.Generator().manual_seed(2)) * 0.1
    logp = torch.log_softmax(logits, dim=-1)
    top_k = torch.tensor([0, 0, 700])
    top_p = torch.tensor([0.9, 0.5, 0.95])
    ids, values, keep = kept_candidates(logp, top_k, top_p)
    full_values, full_ids = torch.sort(logp, dim=-1, descending=True, stable=True)
    full_keep, resolved = truncation_keep(full_values, top_k, top_p, 1000)
    assert bool(resolved.all())
    for i in range(3):
        assert set(ids[i][keep[i]].tolist()) == set(full_ids[i][full_keep[i]].tolist())
        assert torch.equal(values[i][keep[i]], logp[i][ids[i][keep[i]]])
    assert keep.sum(dim=-1).tolist() == full_keep.sum(dim=-1).tolist()
    assert int(keep[0].sum()) > 64


def test_truncation_keep_reports_unresolved_prefix():
    logp = torch.log_softmax(torch.zeros(2, 100), dim=-1)
    values = logp[:, :10]  # uniform: ten tokens hold 10% of the mass
    keep, resolved = truncation_keep(values, torch.tensor([0, 5]), torch.tensor([0.5, 0.5]), 100)
    assert resolved.tolist() == [False, True]
    # top-k 5 renormalises: the mass above token 3 is 3/5 >= 0.5, so three tokens stay.
    assert keep[1].tolist() == [True] * 3 + [False] * 7


# ----------------------------------------------------------------------------------- processor


def test_seeded_sampler_forces_its_draw_and_records_it():
    sampler = SeededSampler(
        seeds=torch.tensor([1, 2]), temperature=torch.ones(2), top_k=torch.zeros(2, dtype=torch.long),
        top_p=torch.ones(2), prompt_width=4,
    )
    scores = torch.randn(2, 30)
    forced = sampler(torch.zeros(2, 4, dtype=torch.long), scores.clone())
    tokens, logprobs = sampler.history(1)
    assert torch.equal(forced.argmax(dim=-1), tokens[:, 0])
    assert torch.isinf(forced).sum() == 2 * 29
    expected = torch.log_softmax(scores, dim=-1).gather(1, tokens)
    assert torch.allclose(logprobs, expected)
    with pytest.raises(RuntimeError, match="decoding step 1, got 3"):
        sampler(torch.zeros(2, 7, dtype=torch.long), scores)
    with pytest.raises(RuntimeError, match="returned 2 new tokens"):
        sampler.history(2)


def test_gumbel_noise_is_finite_at_extreme_uniforms():
    bits = torch.tensor([[0, -1]], dtype=torch.long)
    u = uniform_from_bits(bits)
    g = -torch.log(-torch.log(u))
    assert torch.isfinite(g).all()
    assert g[0, 0].item() == pytest.approx(-math.log(-math.log(0.5 * 2**-23)), rel=1e-5)
    assert g[0, 1].item() == pytest.approx(-math.log(-math.log(1 - 0.5 * 2**-23)), rel=1e-3)
