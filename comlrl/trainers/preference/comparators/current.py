"""The ``current`` comparator source, and the sampling every backend-driven source shares.

:class:`BackendComparator` turns a batch of items into one ``generate`` call: a request per (item, agent)
under decentralized generation, or per item with the adapter's joint prompt under centralized generation.
Request ``(round, item, agent)`` samples with :func:`comparator_seed`, candidate ``j`` with
``derive_seed(request seed, j)``, a stream separate from the actors' (whose seeds carry another stream
name); the backends draw from per-request generators, so a comparator completion depends neither on the
actors' sampling nor on the other items of its batch. Subclasses say which backend and which policy
serves each agent slot.

:class:`CurrentComparator` samples the actors themselves through the trainer's backend.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from comlrl.rollout.types import Completion, GenerationRequest, Prompt, SamplingParams
from comlrl.seeding import derive_seed
from comlrl.trainers.core.centralized import (
    build_joint_prompt,
    check_adapter,
    split_joint_completions,
)
from comlrl.trainers.preference.comparators.base import ComparatorContext, ComparatorItemOutput

logger = logging.getLogger(__name__)

__all__ = ["BackendComparator", "CurrentComparator", "comparator_seed", "tokenizers_match"]

COMPARATOR_STREAM = "comparator"


def comparator_seed(seed: int, round_index: int, item_index: int, agent: int) -> int:
    """Seed of the comparator request of ``agent`` (the centralized slot under centralized generation) on
    ``item_index`` in round ``round_index``; candidate ``j`` samples with ``derive_seed(that, j)``."""
    return derive_seed(seed, COMPARATOR_STREAM, round_index, item_index, agent)


def tokenizers_match(a: Any, b: Any) -> bool:
    """Whether token ids mean the same text under both tokenizers: the same object, or equal vocabularies
    (token -> id) and equal EOS ids."""
    if a is b:
        return True
    if a is None or b is None:
        return False
    try:
        same_vocab = a.get_vocab() == b.get_vocab()
    except (AttributeError, NotImplementedError):
        return False
    return same_vocab and getattr(a, "eos_token_id", None) == getattr(b, "eos_token_id", None)


def agent_tokenizer(context: ComparatorContext, agent: int) -> Any:
    """Agent ``agent``'s tokenizer: ``context.tokenizers[agent]`` (or their only entry), else its policy's."""
    toks = list(context.tokenizers or ())
    if len(toks) == 1:
        return toks[0]
    if toks:
        return toks[agent]
    return context.policy.handle(agent).tokenizer


class BackendComparator:
    """Shared sampling of the comparator sources that generate through a rollout backend.

    Subclasses set ``self.backend`` and implement :meth:`policy_for` (the backend policy serving an agent
    slot); :meth:`same_tokenizer_for` tells whether that policy's token ids are in the agent's vocabulary.
    """

    name = "backend"

    def __init__(self, context: ComparatorContext) -> None:
        self.context = context
        self.args = context.args
        self.seed = int(context.seed)
        self.num_roles = int(self.args.num_agents)
        self.num_candidates = int(self.args.resolved_comparator_num_candidates)
        self.centralized = self.args.comparator_generation_mode == "centralized"
        self.central_slot = int(self.args.comparator_centralized_agent_index)
        self.adapter = check_adapter(context.centralized_adapter) if self.centralized else None
        self.backend: Any = None

    # -- what subclasses provide ----------------------------------------------------------------------
    @property
    def slots(self) -> list[int]:
        """Agent slots that generate: every agent, or the centralized slot alone."""
        return [self.central_slot] if self.centralized else list(range(self.num_roles))

    def policy_for(self, slot: int) -> str:
        raise NotImplementedError

    def same_tokenizer_for(self, slot: int) -> bool:
        return True

    def request_metadata(self, item: Any, slot: int) -> dict:
        return {}

    def _generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Any]:
        """One result per request: its completions, or an exception when that request failed for good."""
        return self.backend.generate(requests, params)

    # -- protocol -------------------------------------------------------------------------------------
    def begin_round(self, round_index: int) -> None:
        pass

    def end_round(self, round_index: int) -> None:
        pass

    def state_dict(self) -> dict:
        return {"name": self.name}

    def load_state_dict(self, state: dict) -> None:
        check_state_name(state, self.name)

    def close(self) -> None:
        pass

    def sample(
        self,
        items: Sequence[Any],
        agent_prompts: Sequence[Sequence[Prompt]],
        params: SamplingParams,
        *,
        round_index: int,
        item_indices: Sequence[int],
    ) -> list[ComparatorItemOutput]:
        """``resolved_comparator_num_candidates`` joint candidates per item (see the module docstring)."""
        self._check_batch(items, agent_prompts, item_indices)
        if not items:
            return []
        params = params.with_(n=self.num_candidates)
        requests = []
        for item, prompts, item_index in zip(items, agent_prompts, item_indices):
            for slot in self.slots:
                prompt = (
                    build_joint_prompt(self.adapter, item, prompts) if self.centralized else prompts[slot]
                )
                requests.append(
                    GenerationRequest(
                        prompt=prompt,
                        policy=self.policy_for(slot),
                        seed=comparator_seed(self.seed, round_index, int(item_index), slot),
                        params=params,
                        metadata=self.request_metadata(item, slot),
                    )
                )
        results = self._generate(requests, params)
        width = len(self.slots)
        outputs = []
        for i, (item, item_index) in enumerate(zip(items, item_indices)):
            outputs.append(self._item_output(item, int(item_index), results[i * width : (i + 1) * width]))
        return outputs

    def _item_output(self, item: Any, item_index: int, results: list[Any]) -> ComparatorItemOutput:
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            logger.warning("comparator %s: item %d failed: %s", self.name, item_index, failures[0])
            return ComparatorItemOutput(error=str(failures[0]), same_tokenizer=False)
        if not self.centralized:
            completions: list[list[Completion]] = [list(r) for r in results]
            return ComparatorItemOutput(
                candidates=completions,
                indices=list(range(self.num_candidates)),
                same_tokenizer=all(self.same_tokenizer_for(s) for s in self.slots),
            )
        split = split_joint_completions(self.adapter, results[0], item, self.num_roles, item_index=item_index)
        return ComparatorItemOutput(
            candidates=split.candidates,
            indices=split.indices,
            same_tokenizer=False,
            num_unparsed=split.num_unparsed,
            joint=split.joint,
            joint_same_tokenizer=self.same_tokenizer_for(self.central_slot),
        )

    def _check_batch(self, items, agent_prompts, item_indices) -> None:
        if len(agent_prompts) != len(items) or len(item_indices) != len(items):
            raise ValueError(
                f"`agent_prompts` ({len(agent_prompts)}) and `item_indices` ({len(item_indices)}) must have "
                f"one entry per item ({len(items)})"
            )
        for i, prompts in enumerate(agent_prompts):
            if len(prompts) != self.num_roles:
                raise ValueError(
                    f"`agent_prompts[{i}]` must hold one prompt per agent ({self.num_roles}), "
                    f"got {len(prompts)}"
                )


def check_state_name(state: dict, name: str) -> None:
    saved = state.get("name") if isinstance(state, dict) else None
    if saved != name:
        raise ValueError(f"comparator state is for source {saved!r}, this comparator is {name!r}")


def check_policy_agents(context: ComparatorContext, needed: int) -> None:
    """The actors' policy must serve every agent slot the comparator uses."""
    have = context.policy.num_agents
    if have < needed:
        raise ValueError(
            f"the actors' policy serves {have} agent(s) but the comparator needs {needed} "
            f"(num_agents={context.args.num_agents}, comparator_generation_mode="
            f"{context.args.comparator_generation_mode!r})"
        )


class CurrentComparator(BackendComparator):
    """``comparator_policy="current"``: the actors' own weights, through the trainer's backend, sampled on
    the comparator's seed stream."""

    name = "current"

    def __init__(self, context: ComparatorContext) -> None:
        super().__init__(context)
        check_policy_agents(context, max(self.slots) + 1)
        if context.backend is None:
            raise ValueError(
                "comparator_policy='current' needs the actors' rollout backend (`context.backend`)"
            )
        self.backend = context.backend

    def policy_for(self, slot: int) -> str:
        return self.context.policy.policy_name(slot)
