"""Multi-turn episodes of the online RL trainers (MAGRPO family, IAC, MAAC) under the public library's
``external_transition`` protocol, batched over a buffer of items.

**Prompts.** Turn 1 prompts come from the formatters. After a turn, ``external_transition(prompt=item.get(
"prompt", ""), agent_completions=[each agent's response], num_agents=N, prompt_history_per_agent=[...],
response_history_per_agent=[...])`` (both histories up to and including the turn just played) returns the
next turn's prompt of every agent (a list or tuple of N; anything else is an error naming the transition).
A returned prompt takes the item's ``"prompt"`` before the agent's formatter runs (the public rule); with
``external_prompt_passthrough=True`` it is sent as it is.

**The rollout tree (MAGRPO family).** Every node is one decision of the whole team: each agent samples
``num_generations`` (K) candidates for its prompt; the joint actions are ``aligned`` (candidate k of every
agent: K) or ``cross`` (every combination: K^N); the task reward scores each joint action. A node whose mean
reward exceeds ``early_termination_threshold`` is a leaf; otherwise, before the last turn, every joint
action gets a child node whose prompts the transition builds from that joint action. Returns come back up
the tree: ``G_j = r_j + discount · mean(G of child j)`` (:func:`comlrl.rl.tree_returns`; the public library
leaves ``discount`` out of this sum, which is our default ``discount=1.0``). Each node is one group of the
agents' update: agent i's candidates with their returns (``cross``: a candidate's return is the sum over
the joint actions it is part of, :func:`comlrl.rl.agent_candidate_returns`).

**The trajectory (IAC, MAAC; ``num_generations == 1`` as in the public library).** One joint response per
turn, the reward per turn, early termination after a turn whose mean reward exceeds the threshold; the
critics' one-step targets ``r_t + discount · V(h_{t+1})`` (:func:`comlrl.rl.td_targets`, with the values
at collection time) are both the advantage's target (``A_t = target_t − V(h_t)``) and the value target.

**Batching and seeds.** Every turn is one ``backend.generate`` call over all nodes (trajectories) of the
buffer and all agents. A node's request for agent a derives its seed from ``(seed, stream, step, item,
agent)`` at turn 1 (the single-turn seeds) and adds ``("turn", path)`` below it, where the path lists the
joint actions leading to the node, so every branch samples the same whatever the buffer holds.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from comlrl.rl import agent_candidate_returns, joint_indices, tree_returns
from comlrl.trainers.core.oracle import NonFiniteRewardError
from comlrl.trainers.core.sampling import ItemSample, PromptedItem, sample_prompted

logger = logging.getLogger(__name__)

__all__ = ["TrajectoryTurn", "TurnNode", "build_trees", "next_prompts", "play_trajectories", "tree_nodes_by_turn"]


@dataclass
class TurnNode:
    """One decision of the team in a rollout tree: the node's prompts and candidates (``sample``), its turn
    (0-based), the joint actions leading to it (``path``), the histories the transition sees, and after
    scoring the joint actions, their rewards, children (None: a leaf slot) and returns."""

    sample: ItemSample
    turn: int
    path: tuple[int, ...]
    prompt_history: list[list[str]]
    response_history: list[list[str]]
    joints: list[tuple[int, ...]] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    children: list[TurnNode | None] = field(default_factory=list)
    returns: list[float] = field(default_factory=list)

    def agent_returns(self, agent: int) -> list[float]:
        """Agent ``agent``'s return per own candidate (see the module docstring)."""
        return agent_candidate_returns(self.returns, self.joints, agent, len(self.sample.candidates[agent]))

    @property
    def mean_reward(self) -> float:
        return math.fsum(self.rewards) / len(self.rewards) if self.rewards else math.nan

    @property
    def mean_return(self) -> float:
        return math.fsum(self.returns) / len(self.returns) if self.returns else math.nan


@dataclass
class TrajectoryTurn:
    """One turn of one item's trajectory (one joint response): the turn's sample and its reward."""

    sample: ItemSample
    turn: int
    reward: float


