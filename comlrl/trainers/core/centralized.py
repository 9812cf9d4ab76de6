"""Centralized collaboration: one model writes every role's response in one joint completion.

Two users share these pieces: a centralized *actor* (``collaboration_mode="centralized"``,
:class:`CentralizedCollaboration`) and centralized *comparator generation* (the comparators call
:func:`build_joint_prompt` and :func:`split_joint_completions`).

An adapter turns the agents' prompts for an item into one joint prompt (``build_prompt``) and splits a
joint completion back into one text per role (``parse_completion``).
:class:`TaggedCentralizedComparatorAdapter` is the default: it lists every agent's original prompt and asks
for ``<agent_0>...</agent_0>`` blocks (0-based, as in the public CoMLRL library).
:func:`split_joint_completions` applies an adapter to a list of joint completions: a completion the adapter
cannot split is counted, logged and dropped (its candidate index leaves a gap), never fatal; an adapter that
breaks its contract (wrong type or count) is an :class:`AdapterContractError`.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from comlrl.rollout.types import Completion, Prompt
from comlrl.trainers.core.oracle import Oracle, OracleScores

logger = logging.getLogger(__name__)

__all__ = [
    "AdapterContractError",
    "CentralizedCollaboration",
    "CentralizedComparatorAdapter",
    "CentralizedComparatorParseError",
    "JointSplit",
    "TaggedCentralizedComparatorAdapter",
    "build_joint_prompt",
    "check_adapter",
    "check_role_outputs",
    "prompt_as_text",
    "split_joint_completions",
]


class CentralizedComparatorParseError(ValueError):
    """A joint completion could not be split into role responses."""


class AdapterContractError(TypeError, ValueError):
    """The adapter returned something its contract rules out (a ``TypeError`` and a ``ValueError``, so
    callers written for either keep catching it)."""


@runtime_checkable
class CentralizedComparatorAdapter(Protocol):
    """Builds the joint prompt of an item and splits a joint completion into role responses."""

    def build_prompt(self, batch_item: Any, agent_prompts: Sequence[Any]) -> str:
        """One non-empty prompt asking for every agent's response (``agent_prompts[a]`` is agent a's)."""
        ...

    def parse_completion(self, completion: str, batch_item: Any, num_agents: int) -> Sequence[str]:
        """Exactly ``num_agents`` role texts; raises :class:`CentralizedComparatorParseError` when the text
        cannot be split."""
        ...


def prompt_as_text(prompt: Prompt) -> str:
    """A prompt as text: a string as is, chat messages as their contents joined by blank lines."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(m, dict) and "content" in m for m in prompt):
        return "\n\n".join(str(m["content"]) for m in prompt)
    raise TypeError(
        "a centralized comparator needs text or chat-message agent prompts, got "
        f"{type(prompt).__name__} {prompt!r:.80}"
    )


