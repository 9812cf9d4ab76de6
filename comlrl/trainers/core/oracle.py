"""The oracle: one joint score per joint response of a task item.

The joint score of candidate k, the joint response ``(a_1k, ..., a_nk)``, is
``reward_processor(reward_func(...))`` (identity processor by default). Raw (before the processor)
and processed scores are both kept.

Calling conventions of ``reward_func`` (those of the public CoMLRL library, chosen once from the
signature). Each agent's argument is a list of completion texts, of one entry per call:

- ``f(*completions)``: one list per agent (also used when the signature cannot be read);
- ``f(c_1, ..., c_n)``: n positional parameters, one list per agent;
- ``f(prompts, c_1, ..., c_n)``: n + 1 positional parameters, prompts first;
- ``f(completions)``: one positional parameter and n > 1 agents: a list of the n per-agent lists;
- keywords ``batch_items=[item]`` and ``prompts=[prompt of agent 0]`` are passed when the function
  names them (or takes ``**kwargs``) and they are not already positional.

The result is a float, a one-element list / tuple, or a tensor / array with one element.

Batched form: a function marked with :func:`batched_reward` (or ``Oracle(..., batched=True)``) is
called once per item with all K candidates: each agent's list holds K completions, ``prompts`` and
``batch_items`` hold K entries, and the result must hold K scores in candidate order.

A function that raises, returns a non-finite score or the wrong number of scores is an
:class:`OracleError` naming the item and the candidate; nothing becomes a silent zero. A non-finite score is
the subclass :class:`NonFiniteRewardError`, which the trainers catch to drop that item (counted, logged).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class OracleError(RuntimeError):
    """The reward function or processor failed, or returned something unusable, for a candidate."""


class NonFiniteRewardError(OracleError):
    """The reward function or processor returned a NaN or ±inf (trainers drop the item and count it)."""


def batched_reward(func: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``func`` as batched: it scores all candidates of an item in one call (see module doc)."""
    func.batched_reward = True
    return func


@dataclass(frozen=True)
class OracleScores:
    """Scores of the K joint candidates of one item, in candidate order."""

    raw: list[float]
    processed: list[float]

    def __len__(self) -> int:
        return len(self.processed)

    @property
    def mean(self) -> float:
        """Mean processed score (nan for no candidates)."""
        return sum(self.processed) / len(self.processed) if self.processed else math.nan


@dataclass(frozen=True)
class _CallPlan:
    """How to call ``reward_func`` for a given number of agents."""

    prompts_positional: bool
    wrap_agents: bool  # one positional parameter holding the list of per-agent lists
    pass_prompts_kw: bool
    pass_batch_items_kw: bool


class Oracle:
    """Scores joint candidates with ``reward_func`` and ``reward_processor``.

    Args:
        reward_func: the task reward (see the module docstring for the calling conventions).
        reward_processor: maps one raw score to the processed score; identity when None.
        batched: override the batched opt-in; None reads ``reward_func.batched_reward``.
    """

    def __init__(
        self,
        reward_func: Callable[..., Any],
        reward_processor: Callable[[float], Any] | None = None,
        *,
        batched: bool | None = None,
    ) -> None:
        if not callable(reward_func):
            raise TypeError(f"`reward_func` must be callable, got {type(reward_func).__name__}")
        if reward_processor is not None and not callable(reward_processor):
            raise TypeError(
                f"`reward_processor` must be callable or None, got {type(reward_processor).__name__}"
            )
        self.reward_func = reward_func
        self.reward_processor = reward_processor
        self.batched = (
            bool(getattr(reward_func, "batched_reward", False)) if batched is None else bool(batched)
        )
        try:
            self._signature: inspect.Signature | None = inspect.signature(reward_func)
        except (TypeError, ValueError):
            self._signature = None
        self._plans: dict[int, _CallPlan | None] = {}

    def score(
        self,
        completions: Sequence[Sequence[Any]],
        *,
        prompts: Sequence[str] | None = None,
        item: Any = None,
        item_index: int | None = None,
    ) -> OracleScores:
        """Score every joint candidate of one item.

        Args:
            completions: per agent, its K candidates (texts, or objects with a ``.text``).
            prompts: per agent, its prompt text (passed on as ``prompts=[prompt of agent 0]``).
            item: the task item (passed on as ``batch_items=[item]``).
            item_index: the item's position, used in error messages.
        """
        texts = [[_text(c) for c in agent] for agent in completions]
        if not texts:
            raise ValueError("`completions` must hold one candidate list per agent, got none")
        num_candidates = len(texts[0])
        for agent, agent_texts in enumerate(texts):
            if len(agent_texts) != num_candidates:
                raise ValueError(
                    f"every agent needs the same number of candidates: agent 0 has {num_candidates}, "
                    f"agent {agent} has {len(agent_texts)} ({_where(item_index)})"
                )
        if num_candidates == 0:
            return OracleScores(raw=[], processed=[])
        if self.batched:
            raw = self._call(texts, prompts, item, list(range(num_candidates)), item_index)
        else:
            raw = []
            for k in range(num_candidates):
                raw += self._call([[agent[k]] for agent in texts], prompts, item, [k], item_index)
        processed = [self._process(r, item_index, k) for k, r in enumerate(raw)]
        return OracleScores(raw=raw, processed=processed)

    def __call__(self, completions: Sequence[Sequence[Any]], **kwargs: Any) -> OracleScores:
        return self.score(completions, **kwargs)

    def _call(
        self,
        agent_lists: list[list[str]],
        prompts: Sequence[str] | None,
        item: Any,
        candidates: list[int],
        item_index: int | None,
    ) -> list[float]:
        count = len(candidates)
        where = _where(item_index, candidates)
        plan = self._plan(len(agent_lists))
        prompt_list = None if prompts is None else [prompts[0]] * count
        args: list[Any]
        kwargs: dict[str, Any] = {}
        if plan is None:
            args = list(agent_lists)
        else:
            if plan.prompts_positional:
                if prompt_list is None:
                    raise OracleError(
                        f"`reward_func` takes prompts first but no `prompts` were given ({where})"
                    )
                args = [prompt_list, *agent_lists]
            elif plan.wrap_agents:
                args = [agent_lists]
            else:
                args = list(agent_lists)
            if plan.pass_prompts_kw and prompt_list is not None:
                kwargs["prompts"] = prompt_list
            if plan.pass_batch_items_kw and item is not None:
                kwargs["batch_items"] = [item] * count
        try:
            result = self.reward_func(*args, **kwargs)
        except Exception as exc:
            raise OracleError(f"`reward_func` raised {type(exc).__name__} on {where}: {exc}") from exc
        values = _as_floats(result, where)
        if len(values) != count:
            expected = f"{count} (one per candidate)" if self.batched else "1 (one joint score per call)"
            raise OracleError(f"`reward_func` returned {len(values)} scores on {where}, expected {expected}")
        for k, value in zip(candidates, values):
            if not math.isfinite(value):
                raise NonFiniteRewardError(f"`reward_func` returned {value} on {_where(item_index, [k])}")
        return values

    def _process(self, raw: float, item_index: int | None, k: int) -> float:
        if self.reward_processor is None:
            return raw
        where = _where(item_index, [k])
        try:
            out = self.reward_processor(raw)
        except Exception as exc:
            raise OracleError(f"`reward_processor` raised {type(exc).__name__} on {where}: {exc}") from exc
        values = _as_floats(out, where)
        if len(values) == 1 and not math.isfinite(values[0]):
            raise NonFiniteRewardError(f"`reward_processor` returned {out!r} on {where}, expected one finite number")
        if len(values) != 1:
            raise OracleError(f"`reward_processor` returned {out!r} on {where}, expected one finite number")
        return values[0]

    def _plan(self, num_agents: int) -> _CallPlan | None:
        if num_agents not in self._plans:
            self._plans[num_agents] = _call_plan(self._signature, num_agents, self.reward_func)
        return self._plans[num_agents]


