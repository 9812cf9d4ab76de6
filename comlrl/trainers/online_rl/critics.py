"""Critics of the actor-critic backends: a value head on a causal LM backbone, read at the last real token.

:class:`ValueModel` is a backbone plus a float32 value head (``Linear(hidden, 1)``, or an MLP
``Linear(hidden, d) → tanh → Linear(d, 1)`` with ``hidden_dim = d``) applied to the last layer's hidden
state at each text's final non-padding token (left padding; position ids from the mask, so a padded row
scores as it does alone). The head is initialised from ``seed``.

- A *separate* critic owns its backbone (loaded from ``critic_model_name`` / ``critic_model`` /
  ``critics``, or the agents' model name) and trains all of it.
- A *shared* value head (IAC with ``use_separate_critic=False``) sits on an agent's own model: the value
  loss trains the head and, through the agent's optimizer, that agent's backbone.

Inputs are text, tokenized by the critic's tokenizer (the critic may be another model than the actor);
texts longer than the backbone's ``max_position_embeddings`` keep their tail. Critic input texts:
:func:`agent_critic_text` (IAC: one agent's prompt, and its response for Q) and :func:`joint_critic_text`
(MAAC: every agent's prompt, and the joint response for Q).

:func:`build_critics` builds a trainer's critics from the public sources (see
:func:`resolve_critic_sources`) onto ``critic_devices``; :func:`check_critic_sources` checks those keywords
without loading anything (a trainer calls it before it loads its agents). Where the public library rejects
a critic keyword, its sentence is part of the message.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from comlrl.seeding import derive_seed
from comlrl.trainers.core.models import hidden_size, last_token_index
from comlrl.validation import public_wording

# The public library's sentence for a MARLHF critic without a source.
_MARLHF_MISSING_CRITIC = (
    "critic_model_name must be provided for MARLHF with MAAC/IAC when agent models are objects."
)

__all__ = [
    "ValueModel",
    "agent_critic_text",
    "build_critics",
    "check_critic_sources",
    "critic_count",
    "joint_critic_text",
    "resolve_critic_sources",
]


def agent_critic_text(prompt: str, response: str | None = None) -> str:
    """IAC critic input: the agent's prompt (V), or prompt and response (Q)."""
    return prompt if response is None else f"{prompt}\n\n[Response]\n{response}"


def joint_critic_text(prompts: Sequence[str], responses: Sequence[str] | None = None) -> str:
    """MAAC critic input: ``[Agent i] prompt`` blocks (V), then ``[Joint Action]`` and ``[Agent i] response``
    blocks (Q); agents numbered from 0 as the public library does."""
    text = "\n\n".join(f"[Agent {i}] {p}" for i, p in enumerate(prompts))
    if responses is None:
        return text
    if len(responses) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses for the joint critic text")
    return text + "\n\n[Joint Action]\n" + "\n\n".join(f"[Agent {i}] {r}" for i, r in enumerate(responses))


