"""MARLHF's frozen joint reward model as an oracle: :class:`RewardModelOracle` scores every joint candidate of
an item with :class:`~comlrl.trainers.preference.reward_model.JointRewardModel` under no_grad (the RL stage's
reward, and with ``preference_scoring_reward="reward_model"`` the comparisons' oracle)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from comlrl.validation import check_int

logger = logging.getLogger("comlrl.trainers.preference.reward_model")  # the reward model's log, as before

__all__ = ["RewardModelOracle", "truncation_message"]


def truncation_message(truncated: int, total: int) -> str:
    """The log line for cut joint texts."""
    return f"reward model input truncated for {truncated} of {total} texts (reward_max_length)"



class RewardModelOracle:
    """A batched reward function (see :mod:`comlrl.trainers.core.oracle`) backed by a frozen model.

    ``Oracle(RewardModelOracle(model, agent_prompts=...))`` scores all K joint candidates of an item in
    one no_grad forward. The oracle convention passes only agent 0's prompt, so every agent's prompt
    comes from ``agent_prompts(item)`` (the trainer's per-agent formatters) when given; otherwise each
    ``prompts`` entry must be a per-agent list (or, for one agent, a string). ``batch_size`` bounds the
    texts per forward (None: one forward per call). Cut texts are counted in ``truncated_texts`` of
    ``scored_texts`` and logged once.
    """

    batched_reward = True

    def __init__(
        self,
        model: Any,  # a JointRewardModel (reward_model.py imports this module)
        *,
        agent_prompts: Callable[[Any], Sequence[str]] | None = None,
        batch_size: int | None = None,
    ) -> None:
        if batch_size is not None:
            check_int("batch_size", batch_size, 1, spell_out=True)
        if agent_prompts is not None and not callable(agent_prompts):
            raise TypeError(f"`agent_prompts` must be callable or None, got {type(agent_prompts).__name__}")
        self.model = model
        self.model.eval()
        self.agent_prompts = agent_prompts
        self.batch_size = batch_size
        self.truncated_texts = 0
        self.scored_texts = 0
        self._warned = False

    def score_item(self, prompts: Sequence[str], completions: Sequence[Sequence[str]]) -> list[float]:
        """Scores of the K joint candidates of one item: ``prompts`` per agent, ``completions[agent][k]``."""
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts for {len(completions)} agents' completions")
        num = len(completions[0]) if completions else 0
        return self.score_joint([list(prompts)] * num, [[agent[k] for agent in completions] for k in range(num)])

    def score_joint(self, prompts: Sequence[Sequence[str]], responses: Sequence[Sequence[str]]) -> list[float]:
        """Scores of joint texts (per text, one prompt and one response per agent) under no_grad."""
        if self.model.training:
            self.model.eval()
        scores, truncated = self.model.score(prompts, responses, batch_size=self.batch_size)
        self.scored_texts += len(prompts)
        self.truncated_texts += truncated
        if truncated and not self._warned:
            self._warned = True
            logger.warning(truncation_message(self.truncated_texts, self.scored_texts) + " (oracle; logged once)")
        return scores.tolist()

    def _prompts_for(self, k: int, num_agents: int, prompts: Sequence[Any] | None, items: Sequence[Any] | None):
        if self.agent_prompts is not None and items is not None:
            found = list(self.agent_prompts(items[k]))
        elif prompts is not None and not isinstance(prompts[k], str):
            found = list(prompts[k])
        elif prompts is not None and num_agents == 1:
            found = [prompts[k]]
        else:
            raise ValueError(
                "RewardModelOracle needs every agent's prompt: pass `agent_prompts` (item -> one prompt per "
                "agent) and call it with `batch_items`, or give each `prompts` entry as a per-agent list"
            )
        if len(found) != num_agents or not all(isinstance(p, str) for p in found):
            raise ValueError(f"`agent_prompts` must give {num_agents} prompt strings (one per agent), got {found!r}")
        return found

    def __call__(
        self, *completions: Sequence[str], prompts: Sequence[Any] | None = None, batch_items: Sequence[Any] | None = None
    ) -> list[float]:
        if not completions:
            raise ValueError("RewardModelOracle needs one completion list per agent, got none")
        num = len(completions[0])
        if any(len(agent) != num for agent in completions):
            raise ValueError("every agent needs the same number of completions")
        per_text_prompts = [self._prompts_for(k, len(completions), prompts, batch_items) for k in range(num)]
        return self.score_joint(per_text_prompts, [[agent[k] for agent in completions] for k in range(num)])
