"""``evaluate()`` of the comlrl trainers: one joint response per evaluation item (one path of ``num_turns``
turns for a multi-turn online RL trainer), scored with the task reward, and the public ``eval_logger`` /
``eval_aggregator`` hooks.

Metrics: ``eval/turn_t/reward_mean`` (the mean reward at turn t) and ``eval/turn_t/expected_return`` (the mean
undiscounted reward sum from turn t on, :func:`comlrl.rl.rewards_to_go`), as the public library logs them,
plus ``eval/<key>`` for each key the aggregator returns (without an aggregator, the mean of every numeric
key the logger returns). The logger gets ``agent_completions_turns[agent][item][turn]``, the items and their
first agent's prompt; the aggregator gets ``num_turns``.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from comlrl.rl import rewards_to_go

__all__ = ["evaluate", "evaluate_items", "mean_metrics"]

def evaluate(trainer: Any, num_eval_samples: int | None = None) -> dict[str, float]:
    """``trainer.evaluate()``: the first ``num_eval_samples`` (default ``eval_num_samples``) evaluation items,
    one joint response (path) each; returns and logs ``eval/turn_t/reward_mean``, ``eval/turn_t/expected_return``
    and ``eval/<key>`` for the ``eval_aggregator``'s keys; ``{}`` (with a warning) without an ``eval_dataset``."""
    if trainer.eval_dataset is None:
        warnings.warn(
            "evaluate() has nothing to evaluate: the trainer was built without an `eval_dataset`; pass "
            "eval_dataset=... to measure the task reward",
            UserWarning,
            stacklevel=3,
        )
        return {}
    count = trainer.args.eval_num_samples if num_eval_samples is None else num_eval_samples
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"`num_eval_samples` must be an integer >= 0, got {count!r}")
    items = trainer.eval_dataset[:count]
    if not items:
        return {}
    metrics = evaluate_items(trainer, items)
    trainer.eval_count += 1
    trainer._log(metrics)
    return metrics



def evaluate_items(trainer: Any, items: Sequence[Any]) -> dict[str, float]:
    """The evaluation metrics of ``trainer`` on ``items`` (its ``eval_count`` names the sampling stream)."""
    turns = int(getattr(trainer.args, "num_turns", 1))
    roles = trainer.num_roles or trainer.num_agents
    texts: list[list[list[str]]] = [[] for _ in range(roles)]  # [agent][item][turn]
    prompts: list[str] = []
    per_turn: list[list[float]] = [[] for _ in range(turns)]
    returns: list[list[float]] = [[] for _ in range(turns)]
    size = trainer.args.eval_batch_size
    for start in range(0, len(items), size):
        chunk = list(items[start : start + size])
        indices = list(range(start, start + len(chunk)))
        for trajectory in _play(trainer, chunk, indices, turns):
            rewards = [reward for _, reward in trajectory]
            for t, (reward, to_go) in enumerate(zip(rewards, rewards_to_go(rewards))):
                per_turn[t].append(reward)
                returns[t].append(to_go)
            agent_turns = [[] for _ in range(roles)]
            for sample, _ in trajectory:
                if trainer.collaboration is not None:
                    role_texts, role_prompts = trainer.collaboration.split(sample.candidates[0][0].text, sample.item)
                else:
                    role_texts, role_prompts = [c[0].text for c in sample.candidates], sample.prompt_texts
                for r, text in enumerate(role_texts):
                    agent_turns[r].append(text)
                if len(agent_turns[0]) == 1:
                    prompts.append(role_prompts[0])
            for r in range(roles):
                texts[r].append(agent_turns[r])
    metrics: dict[str, float] = {}
    for t in range(turns):
        if per_turn[t]:
            metrics[f"eval/turn_{t + 1}/reward_mean"] = sum(per_turn[t]) / len(per_turn[t])
            metrics[f"eval/turn_{t + 1}/expected_return"] = sum(returns[t]) / len(returns[t])
    if trainer.eval_logger is not None:
        details = trainer.eval_logger(agent_completions_turns=texts, batch_items=list(items), prompts=prompts)
        if trainer.eval_aggregator is not None:
            aggregated = trainer.eval_aggregator(details, num_turns=turns)
        else:
            aggregated = mean_metrics(details)
        for key, value in (aggregated or {}).items():
            metrics[f"eval/{key}"] = value
    return metrics


def _play(trainer: Any, items: list[Any], indices: list[int], turns: int) -> list[list[tuple[Any, float]]]:
    """Per item, ``[(the turn's ItemSample, its task reward), ...]``."""
    if turns > 1:
        from comlrl.trainers.online_rl.multi_turn import play_trajectories

        trajectories = play_trajectories(trainer, items, indices, stream="eval", step=trainer.eval_count,
                                         early_termination=False, oracle=trainer.task_oracle)
        return [[(turn.sample, turn.reward) for turn in trajectory] for trajectory in trajectories]
    out = []
    for sample in trainer.sample_items(items, indices, n=1, stream="eval", step=trainer.eval_count):
        (reward,) = trainer.task_oracle.score(
            sample.candidates, prompts=sample.prompt_texts, item=sample.item, item_index=sample.item_index
        ).processed
        out.append([(sample, reward)])
    return out


def mean_metrics(details: Any) -> dict[str, float]:
    """The mean of every numeric key over the logger's rows (a mapping is taken as it is)."""
    if isinstance(details, Mapping):
        return dict(details)
    sums: dict[str, list[float]] = defaultdict(list)
    for row in details or []:
        for key, value in (row or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                sums[key].append(float(value))
    return {key: sum(v) / len(v) for key, v in sums.items()}
