"""FSDP for comlrl's trainers (MADPO and MADPOIter, MARLHF's RL stage and MARLHFIter's, MAGRPO, IAC and MAAC):
each policy's update runs on an FSDP2 module (:class:`~comlrl.trainers.core.fsdp.ShardedModel`) whose
parameters, gradients and AdamW states are split over the ranks, while the policy keeps whole weights for
sampling, evaluation, comparator copies, checkpoints and ``save_model``.

**Selecting it** is what pettingllms' AT-GRPO, GRPO and SFT use (:mod:`comlrl.trainers.core.fsdp`): a
data-parallel launch (:mod:`comlrl.trainers.core.data_parallel`) whose environment has
``ACCELERATE_USE_FSDP=true``, which accelerate's launcher sets from a config with ``distributed_type: FSDP``
and ``fsdp_version: 2`` (``ACCELERATE_USE_FSDP=true torchrun ...`` by hand), with the same ``FSDP_*``
variables. Refused before any model loads: one process, LoRA adapters (``lora_config``), IAC with a value
head on the agents' own models (``use_separate_critic=False``); a prebuilt LoRA ``policy=`` when it is built.

**A policy's life over S ranks** (:class:`ShardedTraining`, a part of the trainer):

- its AdamW holds the sharded module's parameters (1/S of each, and 1/S of the optimizer states);
- an update's forward and backward passes run on the sharded module: the trainer's update method
  (``training_step``, decorated with :func:`on_sharded_modules`) sees the policy handles' ``model`` set to
  the sharded modules; each layer's forward all-gathers its weights and each backward reduce-scatters its
  gradient **summed** over the ranks, so the update engine sums only the rows (and the gradients of what is
  not sharded: critics) before it divides, as the data-parallel step does;
- after each optimizer step the new weights are all-gathered into the whole models (:meth:`ShardedTraining.push`),
  so sampling and everything else between steps sees the weights one process would have;
- checkpoints hold whole weights and the one-process optimizer states (gathered on every rank, written by
  rank 0); on resume every rank fills its shards from the loaded whole weights.

**Every rank makes the same forward and backward calls** (each is a collective): a rank without rows in an
update batch runs the trainer's filler (:attr:`ShardedTraining.filler`, the same calls on a one-token row,
back-propagated with weight zero, :meth:`MultiAgentTrainerBase.idle_update`); a micro-batch that is non-finite
on a rank is still back-propagated (zero-weighted) there, and then dropped on every rank.

What stays whole on every rank (data-parallel, gradients all-reduced): critics (MAAC, IAC with separate
critics), MARLHF's reward model, the frozen reference copies and comparator copies (no gradients). Unlike
AT-GRPO's update (:meth:`~comlrl.trainers.core.fsdp.ShardedModel.training`), the whole weights are not released
during the updates (sampling may come between the micro-batches of one optimizer step): a rank holds each
policy's whole weights plus 1/S of its parameters, gradients and AdamW states.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

from comlrl.trainers.core.fsdp import (
    ENV_SWITCH,
    FSDPSettings,
    ShardedModel,
    WholeOptimizerState,
    check_policy,
    fsdp_for_world,
)
from comlrl.trainers.core.trainer_core import TrainerPart

__all__ = ["ShardedTraining", "fsdp_for_trainer", "on_sharded_modules"]


def fsdp_for_trainer(owner: str, world_size: int, args: Any, lora_config: Any = None) -> FSDPSettings | None:
    """The FSDP settings of this launch for trainer ``owner`` (None without ``ACCELERATE_USE_FSDP``); what it
    cannot shard is refused here, before any model loads."""
    settings = fsdp_for_world(world_size)
    if settings is None:
        return None
    refusal = None
    if lora_config is not None:
        refusal = "`lora_config` trains LoRA adapters, whose base is frozen and shared; train them without FSDP"
    elif getattr(args, "rl_algorithm", None) == "iac" and not getattr(args, "use_separate_critic", True):
        refusal = "IAC with use_separate_critic=False puts a value head on each agent's model; use separate critics"
    if refusal is not None:
        raise ValueError(f"`{ENV_SWITCH}` is true but {owner} cannot be sharded with FSDP: {refusal}")
    return settings


def on_sharded_modules(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a trainer's update method (or a trainer part's: its ``host``, the narrow view of its trainer) with
    the policy handles on their FSDP modules when the trainer shards (:meth:`ShardedTraining.modules`); as it
    is otherwise."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        sharded = getattr(getattr(self, "host", self), "sharded", None)
        if sharded is None:
            return method(self, *args, **kwargs)
        with sharded.modules():
            return method(self, *args, **kwargs)

    return run


class ShardedTraining(TrainerPart):
    """The FSDP modules of a :class:`~comlrl.policy.MultiAgentPolicy`'s models (one per distinct model) and what
    the trainer's checkpoints need of them (see the module docstring).

    Args:
        policy: the team (whole models, no LoRA adapter).
        settings: :class:`~comlrl.trainers.core.fsdp.FSDPSettings`.
        data_parallel: the trainer's :class:`~comlrl.trainers.core.data_parallel.DataParallel`; its engine
            hook then leaves the sharded gradients to the reduce-scatter.
        optimizers: the trainer's ``{policy: AdamW}`` on :meth:`trainable_parameters` (a callable: they are
            built after this part), whose whole states the checkpoints gather (:meth:`whole_optimizers`).

    ``filler`` (set by whoever updates the policies): the forward and backward calls of a rank without rows
    in an update batch, back-propagated with weight zero through the trainer's engine.
    """

    def __init__(
        self, policy: Any, settings: FSDPSettings, data_parallel: Any, optimizers: Callable[[], Mapping[str, Any]]
    ) -> None:
        check_policy(policy)
        by_model: dict[int, ShardedModel] = {}
        self.by_policy: dict[str, ShardedModel] = {}
        for name in policy.policies:
            model = policy.handle(name).model
            if id(model) not in by_model:
                by_model[id(model)] = ShardedModel(model, settings, policy.trainable_parameters(name))
            self.by_policy[name] = by_model[id(model)]
        self.policy = policy
        self.models = list(by_model.values())
        self.filler: Callable[[], None] | None = None
        self.optimizers = optimizers
        self._whole: dict[str, WholeOptimizerState] = {}
        self._swapped = False
        data_parallel.sharded = True

    def trainable_parameters(self, name: str) -> list[torch.nn.Parameter]:
        """Policy ``name``'s trainable parameters on its sharded module (what its AdamW holds)."""
        return self.by_policy[name].parameters()

    @contextmanager
    def modules(self) -> Iterator[None]:
        """Inside the block every policy handle's ``model`` is its sharded module (in the whole model's train /
        eval mode), so an update scores and back-propagates through FSDP; restored on exit."""
        if self._swapped:  # already inside
            yield
            return
        handles = self.policy.handles
        whole = {name: handle.model for name, handle in handles.items()}
        for name, handle in handles.items():
            module = self.by_policy[name].module
            module.train(whole[name].training)
            handle.model = module
        self._swapped = True
        try:
            yield
        finally:
            for name, handle in handles.items():
                handle.model = whole[name]
            self._swapped = False

    def fill(self) -> None:
        """This rank has no rows in the current micro-batch: the filler's forward and backward calls (on the
        sharded modules), so every rank makes the same collectives."""
        if self.filler is None:
            raise RuntimeError("FSDP: the trainer set no `filler` for a rank without rows in an update batch")
        with self.modules():
            self.filler()

    def push(self) -> None:
        """All-gather every sharded module's weights into its whole model (a collective: after each step)."""
        for model in self.models:
            model.push()

    def whole_optimizers(self) -> dict[str, WholeOptimizerState]:
        """The checkpoints' view of the policies' sharded AdamWs: one-process state dicts."""
        optimizers = self.optimizers()
        for name, optimizer in optimizers.items():
            if name not in self._whole or self._whole[name].optimizer is not optimizer:
                self._whole[name] = WholeOptimizerState(optimizer)
        return {name: self._whole[name] for name in optimizers}

    # ------------------------------------------------------------------------------------ the part's hooks
    def gather(self) -> None:
        for optimizer in self.whole_optimizers().values():
            optimizer.gather()

    def release(self) -> None:
        for optimizer in self._whole.values():
            optimizer.release()

    def restore(self, checkpoint: Any) -> None:
        for model in self.models:  # the loaded whole weights into this rank's shards (local)
            model.pull()
