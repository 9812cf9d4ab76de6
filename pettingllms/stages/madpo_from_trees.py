"""The ``madpo_from_trees`` stage: MADPO on the preference pairs of the AT-GRPO trees the stage before it
played (multi-turn preference learning; :mod:`pettingllms.trainer.tree_pairs`).

The ``at_grpo`` stage right before it (tree sampling) writes the pairs of each of its steps as one round file
into ``<its folder>/tree_pairs/`` (``pair_selection`` and ``preference_pairs_per_sample`` of this stage's
section choose them, per decision point). This stage adds those rounds, oldest first, to a comlrl
:class:`~comlrl.trainers.preference.replay.PreferenceReplayBuffer` in its own folder, draws the training
pairs with the section's replay settings (``preference_replay_mode`` current: the last step's pairs;
``all_history``, ``nearest_k``, ``lambda_decay`` over every step), and trains ``num_train_epochs`` MADPO epochs
on them (:meth:`~comlrl.trainers.preference.MADPOTrainer.learn_from_pairs`) with the exact sampled token ids.
A historical mode with ``preference_replay_sample_size`` null draws as many pairs as the rounds hold (about
one pass over the stage's pairs, :func:`tree_replay_sample_size`): comlrl's own default, the newest round's
size, would here be one AT-GRPO step's pairs, whatever the number of steps.

The section holds every field of :class:`~comlrl.trainers.preference.MADPOIterConfig` (generated and renamed
to TRL's names, as for ``madpo``: ``learning_rate``, ``beta``, ...) but those of the iterative round loop
(``num_iterations``, the comparator's, ...: :data:`pettingllms.config.key_names.UNREAD_FIELDS`), which would
have no effect here and are refused.
A stage interrupted before it ended runs again from its start (its replay folder is rebuilt).
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pettingllms.config.errors import ConfigError
from pettingllms.stages.context import StageContext, check_one_process
from pettingllms.stages.env_oracle import EnvOracle, oracle_trainer_config

__all__ = ["REPLAY_DIR", "madpo_from_trees_settings", "run_madpo_from_trees", "tree_pair_settings",
           "tree_replay_sample_size"]

REPLAY_DIR = "preference_replay"

logger = logging.getLogger(__name__)


def madpo_from_trees_settings(stage: str, config: Mapping[str, Any], stage_dir: str | Path, progress: bool = True):
    """The :class:`~comlrl.trainers.preference.MADPOIterConfig` of section ``madpo_from_trees``."""
    from comlrl.trainers.preference import MADPOIterConfig

    check_one_process(stage)
    return oracle_trainer_config(MADPOIterConfig, stage, config, stage_dir, progress)


def tree_pair_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """How an ``at_grpo`` stage picks the pairs it writes for the ``madpo_from_trees`` stage after it."""
    section = config["madpo_from_trees"]
    return {"pair_selection": section["pair_selection"], "pairs_per_group": section["preference_pairs_per_sample"]}


def tree_replay_sample_size(mode: str, sample_size: int | None, round_sizes: list[int]) -> int | None:
    """The replay buffer's ``sample_size`` for the stage: the section's, else, for a historical mode, every
    pair the rounds hold (``current`` takes its whole round and no sample size)."""
    from comlrl.trainers.preference.replay import normalize_replay_mode

    if sample_size is not None or normalize_replay_mode(mode) == "current":
        return sample_size
    return max(1, sum(round_sizes))


def run_madpo_from_trees(context: StageContext) -> dict[str, float]:
    """MADPO over the previous ``at_grpo`` stage's tree pairs; returns the pairs, rounds and last metrics."""
    from comlrl.seeding import derive_seed
    from comlrl.trainers.preference import MADPOConfig, MADPOTrainer
    from comlrl.trainers.preference.records import RoundFile, list_round_files
    from comlrl.trainers.preference.replay import PreferenceReplayBuffer
    from pettingllms.stages.context import workflow_env
    from pettingllms.trainer.tree_pairs import TREE_PAIRS_DIR

    check_one_process(context.stage)
    settings = context.settings_or(madpo_from_trees_settings)
    if context.previous_folder is None:
        raise ConfigError("stage `madpo_from_trees` must follow an `at_grpo` stage, whose trees give its pairs")
    source = context.run_dir / context.previous_folder / TREE_PAIRS_DIR
    rounds = list_round_files(source)
    if not rounds:
        raise RuntimeError(
            f"stage `madpo_from_trees`: {source} holds no tree pairs (the `at_grpo` stage before it writes one "
            "round per step; did it run with sampling_mode tree?)"
        )
    replay_dir = context.stage_dir / REPLAY_DIR
    shutil.rmtree(replay_dir, ignore_errors=True)  # a rerun after an interruption starts the stage again
    stored = [RoundFile(path).load_all() for path in rounds]
    sample_size = tree_replay_sample_size(settings.preference_replay_mode, settings.preference_replay_sample_size,
                                          [len(pairs) for pairs in stored])
    buffer = PreferenceReplayBuffer(
        replay_dir, mode=settings.preference_replay_mode, k=settings.preference_replay_k,
        lam=settings.preference_replay_lambda, sample_size=sample_size,
        seed=derive_seed(settings.seed, "madpo_from_trees", context.folder) % 2**63,
    )
    for pairs in stored:
        buffer.add_round(pairs)
    pairs = buffer.sample()
    fields = {f.name for f in dataclasses.fields(MADPOConfig)}
    args = MADPOConfig(**{k: v for k, v in settings.to_dict(redact_secrets=False).items() if k in fields})
    oracle = EnvOracle(*workflow_env(context.config, purpose="train"), context.env_worker)
    try:
        if oracle.roles != context.policy.agents:
            raise ValueError(f"stage {context.stage!r}: the policy's agents {context.policy.agents} differ from the "
                             f"run's roles {oracle.roles}")
        trainer = MADPOTrainer(policy=context.policy, formatters=oracle.formatters, reward_func=oracle.reward, args=args)
        if pairs:
            trainer.learn_from_pairs(pairs, round_index=0)
        else:
            logger.warning("stage %s: the trees of %d at_grpo step(s) in %s hold no preference pair (every decision point's "
                           "candidates tied on reward), so it trains nothing", context.folder, len(rounds), source)
        trainer._flush_window()
        trainer.metrics_logger.close()
    finally:
        oracle.close()
    metrics = {"pairs": float(len(pairs)), "pairs_stored": float(sum(len(p) for p in stored)),
               "rounds": float(len(rounds)), "updates": float(trainer.updates_seen)}
    for record in trainer.metrics_logger.history:
        for key in ("loss", "joint_margin", "preference_accuracy"):
            if key in record:
                metrics[f"last/{key}"] = float(record[key])
    return metrics
