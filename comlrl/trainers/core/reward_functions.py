"""The public CoMLRL library's reward-function helpers, with its meanings: what a user's script does with a
reward function outside a trainer.

- A reward range is declared on the function itself: :func:`set_reward_range` stores
  ``reward_func.reward_range = (low, high)`` (what ``log_reward_distribution`` reads) and
  :func:`resolve_reward_range` reads it back, checked (two finite numbers, low < high; None when absent).
- :func:`call_reward_function` calls a reward function once, the public way: the arguments are chosen from
  its signature (``f(*completions)``, ``f(c_1, ..., c_n)``, ``f(prompts, c_1, ..., c_n)``, ``f(completions)``,
  plus ``batch_items=`` / ``prompts=`` keywords where it names them or takes ``**kwargs``), the result is
  coerced to a list of floats, and a TypeError is retried once as ``f(*completions)`` (without a readable
  signature: ``f(*completions, batch_items=...)``, ``f(*completions)``, ``f(completions)``, in that order).
  The trainers do not call it: they score through :class:`comlrl.trainers.core.oracle.Oracle`, which
  decides the convention once and never retries, so a TypeError raised inside a reward function is a bug
  report, not another calling convention.
- :func:`normalize_reward_lengths` spreads a reward list to the agents (one value for all, one per agent,
  or one per generation).
- :class:`RewardProcessors` builds the ``reward_processor`` callables ``scale`` and ``shift``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

__all__ = [
    "RewardCallable",
    "RewardProcessors",
    "call_reward_function",
    "normalize_reward_lengths",
    "resolve_reward_range",
    "set_reward_range",
]

RewardCallable = TypeVar("RewardCallable", bound=Callable[..., Any])

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


# --------------------------------------------------------------------------------------------------
# Reward range
# --------------------------------------------------------------------------------------------------


def resolve_reward_range(reward_func: Callable[..., Any]) -> tuple[float, float] | None:
    """``reward_func.reward_range`` as ``(minimum, maximum)`` floats, or None when the function declares
    none; a ValueError when it is not two finite numbers with minimum < maximum."""
    declared = getattr(reward_func, "reward_range", None)
    if declared is None:
        return None
    if isinstance(declared, (str, bytes)) or not isinstance(declared, Sequence) or len(declared) != 2:
        raise ValueError("reward_func.reward_range must be a two-item sequence: (minimum, maximum).")
    minimum, maximum = (float(value) for value in declared)
    if not (math.isfinite(minimum) and math.isfinite(maximum)):
        raise ValueError("reward_func.reward_range values must be finite.")
    if minimum >= maximum:
        raise ValueError("reward_func.reward_range minimum must be less than maximum.")
    return minimum, maximum


def set_reward_range(reward_func: RewardCallable, minimum: float, maximum: float) -> RewardCallable:
    """Declare the raw output range of ``reward_func`` (``reward_func.reward_range``), check it, and return
    the function (so it also serves as a decorator's body)."""
    reward_func.reward_range = (float(minimum), float(maximum))
    resolve_reward_range(reward_func)
    return reward_func


# --------------------------------------------------------------------------------------------------
# One call of a reward function, the public way
# --------------------------------------------------------------------------------------------------


def call_reward_function(
    reward_func: Callable[..., Any],
    prompts: Sequence[str],
    agent_completions: Sequence[Sequence[str]],
    *,
    num_agents: int,
    batch_items: Sequence[Mapping[str, Any]] | None = None,
    signature: inspect.Signature | None = None,
) -> list[float]:
    """Call ``reward_func`` once on ``agent_completions`` (one list per agent) and return its rewards as a
    list of floats (see the module docstring for the conventions); ``signature`` saves reading it again."""
    if signature is None:
        try:
            signature = inspect.signature(reward_func)
        except (TypeError, ValueError):
            signature = None
    if signature is None:
        return _call_without_signature(reward_func, agent_completions, batch_items)
    args, kwargs = _public_arguments(signature, prompts, agent_completions, num_agents, batch_items)
    try:
        return _as_float_list(reward_func(*args, **kwargs))
    except TypeError as error:
        try:
            return _as_float_list(reward_func(*agent_completions))
        except TypeError:
            raise error from None


def _call_without_signature(
    reward_func: Callable[..., Any],
    agent_completions: Sequence[Sequence[str]],
    batch_items: Sequence[Mapping[str, Any]] | None,
) -> list[float]:
    """The conventions tried in order when the signature cannot be read."""
    if batch_items is not None:
        try:
            return _as_float_list(reward_func(*agent_completions, batch_items=batch_items))
        except TypeError:
            pass
    try:
        return _as_float_list(reward_func(*agent_completions))
    except TypeError:
        return _as_float_list(reward_func(agent_completions))


def _public_arguments(
    signature: inspect.Signature,
    prompts: Sequence[str],
    agent_completions: Sequence[Sequence[str]],
    num_agents: int,
    batch_items: Sequence[Mapping[str, Any]] | None,
) -> tuple[list[Any], dict[str, Any]]:
    """Positional arguments and keywords from the signature: every positional parameter counts, with or
    without a default (the public rule, unlike the trainers' oracle)."""
    params = signature.parameters
    count = sum(p.kind in _POSITIONAL for p in params.values())
    has_varargs = any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params.values())
    has_varkw = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs: dict[str, Any] = {}
    if batch_items is not None and ("batch_items" in params or has_varkw):
        kwargs["batch_items"] = batch_items
    prompts_first = False
    if has_varargs:
        args = list(agent_completions)
    elif num_agents == 1:
        prompts_first = count != 1
        args = [prompts, agent_completions[0]] if prompts_first else [agent_completions[0]]
    elif count == num_agents + 1:
        prompts_first = True
        args = [prompts, *agent_completions]
    elif count == 1:
        args = [agent_completions]
    else:
        args = list(agent_completions)
    if not prompts_first and ("prompts" in params or has_varkw):
        kwargs["prompts"] = prompts
    return args, kwargs


def _as_float_list(raw: Any) -> list[float]:
    """A number, a list / tuple or a tensor (detached, on the CPU) as a list of floats."""
    if hasattr(raw, "detach"):
        raw = raw.detach().cpu().tolist()
    values = list(raw) if isinstance(raw, (list, tuple)) else [raw]
    return [float(value) for value in values]


def normalize_reward_lengths(
    rewards: Sequence[float], *, num_agents: int, num_generations: int, algorithm: str
) -> list[float]:
    """The rewards of one prompt as floats: one agent keeps them; with several, one value is repeated for
    every agent, and one per agent or one per generation is kept; any other length is a ValueError naming
    ``algorithm``."""
    values = [float(r) for r in rewards]
    if num_agents == 1:
        return values
    if num_generations < 1:
        raise ValueError("num_generations must be >= 1.")
    if len(values) == 1:
        return values * num_agents
    if len(values) in (num_agents, num_generations):
        return values
    raise ValueError(
        f"Reward function must return either 1 or {num_agents} values per prompt for multi-agent {algorithm}."
    )


# --------------------------------------------------------------------------------------------------
# Reward processors
# --------------------------------------------------------------------------------------------------


class RewardProcessors:
    """Builders of ``reward_processor`` callables (one raw reward in, the processed reward out)."""

    @staticmethod
    def scale(factor: float = 1.0) -> Callable[[float], float]:
        """``r -> r * factor``."""
        return lambda reward: reward * factor

    @staticmethod
    def shift(value: float = 0.0) -> Callable[[float], float]:
        """``r -> r + value``."""
        return lambda reward: reward + value
