"""An environment as comlrl's task oracle, and the run of a comlrl preference trainer over it (the shared
part of the ``madpo`` and ``marlhf`` stages, :mod:`pettingllms.stages.madpo` / :mod:`pettingllms.stages.marlhf`).

comlrl knows nothing about environments; it takes prompt ``formatters`` and a ``reward_func``. An
:class:`EnvOracle` provides both for a registered environment, over one-turn joint actions:

- item ``{"seed": s}`` is the instance the environment resets to from seed ``s``;
- ``formatters[i](item)`` resets the environment and returns the prompt agent ``i`` (``turn_order[i]``)
  builds from that reset state (``update_from_env(0, env)``), so the agents answer simultaneously;
- ``reward_func(*agent_completions, batch_items=[item])`` executes the joint action: reset from the seed,
  then each agent in turn order parses its completion (``update_from_model``) and steps
  (``env.step_agent``); the result is the task (global) reward of the state the team leaves behind.

A malformed completion gets the environment's documented failure handling (the agent's step scores it);
an infrastructure failure in a step (a crashed sandbox) is raised, never turned into a score. The pair
records of a round then hold one prompt per agent.

A stage's section holds every field of its comlrl config (generated from the class by the config loader:
``pettingllms.config.loader.config_stage_defaults``) plus ``num_problems`` / ``seed_start`` (the items
``{"seed": s}``); sampling comes from ``rollout`` where the section leaves it null, ``seed`` / ``report_to`` /
``num_agents`` / ``output_dir`` are the pipeline's (a section key naming one is an error naming the key that
sets it), and checkpoints after every round go to the stage folder.
"""

from __future__ import annotations

import asyncio
import copy
import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pettingllms.config.key_names import public_arguments, public_name_note
from pettingllms.config.loader import ConfigError, section_to_dataclass
from pettingllms.stages.context import StageContext, run_workflow, workflow_env

__all__ = ["STAGE_ONLY_KEYS", "EnvOracle", "oracle_trainer_config", "preference_items", "run_oracle_trainer"]

# Section keys that are the pipeline's, not the comlrl config's.
STAGE_ONLY_KEYS = ("num_problems", "seed_start")


class EnvOracle:
    """Prompt formatters and the reward function that make environment ``env_name`` comlrl's oracle.

    Args:
        env_name, env_config: the registered environment and its config (mapping or dataclass); its
            ``turn_order`` names the agents, in comlrl's agent order.
        agent_options: per-role agent options (``registry.make_agents``).
        env_worker: the env worker for tools that run code (e.g. a ``SandboxPool``), or None.
    """

    def __init__(
        self,
        env_name: str,
        env_config: Any,
        agent_options: Mapping[str, Mapping[str, Any]] | None = None,
        env_worker: Any = None,
    ) -> None:
        from pettingllms.registry import make_agents, make_env

        self.env_name = env_name
        self._make_env = functools.partial(make_env, env_name)
        self.env = make_env(env_name, env_config)
        self.roles: list[str] = list(self.env.config.turn_order)
        self.agents = make_agents(env_name, self.roles, agent_options)
        self.env_worker = env_worker
        self._loop = asyncio.new_event_loop()

    # ---- comlrl hooks ---------------------------------------------------------------------------
    @property
    def formatters(self) -> list[Any]:
        """One formatter per agent, in turn order: ``formatters[i](item)`` is agent i's prompt."""
        return [functools.partial(self.prompt, i) for i in range(len(self.roles))]

    def prompt(self, agent_index: int, item: Mapping[str, Any]) -> Any:
        """Agent ``agent_index``'s prompt (text or chat messages) built from the reset state of ``item``."""
        env = self._reset(item)
        agent = copy.deepcopy(self.agents[agent_index])
        return agent.update_from_env(0, env)

    def reward(self, *agent_completions: Sequence[str], batch_items: Sequence[Mapping[str, Any]] | None = None) -> float:
        """The task reward after the joint action ``agent_completions`` (one one-element list per agent)."""
        if batch_items is None or len(batch_items) != 1:
            raise ValueError(f"`batch_items` must hold the one item being scored, got {batch_items!r}")
        if len(agent_completions) != len(self.roles):
            raise ValueError(
                f"expected one completion list per agent {self.roles}, got {len(agent_completions)}"
            )
        texts = []
        for role, completions in zip(self.roles, agent_completions):
            if len(completions) != 1:
                raise ValueError(f"agent {role!r}: expected one completion per call, got {len(completions)}")
            texts.append(_text(completions[0]))
        return self.joint_reward(batch_items[0], texts)

    # ---- the joint action -----------------------------------------------------------------------
    def joint_reward(self, item: Mapping[str, Any], texts: Sequence[str]) -> float:
        """Reset from ``item``'s seed, step every agent with its text in turn order, return the task reward."""
        env = self._reset(item)
        agents = [copy.deepcopy(a) for a in self.agents]
        for agent in agents:  # every prompt is built from the reset state: the agents answered together
            agent.update_from_env(0, env)
        for agent, text in zip(agents, texts):
            if env.done:
                break
            agent.update_from_model(text)
            self._loop.run_until_complete(env.step_agent(agent, self.env_worker))
        return float(env.task_reward)

    def _reset(self, item: Mapping[str, Any]) -> Any:
        seed = item.get("seed") if isinstance(item, Mapping) else None
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"an item must be {{'seed': int >= 0}}, got {item!r}")
        self._loop.run_until_complete(self.env.reset(seed))
        return self.env

    def close(self) -> None:
        self._loop.run_until_complete(self.env.close())
        self._loop.close()


