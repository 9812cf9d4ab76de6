"""MADPO: Multi-Agent Direct Preference Optimization, base (:class:`MADPOTrainer`) and iterative
(:class:`MADPOIterTrainer`).

The loop, top to bottom (the base trainer; the iterative one runs the same update each round of
:mod:`.rounds`):

1. sample ``preference_num_candidates`` joint responses per training item (one generate call per batch of
   items, every agent's requests together), score them with the oracle, keep the non-tied pairs;
2. for ``num_train_epochs`` epochs, shuffle the pairs with a seeded generator and cut batches of
   ``train_batch_size``;
3. per batch, one padded forward per agent scores the winners and losers together (the sampled token ids,
   EOS included unless ``exclude_last_completion_token``), giving every agent's margin on every pair;
4. agent i's loss is ``-log sigmoid(dpo_beta * (m_i + sum_{j != i} stopgrad(m_j)))``
   (:func:`~comlrl.trainers.preference.losses.madpo_agent_losses`): one backward of the summed losses
   gives each agent exactly its own gradient, and every policy's AdamW steps once.

A non-finite loss (or an agent's non-finite log-probs) skips the update: no parameter changes, the skip is
counted in ``nonfinite_losses_skipped`` and logged naming the agent and the update;
``max_nonfinite_losses_in_a_row`` in a row stop the run (:mod:`comlrl.trainers.core.nonfinite`). An item
whose oracle score is non-finite yields no pairs (counted in ``nonfinite_rewards_dropped``). Override points: :meth:`MADPOTrainer.compute_margins` and :meth:`MADPOTrainer.training_step`.

FSDP (:mod:`comlrl.trainers.core.sharded_training`): ``training_step`` scores on the sharded modules; a rank
without pairs in a batch scores a one-token filler pair and back-propagates it with weight zero, an agent
without completions in a batch scores the filler too (its margin times zero), and a non-finite batch is still
back-propagated (weight zero) before it is dropped, so every rank makes the same forward and backward calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import SimpleNamespace

import numpy as np
import torch

from comlrl.rl import nonfinite_names
from comlrl.scoring import completion_logprobs
from comlrl.seeding import derive_seed
from comlrl.trainers.core.models import pad_token_id, scoring_mode
from comlrl.trainers.core.optimization import accumulated_steps
from comlrl.trainers.core.reference import ReferencePolicy
from comlrl.trainers.core.sharded_training import on_sharded_modules
from comlrl.trainers.preference.base import PreferenceTrainerBase
from comlrl.trainers.preference.config import MADPOConfig, MADPOIterConfig
from comlrl.trainers.preference.losses import (
    dpo_margins,
    madpo_agent_losses,
    pair_margins,
    preference_accuracy,
    sequence_logprob_sums,
)
from comlrl.trainers.preference.records import PreferencePair, ensure_token_ids
from comlrl.trainers.preference.reference_margin import PreferenceReference
from comlrl.trainers.preference.rounds import PreferenceRounds

__all__ = ["MADPOIterTrainer", "MADPOTrainer", "shuffled_batches"]


def shuffled_batches(num_pairs: int, batch_size: int, seed: int) -> list[np.ndarray]:
    """Pair indices of one epoch: a permutation from ``seed`` cut into consecutive batches."""
    order = np.random.Generator(np.random.PCG64(seed)).permutation(num_pairs)
    return [order[start : start + batch_size] for start in range(0, num_pairs, batch_size)]


class MADPOTrainer(PreferenceTrainerBase):
    """Trains a team of agents directly on preferences between their joint responses (reference-free, or
    against the frozen initial agents with ``preference_reference="initial"``).

    Takes the public CoMLRL constructor keywords (see :class:`PreferenceTrainerBase`) and a
    :class:`~comlrl.trainers.preference.MADPOConfig`.

    >>> trainer = MADPOTrainer(agent_model="test-tiny", num_agents=2, reward_func=reward,
    ...                        train_dataset=items, args=MADPOConfig(num_train_epochs=2))
    >>> trainer.train()
    """

    config_class = MADPOConfig

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # DPO's frozen reference (our extension), taken now: before any update.
        self.preference_reference = None
        if self.args.preference_reference == "initial":
            self.preference_reference = self.add_part(
                PreferenceReference(
                    self.policy,
                    self.args.reference_devices,
                    output_dir=lambda: self.args.output_dir,
                    data_parallel=self.data_parallel,
                )
            )
        if self.sharded is not None:  # FSDP: a rank without pairs in a batch makes the same calls
            self.sharded.filler = self._filler_step

    @property
    def reference_policy(self) -> ReferencePolicy | None:
        """The frozen initial agents of ``preference_reference="initial"`` (None for the reference-free loss,
        whatever ``reference_kl_enabled`` says: MADPO's loss never uses a reference KL)."""
        return None if self.preference_reference is None else self.preference_reference.reference

    # ------------------------------------------------------------------------------------ the epochs
    def learn_from_pairs(
        self,
        pairs: list[PreferencePair],
        *,
        round_index: int,
        start_epoch: int = 0,
        start_batch: int = 0,
        on_epoch_end: Callable[[int], None] | None = None,
    ) -> None:
        """``num_train_epochs`` epochs over ``pairs`` from epoch ``start_epoch``, batch ``start_batch`` (a
        resume); ``gradient_accumulation_steps`` consecutive batches of an epoch make one optimizer step. The
        data cursor's ``in_epoch`` counts the batches done, so a ``save_steps`` checkpoint resumes there."""
        args, steps = self.args, self.gradient_steps
        ensure_token_ids(pairs, self.tokenizers, append_eos=True)
        per_epoch = accumulated_steps(-(-len(pairs) // args.train_batch_size), args.gradient_accumulation_steps)
        steps.begin_phase(per_epoch * args.num_train_epochs, resume=(start_epoch, start_batch) != (0, 0))
        for epoch in range(start_epoch, args.num_train_epochs):
            batches = shuffled_batches(
                len(pairs), args.train_batch_size, derive_seed(args.seed, "shuffle", round_index, epoch)
            )
            first = start_batch if epoch == start_epoch else 0
            desc = f"MADPO epoch {epoch + 1}/{args.num_train_epochs}"
            with self.progress_bar(total=len(batches), initial=first, desc=desc, unit="batch") as bar:
                for b in range(first, len(batches)):
                    self._maybe_evaluate()
                    mine = self.data_parallel.shard(batches[b])  # data parallel: this rank's pairs of the batch
                    if mine:
                        self.training_step([pairs[i] for i in mine], where=f"round {round_index}, epoch {epoch}")
                    else:
                        self.idle_update()
                    self.data_cursor["in_epoch"] = b + 1
                    self.save_due_checkpoint()
                    bar.update(1)
            steps.flush()
            self.data_cursor.pop("in_epoch", None)
            if on_epoch_end is not None:
                on_epoch_end(epoch + 1)

    # ------------------------------------------------------------------------------------ one update
    def compute_margins(self, batch: Sequence[PreferencePair]) -> torch.Tensor:
        """Every agent's margin on every pair, ``[num_agents, len(batch)]``, with gradients.

        One padded forward per agent scores its winner and loser completions together (with
        ``preference_reference="initial"`` one more, without gradients, of the frozen reference: DPO's margin).
        """
        margins: list[torch.Tensor | None] = []
        device = None
        for a, agent in enumerate(self.agent_names):
            handle = self.policy.handle(agent)
            prompts = [pair.prompt_token_ids[a] for pair in batch]
            completions = [pair.winner_token_ids[a] for pair in batch] + [
                pair.loser_token_ids[a] for pair in batch
            ]
            idle = not any(completions)  # the agent did not act (pairs from a tree's decision point): margin 0
            if idle and self.sharded is None:
                margins.append(None)
                continue
            pad = pad_token_id(handle.tokenizer)
            if idle:  # FSDP: every rank scores every agent (a one-token filler pair, its margin times zero)
                prompts, completions = [[pad]], [[pad], [pad]]
            with self.policy.activate(agent), scoring_mode(handle.model, self.args.disable_dropout):
                logprobs, mask = completion_logprobs(
                    handle.model,
                    prompts + prompts,
                    completions,
                    pad_token_id=pad,
                    exclude_last_token=self.args.exclude_last_completion_token,
                    requires_grad=True,
                )
            margin = pair_margins(sequence_logprob_sums(logprobs, mask), len(prompts))
            if idle:
                margin = (margin * 0.0).expand(len(batch))
            elif self.preference_reference is not None:
                margin = dpo_margins(margin, self.preference_reference.margins(
                    agent, prompts, completions[: len(batch)], completions[len(batch) :],
                    pad_token_id=pad,
                    exclude_last_token=self.args.exclude_last_completion_token,
                ))
            device = margin.device if device is None else device
            margins.append(margin.to(device))
        zeros = torch.zeros(len(batch), device=device if device is not None else "cpu")
        return torch.stack([zeros if m is None else m for m in margins])

    @on_sharded_modules
    def training_step(self, batch: Sequence[PreferencePair], where: str = "") -> dict[str, float] | None:
        """One MADPO micro-batch of every agent on ``batch`` (an optimizer step when it completes a group of
        ``gradient_accumulation_steps``); returns its metrics (None when skipped)."""
        steps = self.gradient_steps
        steps.start_micro_batch()
        with steps.autocast():
            margins = self.compute_margins(batch)
        margins = margins.float()
        losses = madpo_agent_losses(margins, self.args.dpo_beta)
        total = losses.sum()
        # Margins are sums of an agent's log-probs: a non-finite one names the agent whose model produced it.
        bad = nonfinite_names({**{f"log-probs of agent {a}": m for a, m in enumerate(margins)}, "loss": total})
        if bad:
            if self.sharded is not None:  # FSDP: every rank back-propagates (weight zero) before the drop
                steps.backward(total, 0)
            del total, losses, margins
            steps.discard_micro_batch()
            self.record_nonfinite(f"update {self.updates_seen + 1} ({where})", ", ".join(bad))
            return None
        with self._all_adapters_trainable():
            steps.backward(total, len(batch))
        if not steps.end_micro_batch(len(batch)):  # another rank's part was non-finite: dropped everywhere
            return None
        self.nonfinite.finite_step()
        detached = margins.detach()
        reward_mean = sum(p.candidate_reward_mean for p in batch) / len(batch)
        metrics = {
            "loss": float(losses[0].detach()),
            "joint_margin": float(detached.sum(0).mean()),
            "preference_accuracy": float(preference_accuracy(detached)),
            "turn_1/reward_mean": reward_mean,
            "turn_1/expected_return": reward_mean,
        }
        if self.num_agents > 1:
            for a in range(self.num_agents):
                metrics[f"agent_{a}/margin"] = float(detached[a].mean())
        self.record_update(len(batch), metrics)
        return metrics

    def _filler_step(self) -> None:
        """FSDP, a rank without pairs in the batch: the forward and backward calls of :meth:`training_step` on a
        filler pair (every agent idle), back-propagated with weight zero."""
        pads = [[pad_token_id(tokenizer)] for tokenizer in self.tokenizers]
        filler = SimpleNamespace(prompt_token_ids=pads, winner_token_ids=[[]] * len(pads), loser_token_ids=[[]] * len(pads))
        with self.gradient_steps.autocast():
            margins = self.compute_margins([filler])
        self.gradient_steps.backward(madpo_agent_losses(margins.float(), self.args.dpo_beta).sum(), 0)

    @contextmanager
    def _all_adapters_trainable(self) -> Iterator[None]:
        """Let gradients reach every agent's LoRA adapter during backward.

        peft's ``set_adapter`` leaves only the active adapter with ``requires_grad``, and autograd skips
        accumulating into leaves whose flag is off at backward time, so the adapters scored earlier in the
        batch are switched back on for the backward pass (and restored afterwards).
        """
        params = [p for name in self.policy.policies for p in self.policy.trainable_parameters(name)]
        flags = [p.requires_grad for p in params]
        for p in params:
            p.requires_grad_(True)
        try:
            yield
        finally:
            for p, flag in zip(params, flags):
                p.requires_grad_(flag)


class MADPOIterTrainer(MADPOTrainer):
    """Iterative MADPO: ``num_iterations`` rounds of comparing the current agents with a comparator,
    storing the round's pairs in the replay buffer and training ``num_train_epochs`` MADPO epochs on the
    replay sample (the round loop is ``self.rounds``, a :class:`~.rounds.PreferenceRounds`). Takes
    :class:`MADPOTrainer`'s keywords (plus ``comparator=``) and a
    :class:`~comlrl.trainers.preference.MADPOIterConfig`."""

    config_class = MADPOIterConfig
    rounds_class = PreferenceRounds
