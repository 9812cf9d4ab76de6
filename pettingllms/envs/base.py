"""Environment base class, its configuration, shared state fields and the step result.

An environment owns one state dataclass (the agents' blackboard), resets it from a seed, knows when the
episode is over and whether it succeeded, and gives the global (task) reward of any state. Agents change
the state in their ``step``; :meth:`BaseEnv.step_agent` runs that step under the step timeout, moves the
turn order on, and returns both reward parts.

Rewards. An agent's training reward is ``alpha * global + local`` (:func:`mix_reward`); both parts are
kept in :class:`StepResult`. The global part is the task reward of the state right after the agent's
own step, so an agent that is not last in its turn is scored on the state it left behind.

Copies. Tree sampling steps K copies of one state. A pure-Python environment is ``copyable``:
:meth:`BaseEnv.snapshot` / :meth:`BaseEnv.restore` deep-copy the state and :meth:`BaseEnv.clone`
deep-copies the whole environment; copies share no mutable object. An environment that holds an outside
resource sets ``copyable = False`` and these raise :class:`NotCopyableError`, so the engine can fall
back to independent sampling and say so.
"""

from __future__ import annotations

import asyncio
import copy
import math
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from comlrl.validation import strict_from_dict
from pettingllms.agents.failures import NotCopyableError, StepTimeoutError


def mix_reward(global_reward: float, local_reward: float, alpha: float) -> float:
    """Training reward of one step: ``alpha * global_reward + local_reward``."""
    for name, value in (("global_reward", global_reward), ("local_reward", local_reward), ("alpha", alpha)):
        if not math.isfinite(value):
            raise ValueError(f"`{name}` must be finite, got {value}")
    return alpha * global_reward + local_reward


#: What an environment is built for (:attr:`EnvConfig.purpose`).
PURPOSES: tuple[str, ...] = ("train", "eval")


@dataclass(frozen=True)
class EnvConfig:
    """Settings every environment shares.

    > Workflow

    - ``turn_order``: roles that act in each turn, in order (one agent per entry).
    - ``max_turns``: turn budget; the episode ends after this many full turns.
    - ``step_timeout``: seconds one agent step may take (it awaits env workers); past it the step is
      rolled back and :class:`~pettingllms.agents.failures.StepTimeoutError` is raised.

    > Rewards

    - ``alpha``: weight of the global (task) reward in ``alpha * global + local``.

    > Instances

    - ``purpose``: ``train`` or ``eval``, set by the stages (training stages play ``train``, evaluation
      ``eval``; a value in a config file is overwritten). Environments whose training and evaluation
      instances differ read it: a dataset environment's seeds index its train split for ``train`` and its
      test split for ``eval``. Generated tasks ignore it.
    """

    turn_order: tuple[str, ...] = ("tool", "plan")
    max_turns: int = 5
    step_timeout: float = 60.0
    alpha: float = 1.0
    purpose: str = "eval"

    # Fields an evaluation benchmark may set apart from the trained run (`eval.benchmarks`,
    # pettingllms.config.benchmarks): what selects and judges the evaluation data, never the team.
    eval_fields: ClassVar[tuple[str, ...]] = ("step_timeout",)
    # Fields that describe one dataset's files: back to their defaults when a benchmark names another dataset.
    dataset_fields: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        order = self.turn_order
        if isinstance(order, str) or not all(isinstance(r, str) and r for r in order):
            raise ValueError(f"`turn_order` must be a list of non-empty role names, got {order!r}")
        object.__setattr__(self, "turn_order", tuple(order))
        if not self.turn_order:
            raise ValueError("`turn_order` must name at least one role, got []")
        if isinstance(self.max_turns, bool) or not isinstance(self.max_turns, int) or self.max_turns < 1:
            raise ValueError(f"`max_turns` must be an integer >= 1, got {self.max_turns!r}")
        if not (isinstance(self.step_timeout, (int, float)) and self.step_timeout > 0):
            raise ValueError(f"`step_timeout` must be > 0 seconds, got {self.step_timeout!r}")
        if not (isinstance(self.alpha, (int, float)) and math.isfinite(self.alpha)):
            raise ValueError(f"`alpha` must be a finite number, got {self.alpha!r}")
        if self.purpose not in PURPOSES:
            raise ValueError(f"`purpose` must be one of {list(PURPOSES)}, got {self.purpose!r}")

    # From a mapping (a YAML section); an unknown key is an error naming it.
    from_dict = classmethod(strict_from_dict)


