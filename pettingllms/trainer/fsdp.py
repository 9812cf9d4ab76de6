"""FSDP for the data-parallel AT-GRPO, GRPO and SFT updates. The machinery is comlrl's, shared with comlrl's
trainers (:mod:`comlrl.trainers.core.fsdp`: the settings from accelerate's ``ACCELERATE_USE_FSDP`` /
``FSDP_*`` variables, :class:`ShardedModel`, :class:`ShardedReference`, :class:`WholeOptimizerState`,
:class:`ShardedCheckpoint`; re-exported here); AT-GRPO's filler rows and policy-level check are this module's.

**A policy's life under FSDP over S ranks.**

- At rest the policy's model is whole on every rank: the rollout engine, evaluation and saving use it as in
  a plain data-parallel run (rollout devices need whole weights).
- :class:`ShardedModel` is a second module of the same class, built on the ``meta`` device and sharded,
  holding this rank's 1/S of every parameter (filled from the whole model); the AdamW of the policy is
  built on its parameters, so the optimizer states are 1/S too.
- :meth:`ShardedModel.training` brackets an update: the whole model's weights are released, the update runs
  on the sharded module (each layer's forward all-gathers it, each backward reduce-scatters its gradient,
  **summed** over the ranks: ``dapo``'s losses are already divided by the global token count, the row-mean
  types' are weighted by their rows and the engine divides by the global rows), and
  at the end the new weights are all-gathered back into the whole model, once per update.

**Rules the updates follow** (:mod:`pettingllms.trainer.policy_update`, :mod:`pettingllms.trainer.sft`):
every rank makes the same sequence of forward and backward calls on a sharded module, since each one is a
collective: the micro-batch count of an optimizer step is agreed with a max and a rank short of it runs
zero-weight :func:`filler_rows` (also a rank with no rows of the policy); the shared-prompt forward is kept
at two calls per micro-batch (completions at least two positions wide); a non-finite micro-batch still
backpropagates (zero-weighted) before the step is skipped on every rank. The flat gradient all-reduce of
the plain data-parallel update is skipped; clipping uses the norm over all shards (the update engine's
:func:`~comlrl.trainers.core.optimization.clip_grad_norm` with ``sharded=True``).
Checkpoints hold the one-process optimizer state (:class:`WholeOptimizerState`: full tensors, gathered on
every rank by the trainer's :class:`ShardedCheckpoint` part, written by rank 0, each rank keeping its shard on
load), so a run resumes exactly on the same world size. The reference model (``beta > 0``) is a frozen
:class:`ShardedReference`. Refused before anything starts: LoRA policies (L2), remote update workers
(``run.backend: ray``) and a world of one process.
"""

from __future__ import annotations

import torch

from comlrl.trainers.core.fsdp import (
    ENV_SWITCH,
    FSDPSettings,
    ShardedCheckpoint,
    ShardedModel,
    ShardedReference,
    WholeOptimizerState,
    check_policy,
    fsdp_for_world,
    fsdp_settings,
    reshard,
    zero_weight,
)

__all__ = [
    "ENV_SWITCH",
    "FSDPSettings",
    "ShardedCheckpoint",
    "ShardedModel",
    "ShardedReference",
    "WholeOptimizerState",
    "check_level",
    "check_policy",
    "filler_rows",
    "fsdp_for_world",
    "fsdp_settings",
    "reshard",
    "zero_weight",
]


def check_level(level: str, field: str = "policy_level") -> None:
    """Refuse policy level L2 (LoRA adapters) under FSDP, naming ``field``."""
    if level == "L2":
        raise ValueError(
            f"`{ENV_SWITCH}` is true but `{field}` is L2 (LoRA adapters): FSDP shards whole-model training (L0, "
            "L1, L3); run L2 data-parallel without FSDP (the adapters' states are small)"
        )


def filler_rows(pad_token_id: int, width: int = 2) -> dict[str, torch.Tensor]:
    """A one-row micro-batch of padding (one prompt token, ``width`` completion positions, the first one
    real) in :func:`~pettingllms.trainer.micro_batches.policy_rows`' layout, for a rank short of the agreed
    number of forward and backward calls; backpropagate :func:`zero_weight` of its scores."""
    completion_mask = torch.zeros((1, width), dtype=torch.long)
    completion_mask[0, 0] = 1
    return {
        "prompt_ids": torch.full((1, 1), pad_token_id, dtype=torch.long),
        "prompt_mask": torch.ones((1, 1), dtype=torch.long),
        "completion_ids": torch.full((1, width), pad_token_id, dtype=torch.long),
        "completion_mask": completion_mask,
        "old_per_token_logps": torch.zeros((1, width)),
        "advantages": torch.zeros(1),
    }