def _text(completion: Any) -> str:
    text = getattr(completion, "text", completion)
    if not isinstance(text, str):
        raise TypeError(f"a completion must be a str or have `.text`, got {type(completion).__name__}")
    return text


# ---- a comlrl preference trainer with the oracle ---------------------------------------------------

def preference_items(section: Mapping[str, Any]) -> list[dict[str, int]]:
    """The stage's training items ``{"seed": s}`` for ``s`` in ``seed_start .. seed_start + num_problems - 1``."""
    from pettingllms.trainer.demonstrations import seed_range

    return [{"seed": s} for s in seed_range(section["seed_start"], section["num_problems"])]


def oracle_trainer_config(
    config_class: type,
    stage: str,
    config: Mapping[str, Any],
    output_dir: str | Path,
    progress: bool = True,
    defaults: Mapping[str, Any] | None = None,
    num_agents: int | None = None,
) -> Any:
    """``config_class`` (a comlrl preference config) from stage section ``stage`` of a resolved run config.

    The section's keys are the config's fields under their TRL names where the public names differ
    (:data:`pettingllms.config.key_names.PUBLIC_NAMES`, e.g. ``learning_rate`` sets ``agent_learning_rate``),
    plus ``num_problems`` / ``seed_start``; sampling comes from ``rollout`` (``max_completion_length``,
    ``temperature``, ``top_p``) and ``defaults`` unless the section sets it; ``num_agents`` defaults to the
    run's roles, ``seed`` / ``report_to`` come from ``run`` and ``output_dir`` is the stage folder.
    """
    rollout, run = config["rollout"], config["run"]
    section = public_arguments(stage, {k: v for k, v in config[stage].items() if k not in STAGE_ONLY_KEYS})
    values: dict[str, Any] = {
        "max_new_tokens": rollout["max_completion_length"],
        "temperature": rollout["temperature"],
        "top_p": rollout["top_p"],
        **(defaults or {}),
    }
    fallback = set(values)  # a null section key here means "the pipeline's" (rollout, or `defaults`)
    values.update({k: v for k, v in section.items() if not (v is None and k in fallback)})
    values.update(
        {
            "num_agents": len(run_workflow(config)) if num_agents is None else num_agents,
            "seed": run["seed"],
            "report_to": run["report_to"],
            "output_dir": str(output_dir),
            "disable_tqdm": not progress,
        }
    )
    try:
        return section_to_dataclass(config_class, values, stage)
    except ConfigError as error:  # the class's checks name its public fields: say which key sets them
        raise ConfigError(f"{error}{public_name_note(stage, str(error))}") from error


def run_oracle_trainer(context: StageContext, trainer_class: type, args: Any) -> dict[str, float]:
    """Train ``context.policy`` with ``trainer_class`` (a comlrl iterative preference trainer) configured by
    ``args``, the environment being the oracle; returns summary metrics.

    Checkpoints after every round go to the stage folder; with ``context.resume`` the latest is resumed.
    """
    from comlrl.checkpoint import latest_checkpoint

    oracle = EnvOracle(*workflow_env(context.config, purpose="train"), context.env_worker)
    try:
        if oracle.roles != context.policy.agents:
            raise ValueError(
                f"stage {context.stage!r}: the policy's agents {context.policy.agents} differ from the "
                f"run's roles {oracle.roles}"
            )
        trainer = trainer_class(
            policy=context.policy,
            formatters=oracle.formatters,
            reward_func=oracle.reward,
            train_dataset=preference_items(context.config[context.stage]),
            args=args,
        )
        resume = latest_checkpoint(context.stage_dir) if context.resume else None
        trainer.train(
            resume_from_checkpoint=resume,
            checkpoint_dir=str(context.stage_dir),
            checkpoint_interval=1,
            checkpoint_total_limit=2,
        )
    finally:
        oracle.close()
    metrics = {"pairs_built": float(trainer.pairs_built), "pairs_skipped": float(trainer.pairs_skipped)}
    for record in trainer.metrics_logger.history:  # the last value of each per-round metric
        for key, value in record.items():
            if key.startswith("iter/"):
                metrics[key] = float(value)
    return metrics
