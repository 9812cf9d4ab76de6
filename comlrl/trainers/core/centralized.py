"""Centralized collaboration: one model writes every role's response in one joint completion.

Two users share these pieces: a centralized *actor* (``collaboration_mode="centralized"``,
:class:`CentralizedCollaboration`) and centralized *comparator generation* (the comparators call
:func:`build_joint_prompt` and :func:`split_joint_completions`). :class:`CentralizedRewardCollaboration` is the
public library's class of the same role, with its constructor, for users' scripts.

An adapter turns the agents' prompts for an item into one joint prompt (``build_prompt``) and splits a
joint completion back into one text per role (``parse_completion``).
:class:`TaggedCentralizedComparatorAdapter` is the default: it lists every agent's original prompt and asks
for ``<agent_0>...</agent_0>`` blocks (0-based, as in the public CoMLRL library).
:func:`split_joint_completions` applies an adapter to a list of joint completions: a completion the adapter
cannot split is counted, logged and dropped (its candidate index leaves a gap), never fatal; an adapter that
breaks its contract (wrong type or count) is an :class:`AdapterContractError`.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from comlrl.rollout.types import Completion, Prompt
from comlrl.trainers.core.oracle import Oracle, OracleScores
from comlrl.trainers.core.reward_functions import call_reward_function, resolve_reward_range
from comlrl.trainers.core.team_keywords import build_formatters

logger = logging.getLogger(__name__)

__all__ = [
    "AdapterContractError",
    "CentralizedCollaboration",
    "CentralizedComparatorAdapter",
    "CentralizedComparatorParseError",
    "CentralizedRewardCollaboration",
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


class CentralizedRewardCollaboration:
    """The public library's ``CentralizedCollaboration(adapter, formatters, reward_func, num_roles)`` (its
    import path ``comlrl.trainers.preference.collaboration`` gives this class that name): the joint prompt
    (:meth:`build_prompt`), the role split (:meth:`split`), and, called as a reward function on joint
    completions, the task reward of their split roles (one joint reward each, by the public calling
    convention, :func:`~comlrl.trainers.core.reward_functions.call_reward_function`). An unparsable joint
    completion gives every role ``""``.

    comlrl's trainers use :class:`CentralizedCollaboration` (built from role formatters; scores through the
    oracle's checks and counts parse failures) instead; this class is for users' scripts.
    """

    def __init__(self, adapter: Any, formatters: Any, reward_func: Any, num_roles: int) -> None:
        self.adapter = adapter
        self.num_roles = num_roles
        self.formatters = build_formatters(formatters, num_roles, pass_none_external_prompts=False)
        self.reward_func = reward_func
        self.reward_range = resolve_reward_range(reward_func)

    def build_prompt(self, item: Any) -> str:
        """The joint prompt of ``item`` from every role formatter's prompt."""
        return build_joint_prompt(self.adapter, item, [formatter(item) for formatter in self.formatters])

    def split(self, completion: str, item: Any) -> list[str]:
        """The role responses of one joint completion (``""`` for each when the adapter cannot parse it)."""
        try:
            outputs = self.adapter.parse_completion(completion, item, self.num_roles)
        except CentralizedComparatorParseError:
            outputs = [""] * self.num_roles
        return check_role_outputs(outputs, self.num_roles)

    def __call__(self, completions: Sequence[str], *, prompts: Any = None, batch_items: Any = None) -> list[float]:
        """One task reward per joint completion; ``batch_items`` holds one item for all, or one each."""
        if not batch_items:
            raise ValueError("Centralized task rewards require batch_items.")
        if len(batch_items) not in {1, len(completions)}:
            raise ValueError(
                f"Centralized completions must align with batch_items: {len(completions)} completions, "
                f"{len(batch_items)} batch_items."
            )
        rewards = []
        for index, completion in enumerate(completions):
            item = batch_items[0] if len(batch_items) == 1 else batch_items[index]
            values = call_reward_function(
                self.reward_func,
                [self.formatters[0](item)],
                [[output] for output in self.split(completion, item)],
                num_agents=self.num_roles,
                batch_items=[item],
            )
            if len(values) != 1:
                raise ValueError(f"Centralized task reward must return one joint reward, got {len(values)}.")
            rewards.append(values[0])
        return rewards

    def split_eval(
        self, joint_turns: Sequence[Sequence[Sequence[str]]], items: Sequence[Any]
    ) -> list[list[list[str]]]:
        """Evaluation completions ``[turn 0][item][sample]`` of the joint actor as ``[role][item][sample]``."""
        if len(joint_turns) != 1 or len(joint_turns[0]) != len(items):
            raise ValueError("Centralized evaluation outputs must align with items.")
        outputs: list[list[list[str]]] = [[] for _ in range(self.num_roles)]
        for samples, item in zip(joint_turns[0], items):
            rows = [self.split(completion, item) for completion in samples]
            for role in range(self.num_roles):
                outputs[role].append([row[role] for row in rows])
        return outputs

    def wrap_metrics_callback(self, callback: Any) -> Any:
        """``callback`` fed one copy of each rollout sample per role: ``agent_idx`` the role, ``completion``
        its response (the sample's ``metadata["batch_item"]`` is the item it was split for)."""

        def role_metrics(rollouts: Sequence[Any]) -> Any:
            role_samples = []
            for sample in rollouts:
                for role, completion in enumerate(self.split(sample.completion, sample.metadata["batch_item"])):
                    role_sample = copy.copy(sample)
                    role_sample.agent_idx = role
                    role_sample.completion = completion
                    role_samples.append(role_sample)
            return callback(role_samples)

        return role_metrics


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
