"""Scripted policies that play through the agent protocol without a model, and a reference episode loop.

A scripted policy answers an agent's prompt with *text*, exactly as a model would, so the agent's
parser, step and rewards run unchanged:

* :class:`OraclePolicy`: the environment's solver answer for the current state (tool agents call their
  first tool with it, plan and single agents give it as ``#### ...``);
* :class:`RandomPolicy`: a well-formed random answer (and, with ``malformed_prob``, random junk);
* :class:`RolePolicy`: a different policy per role (e.g. an oracle tool agent and a random plan agent).

Each environment names the scripted policies it can be played by in its ``scripted_policies`` (the games:
``oracle`` and ``random``); :func:`make_scripted_policy` builds one by that name, as
``pettingllms eval CONFIG --policy scripted:NAME`` does. The protocol, for a policy of your own: an entry
``{NAME: "package.module:Factory"}``, where ``Factory()`` (no arguments) builds an object whose
``respond(agent, env) -> str`` answers ``agent``'s current prompt (``update_from_env`` just built it from
``env.state``) with the text a model would write. ``oracle`` plays the ``sft`` warm start and ``eval --policy
oracle``, ``random`` ``eval --policy random`` and ``pettingllms plan``; the generic :class:`OraclePolicy` and
:class:`RandomPolicy` need the environment's ``oracle_answer`` / ``random_answer`` and every agent's
``format_response`` (:mod:`pettingllms.config.contract` checks all of it before a run).

:func:`play_episode` is the plain sequential loop (one instance, one agent at a time); the batched,
tree-sampling engine lives in :mod:`pettingllms.execution`.
"""

from __future__ import annotations

import importlib
import random
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pettingllms.envs.base import BaseEnv, StepResult
from pettingllms.envs.game import ACCEPT_PROPOSAL

__all__ = [
    "EpisodeResult",
    "OraclePolicy",
    "RandomPolicy",
    "RolePolicy",
    "ScriptedPolicy",
    "make_scripted_policy",
    "play_episode",
    "scripted_policy_names",
]


@runtime_checkable
class ScriptedPolicy(Protocol):
    """Answers ``agent``'s current prompt (built by ``update_from_env``) with response text."""

    def respond(self, agent: Any, env: Any) -> str: ...


def _format(agent: Any, answer: Any) -> str:
    formatter = getattr(agent, "format_response", None)
    if formatter is None:
        raise TypeError(f"{type(agent).__name__} has no `format_response`; scripted policies cannot answer for it")
    return formatter(answer)


class OraclePolicy:
    """The environment's oracle answer for the current state, in the agent's response format.

    ``tool_candidates`` > 1 makes tool agents search the way a model can: each tool response holds
    ``1 .. min(tool_candidates, agent.max_tool_calls)`` calls (count drawn uniformly), the oracle's
    answer at a random position among random well-formed answers (the env's ``random_answer``). A model
    fine-tuned on these learns to try several candidates, and the env keeps the best one as the
    proposal. Draws come from a generator seeded by ``seed``.

    ``accept_proposals``: a plan agent whose tool agent proposed an answer that solves the current state
    answers ``#### proposal`` (play it as it is) instead of spelling the answer out.

    A single agent with the team's tools (``uses_tools``) plays both parts in turn, as the team does: a tool
    turn (as a tool agent's response) until its own proposal solves the state, then the action (``#### proposal``
    with ``accept_proposals``, else the answer spelled out); on its last turn it acts at once.
    """

    def __init__(self, tool_candidates: int = 1, seed: int = 0, accept_proposals: bool = False) -> None:
        if isinstance(tool_candidates, bool) or not isinstance(tool_candidates, int) or tool_candidates < 1:
            raise ValueError(f"`tool_candidates` must be an integer >= 1, got {tool_candidates!r}")
        self.tool_candidates = tool_candidates
        self.accept_proposals = bool(accept_proposals)
        self.rng = random.Random(seed)

    def respond(self, agent: Any, env: Any) -> str:
        alone_with_tools = getattr(agent, "uses_tools", False)
        if (self.accept_proposals or alone_with_tools) and getattr(agent, "sees_tool_report", False) \
                and _proposal_solves(env):
            return f"#### {ACCEPT_PROPOSAL}" if self.accept_proposals else _format(agent, env.oracle_answer(env.state))
        answer = env.oracle_answer(env.state)
        if alone_with_tools and env.state.turn >= env.config.max_turns - 1:
            return _format(agent, answer)  # its last turn: no turn would be left to play a proposal
        max_calls = getattr(agent, "max_tool_calls", None)
        write = agent.format_tool_response if alone_with_tools else (lambda a: _format(agent, a))
        if self.tool_candidates == 1 or max_calls is None:
            return write(answer)
        count = self.rng.randint(1, min(self.tool_candidates, max_calls))
        answers = [env.random_answer(env.state, self.rng) for _ in range(count - 1)]
        answers.insert(self.rng.randrange(count), answer)
        return "\n".join(write(a) for a in answers)


