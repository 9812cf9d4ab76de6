"""The ``sft`` stage: the environment's oracle plays the ``sft`` seeds, then every policy is fine-tuned on the
prompts its roles saw and the oracle's answers (:func:`pettingllms.trainer.sft.sft_warm_start`).

The oracle plays each of ``sft.workflows`` (default: the run's own workflow) on every seed, so one shared
(L0 / L1) model can also learn roles the run does not play, e.g. ``[[single], [tool, plan]]``: the single
agent's and the team's. Roles are learnt in the order they first appear there.

Data-parallel runs (``accelerate launch`` / ``torchrun``): every rank builds the same demonstrations (the
oracle is deterministic) and :func:`~pettingllms.trainer.sft.sft_warm_start` trains each rank on its shard of
every batch; rank 0 alone logs and shows progress.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pettingllms.config.loader import ConfigError, section_to_dataclass
from pettingllms.stages.context import StageContext, run_workflow, workflow_env

if TYPE_CHECKING:
    from pettingllms.trainer.sft import SFTWarmStartConfig

__all__ = ["run_sft", "sft_demonstrations", "sft_role_order", "sft_settings", "sft_stage"]


def sft_role_order(config: Mapping[str, Any], settings: SFTWarmStartConfig) -> list[str]:
    """Every role of ``sft.workflows`` (default: the run's workflow), in order of first appearance."""
    workflows = settings.workflows or (tuple(run_workflow(config)),)
    return list(dict.fromkeys(role for workflow in workflows for role in workflow))


def sft_settings(stage: str, config: Mapping[str, Any], stage_dir: Path | None = None, progress: bool = True) -> SFTWarmStartConfig:
    """The checked ``sft`` section: its values, every workflow's environment and agents, and roles outside
    the run's workflow only where the run has one policy to learn them."""
    from pettingllms.registry import make_agents, make_env
    from pettingllms.trainer.sft import SFTWarmStartConfig

    settings = section_to_dataclass(SFTWarmStartConfig, config["sft"], "sft")
    for workflow in settings.workflows:
        name, fields, options = workflow_env(config, workflow, purpose="train")
        try:
            make_agents(name, list(make_env(name, fields).config.turn_order), options)
        except (ValueError, TypeError, LookupError) as error:
            raise ConfigError(f"`sft.workflows` {list(workflow)}: {error}") from error
    extra = [role for role in sft_role_order(config, settings) if role not in run_workflow(config)]
    policies = set(config["policy"]["agents"].values())
    if extra and len(policies) != 1:
        raise ConfigError(
            f"`sft.workflows` names role(s) {extra} that the run does not play; only a run with one policy "
            f"(L0 / L1) can learn them, got `policy.agents` {dict(config['policy']['agents'])}"
        )
    return settings


def sft_demonstrations(
    config: Mapping[str, Any],
    settings: SFTWarmStartConfig | None = None,
    *,
    held_out_seeds: range | Sequence[int] | None = None,
    env_worker: Any = None,
    progress: bool = False,
) -> dict[str, list]:
    """``{role: [Demonstration, ...]}`` the ``sft`` stage trains on: the oracle's episodes of every workflow
    on the ``sft`` seeds of the split training plays, which must miss ``held_out_seeds`` (default: the
    ``eval`` instances, :func:`~pettingllms.config.instances.check_held_out_instances`);
    ``progress``: a bar per workflow over its episodes."""
    from pettingllms.trainer.demonstrations import make_demonstrations

    settings = settings if settings is not None else sft_settings("sft", config)
    if held_out_seeds is None:
        # The eval instances: compared by problem id for a dataset (its seeds index another split),
        # by seed for generated tasks.
        from pettingllms.config.instances import check_held_out_instances

        check_held_out_instances(config, ["sft", "eval"])
        held_out_seeds = ()
    demos: dict[str, list] = {}
    for workflow in settings.workflows or (None,):
        name, fields, options = workflow_env(config, workflow, purpose="train")
        found = make_demonstrations(
            name, fields, settings.seeds, agent_options=options, held_out_seeds=held_out_seeds,
            env_worker=env_worker, tool_candidates=settings.tool_candidates,
            accept_proposals=settings.accept_proposals, late_turn_fraction=settings.late_turn_fraction,
            detour_seed=config["run"]["seed"], progress=progress,
        )
        for role, items in found.items():
            demos.setdefault(role, []).extend(items)
    return demos


def sft_stage(
    policy,
    config: Mapping[str, Any],
    *,
    held_out_seeds: range | Sequence[int] | None = None,
    logger=None,
    progress: bool = True,
    env_worker: Any = None,
    settings: SFTWarmStartConfig | None = None,
) -> dict[str, float]:
    """The ``sft`` stage of a resolved run config: :func:`sft_demonstrations`, then
    :func:`~pettingllms.trainer.sft.sft_warm_start` with the ``sft`` section's settings and ``run.seed``.

    ``held_out_seeds`` defaults to the ``eval`` section's instances; they must not overlap the
    demonstration seeds. A role the policy does not play trains its one policy.
    """
    from pettingllms.trainer.sft import sft_warm_start

    settings = settings if settings is not None else sft_settings("sft", config)
    demos = sft_demonstrations(
        config, settings, held_out_seeds=held_out_seeds, env_worker=env_worker, progress=progress
    )
    roles = sft_role_order(config, settings)
    if len(policy.policies) != 1 and not set(roles) <= set(policy.agents):
        raise ConfigError(f"`sft.workflows`: roles {roles} need one policy to learn them, the policy holds {policy.policies}")
    role_policies = {r: policy.policy_name(r) if r in policy.agents else policy.policies[0] for r in roles}
    return sft_warm_start(
        policy, demos, num_train_epochs=settings.num_train_epochs, learning_rate=settings.learning_rate,
        per_device_train_batch_size=settings.per_device_train_batch_size, seed=config["run"]["seed"],
        max_length=settings.max_length, max_grad_norm=settings.max_grad_norm,
        gradient_accumulation_steps=settings.gradient_accumulation_steps,
        lr_scheduler_type=settings.lr_scheduler_type, lr_scheduler_kwargs=settings.lr_scheduler_kwargs,
        warmup_steps=settings.warmup_steps, warmup_ratio=settings.warmup_ratio,
        logger=logger, progress=progress, role_policies=role_policies,
    )


def run_sft(context: StageContext) -> dict[str, float]:
    """The warm start (:func:`sft_stage`); per-step losses in the stage's metrics."""
    from comlrl import distributed as dist

    logger = context.metrics_logger()
    try:
        return sft_stage(
            context.policy, context.config, logger=logger, progress=context.progress and dist.is_main_process(),
            env_worker=context.env_worker,
            settings=context.settings_or(sft_settings),
        )
    finally:
        logger.close()
