"""The search agents: :class:`WebSearchAgent` (writes queries), :class:`SearchReasoningAgent` (answers, or asks for
another search) and :class:`SearchSingleAgent` (both in one role, policy level L0).

* search agent: ``<search>query</search>``; the environment retrieves the top ``topk`` passages into the state.
  Local reward: +1 when a retrieved passage holds a golden answer, +0.5 for a new supporting passage, 0 otherwise,
  -1 when no query parses.
* reasoner: ``<answer>...</answer>`` (ends the episode; local reward its token F1, global its exact match) or
  ``<search>what to look up</search>`` (a request the search agent sees next turn; 0, -0.5 on the last turn).
* single agent: a query and/or an answer in one response; a search runs first, then an answer ends the episode.

Every agent awaits the retrieval first thing in its step, so the searches of one decision point are batched
(:class:`~pettingllms.envs.search.retrieval.BatchingRetriever`).
"""

from __future__ import annotations

from typing import Any

from pettingllms.agents.base import Agent, Prompt, build_prompt
from pettingllms.envs.search import prompts, rewards
from pettingllms.envs.search.answers import (
    answer_in_text,
    exact_match,
    f1_score,
    format_answer,
    format_query,
    normalize_answer,
    parse_query,
    parse_reasoner,
    parse_single,
)
from pettingllms.envs.search.env import Retrieval, SearchEnv, SearchState

__all__ = ["SearchAgent", "SearchReasoningAgent", "SearchSingleAgent", "WebSearchAgent", "judge_search"]


def judge_search(state: SearchState, passages: list[Any]) -> tuple[bool, bool]:
    """``(answer_found, new_evidence)`` of passages just retrieved: a passage holds a golden answer; a passage is
    a supporting one (by normalised title) that no earlier search of the episode retrieved."""
    golden = state.problem.answers
    found = any(answer_in_text(golden, f"{p.title} {p.text}") for p in passages)
    supporting = {normalize_answer(t) for t in state.problem.supporting_titles}
    before = {normalize_answer(p.title) for p in state.passages}
    new = any(normalize_answer(p.title) in supporting - before for p in passages)
    return found, new


class SearchAgent(Agent):
    """Shared parts of the search agents: the environment check, prompts, and recording searches and answers."""

    @staticmethod
    def _check_env(env: Any) -> SearchEnv:
        if not isinstance(env, SearchEnv):
            raise TypeError(f"search agents play the `search` environment, got {getattr(env, 'name', env)!r}")
        return env

    def _prompt(self, env: SearchEnv, turn_idx: int, system: str, lines: list[str], owner: str, tail: str) -> Prompt:
        """Instruction first, then the question, ``lines``, the queries so far, the passages, and ``tail``."""
        state, config = env.state, env.config
        body = prompts.question_lines(state.problem.question, turn_idx, config.max_turns) + lines
        body += prompts.queries_lines(state.queries, owner)
        body += prompts.passage_lines(state.passages, config.max_passages_shown, config.max_passage_chars)
        body.append(tail)
        self.prompt = build_prompt(system, "\n".join(body), self.prompt_style)
        return self.prompt

    def _begin_step(self, env_data: Any) -> SearchEnv | None:
        """The environment of this step, or None when the response did not parse (scored -1, state unchanged)."""
        env = self._check_env(env_data)
        self.failure = None
        if self.action is None:
            state = env.state
            state.last_report = f"{self.role} response not understood ({self.parse_error}); nothing changed"
            self.local_reward = rewards.NO_ANSWER_REWARD  # -1, as for an unparsed query
            self.failure = "parse_error"
            self.feedback = state.last_report
            return None
        return env

    async def _search(self, env: SearchEnv, query: str) -> Retrieval:
        state = env.state
        passages = await env.search(query)  # first await of the step: batched with the others
        found, new = judge_search(state, passages)
        outcome = rewards.search_outcome(parsed=True, answer_found=found, new_evidence=new)
        retrieval = Retrieval(role=self.role, query=query, passages=passages, outcome=outcome)
        state.retrievals.append(retrieval)
        state.request = None
        titles = ", ".join(p.title or p.id for p in passages) or "nothing"
        state.last_report = f'{self.role} searched "{query}": {titles} ({outcome.replace("_", " ")})'
        return retrieval

    def _answer(self, env: SearchEnv, answer: str) -> float:
        state = env.state
        state.answer = answer
        state.exact_match = exact_match(answer, state.problem.answers)
        state.f1 = f1_score(answer, state.problem.answers)
        verdict = "exact match" if state.exact_match else f"F1 {state.f1:.2f}"
        state.last_report = f"{self.role} answered {answer!r} ({verdict})"
        return rewards.reasoner_local_reward("answer", state.f1)


