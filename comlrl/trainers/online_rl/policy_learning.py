"""The RL stage: multi-agent policy learning on a reward function, shared by MARLHF and the public MAGRPO,
IAC and MAAC trainers (one implementation).

One epoch over the training items, top to bottom (:meth:`PolicyLearner.run_epoch`):

1. take the next ``rollout_buffer_size`` items; every agent samples ``num_generations`` responses per item
   in ONE ``backend.generate`` call (candidate k of every agent forms joint response k);
2. the reward function scores every joint response (the task oracle for MAGRPO/IAC/MAAC, the frozen joint
   reward model under no_grad for MARLHF): ``R`` of shape ``[items * K]``;
3. per ``train_batch_size`` items, one update of every agent (:meth:`PolicyLearner.training_step`):

   - one padded forward per agent scores its sampled tokens (every token, EOS included; padding masked;
     ``exclude_last_completion_token`` leaves the last one out, for parity with the public library);
   - with reference KL on, one no-grad forward of the frozen initial agent gives ``KL_i = Σ_t k3_t`` per
     completion, and agent i's reward signal becomes ``R − reference_kl_coef · KL_i``;
   - MAGRPO family (magrpo / mareinforce / marloo / maremax): advantages from
     :func:`comlrl.rl.compute_advantages` over each item's K responses with baseline mean / raw / rloo /
     max, whitened per item when ``advantage_normalization`` (then all four give the same advantages:
     each baseline is affine in the return);
   - actor-critic (maac: one critic on the joint text; iac: one critic per agent, or a value head on the
     agent's model): ``A = R − V(h)`` (v) or ``Q(h, a) − mean_item Q`` (q) from
     :func:`comlrl.rl.critic_advantages`, minus ``reference_kl_coef · KL_i``, whitened over the update batch
     when ``advantage_normalization``; the critics are fit to ``R`` with
     ``value_loss_coef · value_loss`` (:func:`comlrl.rl.value_loss`, clipped by ``value_clip_range``);
   - agent i's loss is :func:`comlrl.rl.policy_gradient_loss` (``loss_type`` aggregation, padding exactly
     zero); one backward per agent, then every optimizer steps once.

Critics and their optimizers are built once per trainer and persist across epochs and rounds; they travel
in checkpoints.

Non-finite numbers (:mod:`comlrl.trainers.core.nonfinite`): an item with a NaN / inf reward (from the task
oracle or the reward model) is dropped before the update, with its K joint responses (counted in
``nonfinite_rewards_dropped``, logged); an update whose every item was dropped is skipped. A non-finite
loss, log-prob, reference KL, advantage or critic value of any agent skips the whole update before any
optimizer steps (counted in ``nonfinite_losses_skipped``, logged naming the agent and the quantity).
``max_nonfinite_losses_in_a_row`` skipped updates in a row stop the run.
Log-probs are taken at temperature 1 (the policy's own distribution), as the public library does.

FSDP (:mod:`comlrl.trainers.core.sharded_training`): the update scores on the sharded modules, a rank without
rows runs :func:`~comlrl.trainers.online_rl.agent_update.fill_policy_gradient`, and a non-finite agent's loss
is still back-propagated (weight zero, the later agents' too) before the update is dropped on every rank.

Metrics per update: ``loss``, ``turn_1/reward_mean``, ``turn_1/expected_return`` (single turn: the same),
``reward_std``, ``frac_reward_zero_std``, ``advantage_mean``, ``advantage_std``,
``completions/mean_length``, with reference KL ``turn_1/reference_kl_mean`` and
``turn_1/reference_kl_penalty_mean``, with critics ``value_loss``, ``value_mean``, ``explained_variance``,
and per agent ``agent_i/loss``.
"""

from __future__ import annotations

