"""Training on CUDA: bf16 against float32, one AT-GRPO step, one MADPO round, and the memory of a step.

Run with ``pytest tests/gpu -q`` (``scripts/gpu_check.sh`` runs it); everything here skips without CUDA.
All on the test-tiny model, seconds each.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from comlrl.rollout import GenerationRequest, HFBackend, SamplingParams
from comlrl.scoring import completion_logprobs
from comlrl.seeding import derive_seed
from pettingllms.execution import PolicyConfig
from tests.helpers.bonus_trainer import BonusTrainer

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

# bf16 against float32 on the same completions, in nats per token (measured on test-tiny in bf16 on CPU:
# mean 0.001-0.003, max 0.004-0.012; CUDA's kernels round differently, hence the margin).
BF16_MEAN_ABS = 0.02
BF16_MAX_ABS = 0.15
# The share of completions whose first sampled token is the same in bf16 and float32: the seeded noise is
# the same, so only near-ties (a Gumbel gap below the logit error, a few percent) may flip.
FIRST_TOKEN_AGREEMENT = 0.75
# A test-tiny step (0.1 M parameters, a few hundred tokens) needs a few MiB; this bounds a regression that
# would keep whole batches or models alive.
STEP_PEAK_MIB = 512


def bf16_or_skip() -> None:
    if not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")


def requests(count: int = 6) -> list[GenerationRequest]:
    return [
        GenerationRequest([4 + (7 * i + j) % 500 for j in range(3 + 5 * i)], seed=derive_seed(2, "gpu-train", i))
        for i in range(count)
    ]


def test_bf16_generation_and_scoring_agree_with_float32(tiny_model_path):
    from comlrl.models import load_model, load_tokenizer

    bf16_or_skip()
    tokenizer = load_tokenizer(tiny_model_path)
    bf16 = load_model(tiny_model_path, device="cuda", dtype=torch.bfloat16).eval()
    fp32 = load_model(tiny_model_path, device="cuda", dtype=torch.float32).eval()
    params = SamplingParams(n=2, max_new_tokens=24, temperature=0.7, top_p=0.9)
    low = [c for g in HFBackend.from_model(bf16, tokenizer).generate(requests(), params) for c in g]
    high = [c for g in HFBackend.from_model(fp32, tokenizer).generate(requests(), params) for c in g]
    agreement = sum(a.token_ids[:1] == b.token_ids[:1] for a, b in zip(low, high)) / len(low)
    assert agreement >= FIRST_TOKEN_AGREEMENT
    prompts, completions = [c.prompt_token_ids for c in low], [c.token_ids for c in low]
    scored = {}
    for name, model in (("bf16", bf16), ("fp32", fp32)):
        scored[name], mask = completion_logprobs(model, prompts, completions, pad_token_id=tokenizer.pad_token_id,
                                                 temperature=0.7)
        assert scored[name].dtype == torch.float32 and scored[name].device.type == "cuda"
    error = (scored["bf16"] - scored["fp32"]).abs()[mask]
    assert torch.isfinite(error).all()
    assert error.mean().item() < BF16_MEAN_ABS
    assert error.max().item() < BF16_MAX_ABS



def at_grpo_trainer(tmp_path, model_path, level: str, **overrides):
    values = dict(policy_level=level, max_turns=2, problems_per_step=2, num_generations=2, max_completion_length=8,
                  max_steps=1, learning_rate=1e-2, per_device_train_batch_size=8, disable_tqdm=True, seed=1,
                  output_dir=str(tmp_path / f"run-{level}"))
    values.update(overrides)
    model = PolicyConfig(policy_level=level, model=model_path, device="cuda", dtype="bfloat16")
    trainer = BonusTrainer.from_flat(values, model=model, env_config={"rows": 4, "cols": 4})
    if level == "L2":  # LoRA B starts at 0, so A would get no gradient: give the adapters weights
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name in trainer.policy.policies:
                for p in trainer.policy.trainable_parameters(name):
                    p.add_((0.05 * torch.randn(p.shape, generator=generator)).to(p.device, p.dtype))
    return trainer


def snapshot(policy) -> dict[str, list[torch.Tensor]]:
    return {n: [p.detach().clone() for p in policy.trainable_parameters(n)] for n in policy.policies}


def assert_every_tensor_moved(policy, before) -> None:
    for name in policy.policies:
        named = policy.named_trainable_parameters(name)
        same = [k for (k, p), b in zip(named, before[name]) if torch.equal(p.detach(), b)]
        assert not same, f"policy {name!r}: {same} did not change"


@pytest.mark.parametrize("level", ["L1", "L2"])
def test_an_at_grpo_step_on_cuda_moves_every_trainable_tensor_with_finite_metrics(level, tmp_path,
                                                                                   tiny_model_path):
    bf16_or_skip()
    trainer = at_grpo_trainer(tmp_path, tiny_model_path, level)
    policy = trainer.policy
    assert {p.device.type for n in policy.policies for p in policy.trainable_parameters(n)} == {"cuda"}
    before = snapshot(policy)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    (metrics,) = trainer.train()
    torch.cuda.synchronize()
    peak_mib = torch.cuda.max_memory_allocated() / 2**20
    assert_every_tensor_moved(policy, before)
    assert metrics["nonfinite_losses_skipped"] == 0
    for name in policy.policies:
        assert metrics[f"policy/{name}/optimizer_steps"] >= 1
        for key in ("loss", "grad_norm", "approx_kl", "entropy", "ratio_mean"):
            assert math.isfinite(metrics[f"policy/{name}/{key}"]), key
    assert peak_mib < STEP_PEAK_MIB


def test_the_memory_of_a_step_is_released_before_the_next(tmp_path, tiny_model_path):
    bf16_or_skip()
    trainer = at_grpo_trainer(tmp_path, tiny_model_path, "L1", max_steps=1)
    trainer.train()
    torch.cuda.synchronize()
    after_one = torch.cuda.memory_allocated()
    trainer.config.max_steps = 3  # a trainer already stepped continues its own run
    history = trainer.train()
    torch.cuda.synchronize()
    assert trainer.global_step == 3 and len(history) == 3
    # The optimizer state exists after the first step; later steps must not keep anything of theirs.
    assert torch.cuda.memory_allocated() <= after_one + 2**20


def test_a_madpo_round_on_cuda_moves_both_agents(tmp_path, tiny_model_path):
    from comlrl.trainers.preference import MADPOIterConfig, MADPOIterTrainer

    def reward(a, b):
        return float(len(a[0]) % 5) + 0.5 * float(len(b[0]) % 3)

    args = MADPOIterConfig(
        output_dir=str(tmp_path / "madpo"), num_iterations=1, num_train_epochs=1, preference_num_candidates=4,
        preference_pairs_per_sample=2, max_new_tokens=6, temperature=1.0, top_p=1.0, agent_learning_rate=1e-2,
        train_batch_size=2, logging_steps=1, eval_interval=0, disable_tqdm=True, agent_devices="cuda",
    )
    items = [{"prompt": f"Task {i}: write a short plan."} for i in range(4)]
    trainer = MADPOIterTrainer(agent_model=tiny_model_path, num_agents=2, reward_func=reward, train_dataset=items,
                               args=args)
    policy = trainer.policy
    assert {policy.device(n).type for n in policy.policies} == {"cuda"}
    before = snapshot(policy)
    trainer.train()
    assert trainer.updates_seen >= 1 and trainer.nonfinite_losses_skipped == 0
    assert_every_tensor_moved(policy, before)
    records = [json.loads(line) for line in trainer.metrics_logger.path.read_text().splitlines() if line]
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses and all(math.isfinite(x) for x in losses)
