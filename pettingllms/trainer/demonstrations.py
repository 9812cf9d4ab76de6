"""Oracle demonstrations for the ``sft`` warm start, recorded through the agent protocol.

Each episode is played by :func:`pettingllms.scripted.play_episode` with the environment's oracle
(:class:`~pettingllms.scripted.OraclePolicy`); for every agent decision we keep the prompt the agent
built (``update_from_env``, exactly what the rollout engine will send to a model) and the oracle's
response text (the agent's ``format_response``). Supervised fine-tuning on these pairs therefore
teaches the prompt and answer formats the RL stage uses.

With ``late_turn_fraction`` > 0 a share of the episodes first takes a random *detour*
(:func:`detour_turns`: turns played by a random policy, not recorded) before the oracle takes over, so the
demonstrations also hold later-turn prompts (tool reports, failed moves); otherwise every recorded episode
starts from the reset state.

Demonstration instances must not be evaluation instances: :func:`check_disjoint_seeds` (declared with the
config checks, :mod:`pettingllms.config.instances`) is the check,
and :func:`make_demonstrations` runs it when given the held-out seeds.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from pettingllms.config.instances import check_disjoint_seeds
from pettingllms.scripted import OraclePolicy, RandomPolicy, make_scripted_policy, play_episode

__all__ = [
    "Demonstration",
    "DetourOracle",
    "check_disjoint_seeds",
    "collect_demonstrations",
    "detour_turns",
    "make_demonstrations",
    "seed_range",
]

# Share of the detour's random answers that are junk, so the warm start also sees parse-error reports.
DETOUR_MALFORMED_PROB = 0.25

logger = logging.getLogger(__name__)


class Demonstration(NamedTuple):
    """One agent decision to imitate: the prompt (chat messages or text) and the response text."""

    prompt: Any
    response: str


def seed_range(start: int, count: int) -> range:
    """Instance seeds ``start, ..., start + count - 1``."""
    for name, value in (("start", start), ("count", count)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"`{name}` must be an integer >= 0, got {value!r}")
    return range(start, start + count)


def detour_turns(instance_seed: int, fraction: float, max_turns: int, seed: int) -> int:
    """Random-play turns before the oracle takes over in a demonstration episode: 0 with probability
    ``1 - fraction``, else uniform in ``1 .. max_turns - 1`` (drawn from a generator seeded by both seeds)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"`late_turn_fraction` must be in [0, 1], got {fraction}")
    rng = random.Random(f"detour-{seed}-{instance_seed}")
    if max_turns < 2 or rng.random() >= fraction:
        return 0
    return rng.randint(1, max_turns - 1)


class DetourOracle:
    """Random answers (some malformed) for the first ``detour`` turns, not recorded; then the oracle's
    answers (:class:`~pettingllms.scripted.OraclePolicy`), recorded as ``(role, prompt, response)``.
    ``detour=0`` records a plain oracle episode. Where ``env`` declares its own ``oracle`` / ``random``
    scripted policies (not the generic ones), those play instead."""

    def __init__(
        self, detour: int, seed: int, tool_candidates: int = 1, accept_proposals: bool = False, env: Any = None
    ) -> None:
        self.detour = detour
        own_oracle, own_random = _declared(env, "oracle"), _declared(env, "random")
        # An environment with its own scripted oracle (code: the reference solution) plays it as it is.
        self.oracle = own_oracle or OraclePolicy(tool_candidates=tool_candidates, seed=seed, accept_proposals=accept_proposals)
        self.random = own_random or RandomPolicy(seed=seed, malformed_prob=DETOUR_MALFORMED_PROB)
        self.records: list[tuple[str, Any, str]] = []

    def respond(self, agent: Any, env: Any) -> str:
        if env.state.turn < self.detour:
            return self.random.respond(agent, env)
        if agent.prompt is None:
            raise RuntimeError(f"agent {agent.role!r} answered without a prompt: update_from_env was not called")
        response = self.oracle.respond(agent, env)
        self.records.append((agent.role, copy.deepcopy(agent.prompt), response))
        return response


def _declared(env: Any, name: str) -> Any:
    """A fresh instance of scripted policy ``name`` where ``env`` declares its own (not the generic
    :mod:`pettingllms.scripted` one, which the caller builds with its settings), else None."""
    path = getattr(env, "scripted_policies", {}).get(name)
    if path is None or path.startswith("pettingllms.scripted:"):
        return None
    return make_scripted_policy(env, name)


