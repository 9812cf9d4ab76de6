"""The public CoMLRL library's helpers for its team keywords, as standalone functions with its signatures,
rules and sentences: model sources (:func:`infer_model_name`, :func:`resolve_model_sources`), tokenizers
(:func:`ensure_pad_token`, :func:`ensure_tokenizer`, :func:`resolve_tokenizers`,
:func:`apply_tokenizer_specials`) and prompt formatters (:func:`build_formatters`).

comlrl's trainers check the same keywords in :mod:`comlrl.trainers.core.team`, whose messages hold these
sentences and also name our field and value, and whose rules differ where the public ones misbehave: a
model object's name there is never its ``model_type`` or class name (:func:`infer_model_name` falls back
to them, which made the public reward-model fallback load an unrelated hub model). Named models load
through :func:`comlrl.models.resolve_model_path`: presets, local folders, and hub ids only where the hub is
allowed (README, "Models, offline").
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "apply_tokenizer_specials",
    "build_formatters",
    "ensure_pad_token",
    "ensure_tokenizer",
    "infer_model_name",
    "resolve_model_sources",
    "resolve_tokenizers",
]

Formatter = Callable[[Mapping[str, Any]], str]


# --------------------------------------------------------------------------------------------------
# Model sources
# --------------------------------------------------------------------------------------------------


def infer_model_name(source: Any) -> str | None:
    """A name for a model source: a string is its own name; a model gives its config's ``_name_or_path``
    or ``model_type`` (a PEFT model: its base model's ``model_type`` first), else its class name; None for
    None."""
    if source is None:
        return None
    if isinstance(source, str):
        return source
    if hasattr(source, "base_model") and hasattr(source.base_model, "config"):
        config = source.base_model.config
        name = getattr(config, "model_type", None) or getattr(config, "_name_or_path", None)
        if name:
            return str(name)
    if hasattr(source, "model"):
        base = source.model
    elif hasattr(source, "base_model"):
        base = source.base_model
    else:
        base = source
    config = getattr(base, "config", None)
    if config is not None:
        name = getattr(config, "_name_or_path", None) or getattr(config, "model_type", None)
        if name:
            return str(name)
    return type(base).__name__


def resolve_model_sources(
    *,
    kind: str,
    model: Any,
    models: Sequence[Any] | None,
    expected_count: int,
    expected_label: str | None = None,
    model_label: str = "model",
) -> tuple[list[Any], str | None]:
    """``(one source per slot, the first source's name)`` from a shared ``model`` and/or a list ``models``
    (``kind`` names the list, e.g. ``"agents"``): the list wins and must hold ``expected_count`` non-null
    entries; given both, the list must name the same model as ``model``."""
    label = expected_label or f"num_agents ({expected_count})"
    if model is not None and models is not None:
        if isinstance(models, (str, bytes)) or not isinstance(models, Sequence):
            raise ValueError(
                f"Cannot provide both {model_label} and {kind} unless {kind} is a list of {label} model names."
            )
        if len(models) != expected_count:
            raise ValueError(f"{kind} length ({len(models)}) must match {label}.")
        model_name = infer_model_name(model)
        names = [infer_model_name(source) for source in models]
        if model_name is None or any(name is None for name in names):
            raise ValueError(
                f"Cannot verify consistency between {model_label} and {kind}; provide model names or omit one."
            )
        if any(name != model_name for name in names):
            raise ValueError(f"{model_label} and {kind} conflict: {model_name} != {names}.")
    if model is None and models is None:
        raise ValueError(f"Either {model_label} or {kind} must be provided.")
    if expected_count < 1:
        raise ValueError("expected_count must be >= 1.")
    if models is not None:
        if isinstance(models, (str, bytes)) or not isinstance(models, Sequence):
            raise ValueError(f"{kind} must be a non-empty sequence.")
        sources = list(models)
        if len(sources) != expected_count:
            raise ValueError(f"{kind} length ({len(sources)}) must match {label}.")
    else:
        sources = [model] * expected_count
    if any(source is None for source in sources):
        raise ValueError(f"{kind} entries must be non-null.")
    return sources, infer_model_name(sources[0])


# --------------------------------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------------------------------


def ensure_pad_token(tokenizer: Any) -> Any:
    """The tokenizer, its pad token set to its EOS token when it has none; a ValueError when it still has
    no pad id."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.pad_token_id is None:
        raise ValueError("Tokenizer must expose pad_token_id.")
    return tokenizer


def ensure_tokenizer(model: Any, tokenizer: Any) -> Any:
    """``tokenizer``, or else the tokenizer of the named ``model`` (a model object cannot name one), with a
    pad token (:func:`ensure_pad_token`)."""
    if tokenizer is None:
        from transformers import PreTrainedModel

        if model is None or isinstance(model, PreTrainedModel):
            raise ValueError("Tokenizer must be provided when model is a PreTrainedModel instance.")
        tokenizer = _load_tokenizer(model)
    return ensure_pad_token(tokenizer)


def resolve_tokenizers(model: Any, tokenizer: Any, agents: Sequence[Any] | None) -> Any:
    """The tokenizer(s) of a team: without ``agents``, one (``tokenizer``, else ``model``'s); with
    ``agents``, the given tokenizer shared, a list of one per agent, or (named agents only) each agent's
    own."""
    if agents is None:
        if tokenizer is not None and not _is_tokenizer_sequence(tokenizer):
            return ensure_pad_token(tokenizer)
        return ensure_tokenizer(model, None)
    if tokenizer is None:
        named = (
            isinstance(agents, Sequence)
            and not isinstance(agents, (str, bytes))
            and all(isinstance(source, str) for source in agents)
        )
        if named:
            return [ensure_pad_token(_load_tokenizer(name)) for name in agents]
        raise ValueError("Tokenizer(s) must be provided when agents are model objects.")
    if _is_tokenizer_sequence(tokenizer):
        tokenizers = list(tokenizer)
        if len(tokenizers) != len(agents):
            raise ValueError("tokenizers length must match agents.")
        return [ensure_pad_token(t) for t in tokenizers]
    return ensure_pad_token(tokenizer)


def apply_tokenizer_specials(tokenizer: Any, models: Sequence[Any]) -> None:
    """Write the tokenizer's pad id and EOS id (the pad id when it has no EOS) into each model's config
    (a wrapper's inner ``model.config`` where there is one); None entries are skipped."""
    tokenizer = ensure_pad_token(tokenizer)
    pad_id = tokenizer.pad_token_id
    eos_id = tokenizer.eos_token_id or pad_id
    for model in models:
        if model is None:
            continue
        if hasattr(model, "model") and hasattr(model.model, "config"):
            config = model.model.config
        elif hasattr(model, "config"):
            config = model.config
        else:
            continue
        config.pad_token_id = pad_id
        config.eos_token_id = eos_id


def _is_tokenizer_sequence(tokenizer: Any) -> bool:
    from transformers import PreTrainedTokenizerBase

    return isinstance(tokenizer, Sequence) and not isinstance(
        tokenizer, (str, bytes, PreTrainedTokenizerBase)
    )


def _load_tokenizer(name: str | os.PathLike) -> Any:
    """``AutoTokenizer.from_pretrained`` on the folder the name resolves to (padding side as saved)."""
    from transformers import AutoTokenizer

    from comlrl.models import resolve_model_path

    return AutoTokenizer.from_pretrained(resolve_model_path(name))


# --------------------------------------------------------------------------------------------------
# Prompt formatters
# --------------------------------------------------------------------------------------------------


def build_formatters(
    formatters: Formatter | Sequence[Formatter] | None,
    num_agents: int,
    *,
    pass_none_external_prompts: bool = True,
) -> list[Callable[..., str]]:
    """One formatter per agent, each callable as ``f(item, external_prompts=None)``.

    None gives formatters that return ``external_prompts`` when given, else ``item.get("prompt", "")``. A
    user formatter that names ``external_prompts`` receives it (None too, unless
    ``pass_none_external_prompts`` is False: then it is called as ``f(item)`` and keeps its own default);
    one that does not is called as ``f(item)``. One callable serves every agent; a sequence must hold
    ``num_agents``.
    """

    def default_formatter(item: Mapping[str, Any], external_prompts: Any = None) -> str:
        if external_prompts is not None:
            return external_prompts
        return item.get("prompt", "")

    def wrap(formatter: Formatter) -> Callable[..., str]:
        if _names_external_prompts(formatter):
            if pass_none_external_prompts:
                return lambda item, external_prompts=None: formatter(item, external_prompts=external_prompts)
            return lambda item, external_prompts=None: (
                formatter(item)
                if external_prompts is None
                else formatter(item, external_prompts=external_prompts)
            )
        return lambda item, external_prompts=None: formatter(item)

    if formatters is None:
        return [default_formatter] * num_agents
    if callable(formatters):
        return [wrap(formatters) for _ in range(num_agents)]
    if isinstance(formatters, Sequence) and not isinstance(formatters, (str, bytes)):
        if len(formatters) != num_agents:
            raise ValueError("Number of formatters must match num_agents when providing a sequence.")
        return [wrap(f) for f in formatters]
    raise ValueError("formatters must be None, a callable, or a sequence of callables.")


def _names_external_prompts(formatter: Callable[..., Any]) -> bool:
    try:
        return "external_prompts" in inspect.signature(formatter).parameters
    except (TypeError, ValueError):
        return False
