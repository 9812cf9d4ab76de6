"""The narrow interface between a trainer and its RL stage (``trainer.rl``, a
:class:`~comlrl.trainers.online_rl.policy_learning.PolicyLearner`).

The RL stage does not hold its trainer: the trainer hands it an :class:`RLHost`
(:meth:`~comlrl.trainers.online_rl.trainer.RLStageAttributes.rl_host`, shared by MAGRPO / IAC / MAAC and
MARLHF), which carries exactly what the stage (with its multi-turn episodes, its critics and its FSDP filler)
uses, as values and callables:

- the config (read only) and the team: the policy (handles, adapters, devices), the agent names, the agent
  count, the actors' names (critic sources) and, from the policy, the tokenizers;
- the engine: the gradient steps (micro-batches, backward, optimizer steps, autocast), the data-parallel
  group (shards, whitening, rank-zero writes) and the sharded modules under FSDP (None without);
- sampling: the items' samples and the sampling parameters; for multi-turn runs the episodes (trees of the
  MAGRPO family, trajectories of actor-critic);
- the trainer's bookkeeping: the update and non-finite counters (read when used: a fresh ``train()``
  replaces them), the data cursor, the due checkpoint, the progress bar, the due evaluation, a data-parallel
  idle update and the step record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from comlrl.trainers.core.sampling import ItemSample

__all__ = ["RLHost"]


@dataclass(frozen=True)
class RLHost:
    """What an RL stage uses of its trainer (see the module docstring).

    Attributes:
        args: the trainer's config.
        policy: the team (``handle``, ``activate``, ``device``).
        agent_names: the agents' names, in agent order.
        num_agents: the agent count.
        actor_names: the actors' model names (the critics' default sources).
        gradient_steps: the engine that turns micro-batches into optimizer steps.
        data_parallel: the data-parallel group.
        sharded: the policies' sharded modules under FSDP, else None.
        sample_items: ``sample_items(items, indices, *, n, stream, step)``: every agent's ``n`` candidates.
        sampling_params: the sampling parameters for ``n`` candidates.
        build_trees / play_trajectories: the multi-turn episodes
            (:func:`~comlrl.trainers.online_rl.multi_turn.build_trees`,
            :func:`~comlrl.trainers.online_rl.multi_turn.play_trajectories` on the trainer).
        updates_seen: the updates done so far.
        nonfinite: the run's non-finite guard (a fresh ``train()`` builds a new one).
        data_cursor: the trainer's data cursor (changed in place).
        save_due_checkpoint: a ``save_steps`` checkpoint when one is due.
        progress_bar: ``progress_bar(total=, initial=, desc=, unit=)``, a context manager.
        maybe_evaluate: an evaluation when one is due.
        idle_update: a data-parallel update without rows on this rank.
        record_step: ``record_step(env_steps, metrics)`` after an update.
        record_nonfinite: ``record_nonfinite(where, what)`` after a skipped update.
    """

    args: Any
    policy: Any
    agent_names: Sequence[Any]
    num_agents: int
    actor_names: Sequence[Any]
    gradient_steps: Any
    data_parallel: Any
    sharded: Any
    sample_items: Callable[..., list[ItemSample]]
    sampling_params: Callable[[int], Any]
    build_trees: Callable[..., list[Any]]
    play_trajectories: Callable[..., list[Any]]
    updates_seen: Callable[[], int]
    nonfinite: Callable[[], Any]
    data_cursor: Callable[[], dict[str, Any]]
    save_due_checkpoint: Callable[[], None]
    progress_bar: Callable[..., Any]
    maybe_evaluate: Callable[[], None]
    idle_update: Callable[[], Any]
    record_step: Callable[[int, Mapping[str, float]], None]
    record_nonfinite: Callable[[str, str], None]

    @property
    def tokenizers(self) -> list[Any]:
        """Every agent's tokenizer, in agent order (the first one tokenizes a critic without its own)."""
        return [self.policy.handle(a).tokenizer for a in self.agent_names]