def next_prompts(
    trainer: Any, item: Any, responses: Sequence[str], prompt_history: Sequence[Sequence[str]],
    response_history: Sequence[Sequence[str]],
) -> list[Any]:
    """The next turn's prompt of every agent from ``trainer.external_transition`` (see the module docstring)."""
    num = trainer.num_agents
    item_prompt = item.get("prompt", "") if hasattr(item, "get") else ""
    result = trainer.external_transition(
        prompt=item_prompt,
        agent_completions=list(responses),
        num_agents=num,
        prompt_history_per_agent=[list(h) for h in prompt_history],
        response_history_per_agent=[list(h) for h in response_history],
    )
    if not isinstance(result, (list, tuple)) or len(result) != num:
        got = f"{len(result)} values" if isinstance(result, (list, tuple)) else type(result).__name__
        raise ValueError(f"External transition must return per-agent prompts: a list of {num}, got {got}")
    if trainer.args.external_prompt_passthrough:
        prompts = list(result)
    else:
        base = dict(item) if isinstance(item, dict) else {"prompt": item_prompt}
        prompts = [trainer.formatters[a]({**base, "prompt": result[a]}) for a in range(num)]
    for a, prompt in enumerate(prompts):
        if not isinstance(prompt, (str, list)):
            raise TypeError(f"the next prompt of agent {a} must be a string or chat messages, got {type(prompt).__name__}")
    return prompts


def _score(trainer: Any, sample: ItemSample, joints: Sequence[tuple[int, ...]], oracle: Any = None) -> list[float]:
    """The reward of each joint action of a node by ``oracle`` (default: the trainer's; NaN for every one
    when a score is non-finite: the update drops the node and counts it)."""
    candidates = [[sample.candidates[a][joint[a]] for joint in joints] for a in range(len(sample.candidates))]
    try:
        if oracle is None:
            return list(trainer.score(sample, candidates).processed)
        return list(oracle.score(candidates, prompts=sample.prompt_texts, item=sample.item,
                                 item_index=sample.item_index).processed)
    except NonFiniteRewardError as error:
        logger.warning("%s: the node is dropped from its update", error)  # says which value, and where
        return [math.nan] * len(joints)


def _terminated(trainer: Any, rewards: Sequence[float]) -> bool:
    threshold = trainer.args.early_termination_threshold
    if threshold is None or not rewards:
        return False
    mean = math.fsum(rewards) / len(rewards)
    return math.isfinite(mean) and mean > float(threshold)


def build_trees(
    trainer: Any, items: Sequence[Any], indices: Sequence[int], *, n: int, stream: str, step: int
) -> list[TurnNode]:
    """One rollout tree per item (the roots), scored and with returns; one generate call per turn."""
    args, num = trainer.args, trainer.num_agents
    mode = args.joint_mode
    level = [
        TurnNode(sample, 0, (), [[t] for t in sample.prompt_texts], [[] for _ in range(num)])
        for sample in sample_prompted(
            trainer, [PromptedItem(item, int(index), trainer.agent_prompts(item)) for item, index in zip(items, indices)],
            n=n, stream=stream, step=step,
        )
    ]
    roots = list(level)
    for turn in range(args.num_turns):
        pending: list[tuple[TurnNode, int, list[Any], list[list[str]]]] = []
        for node in level:
            node.joints = joint_indices(num, n, mode)
            node.rewards = _score(trainer, node.sample, node.joints)
            node.children = [None] * len(node.joints)
            if turn + 1 >= args.num_turns or _terminated(trainer, node.rewards):
                continue
            for j, joint in enumerate(node.joints):
                responses = [node.sample.candidates[a][joint[a]].text for a in range(num)]
                history = [node.response_history[a] + [responses[a]] for a in range(num)]
                prompts = next_prompts(trainer, node.sample.item, responses, node.prompt_history, history)
                pending.append((node, j, prompts, history))
        if not pending:
            break
        entries = [
            PromptedItem(node.sample.item, node.sample.item_index, prompts, ("turn", *node.path, j))
            for node, j, prompts, _ in pending
        ]
        samples = sample_prompted(trainer, entries, n=n, stream=stream, step=step)
        level = []
        for (parent, j, _, history), sample in zip(pending, samples):
            child = TurnNode(
                sample, turn + 1, (*parent.path, j),
                [parent.prompt_history[a] + [sample.prompt_texts[a]] for a in range(num)], history,
            )
            parent.children[j] = child
            level.append(child)
    for root in roots:
        _fill_returns(root, float(args.discount))
    return roots


