"""The comparator interface of the iterative preference trainers.

A comparator supplies the other side of each comparison: for every task item it answers the agents'
prompts with ``comparator_num_candidates`` joint responses. The trainer pairs candidate k of the current
agents with candidate k of the comparator, for the indices present on both sides.

Sources (``comparator_policy``): ``current`` (the actors, own seeded stream), ``current_copy`` (a
frozen copy refreshed once per round), ``model`` (frozen models loaded once), ``history`` (the policy
as it was ``comparator_history_k`` rounds ago), ``api`` (a remote model). With
``comparator_generation_mode="centralized"`` one comparator model writes all roles' responses in one
joint response that a parse adapter splits into role responses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from comlrl.rollout.types import Completion, Prompt, SamplingParams


@dataclass
class ComparatorItemOutput:
    """The comparator's answer for one task item.

    ``candidates[agent][j]`` is the completion of agent ``agent`` for the comparator's ``j``-th kept
    joint candidate, whose original candidate index is ``indices[j]`` (indices are increasing; a joint
    candidate dropped because it could not be parsed leaves a gap). ``error`` is set, and
    ``candidates`` empty, when the whole item failed (e.g. an API request that still failed after its
    retries): the trainer drops such an item from the round and counts it.
    ``same_tokenizer`` tells whether the completions' token ids are in the agents' vocabularies (False
    for API text or another tokenizer: the trainer then tokenizes the text once).

    With centralized generation, ``candidates[agent][j]`` holds role ``agent``'s text parsed out of the
    joint completion ``joint[j]`` (no token ids, so ``same_tokenizer`` is False), ``num_unparsed`` counts
    the joint completions the adapter could not split, and ``joint_same_tokenizer`` tells whether
    ``joint[j].token_ids`` are in the vocabulary of the agent at ``comparator_centralized_agent_index``
    (what a centralized actor trains on). ``joint`` is empty under decentralized generation.
    """

    candidates: list[list[Completion]] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)
    error: str | None = None
    same_tokenizer: bool = True
    num_unparsed: int = 0
    joint: list[Completion] = field(default_factory=list)
    joint_same_tokenizer: bool = False


@dataclass
class ComparatorContext:
    """What a comparator may use: handed over once by the trainer at construction or resume."""

    policy: Any  # comlrl.policy.MultiAgentPolicy of the actors
    backend: Any  # the actors' RolloutBackend
    args: Any  # the trainer's iterative config
    output_dir: str
    seed: int
    tokenizers: Sequence[Any] = ()  # one per agent; empty: each agent's policy tokenizer
    # The trainer's ``centralized_comparator_adapter`` (build_prompt, parse_completion); None: tagged.
    centralized_adapter: Any = None


class Comparator(Protocol):
    """A comparator source. ``sample`` is called once per batch of items with every agent's prompts."""

    name: str

    def begin_round(self, round_index: int) -> None:
        """Called before a round's pairs are built (1-based round index): refresh copies, pick the
        history snapshot, ..."""

    def sample(
        self,
        items: Sequence[dict],
        agent_prompts: Sequence[Sequence[Prompt]],
        params: SamplingParams,
        *,
        round_index: int,
        item_indices: Sequence[int],
    ) -> list[ComparatorItemOutput]:
        """``agent_prompts[i][a]`` is agent a's prompt for item i. Candidate j of (item, agent) samples with
        ``derive_seed(seed, "comparator", round_index, item_indices[i], a)`` then candidate j, a stream
        separate from the actors'."""

    def end_round(self, round_index: int) -> None:
        """Called after the round's update (e.g. the history source snapshots the updated policy)."""

    def state_dict(self) -> dict:
        ...

    def load_state_dict(self, state: dict) -> None:
        ...

    def close(self) -> None:
        """Free transient models."""