class WebSearchAgent(SearchAgent):
    """The web-search agent: one query per turn, its passages go into the shared state."""

    default_role = "web_search_agent"

    def update_from_env(self, turn_idx: int, env_data: Any) -> Prompt:
        env = self._check_env(env_data)
        request = env.state.request
        lines = [f"The reasoner asks you to look up: {request}"] if request else []
        return self._prompt(env, turn_idx, prompts.search_system(), lines, "Your", "Write your search query.")

    def parse(self, response: str) -> str:
        return parse_query(response)

    def format_response(self, query: str) -> str:
        """A response this agent's parser reads back as ``query`` (for scripted policies)."""
        return format_query(query)

    async def step(self, env_data: Any, env_worker: Any = None) -> None:
        env = self._begin_step(env_data)
        if env is None:
            return
        retrieval = await self._search(env, self.action)
        self.local_reward = rewards.search_local_reward(retrieval.outcome)
        self.feedback = env.state.last_report


class SearchReasoningAgent(SearchAgent):
    """The reasoner: answers from the passages found so far, or asks for another search."""

    default_role = "search_reasoning_agent"

    def update_from_env(self, turn_idx: int, env_data: Any) -> Prompt:
        env = self._check_env(env_data)
        return self._prompt(env, turn_idx, prompts.reasoner_system(), [], "The search agent's",
                            "Answer, or ask for another search.")

    def parse(self, response: str) -> tuple[str, str]:
        return parse_reasoner(response)

    def format_response(self, action: tuple[str, str]) -> str:
        """A response this agent's parser reads back as ``(kind, text)``, kind ``answer`` or ``search``."""
        kind, text = action
        if kind not in ("answer", "search"):
            raise ValueError(f"`kind` must be 'answer' or 'search', got {kind!r}")
        return format_answer(text) if kind == "answer" else format_query(text)

    async def step(self, env_data: Any, env_worker: Any = None) -> None:
        env = self._begin_step(env_data)
        if env is None:
            return
        state = env.state
        kind, text = self.action
        if kind == "answer":
            self.local_reward = self._answer(env, text)
        else:
            state.requests.append(text)
            state.request = text
            last = state.turn >= env.config.max_turns - 1
            self.local_reward = rewards.reasoner_local_reward("search", last_turn=last)
            state.last_report = f"{self.role} asked to look up {text!r}" + (" on the last turn" if last else "")
        self.feedback = state.last_report


class SearchSingleAgent(SearchAgent):
    """One agent that searches and answers (policy level L0): a query and/or an answer per response."""

    default_role = "single"

    def update_from_env(self, turn_idx: int, env_data: Any) -> Prompt:
        env = self._check_env(env_data)
        return self._prompt(env, turn_idx, prompts.single_system(), [], "Your", "Search, or give your final answer.")

    def parse(self, response: str) -> tuple[str | None, str | None]:
        return parse_single(response)

    def format_response(self, action: tuple[str | None, str | None]) -> str:
        """A response this agent's parser reads back as ``(query, answer)`` (either may be None)."""
        query, answer = action
        parts = ([format_query(query)] if query else []) + ([format_answer(answer)] if answer else [])
        if not parts:
            raise ValueError("`action` must hold a query or an answer")
        return "\n".join(parts)

    async def step(self, env_data: Any, env_worker: Any = None) -> None:
        env = self._begin_step(env_data)
        if env is None:
            return
        query, answer = self.action
        retrieval = await self._search(env, query) if query is not None else None
        if answer is not None:
            self.local_reward = self._answer(env, answer)
        else:
            assert retrieval is not None
            self.local_reward = rewards.search_local_reward(retrieval.outcome)
        self.feedback = env.state.last_report
