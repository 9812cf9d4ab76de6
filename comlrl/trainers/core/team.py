"""The team of a multi-agent trainer, built from the public CoMLRL keywords: one model source per agent
(``agent_model`` / ``agents``), devices (``agent_devices``, ``parallel_training``), model loading options and
special tokens (``model_config``), tokenizers, a LoRA arrangement (``lora_config``) or a prebuilt ``policy``;
plus the prompt formatters, the datasets as item lists, and the team's public on-disk layout (``agent_i/``).

Every keyword is checked before any model is loaded, and where the public CoMLRL library rejects a value its
sentence is part of the message (:func:`~comlrl.validation.public_wording`). A config with
``actor_critic_constructor_rules`` (the IAC / MAAC configs) also gets the public actor-critic rules:
``agents`` holds exactly ``num_agents`` models and comes with a ``tokenizer``."""

from __future__ import annotations

import copy
import inspect
import os
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from comlrl.policy import MultiAgentPolicy
from comlrl.trainers.core.device_scheduler import DeviceScheduler
from comlrl.validation import public_wording

__all__ = [
    "agent_count",
    "agent_sources",
    "as_items",
    "build_team",
    "check_team_keywords",
    "resolve_devices",
    "resolve_formatters",
    "save_agent_folders",
    "source_name",
]


def build_team(
    agent_model: Any,
    agents: Sequence[Any] | None,
    num_agents: int,
    tokenizer: Any,
    model_config: Mapping[str, Any] | None,
    lora_config: Any,
    policy: MultiAgentPolicy | None,
    args: Any,
    *,
    centralized: bool,
) -> tuple[MultiAgentPolicy, list[str | None]]:
    """``(policy, actor names)``: the team and, per actor, the name it was given by (None for a model
    object not loaded from a local folder). ``centralized`` asks for exactly one actor."""
    if policy is not None:
        if agent_model is not None or agents is not None:
            raise ValueError("give either `policy` or `agent_model`/`agents`, not both")
        if not isinstance(policy, MultiAgentPolicy):
            raise TypeError(f"`policy` must be a MultiAgentPolicy, got {type(policy).__name__}")
        if lora_config is not None:
            raise ValueError("`lora_config` applies only when the trainer builds the team; `policy` is built")
        if centralized and policy.num_agents != 1:
            raise ValueError(
                "Centralized collaboration requires exactly one actor model: "
                "`policy` must have one agent, "
                f"got {policy.num_agents}"
            )
        return policy, [None] * policy.num_agents
    sources, tokenizers = check_team_keywords(agent_model, agents, num_agents, tokenizer, args, centralized=centralized)
    actor_names = [source_name(s) for s in sources]
    count = len(sources)
    names = [f"agent_{i}" for i in range(count)]
    load_kwargs, special_tokens = _model_loading_options(dict(model_config or {}))
    devices = resolve_devices(args.agent_devices, count, args.parallel_training)

    if lora_config is not None:
        if len({_source_key(s) for s in sources}) != 1:
            raise ValueError(
                "`lora_config` puts every agent on one base model; `agents` name different models"
            )
        model, tok = _load_one(sources[0], tokenizers[0], devices[0], load_kwargs, args, "agent_model")
        _add_special_tokens(model, tok, special_tokens)
        team = MultiAgentPolicy.from_mapping(
            {n: n for n in names},
            base_model=model,
            lora_config=lora_config,
            tokenizer=tok,
            arrangement="lora",
        )
        return team, actor_names
    models, toks = {}, {}
    for i, (name, source) in enumerate(zip(names, sources)):
        if isinstance(source, nn.Module) and any(source is m for m in models.values()):
            source = copy.deepcopy(source)  # one object for every agent: independent copies
        field = "agent_model" if agents is None else f"agents[{i}]"
        model, tok = _load_one(source, tokenizers[i], devices[i], load_kwargs, args, field)
        _add_special_tokens(model, tok, special_tokens)
        models[name], toks[name] = model, tok
    team = MultiAgentPolicy.from_mapping(
        {n: n for n in names}, models, tokenizer=toks, arrangement="single" if count == 1 else "per_agent"
    )
    return team, actor_names


