"""The rollout engine and scoring on CUDA: one run on a GPU machine checks all of it.

Run with ``pytest tests/gpu -q``; everything here skips without CUDA.
"""

from __future__ import annotations

import pytest
import torch

from comlrl.rollout import GenerationRequest, HFBackend, SamplingParams
from comlrl.rollout.sampling import gumbel_noise, noise_bits, sample_step, step_keys, uniform_from_bits
from comlrl.scoring import completion_logprobs
from comlrl.seeding import derive_seed

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def requests(count: int = 6) -> list[GenerationRequest]:
    return [
        GenerationRequest([4 + (7 * i + j) % 500 for j in range(3 + 5 * i)], seed=derive_seed(1, "gpu", i))
        for i in range(count)
    ]


def test_noise_hash_is_identical_on_cpu_and_cuda():
    seeds = torch.tensor([0, 1, 2**62 + 3, 987654321, 2**63 - 1])
    ids = torch.arange(4096)
    for step in (0, 1, 17, 1000):
        cpu_keys = step_keys(seeds, step)
        gpu_keys = step_keys(seeds.cuda(), step)
        assert torch.equal(cpu_keys, gpu_keys.cpu())
        cpu_bits = noise_bits(cpu_keys, ids)
        gpu_bits = noise_bits(gpu_keys, ids.cuda())
        assert torch.equal(cpu_bits, gpu_bits.cpu())
        assert torch.equal(uniform_from_bits(cpu_bits), uniform_from_bits(gpu_bits).cpu())
        # The Gumbel transform goes through float32 log, which may differ in the last ulp across devices.
        assert torch.allclose(gumbel_noise(cpu_keys, ids), gumbel_noise(gpu_keys, ids.cuda()).cpu(), rtol=1e-5,
                              atol=1e-6)


@pytest.mark.parametrize(("top_k", "top_p"), [(0, 1.0), (50, 1.0), (0, 0.9)])
def test_sample_step_draws_the_same_tokens_on_cpu_and_cuda(top_k, top_p):
    rows = 256
    logits = torch.randn(rows, 2048, generator=torch.Generator().manual_seed(0)) * 3
    args = (torch.arange(rows) * 13 + 1, 4, torch.full((rows,), 0.8), torch.full((rows,), top_k),
            torch.full((rows,), top_p))
    cpu_tokens, cpu_logprobs = sample_step(logits, *args)
    gpu_tokens, gpu_logprobs = sample_step(logits.cuda(), *(a.cuda() if torch.is_tensor(a) else a for a in args))
    agreement = (cpu_tokens == gpu_tokens.cpu()).float().mean().item()
    assert agreement >= 0.99  # only last-ulp near-ties may flip
    same = cpu_tokens == gpu_tokens.cpu()
    assert torch.allclose(cpu_logprobs[same], gpu_logprobs.cpu()[same], atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_generation_on_cuda_is_seeded_and_rescores(tiny_model_path, dtype):
    from comlrl.models import load_model, load_tokenizer

    if dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    model = load_model(tiny_model_path, device="cuda", dtype=dtype).eval()
    tokenizer = load_tokenizer(tiny_model_path)
    assert next(model.parameters()).dtype == dtype
    backend = HFBackend.from_model(model, tokenizer)
    params = SamplingParams(n=2, max_new_tokens=24, temperature=0.7, top_p=0.9)
    first = backend.generate(requests(), params)
    second = backend.generate(requests(), params)
    assert [c.token_ids for g in first for c in g] == [c.token_ids for g in second for c in g]
    completions = [c for g in first for c in g]
    assert all(len(c.token_ids) == len(c.logprobs) > 0 for c in completions)
    scored, mask = completion_logprobs(
        model, [c.prompt_token_ids for c in completions], [c.token_ids for c in completions],
        pad_token_id=tokenizer.pad_token_id, temperature=0.7,
    )
    assert scored.device.type == "cuda"
    returned = torch.zeros_like(scored)
    for i, c in enumerate(completions):
        returned[i, : len(c.logprobs)] = torch.tensor(c.logprobs, device=scored.device)
    error = (returned - scored).abs()[mask]
    # Incremental (KV-cache) and full-sequence forwards round differently, far more so in bf16.
    assert error.max().item() < (0.25 if dtype == torch.bfloat16 else 1e-4)
    if dtype == torch.float32:
        cpu_model = load_model(tiny_model_path).eval()
        cpu = HFBackend.from_model(cpu_model, tokenizer).generate(requests(), params)
        same = sum(a.token_ids == b.token_ids for ga, gb in zip(first, cpu) for a, b in zip(ga, gb))
        assert same >= 0.75 * len(completions)  # fp32 CPU and CUDA agree except after rare near-ties


def test_scoring_backward_on_cuda_bf16(tiny_model_path):
    from comlrl.models import load_model

    if not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    model = load_model(tiny_model_path, device="cuda", dtype=torch.bfloat16)
    prompts = [[5, 6, 7], [8, 9]]
    completions = [[10, 11, 2], [12]]
    logprobs, mask = completion_logprobs(model, prompts, completions, pad_token_id=3, requires_grad=True,
                                         token_budget=4)
    assert logprobs.dtype == torch.float32 and logprobs.requires_grad
    (logprobs * mask).sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