@dataclass(frozen=True)
class TaggedCentralizedComparatorAdapter:
    """Joint prompt with one section per agent; role ``a``'s answer between ``<agent_a>`` and ``</agent_a>``.

    Parsing is case-insensitive and tolerates spaces inside the tags; each block is stripped. A missing
    block becomes ``""`` (the public library's behaviour) unless ``require_all``; a completion with no
    block at all raises :class:`CentralizedComparatorParseError`. ``tag_prefix`` changes the tag names.
    """

    tag_prefix: str = "agent_"
    require_all: bool = False
    instructions: str = field(
        default=(
            "You write the responses of {num_agents} agents who work together on one task. Answer each "
            "agent's prompt on its own, inside that agent's tags, and write nothing outside the tags."
        )
    )

    def __post_init__(self) -> None:
        if not isinstance(self.tag_prefix, str) or not re.fullmatch(
            r"[A-Za-z][A-Za-z0-9_-]*", self.tag_prefix
        ):
            raise ValueError(
                "`tag_prefix` must start with a letter and hold letters, digits, '_' or '-', "
                f"got {self.tag_prefix!r}"
            )

    def tag(self, agent: int) -> str:
        return f"{self.tag_prefix}{agent}"

    def build_prompt(self, batch_item: Any, agent_prompts: Sequence[Any]) -> str:
        if not agent_prompts:
            raise ValueError("`agent_prompts` must hold at least one agent's prompt")
        sections = "\n\n".join(
            f"Agent {a} original prompt:\n{prompt_as_text(p)}" for a, p in enumerate(agent_prompts)
        )
        layout = "\n".join(f"<{self.tag(a)}>\n...\n</{self.tag(a)}>" for a in range(len(agent_prompts)))
        head = self.instructions.format(num_agents=len(agent_prompts))
        return f"{head}\n\n{sections}\n\nReply with exactly one block per agent, in this form:\n{layout}\n"

    def parse_completion(self, completion: str, batch_item: Any, num_agents: int) -> list[str]:
        text = str(completion)
        parts: list[str | None] = []
        for a in range(num_agents):
            tag = re.escape(self.tag(a))
            match = re.search(rf"<\s*{tag}\s*>(.*?)<\s*/\s*{tag}\s*>", text, flags=re.IGNORECASE | re.DOTALL)
            parts.append(None if match is None else match.group(1).strip())
        missing = [a for a, part in enumerate(parts) if part is None]
        if len(missing) == num_agents:
            raise CentralizedComparatorParseError(
                f"no <{self.tag(0)}>...</{self.tag(0)}> style block in the joint completion {text!r:.120}"
            )
        if missing and self.require_all:
            raise CentralizedComparatorParseError(
                f"the joint completion lacks the block(s) of agent(s) {missing}: {text!r:.120}"
            )
        return ["" if part is None else part for part in parts]


def check_adapter(adapter: Any) -> Any:
    """``adapter`` itself, or a TypeError naming the method it lacks; None gives the tagged adapter."""
    if adapter is None:
        return TaggedCentralizedComparatorAdapter()
    for method in ("build_prompt", "parse_completion"):
        if not callable(getattr(adapter, method, None)):
            raise TypeError(f"centralized_comparator_adapter.{method} must be callable, got {adapter!r}")
    return adapter


def build_joint_prompt(adapter: Any, item: Any, agent_prompts: Sequence[Any]) -> str:
    """The adapter's joint prompt, checked to be a non-empty string."""
    prompt = adapter.build_prompt(item, list(agent_prompts))
    if not isinstance(prompt, str) or not prompt.strip():
        raise AdapterContractError(
            f"centralized_comparator_adapter.build_prompt must return a non-empty string, got {prompt!r:.80}"
        )
    return prompt


def check_role_outputs(parts: Any, num_roles: int) -> list[str]:
    """``parse_completion``'s answer as a list, checked to hold exactly ``num_roles`` strings."""
    if isinstance(parts, (str, bytes)) or not isinstance(parts, Sequence):
        raise AdapterContractError(
            "centralized_comparator_adapter.parse_completion must return a sequence of "
            f"{num_roles} strings, got {type(parts).__name__}"
        )
    if len(parts) != num_roles:
        raise AdapterContractError(
            f"centralized_comparator_adapter.parse_completion must return exactly {num_roles} outputs; "
            f"got {len(parts)}"
        )
    if not all(isinstance(part, str) for part in parts):
        raise AdapterContractError(
            "centralized_comparator_adapter.parse_completion must return strings, got "
            f"{[type(part).__name__ for part in parts]}"
        )
    return list(parts)


@dataclass
class JointSplit:
    """Role responses of the joint completions that parsed: ``candidates[role][j]`` came from
    ``joint[j]``, whose candidate index is ``indices[j]``."""

    candidates: list[list[Completion]]
    indices: list[int]
    joint: list[Completion]
    num_unparsed: int