def check_team_keywords(
    agent_model: Any,
    agents: Sequence[Any] | None,
    num_agents: int,
    tokenizer: Any,
    args: Any,
    *,
    centralized: bool,
) -> tuple[list[Any], list[Any]]:
    """``(one model source per actor, one tokenizer or None per actor)``: the team keywords checked without
    loading anything, in the public library's order (under centralized collaboration one actor and one
    tokenizer; then a source for every agent, :func:`agent_sources`; then, for the actor-critic configs, a
    tokenizer with ``agents``). The trainers call it before any other rule that could hide these errors."""
    if centralized and agents is not None and (_is_source_list(agents) and len(agents) != 1):
        raise ValueError(
            "Centralized collaboration requires exactly one actor model. `agents` must hold one model, "
            f"got {len(agents)}"
        )
    if centralized:
        _tokenizer_list(tokenizer, 1, centralized=True)
    rules = bool(getattr(args, "actor_critic_constructor_rules", False)) and not centralized
    sources = agent_sources(agent_model, agents, 1 if centralized else num_agents, exact_count=rules)
    if rules and agents is not None and tokenizer is None:
        raise ValueError(
            "Tokenizer must be provided when using agents. `tokenizer` is None while `agents` is given "
            f"({type(args).__name__} follows the public actor-critic rules)"
        )
    tokenizers = _tokenizer_list(tokenizer, len(sources), centralized=centralized, per_source=agents is not None)
    return sources, tokenizers


def agent_count(
    agents: Sequence[Any] | None,
    num_agents: int,
    policy: MultiAgentPolicy | None,
    args: Any,
    *,
    centralized: bool,
) -> int:
    """How many agents (roles, under centralized collaboration) the keywords ask for, known before any model
    is loaded: what the prompt formatters are checked against."""
    if centralized:
        return int(args.num_agents)
    if isinstance(policy, MultiAgentPolicy):
        return policy.num_agents
    if agents is not None and _is_source_list(agents):
        return len(agents)
    return num_agents


def save_agent_folders(policy: MultiAgentPolicy, agent_names: Sequence[str], directory: Path) -> None:
    """``directory/agent_i/`` for every agent, as the public library writes them (model and tokenizer
    ``save_pretrained``; a LoRA agent's folder holds its adapter and tokenizer, the base goes to
    ``directory/base/``), next to the policy folders ``policy.save(directory)`` wrote."""
    from comlrl.models.lora import save_adapter, save_base

    written_base = False
    for i, agent in enumerate(agent_names):
        target = directory / f"agent_{i}"
        handle = policy.handle(agent)
        if handle.adapter is None and handle.name == target.name:
            continue  # the policy's own folder already is agent_i
        if target.exists():
            shutil.rmtree(target)
        if handle.adapter is not None:
            save_adapter(handle.model, handle.adapter, target)
            if not written_base:
                save_base(handle.model, directory / "base")
                handle.tokenizer.save_pretrained(directory / "base")
                written_base = True
        else:
            handle.model.save_pretrained(target)
        handle.tokenizer.save_pretrained(target)


def agent_sources(
    agent_model: Any, agents: Sequence[Any] | None, num_agents: int, *, exact_count: bool = False
) -> list[Any]:
    """One model source per agent from the public ``agent_model`` / ``agents`` keywords: ``agents`` (of
    ``num_agents`` entries when ``exact_count`` or when ``agent_model`` is given too, which must then name
    the same model), else ``agent_model`` for each of ``num_agents`` agents."""
    if agent_model is None and agents is None:
        raise ValueError(
            "Either agent_model or agents must be provided. Got `agent_model`=None and `agents`=None."
        )
    if agents is None:
        if not isinstance(agent_model, (str, os.PathLike, nn.Module)):
            message = (
                "`agent_model` must be a model name, a local path or a model object to create homogeneous "
                f"agents, got {type(agent_model).__name__}"
            )
            raise ValueError(
                public_wording(message, "agent_model should be a string to create homogeneous agents")
            )
        return [agent_model] * num_agents
    if not _is_source_list(agents) or not agents:
        if agent_model is not None and not _is_source_list(agents):
            public = (
                "Cannot provide both agent_model and agents unless agents is a list of "
                f"num_agents ({num_agents}) model names."
            )
        else:
            public = "agents must be a non-empty sequence."
        message = f"`agents` must be a non-empty list of model names or model objects, got {agents!r:.80}"
        raise ValueError(public_wording(message, public))
    agents = list(agents)
    missing = [i for i, a in enumerate(agents) if a is None]
    if missing:
        raise ValueError(
            public_wording(f"`agents[{missing[0]}]` is None", "agents entries must be non-null.")
        )
    if (exact_count or agent_model is not None) and len(agents) != num_agents:
        why = "`agent_model` is given too" if agent_model is not None else "one model per agent"
        message = f"`agents` must hold num_agents ({num_agents}) models ({why}), got {len(agents)}"
        public = f"agents length ({len(agents)}) must match num_agents ({num_agents})."
        raise ValueError(public_wording(message, public))
    if agent_model is None:
        return agents
    if not isinstance(agent_model, (str, os.PathLike)) or any(
        not isinstance(a, (str, os.PathLike)) or str(a) != str(agent_model) for a in agents
    ):
        message = "`agent_model` and `agents` conflict: give one of them, or the same model name in both"
        public = f"agent_model and agents conflict: {_label(agent_model)} != {[_label(a) for a in agents]}."
        raise ValueError(public_wording(message, public))
    return [agent_model] * num_agents