def _proposal_solves(env: Any) -> bool:
    proposal = getattr(env.state, "proposal", None)
    if proposal is None:
        return False
    new_state, _ = env.apply_answer(env.state, env.parse_answer(proposal))
    return bool(env.is_success(new_state))


class RandomPolicy:
    """Random well-formed answers drawn from a generator this policy owns (seeded by ``seed``).

    With probability ``malformed_prob`` the response is random printable junk instead.
    """

    def __init__(self, seed: int = 0, malformed_prob: float = 0.0) -> None:
        if not 0.0 <= malformed_prob <= 1.0:
            raise ValueError(f"`malformed_prob` must be in [0, 1], got {malformed_prob}")
        self.rng = random.Random(seed)
        self.malformed_prob = malformed_prob

    def respond(self, agent: Any, env: Any) -> str:
        if self.malformed_prob and self.rng.random() < self.malformed_prob:
            return "".join(self.rng.choice(string.printable) for _ in range(self.rng.randint(0, 40)))
        return _format(agent, env.random_answer(env.state, self.rng))


class RolePolicy:
    """Dispatches by ``agent.role`` to the policy given for that role (``default`` for the rest)."""

    def __init__(self, policies: Mapping[str, ScriptedPolicy], default: ScriptedPolicy | None = None) -> None:
        self.policies = dict(policies)
        self.default = default

    def respond(self, agent: Any, env: Any) -> str:
        policy = self.policies.get(agent.role, self.default)
        if policy is None:
            raise KeyError(f"no policy for role {agent.role!r}; roles with a policy: {sorted(self.policies)}")
        return policy.respond(agent, env)


def scripted_policy_names(env: BaseEnv | type[BaseEnv]) -> list[str]:
    """The scripted policies an environment (instance or class) declares, sorted."""
    return sorted(env.scripted_policies)


def make_scripted_policy(env: BaseEnv | type[BaseEnv], name: str) -> ScriptedPolicy:
    """A fresh scripted policy ``name`` of those ``env`` declares; a name it does not declare is a
    ValueError listing the ones it has."""
    declared = env.scripted_policies
    if name not in declared:
        from comlrl.validation import closest_name

        env_name = env.name or (env.__name__ if isinstance(env, type) else type(env).__name__)
        have = ", ".join(sorted(declared)) or "none"
        close = closest_name(name, declared)
        guess = f"did you mean {close!r}? " if close else ""
        raise ValueError(f"environment {env_name!r} has no scripted policy {name!r}; {guess}it has: {have}")
    module, _, attribute = declared[name].partition(":")
    return getattr(importlib.import_module(module), attribute)()


@dataclass
class EpisodeResult:
    """One played episode: instance seed, final status, turns used, and every step's result."""

    seed: int
    success: bool
    done: bool
    turns: int
    steps: list[StepResult] = field(default_factory=list)

    def rewards(self, role: str) -> list[float]:
        return [s.reward for s in self.steps if s.role == role]


async def play_episode(
    env: BaseEnv, agents: Sequence[Any], policy: ScriptedPolicy, seed: int, env_worker: Any = None
) -> EpisodeResult:
    """Reset ``env`` to ``seed`` and play until done; ``agents[i]`` acts at ``turn_order[i]``."""
    order = env.config.turn_order
    if [a.role for a in agents] != list(order):
        raise ValueError(f"agents' roles {[a.role for a in agents]} must match turn_order {list(order)}")
    await env.reset(seed)
    for agent in agents:
        agent.reset()
    steps: list[StepResult] = []
    while not env.done:
        agent = agents[env.state.position]
        agent.update_from_env(env.state.turn, env)
        agent.update_from_model(policy.respond(agent, env))
        steps.append(await env.step_agent(agent, env_worker))
    return EpisodeResult(seed=seed, success=env.success, done=env.done, turns=env.state.turn, steps=steps)