async def collect_demonstrations(
    env: Any,
    agents: Sequence[Any],
    seeds: Iterable[int],
    *,
    env_worker: Any = None,
    skip_failed: bool = False,
    tool_candidates: int = 1,
    accept_proposals: bool = False,
    late_turn_fraction: float = 0.0,
    detour_seed: int = 0,
    progress: bool = False,
) -> dict[str, list[Demonstration]]:
    """``{role: [Demonstration, ...]}`` from oracle episodes on ``seeds`` (one agent per turn-order role).

    An episode the oracle does not solve (e.g. its answer exceeds the answer-length limit) is an error
    naming the seed, or, with ``skip_failed``, left out with a warning; an oracle answer that does not parse
    is left out (counted in a warning). ``tool_candidates`` and
    ``accept_proposals``: see :class:`~pettingllms.scripted.OraclePolicy` (draws seeded by the instance seed).
    ``late_turn_fraction``: share of episodes that start with a random detour (:func:`detour_turns`, drawn
    with ``detour_seed``); an episode whose detour already solved the instance records nothing.
    ``progress``: a tqdm bar (stderr) over the episodes.
    """
    from tqdm.auto import tqdm

    by_role: dict[str, list[Demonstration]] = {agent.role: [] for agent in agents}
    skipped: list[int] = []
    unparsed: dict[str, int] = {}
    name = getattr(env, "name", type(env).__name__)
    with tqdm(seeds, desc=f"demonstrations ({name})", unit="episode", disable=not progress) as bar:
        for seed in bar:
            detour = detour_turns(seed, late_turn_fraction, env.config.max_turns, detour_seed)
            recorder = DetourOracle(
                detour, seed=seed, tool_candidates=tool_candidates, accept_proposals=accept_proposals, env=env
            )
            result = await play_episode(env, agents, recorder, seed, env_worker)
            if not result.success:
                if not skip_failed:
                    raise ValueError(
                        f"{getattr(env, 'name', env)}: the oracle did not solve instance seed {seed} "
                        f"(turns {result.turns}, parse errors "
                        f"{[s.parse_error for s in result.steps if s.parse_error]}); pass skip_failed=True to skip it"
                    )
                skipped.append(seed)
                continue
            # The recorded answers are those of the steps past the detour, in order. One that does not parse
            # (the code oracle's tester where a problem's tests state no literal equality) teaches nothing.
            oracle_steps = [s for s in result.steps if s.turn >= detour]
            for (role, prompt, response), step in zip(recorder.records, oracle_steps, strict=True):
                if step.parse_error is not None:
                    unparsed[role] = unparsed.get(role, 0) + 1
                    continue
                by_role[role].append(Demonstration(prompt, response))
    if skipped:
        logger.warning("oracle demonstrations: skipped %d unsolved seed(s): %s", len(skipped), skipped[:20])
    if unparsed:
        logger.warning("oracle demonstrations: left out %s oracle answer(s) that do not parse (by role)", unparsed)
    return by_role


def make_demonstrations(
    env_name: str,
    env_config: Any,
    seeds: Iterable[int],
    *,
    agent_options: Mapping[str, Mapping[str, Any]] | None = None,
    held_out_seeds: Iterable[int] | None = None,
    env_worker: Any = None,
    skip_failed: bool = False,
    tool_candidates: int = 1,
    accept_proposals: bool = False,
    late_turn_fraction: float = 0.0,
    detour_seed: int = 0,
    progress: bool = False,
) -> dict[str, list[Demonstration]]:
    """Oracle demonstrations per role for registered environment ``env_name`` on instance ``seeds``.

    ``env_config`` is the environment's config (dataclass or mapping; its ``turn_order`` names the
    roles); ``agent_options`` are per-role agent options (e.g. ``{"tool": {"tools": ["simulate"]}}``);
    ``tool_candidates`` (calls per tool-agent demonstration) and ``accept_proposals`` (plan agents answer
    ``#### proposal`` when the proposal solves): see :class:`~pettingllms.scripted.OraclePolicy`;
    ``late_turn_fraction``, ``detour_seed`` and ``progress``: see :func:`collect_demonstrations`.
    When ``held_out_seeds`` is given, it must be disjoint from ``seeds``. Runs its own event loop; from
    async code, await :func:`collect_demonstrations`.
    """
    from pettingllms.registry import make_agents, make_env

    seeds = seeds if isinstance(seeds, range) else list(seeds)
    if held_out_seeds is not None:
        check_disjoint_seeds(seeds, held_out_seeds, "demonstration seeds", "held-out seeds")
    env = make_env(env_name, env_config)
    agents = make_agents(env_name, env.config.turn_order, agent_options)

    async def run() -> dict[str, list[Demonstration]]:
        try:
            return await collect_demonstrations(
                env, agents, seeds, env_worker=env_worker, skip_failed=skip_failed, tool_candidates=tool_candidates,
                accept_proposals=accept_proposals, late_turn_fraction=late_turn_fraction, detour_seed=detour_seed,
                progress=progress,
            )
        finally:
            await env.close()

    return asyncio.run(run())
