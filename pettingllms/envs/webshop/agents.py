"""The web shop agents: :class:`SearcherAgent` (``search[...]``), :class:`BuyerAgent` (``click[...]`` lines) and
:class:`WebShopSingleAgent` (either, policy level L0).

Each reads the current page from the shared state, answers with WebShop actions
(:mod:`pettingllms.envs.webshop.parsers`), and its step plays them on the site
(:meth:`~pettingllms.envs.webshop.env.WebShopEnv.play`). Local rewards are
:mod:`pettingllms.envs.webshop.rewards`'s: the searcher's results score, the buyer's purchase reward, the
single agent's either; a response that does not parse changes nothing and scores ``parse_error_reward``
(failure ``parse_error``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pettingllms.agents.base import Agent, Prompt, build_prompt
from pettingllms.envs.webshop import prompts, rewards
from pettingllms.envs.webshop.env import (
    BUYER_ROLE,
    ROLE_VERBS,
    SEARCHER_ROLE,
    SINGLE_ROLE,
    PlayOutcome,
    WebShopEnv,
)
from pettingllms.envs.webshop.parsers import Action, format_actions, parse_actions

__all__ = ["BuyerAgent", "SearcherAgent", "WebShopAgent", "WebShopSingleAgent"]


class WebShopAgent(Agent):
    """Shared parts of the web shop agents: prompt, strict parser, playing the actions."""

    kind: ClassVar[str] = SINGLE_ROLE  # which role's verbs, prompt and reward this agent has

    def __init__(self, *, role: str | None = None, prompt_style: str = "chat") -> None:
        super().__init__(role=role, prompt_style=prompt_style)
        self.max_actions = 1 if self.kind == SEARCHER_ROLE else 8  # set from the env's config by update_from_env

    @property
    def verbs(self) -> tuple[str, ...]:
        return ROLE_VERBS[self.kind]

    @staticmethod
    def _check_env(env: Any) -> WebShopEnv:
        if not isinstance(env, WebShopEnv):
            raise TypeError(f"webshop agents play the `webshop` environment, got {getattr(env, 'name', env)!r}")
        return env

    def _system(self) -> str:
        if self.kind == SEARCHER_ROLE:
            return prompts.searcher_system()
        if self.kind == BUYER_ROLE:
            return prompts.buyer_system(self.max_actions)
        return prompts.single_system(self.max_actions)

    def update_from_env(self, turn_idx: int, env_data: Any) -> Prompt:
        env = self._check_env(env_data)
        state = env.state
        self.max_actions = 1 if self.kind == SEARCHER_ROLE else env.config.max_actions
        observation = state.page.observation() if state.page is not None else "(no page yet)"
        lines = prompts.state_lines(turn_idx, env.config.max_turns, state.last_report, observation)
        self.prompt = build_prompt(self._system(), "\n".join(lines), self.prompt_style)
        return self.prompt

    def parse(self, response: str) -> tuple[Action, ...]:
        return parse_actions(response, self.verbs, self.max_actions)

    def format_response(self, actions: tuple[Action, ...]) -> str:
        """A response this agent's parser reads back as ``actions`` (for scripted policies)."""
        return format_actions(actions)

    def _local_reward(self, env: WebShopEnv, outcome: PlayOutcome) -> float:
        invalid, penalty = outcome.invalid is not None, float(env.config.invalid_action_penalty)
        if self.kind == SEARCHER_ROLE:
            return rewards.searcher_local_reward(outcome.results_score, invalid, penalty)
        if self.kind == BUYER_ROLE:
            return rewards.buyer_local_reward(outcome.bought, invalid, penalty)
        return rewards.single_local_reward(outcome.bought, outcome.results_score, invalid, penalty)

    async def step(self, env_data: Any, env_worker: Any = None) -> None:
        env = self._check_env(env_data)
        state = env.state
        self.failure = None
        if self.action is None:
            state.last_report = f"{self.role} response not understood ({self.parse_error}); nothing changed"
            self.local_reward = float(env.config.parse_error_reward)
            self.failure = "parse_error"
            self.feedback = state.last_report
            return
        outcome = env.play(self.action)
        state.last_report = f"{self.role}: {state.last_report}"
        self.local_reward = self._local_reward(env, outcome)
        self.feedback = state.last_report


class SearcherAgent(WebShopAgent):
    """The searcher: one ``search[query]`` per turn."""

    default_role = SEARCHER_ROLE
    kind = SEARCHER_ROLE


class BuyerAgent(WebShopAgent):
    """The buyer: 1 to ``max_actions`` ``click[label]`` lines per turn."""

    default_role = BUYER_ROLE
    kind = BUYER_ROLE


class WebShopSingleAgent(WebShopAgent):
    """One agent doing the whole task (L0): 1 to ``max_actions`` ``search[...]`` / ``click[...]`` lines."""

    default_role = SINGLE_ROLE
    kind = SINGLE_ROLE