def _fill_returns(node: TurnNode, discount: float) -> list[float]:
    child_returns = [_fill_returns(child, discount) if child is not None else None for child in node.children]
    node.returns = tree_returns(node.rewards, child_returns, discount)
    return node.returns


def tree_nodes_by_turn(roots: Sequence[TurnNode]) -> list[list[TurnNode]]:
    """Every node of the trees, grouped by turn (turn 0 first), in breadth-first order within a turn."""
    out: list[list[TurnNode]] = []
    level = list(roots)
    while level:
        out.append(level)
        level = [child for node in level for child in node.children if child is not None]
    return out


def play_trajectories(
    trainer: Any, items: Sequence[Any], indices: Sequence[int], *, stream: str, step: int,
    early_termination: bool = True, oracle: Any = None,
) -> list[list[TrajectoryTurn]]:
    """One trajectory per item (one joint response per turn), up to ``num_turns`` or (``early_termination``)
    an early termination; one generate call per turn for every item still playing; rewards by ``oracle``
    (default: the trainer's). Evaluation plays every turn with the task oracle, as the public library does."""
    args, num = trainer.args, trainer.num_agents
    playing = [PromptedItem(item, int(index), trainer.agent_prompts(item)) for item, index in zip(items, indices)]
    histories = {entry.item_index: ([[] for _ in range(num)], [[] for _ in range(num)]) for entry in playing}
    out: dict[int, list[TrajectoryTurn]] = {entry.item_index: [] for entry in playing}
    for turn in range(args.num_turns):
        if not playing:
            break
        samples = sample_prompted(trainer, playing, n=1, stream=stream, step=step)
        still = []
        for entry, sample in zip(playing, samples):
            (reward,) = _score(trainer, sample, [(0,) * num], oracle)
            out[entry.item_index].append(TrajectoryTurn(sample, turn, reward))
            prompts_seen, responses_seen = histories[entry.item_index]
            for a in range(num):
                prompts_seen[a].append(sample.prompt_texts[a])
                responses_seen[a].append(sample.candidates[a][0].text)
            if turn + 1 < args.num_turns and not (early_termination and _terminated(trainer, [reward])):
                responses = [sample.candidates[a][0].text for a in range(num)]
                prompts = next_prompts(trainer, entry.item, responses, prompts_seen, responses_seen)
                still.append(PromptedItem(entry.item, entry.item_index, prompts, ("turn", turn + 1)))
        playing = still
    return [out[int(index)] for index in indices]


# ---- training on the episodes ------------------------------------------------------------------------------


