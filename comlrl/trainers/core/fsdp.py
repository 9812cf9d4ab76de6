"""FSDP for the data-parallel updates of both packages' trainers (pettingllms' AT-GRPO, GRPO and SFT; comlrl's
MADPO, MARLHF's RL stage, MAGRPO, IAC and MAAC through :mod:`comlrl.trainers.core.sharded_training`): each policy
trains as an FSDP2 module (``torch.distributed.fsdp.fully_shard`` on every decoder layer, then on the root) whose
parameters, gradients and AdamW states are split over the ranks, while the policy's own model keeps whole
weights for rollouts, evaluation, ``save_model`` and checkpoints.

**Selecting it.** accelerate's config (``distributed_type: FSDP``, ``fsdp_version: 2``) or ``accelerate
launch --use_fsdp --fsdp_version 2`` makes the launcher set ``ACCELERATE_USE_FSDP=true`` and the ``FSDP_*``
variables; under ``torchrun`` set ``ACCELERATE_USE_FSDP=true`` yourself (the one switch, whatever the
launcher and whatever the trainer). :func:`fsdp_settings` reads them, and a value it cannot honour is an
error naming the variable:

- ``FSDP_VERSION``: ``2`` (absent: 2); ``1`` is refused (FSDP1's flat parameters are not what is built);
- ``FSDP_RESHARD_AFTER_FORWARD``: ``true`` (default: a layer's gathered weights are freed after its forward
  and gathered again for its backward) or ``false`` (kept until the backward: fewer all-gathers, more memory);
- ``FSDP_TRANSFORMER_CLS_TO_WRAP``: the layer classes sharded one by one (default: the model's
  ``_no_split_modules``, its decoder layer); ``FSDP_AUTO_WRAP_POLICY`` absent or ``TRANSFORMER_BASED_WRAP``;
- ``FSDP_STATE_DICT_TYPE`` absent or ``FULL_STATE_DICT`` (rank 0 writes whole weights);
  ``FSDP_OFFLOAD_PARAMS`` and ``FSDP_ACTIVATION_CHECKPOINTING`` absent or false (not built);
- the rest (``FSDP_CPU_RAM_EFFICIENT_LOADING``, ``FSDP_SYNC_MODULE_STATES``, ``FSDP_USE_ORIG_PARAMS``, the
  prefetch flags) changes nothing: every rank loads the whole model, which its rollouts need anyway.

**The pieces.** :class:`ShardedModel` is a second module of the model's class, built on the ``meta`` device
and sharded, holding this rank's 1/S of every parameter (filled from the whole model, :meth:`ShardedModel.pull`);
the policy's AdamW is built on its parameters, so the optimizer states are 1/S too. Its backward
reduce-scatters each gradient **summed** over the ranks (the losses already carry the global normalisers);
:meth:`ShardedModel.push` all-gathers the new weights back into the whole model, and
:meth:`ShardedModel.training` brackets an update that frees the whole model's weights meanwhile.
:class:`ShardedReference` is a frozen sharded reference; :class:`WholeOptimizerState` is a sharded optimizer
as a checkpoint sees it (the one-process state dict, gathered on every rank, written by rank 0, each rank
keeping its shard on load) and :class:`ShardedCheckpoint` the trainer part that gathers it around rank 0's
write and refills the shards from the loaded whole weights. Every forward and backward of a sharded module is
a collective: every rank must make the same calls in the same order (a rank without rows runs a zero-weight
filler, :func:`zero_weight`). LoRA policies are refused (:func:`check_policy`): their base is frozen and shared
by every adapter.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from comlrl.trainers.core.trainer_core import TrainerPart

__all__ = [
    "ENV_SWITCH",
    "FSDPSettings",
    "ShardedCheckpoint",
    "ShardedModel",
    "ShardedReference",
    "WholeOptimizerState",
    "check_policy",
    "fsdp_for_world",
    "fsdp_settings",
    "reshard",
    "zero_weight",
]

ENV_SWITCH = "ACCELERATE_USE_FSDP"
_TRUE = {"1", "true", "yes", "y", "on", "t"}
_FALSE = {"0", "false", "no", "n", "off", "f"}


# ---- the settings (pure: read from an environment mapping) --------------------------------------------

@dataclass(frozen=True)
class FSDPSettings:
    """How the policies are sharded (from accelerate's ``FSDP_*`` variables, :func:`fsdp_settings`)."""

    reshard_after_forward: bool = True
    layer_classes: tuple[str, ...] = ()  # empty: the model's `_no_split_modules`


def _flag(environ: Mapping[str, str], name: str, default: bool) -> bool:
    raw = environ.get(name)
    if raw is None or not raw.strip():
        return default
    value = raw.strip().lower()
    if value in _TRUE | _FALSE:
        return value in _TRUE
    raise ValueError(f"`{name}` must be true or false, got {raw!r}")


def _choice(environ: Mapping[str, str], name: str, allowed: str, why: str) -> None:
    value = environ.get(name, "").strip()
    if value and value.upper() != allowed:
        raise ValueError(f"`{name}` is {value!r}: FSDP here supports {allowed} only ({why})")


def fsdp_settings(environ: Mapping[str, str] | None = None) -> FSDPSettings | None:
    """The FSDP settings of this launch (None when ``ACCELERATE_USE_FSDP`` is absent or false); a value that
    cannot be honoured raises ``ValueError`` naming the variable (see the module docstring)."""
    environ = os.environ if environ is None else environ
    if not _flag(environ, ENV_SWITCH, False):
        return None
    version = environ.get("FSDP_VERSION", "2").strip() or "2"
    if version != "2":
        raise ValueError(
            f"`FSDP_VERSION` is {version!r} (accelerate's `fsdp_version`): the trainers shard with FSDP2 "
            "(`fully_shard`); set `fsdp_version: 2` in the accelerate config or pass `--fsdp_version 2`"
        )
    for name, what in (("FSDP_OFFLOAD_PARAMS", "CPU offload"), ("FSDP_ACTIVATION_CHECKPOINTING", "activation checkpointing")):
        if _flag(environ, name, False):
            raise ValueError(f"`{name}` is true: {what} is not built into this FSDP; set it to false")
    _choice(environ, "FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP", "every decoder layer is sharded on its own")
    _choice(environ, "FSDP_STATE_DICT_TYPE", "FULL_STATE_DICT", "rank 0 writes whole weights and optimizer states")
    classes = tuple(c.strip() for c in environ.get("FSDP_TRANSFORMER_CLS_TO_WRAP", "").split(",") if c.strip())
    return FSDPSettings(_flag(environ, "FSDP_RESHARD_AFTER_FORWARD", True), classes)


def fsdp_for_world(world_size: int, environ: Mapping[str, str] | None = None) -> FSDPSettings | None:
    """:func:`fsdp_settings`, refused in a world of one process (nothing to shard over)."""
    settings = fsdp_settings(environ)
    if settings is not None and world_size < 2:
        raise ValueError(
            f"`{ENV_SWITCH}` is true but this run has one process: FSDP shards over the ranks of `accelerate launch "
            "--num_processes N` / `torchrun --nproc_per_node N` (N > 1); unset it to run in one process"
        )
    return settings


def check_policy(policy: Any) -> None:
    """Refuse what FSDP does not shard: LoRA policies (their base is frozen and shared by every adapter)."""
    lora = [name for name, handle in policy.handles.items() if handle.adapter is not None]
    if lora:
        raise ValueError(
            f"`{ENV_SWITCH}` is true but policies {lora} are LoRA adapters (policy level L2): FSDP shards "
            "whole-model training (L0, L1, L3); train LoRA adapters data-parallel without FSDP (their states are small)"
        )



# ---- the sharded module --------------------------------------------------------------------------------

def _fsdp_modules(module: nn.Module) -> list[nn.Module]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in module.modules() if isinstance(m, FSDPModule)]