import copy
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from comlrl.checkpoint import extra_dir
from comlrl.rl import (
    compute_advantages,
    critic_advantages,
    explained_variance,
    finite_group_mask,
    group_stats,
    is_finite,
    policy_gradient_loss,
    value_loss,
)
from comlrl.trainers.core.models import pad_token_id, scoring_mode
from comlrl.trainers.core.optimization import accumulated_steps, build_optimizer, epoch_micro_batches
from comlrl.trainers.core.oracle import NonFiniteRewardError
from comlrl.trainers.core.reference import ReferencePolicy, shaped_rewards
from comlrl.trainers.core.sampling import ItemSample
from comlrl.trainers.core.sharded_training import on_sharded_modules
from comlrl.trainers.core.trainer import MultiAgentTrainerBase
from comlrl.trainers.core.trainer_core import TrainerPart
from comlrl.trainers.online_rl.agent_update import AgentLoss, fill_policy_gradient, nonfinite_parts
from comlrl.trainers.online_rl.critics import ValueModel, agent_critic_text, build_critics, joint_critic_text
from comlrl.trainers.online_rl.host import RLHost

logger = logging.getLogger(__name__)

__all__ = ["AgentLoss", "MAGRPO_FAMILY", "PolicyLearner", "RewardFn", "task_reward_fn"]

RewardFn = Callable[[list[ItemSample]], list[list[float]]]
MAGRPO_FAMILY = ("magrpo", "mareinforce", "marloo", "maremax")
CRITICS_PAYLOAD = "critics"
CRITICS_FILE = "critics.pt"
REFERENCE_DIR = "reference_policy"


def task_reward_fn(trainer: MultiAgentTrainerBase) -> RewardFn:
    """The trainer's oracle (``reward_func`` after ``reward_processor``), item by item; an item with a
    non-finite score gets NaN for all its responses (the update drops it and counts it)."""

    def item_scores(sample: ItemSample) -> list[float]:
        try:
            return list(trainer.score(sample).processed)
        except NonFiniteRewardError as error:
            logger.warning("%s: the item is dropped from its update", error)  # says which value, and where
            return [math.nan] * len(sample.candidates[0])

    def score(samples: list[ItemSample]) -> list[list[float]]:
        return [item_scores(sample) for sample in samples]

    return score