def train_multi_turn_epoch(
    learner: Any, items: Sequence[Any], *, epoch: int, round_index: int, desc: str, start_buffer: int = 0
) -> None:
    """One multi-turn pass of :class:`~comlrl.trainers.online_rl.policy_learning.PolicyLearner` over ``items`` from
    buffer ``start_buffer``: per buffer of ``rollout_buffer_size`` items, play its episodes (trees or
    trajectories), then update turn by turn (turn 1 first), ``train_batch_size`` nodes (turns) per update.
    Data parallel: each rank plays its shard of the buffer's items and trains on the rows it holds of each
    global update batch (:meth:`~comlrl.trainers.core.data_parallel.DataParallel.row_offsets`)."""
    host, args = learner.host, learner.args
    stream, buffer, batch = f"rl/{round_index}", args.rollout_buffer_size, args.train_batch_size
    with host.progress_bar(total=len(items), initial=start_buffer * buffer, desc=desc, unit="item") as bar:
        for start in range(start_buffer * buffer, len(items), buffer):
            stop = min(start + buffer, len(items))
            indices = host.data_parallel.shard(range(start, stop))
            chunk = [items[i] for i in indices]
            if not indices:
                levels = []
            elif learner.algorithm in ("iac", "maac"):
                levels = _trajectory_levels(learner, chunk, indices, stream=stream, step=epoch)
            else:
                roots = host.build_trees(chunk, indices, n=args.num_generations, stream=stream, step=epoch)
                levels = [_tree_level(host.num_agents, nodes) for nodes in tree_nodes_by_turn(roots)]
            counts = [len(level.samples) for level in levels]
            for turn, (total, offset) in enumerate(host.data_parallel.row_offsets(counts)):
                count = counts[turn] if turn < len(counts) else 0
                for first in range(0, total, batch):
                    host.maybe_evaluate()
                    lo, hi = max(first - offset, 0), min(first + batch - offset, count)
                    if lo >= hi:  # data parallel: none of this batch's rows is this rank's
                        host.idle_update()
                        continue
                    level, part = levels[turn], slice(lo, hi)
                    learner.training_step(
                        level.samples[part], level.rewards[part],
                        where=f"round {round_index}, epoch {epoch}, turn {turn + 1}, items from {start}",
                        turn=turn,
                        agent_returns=[returns[part] for returns in level.agent_returns],
                        old_values=None if level.old_values is None else [v[part] for v in level.old_values],
                        env_steps=sum(level.env_steps[part]),
                    )
            learner.buffer_done(start // buffer + 1)
            bar.update(stop - start)


@dataclass
class _Level:
    """The training rows of one turn of a buffer: per row (a tree node, or a trajectory's turn) its sample,
    its rewards, per agent its returns, per critic its values at collection (actor-critic), its env steps."""

    samples: list[ItemSample]
    rewards: list[list[float]]
    agent_returns: list[list[list[float]]]
    old_values: list[list[list[float]]] | None
    env_steps: list[int]


def _tree_level(num_agents: int, nodes: Sequence[TurnNode]) -> _Level:
    return _Level(
        samples=[node.sample for node in nodes],
        rewards=[list(node.rewards) for node in nodes],
        agent_returns=[[node.agent_returns(a) for node in nodes] for a in range(num_agents)],
        old_values=None,
        env_steps=[len(node.rewards) for node in nodes],
    )


def _trajectory_levels(learner: Any, items: list[Any], indices: list[int], *, stream: str, step: int) -> list[_Level]:
    """Play the buffer's trajectories, value every turn with the critics (no gradient), and build the rows of
    each turn with the one-step targets as returns."""
    import torch

    from comlrl.rl import td_targets

    host, args = learner.host, learner.args
    trajectories = host.play_trajectories(items, indices, stream=stream, step=step)
    turns = [turn for trajectory in trajectories for turn in trajectory]
    samples = [turn.sample for turn in turns]
    with torch.no_grad():
        if learner.algorithm == "maac":
            values = [learner._joint_values(samples, 1).float().cpu().tolist()]
        else:
            values = [learner._agent_values(a, samples, 1).float().cpu().tolist() for a in range(host.num_agents)]
    position = {id(turn): i for i, turn in enumerate(turns)}
    targets: list[dict[int, float]] = [{} for _ in values]  # per critic: row -> target
    for trajectory in trajectories:
        rows = [position[id(turn)] for turn in trajectory]
        rewards = [turn.reward for turn in trajectory]
        for c, critic_values in enumerate(values):
            nexts = [critic_values[r] for r in rows[1:]] + [0.0]
            for row, target in zip(rows, td_targets(rewards, nexts, float(args.discount))):
                targets[c][row] = target
    levels = []
    for t in range(args.num_turns):
        rows = [position[id(turn)] for turn in turns if turn.turn == t]
        if not rows:
            break
        critic_of = (lambda a: 0) if learner.algorithm == "maac" else (lambda a: a)  # noqa: E731
        levels.append(_Level(
            samples=[samples[r] for r in rows],
            rewards=[[turns[r].reward] for r in rows],
            agent_returns=[[[targets[critic_of(a)][r]] for r in rows] for a in range(host.num_agents)],
            old_values=[[[critic_values[r]] for r in rows] for critic_values in values],
            env_steps=[1] * len(rows),
        ))
    return levels