def reshard(module: nn.Module) -> None:
    """Free every gathered layer of a sharded module (local; a no-op where nothing is gathered)."""
    for part in _fsdp_modules(module):
        part.reshard()


class ShardedModel:
    """The FSDP2 training module of a whole model (see the module docstring).

    Args:
        model: the policy's whole model (a Hugging Face ``PreTrainedModel``), on this rank's device.
        settings: the :class:`FSDPSettings`.
        trainable: the whole model's parameters that train (their sharded twins require grad and are what
            :meth:`parameters` returns, in the whole model's order); empty for a frozen reference.
    """

    def __init__(self, model: nn.Module, settings: FSDPSettings, trainable: Sequence[nn.Parameter] = ()) -> None:
        import torch.distributed as tdist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        self.model = model
        dtypes = {p.dtype for p in model.parameters()}
        if len(dtypes) != 1:
            raise ValueError(f"FSDP needs one parameter dtype per model, {type(model).__name__} has {sorted(map(str, dtypes))}")
        device = next(model.parameters()).device
        with torch.device("meta"):
            module = type(model)(copy.deepcopy(model.config))
        module.to(dtype=dtypes.pop())
        wanted = {id(p) for p in trainable}
        self._trainable = [name for name, p in model.named_parameters() if id(p) in wanted]
        for name, param in module.named_parameters():
            param.requires_grad_(name in self._trainable)
        classes = settings.layer_classes or tuple(getattr(model, "_no_split_modules", None) or ())
        layers = [m for m in module.modules() if type(m).__name__ in classes]
        if not layers:
            raise ValueError(
                f"FSDP: {type(model).__name__} has no layer of class {list(classes)} to shard one by one: set "
                "`FSDP_TRANSFORMER_CLS_TO_WRAP` to its decoder layer class"
            )
        mesh = init_device_mesh(device.type, (tdist.get_world_size(),))
        for layer in layers:
            fully_shard(layer, mesh=mesh, reshard_after_forward=settings.reshard_after_forward)
        fully_shard(module, mesh=mesh)
        for part in _fsdp_modules(module):  # sum, not average: the losses carry the global normalisers
            part.set_gradient_divide_factor(1.0)
            part.set_force_sum_reduction_for_comms(True)
        module.to_empty(device=device)
        buffers = dict(model.named_buffers())
        with torch.no_grad():
            for name, buffer in module.named_buffers():
                buffer.copy_(buffers[name])
        self.module = module
        self._released: dict[str, tuple[torch.Size, torch.dtype, torch.device]] = {}
        self.pull()

    def parameters(self) -> list[nn.Parameter]:
        """The trainable sharded parameters, in the whole model's order (what the optimizer holds)."""
        named = dict(self.module.named_parameters())
        return [named[name] for name in self._trainable]

    @torch.no_grad()
    def pull(self) -> None:
        """Fill this rank's shards from the whole model (local: every rank holds the same whole weights)."""
        from torch.distributed.tensor import distribute_tensor

        whole = dict(self.model.named_parameters())
        for name, param in self.module.named_parameters():
            local = distribute_tensor(whole[name].detach(), param.device_mesh, param.placements, src_data_rank=None)
            param.to_local().copy_(local.to_local())

    @torch.no_grad()
    def push(self) -> None:
        """All-gather the sharded weights back into the whole model (a collective: every rank calls it)."""
        reshard(self.module)
        whole = dict(self.model.named_parameters())
        for name, param in self.module.named_parameters():
            full = param.full_tensor()
            if name in self._released:
                whole[name].data = full
            else:
                whole[name].copy_(full)
        self._released = {}

    def release(self) -> None:
        """Free the whole model's weights (:meth:`push` brings them back)."""
        for name, param in self.model.named_parameters():
            self._released[name] = (param.shape, param.dtype, param.device)
            param.data = torch.empty(0, dtype=param.dtype, device=param.device)

    @contextmanager
    def training(self) -> Iterator[nn.Module]:
        """The sharded module for an update, in the whole model's train / eval mode; the whole model's
        weights are released inside and hold the updated weights after (every rank enters and leaves it)."""
        if self._released:  # already inside
            yield self.module
            return
        self.module.train(self.model.training)
        self.release()
        try:
            yield self.module
        finally:
            self.push()

    def local_numels(self) -> dict[str, tuple[int, int]]:
        """``{name: (elements this rank holds, elements of the whole parameter)}`` of the sharded module."""
        return {name: (p.to_local().numel(), p.numel()) for name, p in self.module.named_parameters()}

    def whole_numel(self) -> int:
        """Elements the whole model holds now (0 inside :meth:`training`)."""
        return sum(p.numel() for p in self.model.parameters())