def _role_completion(joint: Completion, text: str) -> Completion:
    # Role texts are cut out of the joint text, so they have no token ids of their own.
    return Completion(
        prompt_token_ids=[],
        token_ids=[],
        logprobs=[],
        text=text,
        finish_reason=joint.finish_reason,
        policy=joint.policy,
        policy_version=joint.policy_version,
        seed=joint.seed,
    )


def split_joint_completions(
    adapter: Any,
    completions: Sequence[Completion],
    item: Any,
    num_roles: int,
    *,
    item_index: int | None = None,
) -> JointSplit:
    """Split every joint completion into ``num_roles`` role completions with ``adapter``.

    A completion that raises :class:`CentralizedComparatorParseError` is dropped, counted and logged; an
    adapter that returns something other than ``num_roles`` strings raises :class:`AdapterContractError`.
    """
    candidates: list[list[Completion]] = [[] for _ in range(num_roles)]
    indices: list[int] = []
    kept: list[Completion] = []
    unparsed = 0
    for index, joint in enumerate(completions):
        try:
            parts = adapter.parse_completion(joint.text, item, num_roles)
        except CentralizedComparatorParseError as exc:
            unparsed += 1
            logger.warning(
                "comparator joint completion %d of item %s could not be parsed and is dropped: %s",
                index,
                item_index,
                exc,
            )
            continue
        for role, part in enumerate(check_role_outputs(parts, num_roles)):
            candidates[role].append(_role_completion(joint, part))
        indices.append(index)
        kept.append(joint)
    return JointSplit(candidates, indices, kept, unparsed)


class CentralizedCollaboration:
    """``collaboration_mode="centralized"``: one actor writes every role's response in one joint completion.

    The actor's prompt is ``adapter.build_prompt(item, [role formatter(item) for each role])``; each joint
    completion is split into role responses with ``adapter.parse_completion(text, item, num_roles)`` before
    the task reward sees it (with ``prompts=[role 0's prompt]``). A completion that cannot be parsed
    (the adapter raises a ``ValueError``, e.g. ``CentralizedComparatorParseError``) gives every role an
    empty response and is counted in :attr:`parse_failures`; it never stops the run.
    """

    def __init__(self, adapter: Any, role_formatters: Sequence[Any]) -> None:
        self.adapter = adapter
        self.role_formatters = list(role_formatters)
        self.num_roles = len(self.role_formatters)
        self.parse_failures = 0

    def role_prompts(self, item: Any) -> list[Any]:
        return [f(item) for f in self.role_formatters]

    def joint_prompt(self, item: Any) -> str:
        return build_joint_prompt(self.adapter, item, self.role_prompts(item))

    def split(self, text: str, item: Any) -> tuple[list[str], list[Any]]:
        """(role responses, role prompts) of one joint completion."""
        try:
            roles = self.adapter.parse_completion(text, item, self.num_roles)
        except ValueError:
            self.parse_failures += 1
            return [""] * self.num_roles, self.role_prompts(item)
        return check_role_outputs(roles, self.num_roles), self.role_prompts(item)

    def wrap_oracle(self, oracle: Oracle) -> CentralizedOracle:
        return CentralizedOracle(self, oracle)


class CentralizedOracle:
    """Scores joint completions of the one actor by splitting them into roles first."""

    def __init__(self, collaboration: CentralizedCollaboration, oracle: Oracle) -> None:
        self.collaboration = collaboration
        self.oracle = oracle

    def score(self, completions, *, prompts=None, item=None, item_index=None) -> OracleScores:
        (joint,) = completions
        roles: list[list[str]] = [[] for _ in range(self.collaboration.num_roles)]
        role_prompts: list[Any] = []
        for completion in joint:
            text = completion if isinstance(completion, str) else completion.text
            parts, role_prompts = self.collaboration.split(text, item)
            for r, part in enumerate(parts):
                roles[r].append(part)
        if not joint:
            return OracleScores(raw=[], processed=[])
        texts = [p if isinstance(p, str) else json.dumps(p) for p in role_prompts]
        return self.oracle.score(roles, prompts=texts, item=item, item_index=item_index)