class ValueModel(nn.Module):
    """A scalar value per text from a backbone's last hidden state at the last real token.

    Args:
        backbone: a transformers causal LM (or base model).
        tokenizer: its tokenizer.
        hidden_dim: width of the head's hidden layer (None: a linear head).
        seed: seeds the head's initialisation.
        shared: the backbone is an agent's model (only the head belongs to the critic).
    """

    def __init__(
        self,
        backbone: nn.Module,
        tokenizer: Any,
        *,
        hidden_dim: int | None = None,
        seed: int = 0,
        shared: bool = False,
    ) -> None:
        super().__init__()
        size = hidden_size(backbone.config)
        generator = torch.Generator().manual_seed(derive_seed(seed, "value_head"))
        if hidden_dim is None:
            layers: list[nn.Module] = [nn.Linear(size, 1)]
        else:
            layers = [nn.Linear(size, hidden_dim), nn.Tanh(), nn.Linear(hidden_dim, 1)]
        head = nn.Sequential(*layers).float()
        std = float(getattr(backbone.config, "initializer_range", 0.02) or 0.02)
        with torch.no_grad():
            for layer in head:
                if isinstance(layer, nn.Linear):
                    layer.weight.copy_(torch.randn(layer.weight.shape, generator=generator) * std)
                    layer.bias.zero_()
        self.shared = bool(shared)
        # A shared backbone is the agent's model: keep it out of this module's parameters and state dict.
        if self.shared:
            object.__setattr__(self, "backbone", backbone)
        else:
            self.backbone = backbone
        self.tokenizer = tokenizer
        self.head = head.to(next(backbone.parameters()).device)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = int(pad if pad is not None else (getattr(tokenizer, "eos_token_id", None) or 0))
        limit = getattr(backbone.config, "max_position_embeddings", None)
        self.max_length = limit if isinstance(limit, int) and limit > 0 else None

    @property
    def device(self) -> torch.device:
        return next(self.head.parameters()).device

    def critic_parameters(self) -> list[nn.Parameter]:
        """What the critic's optimizer holds: the head, plus the backbone unless it is shared."""
        params = list(self.head.parameters())
        if not self.shared:
            params += [p for p in self.backbone.parameters() if p.requires_grad]
        return params

    def encode(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded ``(input_ids, attention_mask)`` of ``texts`` on the critic's device."""
        if not texts:
            raise ValueError("`texts` must not be empty")
        ids = [list(x) for x in self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]]
        ids = [x[-self.max_length :] if self.max_length else x for x in ids]
        ids = [x if x else [self.pad_token_id] for x in ids]
        width = max(len(x) for x in ids)
        batch = torch.full((len(ids), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.long)
        for i, row in enumerate(ids):
            batch[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row) :] = 1
        return batch.to(self.device), mask.to(self.device)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """One float32 value per row."""
        index = last_token_index(attention_mask)
        position_ids = (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
        if self.shared:
            # The agent's own model (possibly a peft model with the agent's adapter active).
            hidden = self.backbone(**inputs, output_hidden_states=True, use_cache=False).hidden_states[-1]
        else:
            # A causal LM's decoder alone: no vocabulary logits.
            hidden = getattr(self.backbone, "base_model", self.backbone)(**inputs, use_cache=False)[0]
        pooled = hidden[torch.arange(hidden.shape[0], device=hidden.device), index]
        return self.head(pooled.float()).squeeze(-1)

    def values(self, texts: Sequence[str]) -> torch.Tensor:
        """Values of ``texts`` in one padded forward (with gradients as the caller set them)."""
        return self(*self.encode(texts))

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The weights a checkpoint keeps: the head, plus the backbone unless shared."""
        return {k: v.detach().cpu().clone() for k, v in self.state_dict().items()}


def critic_count(args: Any, num_agents: int) -> int:
    """Critics of the config's backend: one (maac), else one per agent (iac)."""
    return 1 if args.rl_algorithm == "maac" else num_agents


def check_critic_sources(
    args: Any, critic_model: Any, critics: Sequence[Any] | None, num_agents: int
) -> None:
    """The critic keywords of a trainer with ``num_agents`` agents, checked without loading anything (the
    rules of :func:`resolve_critic_sources` and :func:`build_critics`); a no-op for a config without critics
    (whose trainer rejects critic keywords itself)."""
    if not getattr(args, "uses_critic", False):
        return
    if args.rl_algorithm == "iac" and not args.use_separate_critic:
        _check_no_critic_sources(critic_model, critics)
        return
    _explicit_critic_sources(critic_model, critics, critic_count(args, num_agents))


def resolve_critic_sources(
    critic_model: Any,
    critics: Sequence[Any] | None,
    count: int,
    critic_model_name: str | None,
    actor_names: Sequence[str | None],
    *,
    public: str = _MARLHF_MISSING_CRITIC,
) -> list[Any]:
    """One critic source per critic: ``critics`` (one per critic), else ``critic_model`` for every critic,
    else ``critic_model_name``, else the agents' model name; a clear error when none is usable. Both
    ``critic_model`` and ``critics`` may be given when they name the same model (as in the public
    library). ``public``: the public library's sentence when no source is usable."""
    explicit = _explicit_critic_sources(critic_model, critics, count)
    if explicit is not None:
        return explicit
    if critic_model_name is not None:
        return [critic_model_name] * count
    if actor_names and all(isinstance(n, str) and n for n in actor_names):
        names = list(actor_names)
        return [names[i % len(names)] for i in range(count)]
    raise ValueError(
        public_wording(
            "`critic_model_name` must be set (or pass `critic_model` / `critics`): the actors were given as "
            "model objects without a name, so there is no model to build the critic from",
            public,
        )
    )


def _critics_label(count: int) -> str:
    """The public library's name of the expected critic count."""
    return "1 critic" if count == 1 else f"num_agents ({count})"


def _explicit_critic_sources(
    critic_model: Any, critics: Sequence[Any] | None, count: int
) -> list[Any] | None:
    """The sources ``critic_model`` / ``critics`` give (None when neither is given), checked: ``critics``
    holds exactly ``count`` entries, none None; with ``critic_model`` too, every entry names that model."""
    if critics is None:
        return None if critic_model is None else [critic_model] * count
    label = _critics_label(count)
    if isinstance(critics, (str, bytes, os.PathLike, nn.Module)) or not isinstance(critics, Sequence):
        public = (
            f"Cannot provide both critic_model and critics unless critics is a list of {label} model names."
            if critic_model is not None
            else "critics must be a non-empty sequence."
        )
        message = f"`critics` must be a list of {count} critic source(s), got {type(critics).__name__}"
        raise ValueError(public_wording(message, public))
    critics = list(critics)
    if len(critics) != count:
        message = f"`critics` must hold {count} critic source(s) (one per critic), got {len(critics)}"
        raise ValueError(public_wording(message, f"critics length ({len(critics)}) must match {label}."))
    missing = [i for i, c in enumerate(critics) if c is None]
    if missing:
        raise ValueError(
            public_wording(f"`critics[{missing[0]}]` is None", "critics entries must be non-null.")
        )
    if critic_model is None:
        return critics
    named = isinstance(critic_model, (str, os.PathLike)) and all(
        isinstance(c, (str, os.PathLike)) and os.fspath(c) == os.fspath(critic_model) for c in critics
    )
    if not named:
        labels = [os.fspath(c) if isinstance(c, (str, os.PathLike)) else type(c).__name__ for c in critics]
        mine = (
            os.fspath(critic_model)
            if isinstance(critic_model, (str, os.PathLike))
            else type(critic_model).__name__
        )
        message = "`critic_model` and `critics` conflict: give one of them, or the same model name in both"
        raise ValueError(public_wording(message, f"critic_model and critics conflict: {mine} != {labels}."))
    return critics


def _check_no_critic_sources(critic_model: Any, critics: Sequence[Any] | None) -> None:
    if critic_model is not None or critics is not None:
        message = "`critic_model` / `critics` need use_separate_critic=True (iac)"
        raise ValueError(
            public_wording(message, "critics can only be provided when use_separate_critic=True.")
        )


def build_critics(trainer: Any, critic_model: Any, critics: Sequence[Any] | None) -> list[ValueModel]:
    """The critics of ``trainer``'s actor-critic backend, in eval mode: IAC without separate critics puts a
    value head on each agent's model; otherwise one critic (MAAC) or one per agent (IAC) is built from its
    source on ``critic_devices`` (default: the agents' devices)."""
    args = trainer.args
    algorithm, seed = args.rl_algorithm, args.seed
    built: list[ValueModel] = []
    if algorithm == "iac" and not args.use_separate_critic:
        _check_no_critic_sources(critic_model, critics)
        for a in range(trainer.num_agents):
            handle = trainer.policy.handle(a)
            built.append(
                ValueModel(
                    handle.model,
                    handle.tokenizer,
                    hidden_dim=args.value_head_hidden_dim,
                    seed=derive_seed(seed, "critic", a),
                    shared=True,
                )
            )
    else:
        count = critic_count(args, trainer.num_agents)
        sources = resolve_critic_sources(
            critic_model,
            critics,
            count,
            args.critic_model_name,
            trainer.actor_names,
            public=_missing_wording(args),
        )
        devices = critic_devices(args.critic_devices, [str(trainer.policy.device(a)) for a in range(count)])
        used: list[nn.Module] = []
        for i, (source, device) in enumerate(zip(sources, devices)):
            if isinstance(source, ValueModel):
                critic = source if not any(source is u for u in used) else copy.deepcopy(source)
                used.append(critic)
                built.append(critic.to(device))
                continue
            backbone, tokenizer = _critic_backbone(source, device, i, used, trainer.tokenizers[0], seed)
            built.append(
                ValueModel(
                    backbone,
                    tokenizer,
                    hidden_dim=args.critic_value_head_hidden_dim,
                    seed=derive_seed(seed, "critic", i),
                )
            )
    for critic in built:
        critic.train(False)
    return built


def _missing_wording(args: Any) -> str:
    """The public sentence for a critic without a source: the IAC / MAAC constructors' or MARLHF's."""
    if not getattr(args, "actor_critic_constructor_rules", False):
        return _MARLHF_MISSING_CRITIC
    if args.rl_algorithm == "maac":
        return "Either critic_model or critics must be provided for MAAC."
    return "Either critic_model or critics must be provided when use_separate_critic=True."


def critic_devices(spec: Any, agent_devices: Sequence[str]) -> list[str]:
    """One device per critic from ``critic_devices`` (None: the agents' devices; one entry: all)."""
    if spec is None:
        return list(agent_devices)
    if isinstance(spec, str):
        return [spec] * len(agent_devices)
    spec = list(spec)
    if len(spec) == 1:
        return spec * len(agent_devices)
    if len(spec) < len(agent_devices):
        raise ValueError(f"`critic_devices` must have 1 or {len(agent_devices)} entries, got {len(spec)}")
    return [str(d) for d in spec[: len(agent_devices)]]


def _critic_backbone(
    source: Any, device: str, index: int, used: list[nn.Module], fallback_tokenizer: Any, seed: int
) -> tuple[nn.Module, Any]:
    from comlrl.models import load_model, load_tokenizer, resolve_model_path

    if isinstance(source, nn.Module):
        model = copy.deepcopy(source) if any(source is u for u in used) else source
        used.append(source)
        folder = getattr(model, "name_or_path", "") or ""
        tokenizer = load_tokenizer(folder) if folder and Path(folder).is_dir() else None
        if tokenizer is None:
            # A critic object without a folder shares the first agent's tokenizer (same vocabulary).
            tokenizer = fallback_tokenizer
        return model.to(device), tokenizer
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError(
            f"critic source {index} must be a model name, a local path or a model object, "
            f"got {type(source).__name__}"
        )
    path = resolve_model_path(source, seed=seed)
    # Critics train in float32 (a value regression is sensitive to bf16 rounding).
    return load_model(path, device=device, dtype=torch.float32), load_tokenizer(path)