class ShardedReference:
    """The frozen reference of a non-LoRA policy (its weights when this is built), sharded like the policies;
    :meth:`model` hands out a policy's reference module as :class:`~comlrl.trainers.core.reference.ReferencePolicy`
    does (in eval mode; run its forwards under ``torch.no_grad()`` and the equal-call rule)."""

    def __init__(self, policy: Any, settings: FSDPSettings) -> None:
        by_model: dict[int, ShardedModel] = {}
        self._models: dict[str, ShardedModel] = {}
        for name in policy.policies:
            model = policy.handle(name).model
            if id(model) not in by_model:
                by_model[id(model)] = ShardedModel(model, settings)
            self._models[name] = by_model[id(model)]

    @contextmanager
    def model(self, name: str) -> Iterator[nn.Module]:
        module = self._models[name].module
        was_training = module.training
        module.eval()
        try:
            yield module
        finally:
            module.train(was_training)
            reshard(module)  # the root keeps its gathered weights after a forward without backward


# ---- the update's helpers ----------------------------------------------------------------------------

def zero_weight(scores: torch.Tensor) -> torch.Tensor:
    """A loss of weight zero on ``scores``: its backward reaches every parameter with zero gradients."""
    return scores.sum() * 0.0


class WholeOptimizerState:
    """A sharded optimizer as a checkpoint sees it: the one-process state dict (whole tensors). Every rank
    calls :meth:`gather` (a collective) before the writing rank calls :meth:`state_dict`;
    :meth:`load_state_dict` keeps this rank's shard of each whole tensor (local, no communication)."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self._whole: dict[str, Any] | None = None

    def gather(self) -> None:
        from torch.distributed.tensor import DTensor

        state = self.optimizer.state_dict()
        self._whole = {
            "state": {
                index: {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in state["state"][index].items()}
                for index in sorted(state["state"])
            },
            "param_groups": state["param_groups"],
        }

    def release(self) -> None:
        self._whole = None

    def state_dict(self) -> dict[str, Any]:
        if self._whole is None:
            raise RuntimeError("WholeOptimizerState.state_dict(): call gather() on every rank first")
        return self._whole

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        from torch.distributed.tensor import DTensor, distribute_tensor

        params = [p for group in self.optimizer.param_groups for p in group["params"]]

        def shard(value: Any, param: nn.Parameter) -> Any:
            if isinstance(param, DTensor) and torch.is_tensor(value) and value.shape == param.shape:
                return distribute_tensor(value.to(param.device), param.device_mesh, param.placements, src_data_rank=None)
            return value

        sharded = {index: {k: shard(v, params[int(index)]) for k, v in entry.items()} for index, entry in state["state"].items()}
        self.optimizer.load_state_dict({"state": sharded, "param_groups": state["param_groups"]})


class ShardedCheckpoint(TrainerPart):
    """What a trainer's checkpoints need of FSDP: every rank gathers the ``optimizers``' whole states before
    rank 0 writes them (:class:`WholeOptimizerState`) and frees them after; on load, once the whole weights
    and optimizer states are in, every ``models`` entry's shards are filled from the whole model."""

    def __init__(self, optimizers: Iterable[WholeOptimizerState], models: Iterable[ShardedModel]) -> None:
        self.optimizers = list(optimizers)
        self.models = list(models)

    def gather(self) -> None:
        for optimizer in self.optimizers:
            optimizer.gather()

    def release(self) -> None:
        for optimizer in self.optimizers:
            optimizer.release()

    def restore(self, checkpoint: Any) -> None:
        for model in self.models:
            model.pull()