class PolicyLearner(TrainerPart):
    """The RL stage of one trainer: optional reference policy, critics and their optimizers, the update.

    Args:
        host: what the stage uses of its trainer (:class:`~comlrl.trainers.online_rl.host.RLHost`, from
            ``trainer.rl_host()``: config, team, engine, sampling, bookkeeping). Its config provides
            ``rl_algorithm``, ``num_generations``, ``rollout_buffer_size``, ``train_batch_size``,
            ``advantage_normalization``, ``loss_type`` and the reference-KL and critic fields
            (``MARLHFConfig``, ``MAGRPOConfig``, ``IACConfig``, ``MAACConfig``).
        critic_model / critics: critic sources for maac / iac (see
            :func:`~comlrl.trainers.online_rl.critics.resolve_critic_sources`).
        metrics_callback: ``f(records) -> {name: value}``, called per update with one record per joint
            response (``item``, ``prompts``, ``completions``, ``reward``); its values are logged.

    A :class:`~comlrl.trainers.core.trainer_core.TrainerPart` (register it with ``trainer.add_part``): the
    reference snapshot travels in ``trainer_state.json`` under ``"rl"``, the critics and their optimizers in
    the ``critics`` payload.
    """

    state_key = "rl"

    def __init__(
        self,
        host: RLHost,
        *,
        critic_model: Any = None,
        critics: Sequence[Any] | None = None,
        metrics_callback: Callable[[list[dict[str, Any]]], Any] | None = None,
    ) -> None:
        args = host.args
        self.host = host
        self.args = args
        self.algorithm = args.rl_algorithm
        if metrics_callback is not None and not callable(metrics_callback):
            raise ValueError(
                f"`metrics_callback` must be a callable or None, got {type(metrics_callback).__name__}"
            )
        self.metrics_callback = metrics_callback
        self.reference = (
            ReferencePolicy(host.policy, args.reference_devices) if args.reference_kl_enabled else None
        )
        self.reference_snapshot: str | None = None
        self.critics: list[ValueModel] = []
        self.critic_optimizers: list[torch.optim.Optimizer] = []
        if args.uses_critic:
            self.critics = build_critics(host, critic_model, critics)
            lr = args.resolved_critic_learning_rate
            self.critic_optimizers = [build_optimizer(c.critic_parameters(), learning_rate=lr) for c in self.critics]
            for c, optimizer in enumerate(self.critic_optimizers):  # stepped, clipped, scheduled with the agents
                host.gradient_steps.add_optimizer(f"critic_{c}", optimizer)
            host.data_parallel.attach(host.gradient_steps, whitenings=host.num_agents if args.advantage_normalization else 0)
        elif critic_model is not None or critics is not None:
            raise ValueError(
                f"`critic_model` / `critics` need an actor-critic backend (maac or iac); "
                f"rl_algorithm is {self.algorithm!r}"
            )
        if args.loss_type == "dapo":  # TRL's dapo: an agent's tokens of the whole optimizer step (micro-batches, ranks)
            host.gradient_steps.add_divisors(*(f"tokens/{a}" for a in range(len(host.agent_names))))
        if host.sharded is not None:  # FSDP: a rank without rows in an update batch makes the same calls
            host.sharded.filler = lambda: fill_policy_gradient(self)

    # ------------------------------------------------------------------------------------ the epoch
    def planned_steps(self, num_items: int) -> int:
        """Optimizer steps of one epoch over ``num_items`` items (the LR schedule's horizon per epoch): exact
        for one turn; for several, a bound (every tree node or trajectory turn of a buffer trains, as when
        no episode ends early)."""
        args, branch = self.args, 1
        if self.algorithm in MAGRPO_FAMILY:  # a tree node's children: K joint actions (cross: K^N)
            branch = args.num_generations ** (len(self.host.agent_names) if args.joint_mode == "cross" else 1)
        turns = int(getattr(args, "num_turns", 1))
        micro = epoch_micro_batches(num_items, args.rollout_buffer_size, args.train_batch_size, turns, branch)
        return accumulated_steps(micro, args.gradient_accumulation_steps)

    def run_epoch(
        self,
        items: Sequence[Any],
        *,
        epoch: int,
        reward_fn: RewardFn,
        round_index: int = 0,
        desc: str = "RL epoch",
        start_buffer: int = 0,
    ) -> None:
        """One pass over ``items`` from buffer ``start_buffer``: sample a buffer, score it, update per
        ``train_batch_size`` (``num_turns > 1``: the buffer's episodes, :mod:`.multi_turn`). The data cursor's
        ``in_epoch`` counts the buffers done (a ``save_steps`` checkpoint may follow); the epoch ends a step."""
        args, host = self.args, self.host
        if int(getattr(args, "num_turns", 1)) > 1:
            from comlrl.trainers.online_rl.multi_turn import train_multi_turn_epoch

            train_multi_turn_epoch(
                self, items, epoch=epoch, round_index=round_index, desc=desc, start_buffer=start_buffer
            )
        else:
            with host.progress_bar(total=len(items), initial=start_buffer * args.rollout_buffer_size,
                                      desc=desc, unit="item") as bar:  # fmt: skip
                for buffer in range(start_buffer, -(-len(items) // args.rollout_buffer_size)):
                    bar.update(self._train_buffer(items, buffer, epoch=epoch, reward_fn=reward_fn, round_index=round_index))
                    self.buffer_done(buffer + 1)
        host.gradient_steps.flush()
        host.data_cursor().pop("in_epoch", None)

    def _train_buffer(self, items: Sequence[Any], buffer: int, *, epoch: int, reward_fn: RewardFn, round_index: int) -> int:
        """Sample rollout buffer ``buffer`` (one generate call), score it, update per ``train_batch_size`` items;
        data parallel: this rank samples and trains on its shard of each update batch. Returns the item count."""
        args, host, k = self.args, self.host, self.args.num_generations
        start = buffer * args.rollout_buffer_size
        stop = min(start + args.rollout_buffer_size, len(items))
        parts = [
            host.data_parallel.shard(range(first, min(first + args.train_batch_size, stop)))
            for first in range(start, stop, args.train_batch_size)
        ]
        mine = [i for part in parts for i in part]
        stream = f"rl/{round_index}"
        samples = host.sample_items([items[i] for i in mine], mine, n=k, stream=stream, step=epoch) if mine else []
        rewards = reward_fn(samples) if samples else []
        _check_rewards(rewards, samples, k)
        at = 0
        for part in parts:
            host.maybe_evaluate()
            if part:
                where = f"round {round_index}, epoch {epoch}, item {part[0]}"
                self.training_step(samples[at : at + len(part)], rewards[at : at + len(part)], where=where)
            else:
                host.idle_update()
            at += len(part)
        return stop - start

    def buffer_done(self, buffers: int) -> None:
        """``buffers`` rollout buffers of the epoch are trained on: a point a run can resume from."""
        self.host.data_cursor()["in_epoch"] = buffers
        self.host.save_due_checkpoint()

    # ------------------------------------------------------------------------------------ one update
    @on_sharded_modules
    def training_step(
        self,
        samples: Sequence[ItemSample],
        rewards: Sequence[Sequence[float]],
        where: str = "",
        *,
        turn: int = 0,
        agent_returns: Sequence[Sequence[Sequence[float]]] | None = None,
        old_values: Sequence[Sequence[float]] | None = None,
        env_steps: int | None = None,
    ) -> dict[str, float] | None:
        """One update of every agent (and critic) on ``samples``; returns its metrics (None when skipped).

        ``rewards[i]`` are item i's rewards (its K joint responses). A multi-turn update
        (:mod:`comlrl.trainers.online_rl.multi_turn`) also gives the ``turn`` (0-based, for the ``turn_t/``
        metrics), ``agent_returns[a][i]`` (agent a's returns of item i's candidates, else ``rewards``),
        ``old_values[c][i]`` (the critics' values at collection: the advantage is then
        ``returns - old_values``) and the ``env_steps`` it consumed (else items x K)."""
        args, host = self.args, self.host
        where = f"update {host.updates_seen() + 1} ({where})"
        kept = self._finite_items(samples, rewards, where, agent_returns)
        if not kept:  # data parallel: this rank still joins the other ranks' micro-batch, with no rows
            return host.idle_update() if host.data_parallel.size > 1 else None
        samples, rewards = [samples[i] for i in kept], [list(rewards[i]) for i in kept]
        num_items, k = len(samples), len(samples[0].candidates[0])
        flat = lambda rows: torch.tensor([float(r) for i in kept for r in rows[i]], dtype=torch.float32)  # noqa: E731
        per_agent = [flat(agent_returns[a]) for a in range(len(agent_returns))] if agent_returns is not None else None
        baselines = [flat(values) for values in old_values] if old_values is not None else None
        immediate = torch.tensor([float(r) for row in rewards for r in row], dtype=torch.float32)
        returns = per_agent[0] if per_agent is not None else immediate
        groups = torch.arange(num_items).repeat_interleave(k)
        steps, rows = host.gradient_steps, num_items * k
        steps.start_micro_batch()
        critic_values, value_losses = None, []
        if self.algorithm == "maac":
            with steps.autocast():
                critic_values = self._joint_values(samples, k).float()
        agent_losses, advantages_seen, kls, lengths = [], [], [], []
        bad = None  # FSDP: the first non-finite agent's parts; every agent still back-propagates (weight zero)
        for a, agent in enumerate(host.agent_names):
            model = host.policy.handle(agent).model
            agent_ret = per_agent[a] if per_agent is not None else returns
            baseline = None if baselines is None else baselines[a if self.algorithm == "iac" else 0]
            # Backward inside the block: peft only lets the active adapter accumulate gradients.
            with host.policy.activate(agent), scoring_mode(model, args.disable_dropout):
                with steps.autocast():
                    out = self.agent_loss(a, samples, agent_ret, groups, critic_values, baseline)
                if bad is None and not is_finite(out.total):  # one sync; every non-finite part reaches the total
                    bad = f"{', '.join(nonfinite_parts(out))} of agent {a}"
                    if host.sharded is None:
                        return self._skip(where, bad)
                value = None if out.value_loss is None else args.value_loss_coef * out.value_loss.to(out.loss.device)
                if bad is not None:
                    out.total, out.loss, value = out.total * 0.0, out.loss * 0.0, None
                steps.backward_policy(out.total, rows, loss_type=args.loss_type, policy_loss=out.loss,
                                      tokens=float(out.mask.sum()), value_loss=value, agent=a)  # fmt: skip
            if out.value_loss is not None:
                value_losses.append(out.value_loss.detach())
            agent_losses.append(float(out.loss.detach()))
            advantages_seen.append(out.advantages.detach().float().cpu())
            kls.append(out.kl.detach().float().cpu())
            lengths.append(out.mask.sum(-1).float().cpu())
        if bad is not None:
            return self._skip(where, bad)
        if self.algorithm == "maac":
            v_loss = self._value_loss(critic_values, returns)
            if not is_finite(v_loss):  # the critic values were checked with every agent's loss
                return self._skip(where, "value loss of the joint critic")
            steps.backward(args.value_loss_coef * v_loss, rows)
            value_losses.append(v_loss.detach())
        if not steps.end_micro_batch(rows):  # another rank's part was non-finite: dropped everywhere
            return None
        host.nonfinite().finite_step()
        metrics = self._metrics(returns, groups, agent_losses, advantages_seen, kls, lengths, immediate, turn)
        if self.critics:
            metrics["value_loss"] = float(torch.stack([v.float().cpu() for v in value_losses]).mean())
            metrics.update(self._critic_metrics)
        if self.metrics_callback is not None:
            metrics.update(self._callback_metrics(samples, rewards))
        host.record_step(num_items * k if env_steps is None else env_steps, metrics)
        return metrics

    def agent_loss(
        self,
        agent: int,
        samples: Sequence[ItemSample],
        returns: torch.Tensor,
        groups: torch.Tensor,
        critic_values: torch.Tensor | None = None,
        old_values: torch.Tensor | None = None,
    ) -> AgentLoss:
        """Agent ``agent``'s loss on ``samples`` (one padded forward over its ``items * K`` completions).

        ``returns`` / ``groups`` are ``[items * K]`` (item-major); ``critic_values`` are MAAC's joint values;
        ``old_values`` (multi-turn actor-critic) the critic's values at collection, the advantage's baseline.
        Call it with the agent's adapter active and backward before leaving (see :meth:`training_step`).
        """
        args, host = self.args, self.host
        handle = host.policy.handle(agent)
        prompts = [c.prompt_token_ids for s in samples for c in s.candidates[agent]]
        completions = [c.token_ids for s in samples for c in s.candidates[agent]]
        pad = pad_token_id(handle.tokenizer)
        logprobs, mask = _completion_logprobs(handle.model, prompts, completions, pad, args)
        device = logprobs.device
        kl = torch.zeros(len(completions), device=device)
        if self.reference is not None:
            kl = self.reference.sequence_kl(
                agent,
                logprobs,
                mask,
                prompts,
                completions,
                pad_token_id=pad,
                estimator=args.reference_kl_estimator,
                exclude_last_token=args.exclude_last_completion_token,
            )
        values = critic_values
        if self.algorithm == "iac":
            values = self._agent_values(agent, samples, len(samples[0].candidates[agent]))
        if self.reference is None or is_finite(kl):  # without a reference the KL is zeros: no sync
            advantages = self.advantages(returns.to(device), kl, groups.to(device), values, old_values)
        else:  # inf logits give an inf KL, and no advantage: training_step skips the update on it
            advantages = torch.full_like(kl, math.nan)
            if host.sharded is not None and self.critics and args.advantage_normalization:
                host.data_parallel.whiten(kl[:0])  # FSDP: the other ranks' whitening, in its place
        loss = policy_gradient_loss(
            logprobs,
            advantages,
            mask,
            loss_type=args.loss_type,
            max_completion_length=max(mask.shape[1], int(host.sampling_params(1).max_new_tokens)),
            num_items_in_batch=mask.sum().clamp(min=1),
        )
        total, v_loss = loss, None
        if self.algorithm == "iac":
            v_loss = self._value_loss(values, returns)
            total = loss + args.value_loss_coef * v_loss.to(loss.device)
        return AgentLoss(loss, total, logprobs, mask, kl, advantages, values, v_loss)

    def advantages(
        self,
        returns: torch.Tensor,
        kl: torch.Tensor,
        groups: torch.Tensor,
        values: torch.Tensor | None = None,
        old_values: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One agent's advantages ``[N]`` from the returns, its per-completion KL and the critic's values
        (with ``old_values``, a multi-turn actor-critic step: ``returns - old_values``, the TD error)."""
        args = self.args
        coef = float(args.reference_kl_coef) if self.reference is not None else 0.0
        if self.algorithm in MAGRPO_FAMILY:
            shaped = shaped_rewards(returns, kl, coef)
            return compute_advantages(
                shaped, groups, estimator=args.advantage_mode, scale_rewards=args.advantage_normalization
            )
        if old_values is not None:
            base = returns - old_values.to(returns.device, returns.dtype)
        else:
            base = critic_advantages(returns, values.detach().to(returns.device), args.critic_type, groups)
        advantages = base - coef * kl.detach().to(base.dtype)
        # Whitened over the global batch's rows; one row has nothing to whiten against: kept raw (the public rule).
        return self.host.data_parallel.whiten(advantages) if args.advantage_normalization else advantages

    def _joint_values(self, samples: Sequence[ItemSample], k: int) -> torch.Tensor:
        critic = self.critics[0]
        if self.args.critic_type == "v":
            texts = [joint_critic_text(s.prompt_texts) for s in samples]
            return critic.values(texts).repeat_interleave(k)
        texts = [
            joint_critic_text(s.prompt_texts, [agent[j].text for agent in s.candidates])
            for s in samples
            for j in range(k)
        ]
        return critic.values(texts)

    def _agent_values(self, agent: int, samples: Sequence[ItemSample], k: int) -> torch.Tensor:
        critic = self.critics[agent]
        if self.args.critic_type == "v":
            return critic.values(
                [agent_critic_text(s.prompt_texts[agent]) for s in samples]
            ).repeat_interleave(k)
        texts = [
            agent_critic_text(s.prompt_texts[agent], c.text) for s in samples for c in s.candidates[agent]
        ]
        return critic.values(texts)

    def _value_loss(self, values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
        target = returns.to(values.device)
        loss = value_loss(values, target, old_values=values.detach(), clip_range=self.args.value_clip_range)
        with torch.no_grad():
            self._critic_metrics = {"value_mean": float(values.detach().float().mean())}
            ev = float(explained_variance(values.detach().float(), target.float()))
            if math.isfinite(ev):
                self._critic_metrics["explained_variance"] = ev
        return loss

    def _metrics(self, returns, groups, agent_losses, advantages, kls, lengths, rewards, turn) -> dict[str, float]:
        stats = group_stats(returns, groups).as_metrics()
        all_adv = torch.cat(advantages)
        prefix = f"turn_{turn + 1}/"
        metrics = {
            "loss": sum(agent_losses) / len(agent_losses),
            f"{prefix}reward_mean": float(rewards.mean()),
            f"{prefix}expected_return": float(returns.mean()),
            "reward_std": stats["reward_std"],
            "frac_reward_zero_std": stats["frac_reward_zero_std"],
            "advantage_mean": float(all_adv.mean()),
            "advantage_std": float(all_adv.std()) if all_adv.numel() > 1 else 0.0,
            "completions/mean_length": float(torch.cat(lengths).mean()),
        }
        if self.reference is not None:
            kl_mean = float(torch.cat(kls).mean())
            metrics[f"{prefix}reference_kl_mean"] = kl_mean
            metrics[f"{prefix}reference_kl_penalty_mean"] = float(self.args.reference_kl_coef) * kl_mean
        if len(agent_losses) > 1:
            for a, value in enumerate(agent_losses):
                metrics[f"agent_{a}/loss"] = value
        return metrics

    def _callback_metrics(self, samples, rewards) -> dict[str, float]:
        records = [
            {
                "item": s.item,
                "prompts": list(s.prompt_texts),
                "completions": [agent[j].text for agent in s.candidates],
                "reward": float(rewards[i][j]),
            }
            for i, s in enumerate(samples)
            for j in range(len(rewards[i]))
        ]
        out = self.metrics_callback(records) or {}
        if not isinstance(out, dict):
            raise TypeError(f"`metrics_callback` must return a dict of metrics, got {type(out).__name__}")
        return {str(key): float(value) for key, value in out.items()}

    # ------------------------------------------------------------------------------------ optimizers
    def _skip(self, where: str, what: str) -> None:
        # Gradients of the agents scored before are dropped (the group's earlier micro-batches keep theirs).
        self.host.gradient_steps.discard_micro_batch()
        self.host.record_nonfinite(where, what)
        return None

    def _finite_items(
        self, samples: Sequence[ItemSample], rewards: Sequence[Sequence[float]], where: str,
        agent_returns: Sequence[Sequence[Sequence[float]]] | None = None,
    ) -> list[int]:
        """The indices of the items whose every reward (and return) is finite; the others are dropped
        (counted, logged, and when none is left the update is a non-finite one)."""
        rows = [
            [*rewards[i], *(r for agent in (agent_returns or []) for r in agent[i])] for i in range(len(samples))
        ]
        width = max(len(row) for row in rows)
        flat = [float(r) for row in rows for r in row + [0.0] * (width - len(row))]
        keep, dropped = finite_group_mask(flat, torch.arange(len(samples)).repeat_interleave(width))
        if dropped:
            what = "; ".join(f"item {samples[i].item_index}: {list(rewards[i])}" for i in dropped)
            self.host.nonfinite().drop_rewards(len(dropped), what, where)
            if len(dropped) == len(samples):
                self.host.nonfinite().empty_step(where)
        return [i for i in range(len(samples)) if bool(keep[i * width])]

    # ------------------------------------------------------------------------------------ checkpoints
    def on_fresh_run(self, output_dir: str | os.PathLike | None = None) -> None:
        """Save the reference policy once (the initial agents) under ``output_dir`` (default: the trainer's),
        so a resumed run reloads exactly it."""
        if self.reference is not None:
            path = (
                Path(output_dir if output_dir is not None else self.host.args.output_dir) / REFERENCE_DIR
            )
            self.host.data_parallel.rank_zero_writes(lambda: self.reference.save(path), None)
            self.reference_snapshot = str(path)

    def state_dict(self) -> dict[str, Any]:
        return {"reference_snapshot": self.reference_snapshot}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        snapshot = state.get("reference_snapshot")
        self.reference_snapshot = snapshot
        if self.reference is None or snapshot is None:
            return
        if Path(snapshot).is_dir():
            self.reference.load_weights_(snapshot)
        else:
            logger.warning(
                "reference snapshot %s is gone; the reference is the copy taken when the trainer was built",
                snapshot,
            )

    def payloads(self) -> dict[str, Callable[[Path], None]]:
        if not self.critics:
            return {}
        state = {
            "critics": [c.trainable_state() for c in self.critics],
            "optimizers": [copy.deepcopy(o.state_dict()) for o in self.critic_optimizers],
        }
        return {CRITICS_PAYLOAD: lambda folder: torch.save(state, folder / CRITICS_FILE)}

    def restore(self, checkpoint: Path) -> None:
        if not self.critics:
            return
        try:
            folder = extra_dir(checkpoint, CRITICS_PAYLOAD)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"checkpoint {checkpoint} has no critics, but this trainer has critics"
            ) from None
        state = torch.load(folder / CRITICS_FILE, map_location="cpu", weights_only=True)
        if len(state["critics"]) != len(self.critics):
            raise ValueError(
                f"checkpoint {checkpoint} holds {len(state['critics'])} critics, expected {len(self.critics)}"
            )
        for critic, weights, optimizer, saved in zip(
            self.critics, state["critics"], self.critic_optimizers, state["optimizers"]
        ):
            critic.load_state_dict(weights)
            optimizer.load_state_dict(saved)


# ---------------------------------------------------------------------------------------- helpers


def _completion_logprobs(model, prompts, completions, pad: int, args) -> tuple[torch.Tensor, torch.Tensor]:
    from comlrl.scoring import completion_logprobs

    return completion_logprobs(
        model,
        prompts,
        completions,
        pad_token_id=pad,
        exclude_last_token=args.exclude_last_completion_token,
        requires_grad=True,
    )


def _check_rewards(rewards: Any, samples: Sequence[ItemSample], k: int) -> None:
    """One score per joint response of every item (a non-finite one is data: training_step drops its item)."""
    if len(rewards) != len(samples) or any(len(row) != k for row in rewards):
        raise RuntimeError(
            f"the reward function returned {[len(r) for r in rewards]} scores for {len(samples)} items of {k} joint responses each"
        )
