"""The household agents: :class:`PlannerAgent` (``planner``), :class:`ActorAgent` (``actor``) and
:class:`HouseholdSingleAgent` (``single``, policy level L0).

* planner: writes the next sub-goal (:func:`~pettingllms.envs.household.parsers.parse_subgoal`); it changes
  nothing in the game. Local reward: :func:`~pettingllms.envs.household.rewards.planner_local_reward`.
* actor: plays one command (:func:`~pettingllms.envs.household.parsers.parse_command`); only admissible
  commands are sent to the game. Local reward: :func:`~pettingllms.envs.household.rewards.actor_local_reward`,
  with the sub-goal bonus when its command reaches the planner's sub-goal.
* single agent: the actor alone, without a sub-goal.

A response that does not parse changes nothing and scores ``parse_error_reward`` (failure ``parse_error``).
"""

from __future__ import annotations

from typing import Any

from pettingllms.agents.base import Agent, Prompt, build_prompt
from pettingllms.envs.household import prompts, rewards
from pettingllms.envs.household.env import (
    ACTOR_ROLE,
    PLANNER_ROLE,
    SINGLE_ROLE,
    HouseholdConfig,
    HouseholdEnv,
)
from pettingllms.envs.household.parsers import Command, format_command, parse_command, parse_subgoal
from pettingllms.envs.household.state import HouseholdState, LoggedCommand

__all__ = ["ActorAgent", "HouseholdAgent", "HouseholdSingleAgent", "PlannerAgent"]


class HouseholdAgent(Agent):
    """Shared parts: the environment check and the parse context captured when the prompt is built."""

    def __init__(self, *, role: str | None = None, prompt_style: str = "chat") -> None:
        super().__init__(role=role, prompt_style=prompt_style)
        self._admissible: tuple[str, ...] | None = None
        self._subgoal: str | None = None

    @staticmethod
    def _check_env(env: Any) -> HouseholdEnv:
        if not isinstance(env, HouseholdEnv):
            raise TypeError(f"household agents play the `household` environment, got {getattr(env, 'name', env)!r}")
        return env

    def _capture(self, env: HouseholdEnv) -> HouseholdState:
        state = env.state
        self._admissible = state.view.admissible
        self._subgoal = state.subgoal
        return state

    def _listed(self) -> tuple[str, ...]:
        if self._admissible is None:
            raise RuntimeError(f"{type(self).__name__}: call update_from_env before update_from_model")
        return self._admissible

    def _prompt(self, system: str, lines: list[str]) -> Prompt:
        self.prompt = build_prompt(system, "\n".join(lines), self.prompt_style)
        return self.prompt

    def format_response(self, command: str) -> str:
        """A response this agent's parser reads back as ``command`` (used by scripted policies)."""
        return format_command(command)

    def _parse_failed(self, env: HouseholdEnv) -> None:
        state = env.state
        state.last_report = f"{self.role} response not understood ({self.parse_error}); nothing changed"
        self.local_reward = env.config.parse_error_reward
        self.failure = "parse_error"
        self.feedback = state.last_report


class PlannerAgent(HouseholdAgent):
    """Writes the next sub-goal: a command of the game the actor should get done next."""

    default_role = PLANNER_ROLE

    def update_from_env(self, turn_idx: int, env_data: Any) -> Prompt:
        env = self._check_env(env_data)
        state = self._capture(env)
        return self._prompt(prompts.PLANNER_SYSTEM, prompts.planner_lines(state, env.config.max_turns,
                                                                          env.config.history_shown))

    def parse(self, response: str) -> str:
        return parse_subgoal(response, self._listed())

    async def step(self, env_data: Any, env_worker: Any = None) -> None:
        env = self._check_env(env_data)
        state = env.state
        config: HouseholdConfig = env.config
        self.failure = None
        if self.action is None:
            self._parse_failed(env)
            return
        subgoal: str = self.action
        expired = state.turn - state.subgoal_turn >= config.subgoal_horizon
        if subgoal != state.subgoal or state.subgoal_reached or expired:
            state.subgoal, state.subgoal_turn, state.subgoal_reached = subgoal, state.turn, False
            state.subgoals_set += 1
        on_path = rewards.subgoal_on_path(subgoal, state.view.policy, config.subgoal_horizon)
        self.local_reward = rewards.planner_local_reward(
            on_path, parse_error_reward=config.parse_error_reward, on_path_reward=config.on_path_reward
        )
        state.last_report = f"{self.role} set the sub-goal {subgoal!r}"
        self.feedback = f"{state.last_report} ({'on' if on_path else 'off'} the winning path)"


class ActorAgent(HouseholdAgent):
    """Plays one command a turn, chosen from the admissible ones, towards the planner's sub-goal."""

    default_role = ACTOR_ROLE
    #: Whether the prompt shows the planner's sub-goal (and ``#### subgoal`` plays it).
    sees_subgoal = True

    def update_from_env(self, turn_idx: int, env_data: Any) -> Prompt:
        env = self._check_env(env_data)
        state = self._capture(env)
        lines = (prompts.actor_lines if self.sees_subgoal else prompts.single_lines)(
            state, env.config.max_turns, env.config.history_shown
        )
        return self._prompt(prompts.ACTOR_SYSTEM if self.sees_subgoal else prompts.SINGLE_SYSTEM, lines)

    def parse(self, response: str) -> Command:
        return parse_command(response, self._listed(), self._subgoal, allow_subgoal=self.sees_subgoal)

    async def step(self, env_data: Any, env_worker: Any = None) -> None:
        env = self._check_env(env_data)
        state = env.state
        config: HouseholdConfig = env.config
        self.failure = None
        if self.action is None:
            self._parse_failed(env)
            state.log.append(LoggedCommand(state.turn, "(not understood)", False, "nothing happened"))
            return
        command: Command = self.action
        reached = False
        if command.admissible:
            before = state.view
            view = env.play(state, command.text)
            changed = view.world != before.world or view.score != before.score or view.won != before.won
            # Reaching the sub-goal pays only for a command that changed the world: a planner and an actor
            # agreeing on `look` earn nothing.
            if self.sees_subgoal and changed and state.subgoal is not None and not state.subgoal_reached:
                within = state.turn - state.subgoal_turn < config.subgoal_horizon
                if within and rewards.subgoal_on_path(command.text, (state.subgoal,), 1):
                    reached = True
                    state.subgoal_reached = True
                    state.subgoals_reached += 1
            answer = view.feedback or "(no answer)"
            state.last_report = f"{self.role} played {command.text!r}: {answer}"
        else:
            changed = False
            state.inadmissible += 1
            answer = "the game does not accept this command now; nothing happened"
            state.last_report = f"{self.role} gave {command.text!r}: {answer}"
        state.log.append(LoggedCommand(state.turn, command.text, command.admissible, answer))
        outcome = rewards.actor_outcome(parsed=True, admissible=command.admissible, changed=changed)
        self.local_reward = rewards.actor_local_reward(
            outcome, reached, parse_error_reward=config.parse_error_reward,
            inadmissible_reward=config.inadmissible_reward, changed_reward=config.changed_reward,
            subgoal_reward=config.subgoal_reward,
        )
        self.feedback = state.last_report + (" (sub-goal reached)" if reached else "")


class HouseholdSingleAgent(ActorAgent):
    """The actor alone (policy level L0): no planner, no sub-goal."""

    default_role = SINGLE_ROLE
    sees_subgoal = False