def _is_source_list(value: Any) -> bool:
    """A list or tuple of model sources (a name, a path or one model object is a single source)."""
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, os.PathLike, nn.Module))


def _label(source: Any) -> str:
    return os.fspath(source) if isinstance(source, (str, os.PathLike)) else type(source).__name__


def source_name(source: Any) -> str | None:
    """The name an actor was given by (preset, path or hub id); for a model object, its ``name_or_path``
    only when that is a local folder (never a ``model_type`` or class name); else None."""
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    folder = getattr(source, "name_or_path", "") or ""
    return str(folder) if folder and Path(folder).is_dir() else None


def resolve_devices(spec: Any, count: int, parallel_training: str) -> list[str]:
    """One device per agent from ``agent_devices`` (the public rules)."""
    if spec is None or spec == "auto":
        devices = DeviceScheduler.auto_devices(count)
    elif isinstance(spec, str):
        devices = [spec] * count
    elif len(spec) == 1:
        devices = list(spec) * count
    elif len(spec) == count:
        devices = list(spec)
    else:
        raise ValueError(f"`agent_devices` must have 1 or {count} entries, got {len(spec)}")
    if parallel_training == "none":
        devices = [devices[0]] * count
    return [str(d) for d in devices]


def resolve_formatters(formatters: Any, count: int) -> list[Callable[[Any], Any]]:
    """One prompt formatter per agent: None reads ``item["prompt"]``; one callable serves every agent."""
    if formatters is None:
        return [_default_formatter] * count
    if callable(formatters):
        return [formatters] * count
    if isinstance(formatters, (list, tuple)):
        if len(formatters) != count:
            message = f"`formatters` must hold one formatter per agent ({count}), got {len(formatters)}"
            public = "Number of formatters must match num_agents when providing a sequence."
            raise ValueError(public_wording(message, public))
        for i, f in enumerate(formatters):
            if not callable(f):
                raise ValueError(f"`formatters[{i}]` must be callable, got {type(f).__name__}")
        return list(formatters)
    message = f"`formatters` must be None, a callable or a list of callables, got {type(formatters).__name__}"
    raise ValueError(
        public_wording(message, "formatters must be None, a callable, or a sequence of callables.")
    )


def as_items(dataset: Any, name: str) -> list[Any] | None:
    """Dataset items in order: an HF Dataset / IterableDataset or any sequence of dicts."""
    if dataset is None:
        return None
    if isinstance(dataset, (str, bytes, Mapping)):
        raise ValueError(
            f"`{name}` must be a datasets.Dataset or a sequence of dicts, got {type(dataset).__name__}"
        )
    if hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
        items = [dataset[i] for i in range(len(dataset))]
    elif isinstance(dataset, Iterable):
        items = list(dataset)
    else:
        raise ValueError(
            f"`{name}` must be a datasets.Dataset or a sequence of dicts, got {type(dataset).__name__}"
        )
    return items


def _default_formatter(item: Any) -> Any:
    try:
        return item["prompt"]
    except (KeyError, TypeError):
        raise ValueError(
            "items need a 'prompt' field when no `formatters` are given "
            f"(got {type(item).__name__} with keys {list(item) if isinstance(item, Mapping) else '-'})"
        ) from None


def _source_key(source: Any) -> Any:
    return id(source) if isinstance(source, nn.Module) else str(source)


