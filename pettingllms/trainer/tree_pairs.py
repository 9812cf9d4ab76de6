"""Preference pairs from AT-GRPO's rollout trees: multi-turn preference learning (the ``madpo_from_trees``
stage).

At a decision point of a tree rollout (a problem, a turn, the acting agent's position in the turn order) the
K sibling candidates share everything before them: the same state, the same prompt. Their mixed rewards
(``group_reward``: ``alpha * global + local``, what AT-GRPO's advantages compare) rank them; every ordered
pair with a strictly higher reward is a preference (ties dropped), selected per decision point by comlrl's
``pair_selection`` (``reward_gap`` / ``all`` / ``random``) and ``pairs_per_group``.

A pair is a comlrl :class:`~comlrl.trainers.preference.records.PreferencePair` with one entry per agent of
the turn order: the acting agent's entry holds the shared prompt and both candidates' texts and sampled ids
(the exact tokens, never re-tokenized); every other agent's entry holds the same prompt on both sides with an
empty completion, so its margin is exactly 0 and MADPO's joint margin is the acting agent's margin. The pair
records ``turn`` and ``agent``. The round file of an AT-GRPO step holds its pairs (:func:`write_step_pairs`),
so comlrl's replay buffer, its modes and its round-file format apply unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from comlrl.trainers.preference.pairs import keep_first, rank_candidate_pairs, validate_pair_selection
from comlrl.trainers.preference.records import PreferencePair, round_file_name, write_round
from pettingllms.execution.samples import Sample

__all__ = ["TREE_PAIRS_DIR", "decision_point_pairs", "tree_pairs", "write_step_pairs"]

# Where an at_grpo stage keeps the pairs of its trees (one round file per step), inside its folder.
TREE_PAIRS_DIR = "tree_pairs"


def decision_point_pairs(
    members: Sequence[Sample],
    num_agents: int,
    prompt_text: str,
    *,
    pair_selection: str = "reward_gap",
    pairs_per_group: int | None = None,
    rng: Any = None,
) -> list[PreferencePair]:
    """The pairs among one decision point's siblings (``members``, any order; one acting agent, one
    prompt). ``prompt_text`` is their shared prompt as text."""
    if not members:
        return []
    members = sorted(members, key=lambda s: s.candidate)
    agents = {s.agent_index for s in members}
    prompts = {tuple(s.prompt_ids) for s in members}
    if len(agents) != 1 or len(prompts) != 1:
        raise ValueError(
            f"one decision point's siblings share one agent and one prompt, got agents {sorted(agents)} and "
            f"{len(prompts)} prompts (group {members[0].group_key})"
        )
    acting = members[0].agent_index
    if not 0 <= acting < num_agents:
        raise ValueError(f"agent index {acting} is outside the turn order's {num_agents} agents")
    rewards = [float(s.group_reward) for s in members]
    if not all(math.isfinite(r) for r in rewards):
        return []  # a dropped group (non-finite reward) has no preference
    mean = sum(rewards) / len(rewards)
    prompt_ids = list(members[0].prompt_ids)
    out = []
    for w, lo in keep_first(rank_candidate_pairs(rewards, pair_selection, rng), pairs_per_group):
        winner, loser = members[w], members[lo]
        out.append(PreferencePair(
            prompts=[prompt_text] * num_agents,
            winner_completions=[winner.response if a == acting else "" for a in range(num_agents)],
            loser_completions=[loser.response if a == acting else "" for a in range(num_agents)],
            winner_reward=rewards[w],
            loser_reward=rewards[lo],
            candidate_reward_mean=mean,
            raw_rewards=[float(winner.reward), float(loser.reward)],
            prompt_token_ids=[list(prompt_ids) for _ in range(num_agents)],
            winner_token_ids=[list(winner.completion_ids) if a == acting else [] for a in range(num_agents)],
            loser_token_ids=[list(loser.completion_ids) if a == acting else [] for a in range(num_agents)],
            turn=int(winner.turn),
            agent=int(acting),
        ))
    return out


def tree_pairs(
    samples: Sequence[Sample],
    num_agents: int,
    decode: Callable[[Sample], str],
    *,
    pair_selection: str = "reward_gap",
    pairs_per_group: int | None = None,
    rng: Any = None,
) -> list[PreferencePair]:
    """The pairs of every decision point of a tree rollout's ``samples`` (in group-key order). ``decode``
    gives a sample's prompt as text. Samples of independent sampling (whole trajectories) are refused:
    their candidates do not share a prefix."""
    selection = validate_pair_selection(pair_selection, pairs_per_group)
    modes = {s.mode for s in samples}
    if modes - {"tree"}:
        raise ValueError(f"pairs from trees need tree rollouts (AT-GRPO's sampling_mode tree), got modes {sorted(modes)}")
    groups: dict[Any, list[Sample]] = {}
    for sample in samples:
        groups.setdefault(sample.group_key, []).append(sample)
    out: list[PreferencePair] = []
    for key in sorted(groups, key=lambda k: k.sort_key()):
        members = groups[key]
        out += decision_point_pairs(members, num_agents, decode(members[0]), pair_selection=selection,
                                    pairs_per_group=pairs_per_group, rng=rng)
    return out


def write_step_pairs(folder: str | Path, step: int, pairs: Sequence[PreferencePair]) -> Path:
    """Write step ``step``'s pairs as round ``step`` (``iteration_NNNN.json`` and its sidecar) under
    ``folder``; a resumed run that plays the step again writes the same file again."""
    path = Path(folder) / round_file_name(step)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_round(path, step, list(pairs))
