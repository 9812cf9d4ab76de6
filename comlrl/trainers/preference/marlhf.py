"""MARLHF: fit a joint reward model to preference pairs, then train the agents with multi-agent RL on it.

The base trainer, top to bottom:

1. collect pairs once (the same collection as MADPO: ``preference_num_candidates`` joint responses per
   item, scored by the task oracle, non-tied pairs kept);
2. fit a fresh :class:`~comlrl.trainers.preference.reward_model.JointRewardModel` (backbone from
   ``reward_model_name``, else the agents' model name; head seeded; on ``reward_model_device``, else the
   first agent's device) with the Bradley–Terry loss on the pairs, holding out ``reward_eval_fraction`` of
   them; log ``reward_model/loss``, ``reward_model/accuracy``, ``reward_model/eval_loss``,
   ``reward_model/eval_accuracy`` (held-out pairwise accuracy) and ``reward_model/truncated``;
3. freeze it and run ``num_train_epochs`` epochs of the RL stage
   (:class:`~comlrl.trainers.online_rl.policy_learning.PolicyLearner`, backend ``rl_algorithm``) with the reward
   model's scores (no gradients, one batched forward per rollout buffer) replacing the task reward.

Non-finite numbers: a fit step with a non-finite Bradley–Terry loss is skipped (counted in
``reward_model/skipped_steps`` and the run's ``nonfinite_losses_skipped``); an item the oracle or the reward
model scores NaN / inf is dropped (``nonfinite_rewards_dropped``); a non-finite RL loss or log-prob skips the
update. ``max_nonfinite_losses_in_a_row`` in a row stop the fit or the run
(:mod:`comlrl.trainers.core.nonfinite`).

The iterative trainer (:class:`MARLHFIterTrainer`) runs the round loop of :mod:`.rounds`; each round
fits a freshly initialised reward model on the replay sample (or continues last round's with
``reward_warm_start``), then runs the RL stage. With ``preference_scoring_reward="reward_model"`` the last
fitted reward model becomes the oracle of the next rounds' comparisons (the task reward until one exists).
Evaluation always uses the task reward.

Checkpoints: the base trainer commits after pair collection (``checkpoint-0``; a resume refits the reward
model, deterministically) and after every RL epoch (the fitted reward model travels with them). The
iterative trainer commits between rounds, with the reward model when the next round needs it (oracle or
warm start). Critics, their optimizers and the reference-policy snapshot travel as in the RL trainers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from comlrl.checkpoint import extra_dir
from comlrl.seeding import derive_seed
from comlrl.trainers.core.oracle import Oracle
from comlrl.trainers.core.sampling import ItemSample
from comlrl.trainers.core.train_options import UNSET
from comlrl.trainers.online_rl.policy_learning import PolicyLearner, RewardFn
from comlrl.trainers.online_rl.trainer import RLStageAttributes
from comlrl.trainers.preference.base import PreferenceTrainerBase
from comlrl.trainers.preference.config import MARLHFConfig, MARLHFIterConfig
from comlrl.trainers.preference.records import PreferencePair
from comlrl.trainers.preference.reward_model import (
    JointRewardModel,
    RewardModelOracle,
    fit_reward_model_from_config,
    resolve_reward_model_device,
    resolve_reward_model_source,
)
from comlrl.trainers.preference.rounds import PreferenceRounds

logger = logging.getLogger(__name__)

__all__ = ["MARLHFIterTrainer", "MARLHFTrainer", "reward_model_fn"]

REWARD_MODEL_PAYLOAD = "reward_model"


def reward_model_fn(model: JointRewardModel, batch_size: int | None = None) -> RewardFn:
    """Scores of every joint response of a rollout buffer by the frozen reward model (no gradients): all
    items' K joint texts go through :meth:`JointRewardModel.score` together (``batch_size`` texts per
    forward). The raw score is the reward (no ``reward_processor``)."""

    def score(samples: list[ItemSample]) -> list[list[float]]:
        prompts, responses, counts = [], [], []
        for sample in samples:
            k = len(sample.candidates[0])
            counts.append(k)
            for j in range(k):
                prompts.append(list(sample.prompt_texts))
                responses.append([agent[j].text for agent in sample.candidates])
        model.eval()
        scores, truncated = model.score(prompts, responses, batch_size=batch_size)
        if truncated:
            logger.info(
                "reward model: %d of %d RL joint texts truncated (reward_max_length)", truncated, len(prompts)
            )
        values = scores.tolist()
        out, start = [], 0
        for k in counts:
            out.append(values[start : start + k])
            start += k
        return out

    return score


class MARLHFTrainer(RLStageAttributes, PreferenceTrainerBase):
    """Multi-Agent RL from Human Feedback (see the module docstring).

    Takes the public CoMLRL constructor keywords (see :class:`~comlrl.trainers.core.trainer.MultiAgentTrainerBase`)
    plus ``metrics_callback``, ``critic_model`` and ``critics`` (critic sources of the maac / iac backends),
    and a :class:`~comlrl.trainers.preference.MARLHFConfig`. The reward model's source is
    ``reward_model_name``, else the agents' model name; actors given as unnamed model objects need
    ``reward_model_name``, which :meth:`train` reports first, before anything is generated or loaded (the
    public library reports it when reward training starts; a trainer of such actors can still be built).

    >>> trainer = MARLHFTrainer(agent_model="test-tiny", num_agents=2, reward_func=reward,
    ...                         train_dataset=items, args=MARLHFConfig(rl_algorithm="magrpo"))
    >>> trainer.train()
    """

    config_class = MARLHFConfig

    def __init__(
        self,
        *args: Any,
        metrics_callback: Callable[..., Any] | None = None,
        critic_model: Any = None,
        critics: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        named = self.args.reward_model_name is not None or self.actor_names[0] is not None
        self.reward_model_source: str | None = (
            resolve_reward_model_source(self.args.reward_model_name, self.actor_names) if named else None
        )
        self.reward_model_device = resolve_reward_model_device(
            self.args.reward_model_device, self.policy.device(0)
        )
        self.reward_model: JointRewardModel | None = None
        self.rl = self.add_part(
            PolicyLearner(
                self.rl_host(), critic_model=critic_model, critics=critics, metrics_callback=metrics_callback
            )
        )

    def train(
        self,
        resume_from_checkpoint: str | os.PathLike | bool | None = None,
        checkpoint_dir: str | os.PathLike | None = None,
        checkpoint_interval: int = UNSET,
        checkpoint_total_limit: int | None = UNSET,
        **generation_kwargs: Any,
    ) -> None:
        """:meth:`~comlrl.trainers.core.trainer.MultiAgentTrainerBase.train` (same keywords), after resolving
        the reward model's source: a missing ``reward_model_name`` is an error before anything loads."""
        self.reward_model_source = resolve_reward_model_source(self.args.reward_model_name, self.actor_names)
        super().train(
            resume_from_checkpoint, checkpoint_dir, checkpoint_interval, checkpoint_total_limit, **generation_kwargs
        )

    # ------------------------------------------------------------------------------------ learning
    def learn_from_pairs(
        self,
        pairs: list[PreferencePair],
        *,
        round_index: int,
        start_epoch: int = 0,
        start_batch: int = 0,
        on_epoch_end: Callable[[int], None] | None = None,
    ) -> None:
        """Fit the reward model on ``pairs`` (unless resuming past it), then run ``num_train_epochs`` RL
        epochs (one LR schedule over them), from epoch ``start_epoch``, rollout buffer ``start_batch``."""
        resume = (start_epoch, start_batch) != (0, 0)
        if not resume or self.reward_model is None:
            self.fit_reward_model(pairs, round_index=round_index)
        items = self._require_train_items()
        reward_fn = reward_model_fn(self.reward_model, batch_size=self.reward_batch_size)
        epochs = self.args.num_train_epochs
        self.gradient_steps.begin_phase(epochs * self.rl.planned_steps(len(items)), resume=resume)
        for epoch in range(start_epoch, epochs):
            self.rl.run_epoch(
                items,
                epoch=epoch,
                reward_fn=reward_fn,
                round_index=round_index,
                desc=f"MARLHF {self.args.rl_algorithm} epoch {epoch + 1}/{epochs}",
                start_buffer=start_batch if epoch == start_epoch else 0,
            )
            if on_epoch_end is not None:
                on_epoch_end(epoch + 1)

    @property
    def reward_batch_size(self) -> int:
        """Joint texts per reward-model forward while scoring rollouts."""
        return max(8, 2 * int(self.args.reward_train_batch_size))

    def new_reward_model(self, round_index: int) -> JointRewardModel:
        """A freshly initialised reward model (backbone from its source, head seeded per round)."""
        args = self.args
        return JointRewardModel.from_source(
            self.reward_model_source,
            device=self.reward_model_device,
            seed=derive_seed(args.seed, "reward_model", round_index),
            max_length=args.reward_max_length,
            freeze_backbone=args.reward_freeze_backbone,
        )

    def fit_reward_model(self, pairs: Sequence[PreferencePair], *, round_index: int) -> dict[str, float]:
        """Fit (a fresh, or with ``reward_warm_start`` the previous) reward model on ``pairs``; log and return
        its metrics. The fitted model replaces the task reward in the RL stage."""
        args = self.args
        warm = bool(getattr(args, "reward_warm_start", False)) and self.reward_model is not None
        model = self.reward_model if warm else self.new_reward_model(round_index)
        metrics = fit_reward_model_from_config(
            model, pairs, args, seed=derive_seed(args.seed, "reward_model", "fit", round_index),
            data_parallel=self.data_parallel,  # under a launcher each rank fits on its shard of every batch
        )
        model.eval()
        self.reward_model = model
        self._use_reward_model_as_oracle()
        # The fit's skipped (non-finite) steps count among the run's, next to the RL stage's.
        self.nonfinite.losses_skipped += int(metrics["reward_model/skipped_steps"])
        self._log({**metrics, "reward_model/warm_start": float(warm), **self.nonfinite.metrics()})
        return metrics

    def _use_reward_model_as_oracle(self) -> None:
        if (
            getattr(self.args, "preference_scoring_reward", "task") == "reward_model"
            and self.reward_model is not None
        ):
            self.oracle = Oracle(RewardModelOracle(self.reward_model, agent_prompts=self.agent_prompt_texts))

    def on_fresh_run(self) -> None:
        super().on_fresh_run()
        self.reward_model = None
        self.oracle = self.task_oracle

    # ------------------------------------------------------------------------------------ checkpoints
    def _keeps_reward_model(self) -> bool:
        """A resume after the first RL update continues on the fitted reward model (before it, the model is
        refitted, deterministically)."""
        cursor = self.data_cursor
        return self.reward_model is not None and bool(cursor.get("epochs_done", 0) or cursor.get("in_epoch", 0))

    def checkpoint_payloads(self) -> dict[str, Callable[[Path], None]]:
        payloads = dict(super().checkpoint_payloads())
        if self._keeps_reward_model():
            model = self.reward_model
            payloads[REWARD_MODEL_PAYLOAD] = lambda folder: model.save(folder / "model")
        return payloads

    def restore_payloads(self, checkpoint: Path) -> None:
        super().restore_payloads(checkpoint)
        self.reward_model = None
        self.oracle = self.task_oracle
        try:
            folder = extra_dir(checkpoint, REWARD_MODEL_PAYLOAD)
        except FileNotFoundError:
            return
        self.reward_model = JointRewardModel.load(folder / "model", device=self.reward_model_device)
        self.reward_model.eval()
        self._use_reward_model_as_oracle()


class MARLHFIterTrainer(MARLHFTrainer):
    """Iterative MARLHF: ``num_iterations`` rounds of comparing the current agents with a comparator, storing
    the round's pairs, fitting a reward model on the replay sample and running the RL stage (the round loop
    is ``self.rounds``, a :class:`~.rounds.PreferenceRounds`). Takes :class:`MARLHFTrainer`'s keywords (plus
    ``comparator=``) and a :class:`~comlrl.trainers.preference.MARLHFIterConfig`."""

    config_class = MARLHFIterConfig
    rounds_class = PreferenceRounds

    def _keeps_reward_model(self) -> bool:
        """The next round needs the fitted reward model when it is the comparisons' oracle or warm-starts
        the next fit."""
        args = self.args
        return self.reward_model is not None and (
            args.preference_scoring_reward == "reward_model"
            or args.reward_warm_start
            or self.rounds.round_in_progress  # a save_steps checkpoint inside a round's RL stage
        )