def _model_loading_options(model_config: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    nested = dict(model_config.get("model_kwargs") or {})
    kwargs: dict[str, Any] = {}
    for key in ("dtype", "torch_dtype"):
        value = model_config.get(key, nested.get(key))
        if value is not None:
            if isinstance(value, str) and value != "auto":
                if not isinstance(getattr(torch, value, None), torch.dtype):
                    raise ValueError(f"`model_config[{key!r}]` names no torch dtype: {value!r}")
                value = getattr(torch, value)
            kwargs["dtype"] = value
    attn = model_config.get("attn_implementation", nested.get("attn_implementation"))
    if attn is not None:
        kwargs["attn_implementation"] = attn
    special = model_config.get("special_tokens") or []
    if isinstance(special, Mapping):
        special = list(special.get("additional_special_tokens", [])) + [
            v for k, v in special.items() if k != "additional_special_tokens" and isinstance(v, str)
        ]
    if isinstance(special, str) or not all(isinstance(t, str) for t in special):
        raise ValueError(f"`model_config['special_tokens']` must be a list of strings, got {special!r}")
    return kwargs, list(special)


def _tokenizer_list(
    tokenizer: Any, count: int, *, centralized: bool = False, per_source: bool = False
) -> list[Any]:
    """One tokenizer per actor: one tokenizer serves all; a list holds one per actor (with ``agent_model``
    a list of one serves all, as the public library then loads one tokenizer for every agent)."""
    if not isinstance(tokenizer, (list, tuple)):
        return [tokenizer] * count
    if centralized and len(tokenizer) != 1:
        message = f"`tokenizer` must be one tokenizer (the one actor model), got a list of {len(tokenizer)}"
        raise ValueError(public_wording(message, "Centralized collaboration requires one actor tokenizer."))
    if len(tokenizer) == 1 and not per_source:
        return list(tokenizer) * count
    if len(tokenizer) != count:
        message = (
            f"`tokenizer` must be one tokenizer or a list of {count} (one per agent), got a list of "
            f"{len(tokenizer)}"
        )
        raise ValueError(public_wording(message, "tokenizers length must match agents."))
    return list(tokenizer)


def _load_one(source: Any, tokenizer: Any, device: str, load_kwargs: dict, args: Any, field: str):
    from transformers import AutoModelForCausalLM

    from comlrl.models import load_tokenizer, resolve_model_path
    from comlrl.models.loading import default_dtype

    if isinstance(source, nn.Module):
        model = source
        if args.agent_devices is not None:
            model = model.to(device)
        if "dtype" in load_kwargs and load_kwargs["dtype"] != "auto":
            model = model.to(load_kwargs["dtype"])
        if tokenizer is None:
            folder = getattr(model, "name_or_path", "") or ""
            if not folder or not Path(folder).is_dir():
                message = (
                    f"`tokenizer` must be provided when agents are model objects (`{field}` was not loaded "
                    "from a local folder)"
                )
                public = (
                    "Tokenizer must be provided when model is a PreTrainedModel instance."
                    if field == "agent_model"
                    else "Tokenizer(s) must be provided when agents are model objects."
                )
                raise ValueError(public_wording(message, public))
            tokenizer = load_tokenizer(folder)
    elif isinstance(source, (str, os.PathLike)):
        path = resolve_model_path(source, seed=args.seed)
        kwargs = {"dtype": default_dtype(device), **load_kwargs}
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs).to(device)
        if tokenizer is None:
            tokenizer = load_tokenizer(path, seed=args.seed)
    else:
        raise ValueError(
            f"`{field}` must be a model name, a local path or a model object, got {type(source).__name__}"
        )
    if isinstance(tokenizer, (str, os.PathLike)):
        tokenizer = load_tokenizer(tokenizer)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def _add_special_tokens(model: nn.Module, tokenizer: Any, tokens: list[str]) -> None:
    if not tokens:
        return
    request = {"additional_special_tokens": tokens}
    if _accepts_replace_kw(tokenizer):
        tokenizer.add_special_tokens(request, replace_extra_special_tokens=False)
    else:
        tokenizer.add_special_tokens(request)
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer))


def _accepts_replace_kw(tokenizer: Any) -> bool:
    try:
        return "replace_extra_special_tokens" in inspect.signature(tokenizer.add_special_tokens).parameters
    except (TypeError, ValueError):
        return False