@dataclass(kw_only=True)
class EnvState:
    """Bookkeeping fields every state has.

    - ``seed``: the instance seed (the problem id).
    - ``turn``: number of completed turns.
    - ``position``: index in ``turn_order`` of the agent due next.
    - ``out_of_turns``: the turn budget is spent.
    """

    seed: int
    turn: int = 0
    position: int = 0
    out_of_turns: bool = False


@dataclass
class StepResult:
    """What one agent step produced, as the engine records it.

    ``reward == alpha * global_reward + local_reward``. ``global_reward`` is the task reward of the
    state right after this step. ``failure`` names a model failure (counted, rewarded by the env's
    documented failure reward); ``parse_error`` is the parser's message when the response did not parse.
    """

    role: str
    turn: int
    position: int
    local_reward: float
    global_reward: float
    alpha: float
    reward: float
    done: bool
    success: bool
    parse_error: str | None = None
    failure: str | None = None
    feedback: str = ""


StateT = TypeVar("StateT", bound=EnvState)


class BaseEnv(ABC, Generic[StateT]):
    """Base class of every environment.

    Subclasses set ``name``, ``config_class`` and ``roles`` and implement :meth:`initial_state`,
    :meth:`task_reward_of` and :meth:`is_success` (and :meth:`is_failed` when a state can become
    unwinnable). ``done`` is success, failure, or the spent turn budget.
    """

    name: ClassVar[str] = ""
    config_class: ClassVar[type[EnvConfig]] = EnvConfig
    #: Roles this environment defines agents for (informational; the registry resolves agents).
    roles: ClassVar[tuple[str, ...]] = ()
    #: Whether the whole state is plain Python that :func:`copy.deepcopy` copies faithfully.
    copyable: ClassVar[bool] = True
    #: Scripted policies that can play this environment without a model (``pettingllms eval --policy
    #: scripted:NAME``), as ``{name: "package.module:Factory"}``: ``Factory()`` answers an agent's prompt
    #: with ``respond(agent, env)`` (:mod:`pettingllms.scripted`). Import paths, because those policies
    #: import the environments.
    scripted_policies: ClassVar[Mapping[str, str]] = {}
    #: Whether the environment judges model-written code itself, so a run needs a sandbox worker
    #: (:func:`pettingllms.stages.context.make_env_worker`) whatever its agents' tools.
    needs_sandbox: ClassVar[bool] = False

    @classmethod
    def sandbox_needed(cls, config: EnvConfig) -> bool:
        """Whether a run of ``config`` needs a sandbox worker: :attr:`needs_sandbox`, unless the environment
        decides per config (math: only where a role runs Python)."""
        return cls.needs_sandbox

    def __init__(self, config: EnvConfig | Mapping[str, Any] | None = None) -> None:
        if config is None:
            config = self.config_class()
        elif isinstance(config, Mapping):
            config = self.config_class.from_dict(config)
        elif not isinstance(config, self.config_class):
            raise TypeError(
                f"`config` must be a {self.config_class.__name__} or a mapping, got {type(config).__name__}"
            )
        self.config = config
        self._state: StateT | None = None

    # ---- state ---------------------------------------------------------------------------------
    @property
    def state(self) -> StateT:
        if self._state is None:
            raise RuntimeError(f"{type(self).__name__} has no state yet: `await env.reset(seed)` first")
        return self._state

    @state.setter
    def state(self, value: StateT) -> None:
        self._state = value

    async def reset(self, seed: int) -> StateT:
        """Build the instance for ``seed`` (same seed, same instance) and return its state."""
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"`seed` must be an integer >= 0, got {seed!r}")
        self._state = self.initial_state(seed)
        return self._state

    async def close(self) -> None:
        """Release outside resources (none for pure-Python environments)."""

    @abstractmethod
    def initial_state(self, seed: int) -> StateT:
        """The seeded start state."""

    # ---- instances ----------------------------------------------------------------------------
    def num_instances(self) -> int | None:
        """How many instances the seeds index (seeds ``0 .. n - 1``), or None where every seed makes an
        instance (generated tasks). A dataset environment returns the size of the split it plays."""
        return None

    def instance_id(self, seed: int) -> Hashable:
        """What identifies the instance of ``seed`` across purposes, for the check that training never
        sees an evaluation instance: the seed itself for generated tasks (training and evaluation play
        the same generator), a dataset's problem id for a dataset environment."""
        return seed

    # ---- status and the global reward ----------------------------------------------------------
    @abstractmethod
    def task_reward_of(self, state: StateT) -> float:
        """Global (task) reward of ``state``."""

    @abstractmethod
    def is_success(self, state: StateT) -> bool:
        """Whether ``state`` solves the task."""

    def is_failed(self, state: StateT) -> bool:
        """Whether ``state`` can no longer be solved (ends the episode); default never."""
        return False

    @property
    def success(self) -> bool:
        return self.is_success(self.state)

    @property
    def done(self) -> bool:
        state = self.state
        return state.out_of_turns or self.is_success(state) or self.is_failed(state)

    @property
    def task_reward(self) -> float:
        return self.task_reward_of(self.state)

    @property
    def due_role(self) -> str:
        """Role whose step comes next."""
        return self.config.turn_order[self.state.position]

    # ---- stepping -------------------------------------------------------------------------------
    async def step_agent(self, agent: Any, env_worker: Any = None) -> StepResult:
        """Run ``agent.step`` under ``step_timeout``, advance the turn order, and score the step.

        The agent must be the one due (``agent.role == turn_order[position]``). On timeout (or any
        exception) the state is rolled back to before the step when the environment is copyable.
        """
        state = self.state
        if self.done:
            raise RuntimeError(f"{type(self).__name__} episode is over (seed {state.seed}); reset it first")
        due = self.due_role
        if agent.role != due:
            raise ValueError(
                f"agent role {agent.role!r} is not due: turn_order position {state.position} expects {due!r}"
            )
        turn, position = state.turn, state.position
        backup = self.snapshot() if self.copyable else None
        try:
            await asyncio.wait_for(agent.step(self, env_worker), timeout=self.config.step_timeout)
        except asyncio.TimeoutError as exc:
            if backup is not None:
                self.restore(backup)
            raise StepTimeoutError(
                f"{self.name or type(self).__name__}: agent {agent.role!r} step exceeded "
                f"step_timeout={self.config.step_timeout}s (turn {turn})"
            ) from exc
        except BaseException:
            if backup is not None:
                self.restore(backup)
            raise
        self._advance_turn_order()
        global_reward = float(self.task_reward)
        local_reward = float(agent.local_reward)
        reward = mix_reward(global_reward, local_reward, self.config.alpha)
        agent.done, agent.success = self.done, self.success
        return StepResult(
            role=agent.role,
            turn=turn,
            position=position,
            local_reward=local_reward,
            global_reward=global_reward,
            alpha=self.config.alpha,
            reward=reward,
            done=agent.done,
            success=agent.success,
            parse_error=agent.parse_error,
            failure=agent.failure,
            feedback=agent.feedback,
        )

    def _advance_turn_order(self) -> None:
        state = self.state
        state.position += 1
        if state.position == len(self.config.turn_order):
            state.position = 0
            state.turn += 1
            if state.turn >= self.config.max_turns:
                state.out_of_turns = True

    # ---- copies ---------------------------------------------------------------------------------
    def _require_copyable(self, what: str) -> None:
        if not self.copyable:
            raise NotCopyableError(
                f"{self.name or type(self).__name__} holds an outside resource and cannot {what}; "
                "sample its trajectories independently"
            )

    def snapshot(self) -> StateT:
        """A deep copy of the state, to :meth:`restore` later (any number of times)."""
        self._require_copyable("snapshot its state")
        return copy.deepcopy(self.state)

    def restore(self, snapshot: StateT) -> None:
        """Make the state a deep copy of ``snapshot``."""
        self._require_copyable("restore a snapshot")
        self._state = copy.deepcopy(snapshot)

    def clone(self) -> BaseEnv[StateT]:
        """An independent deep copy of the environment (config, state and all)."""
        self._require_copyable("be cloned")
        return copy.deepcopy(self)


__all__ = ["PURPOSES", "BaseEnv", "EnvConfig", "EnvState", "StepResult", "mix_reward"]
