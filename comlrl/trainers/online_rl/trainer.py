"""Online RL on the task reward: the trainer base of MAGRPO (``reinforce/``), IAC and MAAC
(``actor_critic/``), which differ only in their configs and public constructors; single-turn or multi-turn
(``num_turns > 1`` with an ``external_transition``: :mod:`comlrl.trainers.online_rl.multi_turn`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from comlrl.trainers.core.train_options import CheckpointPlan
from comlrl.trainers.core.trainer import MultiAgentTrainerBase
from comlrl.trainers.online_rl.host import RLHost
from comlrl.trainers.online_rl.multi_turn import build_trees, play_trajectories
from comlrl.trainers.online_rl.policy_learning import PolicyLearner, task_reward_fn

__all__ = ["OnlineRLTrainer", "RLStageAttributes"]


class RLStageAttributes:
    """The public attributes a trainer with an RL stage (``self.rl``, a :class:`PolicyLearner`) shows: its
    critics, their optimizers and the reference policy; and what the stage uses of the trainer
    (:meth:`rl_host`). MAGRPO / IAC / MAAC and MARLHF share them."""

    rl: PolicyLearner

    def rl_host(self: Any) -> RLHost:
        """What the RL stage uses of this trainer (:class:`~comlrl.trainers.online_rl.host.RLHost`): built once,
        when the stage is; the counters and the data cursor a fresh ``train()`` replaces are read when used."""
        return RLHost(
            args=self.args,
            policy=self.policy,
            agent_names=self.agent_names,
            num_agents=self.num_agents,
            actor_names=self.actor_names,
            gradient_steps=self.gradient_steps,
            data_parallel=self.data_parallel,
            sharded=self.sharded,
            sample_items=self.sample_items,
            sampling_params=self.sampling_params,
            build_trees=partial(build_trees, self),
            play_trajectories=partial(play_trajectories, self),
            updates_seen=lambda: self.updates_seen,
            nonfinite=lambda: self.nonfinite,
            data_cursor=lambda: self.data_cursor,
            save_due_checkpoint=self.save_due_checkpoint,
            progress_bar=self.progress_bar,
            maybe_evaluate=self._maybe_evaluate,
            idle_update=self.idle_update,
            record_step=self.record_step,
            record_nonfinite=self.record_nonfinite,
        )

    @property
    def critics(self) -> list[Any]:
        """The RL stage's critics (maac / iac), persisting across epochs (and rounds)."""
        return self.rl.critics

    @property
    def critic_optimizers(self) -> list[Any]:
        """One AdamW per critic, in critic order (the public attribute)."""
        return self.rl.critic_optimizers

    @property
    def reference_policy(self) -> Any:
        """The frozen initial agents of the reference KL (None when ``reference_kl_enabled`` is off)."""
        return self.rl.reference


class OnlineRLTrainer(RLStageAttributes, MultiAgentTrainerBase):
    """Online RL on the task reward: ``num_train_epochs`` epochs of :meth:`PolicyLearner.run_epoch` over the
    training items (the base of :class:`~comlrl.trainers.reinforce.MAGRPOTrainer`,
    :class:`~comlrl.trainers.actor_critic.IACTrainer` and :class:`~comlrl.trainers.actor_critic.MAACTrainer`).

    Checkpoints (``train(checkpoint_dir=...)``) commit after every epoch (``checkpoint-{epochs done}``) and
    hold the weights, optimizers, critics, random streams and metrics; a resumed run continues exactly.
    ``save_steps`` checkpoints fall after a rollout buffer (the first buffer end at or after the due step).
    Extra keywords: ``critic_model``, ``critics`` (actor-critic backends), ``metrics_callback``.
    """

    def __init__(
        self,
        *args: Any,
        critic_model: Any = None,
        critics: Sequence[Any] | None = None,
        metrics_callback: Callable[..., Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.rl = self.add_part(
            PolicyLearner(
                self.rl_host(), critic_model=critic_model, critics=critics, metrics_callback=metrics_callback
            )
        )

    def _accept_external_transition(self, transition: Any, args: Any) -> Any:
        """Multi-turn episodes (``num_turns > 1``) need the transition that writes the next turn's prompts
        (the public rule and message); a single-turn run keeps one it is given, unused."""
        if transition is not None and not callable(transition):
            raise ValueError(f"`external_transition` must be a callable or None, got {type(transition).__name__}")
        if args.num_turns > 1 and transition is None:
            family = type(self).__name__.removesuffix("Trainer")
            raise ValueError(
                f"Multi-turn {family} requires an external_transition: `num_turns` is {args.num_turns}; pass "
                "external_transition=... (it returns each agent's next prompt) or set num_turns=1"
            )
        return transition

    def _run(self, plan: CheckpointPlan) -> None:
        items = self._require_train_items()
        epochs = self.args.num_train_epochs
        reward_fn = task_reward_fn(self)
        start, in_epoch = int(self.data_cursor.get("epochs_done", 0)), int(self.data_cursor.get("in_epoch", 0))
        # One LR schedule over the run (a resume continues it).
        self.gradient_steps.begin_phase(epochs * self.rl.planned_steps(len(items)), resume=bool(start or in_epoch))
        for epoch in range(start, epochs):
            self.rl.run_epoch(
                items,
                epoch=epoch,
                reward_fn=reward_fn,
                desc=f"{type(self).__name__} epoch {epoch + 1}/{epochs}",
                start_buffer=in_epoch if epoch == start else 0,
            )
            self._flush_window()
            self.data_cursor = {"epochs_done": epoch + 1}
            self._commit(plan, epoch + 1, last=epoch + 1 == epochs)