def _call_plan(signature: inspect.Signature | None, n: int, func: Any) -> _CallPlan | None:
    """Decide once how ``func`` takes n agents' completion lists (None: plain ``f(*lists)``)."""
    if signature is None:
        return None
    params = list(signature.parameters.values())
    has_varargs = any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params)
    has_varkw = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params)
    names = {p.name for p in params}
    positional = [p for p in params if p.kind in _POSITIONAL]
    # `batch_items`, and a `prompts` that is not the first parameter, are keywords even when they
    # could be given by position; a first parameter named `prompts` takes the prompts.
    prompts_first = bool(positional) and positional[0].name == "prompts"
    slots = [p for p in positional if p.name != "batch_items" and (p.name != "prompts" or prompts_first)]
    required = sum(p.default is inspect.Parameter.empty for p in slots)
    prompts_positional, wrap, ok = False, False, True
    if has_varargs:
        pass
    elif prompts_first:
        prompts_positional, ok = True, required <= n + 1 <= len(slots)
    elif len(slots) == n + 1 and required == n + 1:
        # The public convention: n + 1 required parameters means prompts first, whatever its name.
        prompts_positional = True
    elif len(slots) == 1 and n > 1:
        wrap = True
    else:
        ok = required <= n <= len(slots)
    if not ok:
        name = getattr(func, "__name__", type(func).__name__)
        raise TypeError(
            f"`reward_func` ({name}) takes {len(slots)} positional argument(s); with {n} agent(s) it must "
            f"take {n} (one completion list per agent), {n + 1} (prompts first), 1 (a list of the per-agent "
            "lists) or *completions"
        )
    return _CallPlan(
        prompts_positional=prompts_positional,
        wrap_agents=wrap,
        pass_prompts_kw=not prompts_positional and ("prompts" in names or has_varkw),
        pass_batch_items_kw="batch_items" in names or has_varkw,
    )


def _text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    text = getattr(completion, "text", None)
    if not isinstance(text, str):
        raise TypeError(
            f"a candidate must be a string or have a `.text` string, got {type(completion).__name__}"
        )
    return text


def _as_floats(result: Any, where: str) -> list[float]:
    if hasattr(result, "detach"):  # a torch tensor, possibly on an accelerator
        result = result.detach().cpu()
    if hasattr(result, "tolist"):
        result = result.tolist()
    if isinstance(result, (list, tuple)):
        values = list(result)
    else:
        values = [result]
    out = []
    for value in values:
        if not isinstance(value, Real):
            raise OracleError(
                f"`reward_func` must return numbers (a float, a list or a tensor); got {type(value).__name__} "
                f"on {where}"
            )
        out.append(float(value))
    return out


def _where(item_index: int | None, candidates: Sequence[int] | None = None) -> str:
    item = "item ?" if item_index is None else f"item {item_index}"
    if candidates is None:
        return item
    if len(candidates) == 1:
        return f"{item}, candidate {candidates[0]}"
    return f"{item}, candidates {candidates[0]}..{candidates[-1]}"
