"""The twin check of ARCHITECTURE.md principle 10 (nothing computed from hidden gold reaches an agent).

:func:`play_twins` plays two environments whose observable history is identical but whose hidden gold differs
(a Sudoku's stored solution, a question's golden answers, the goal a purchase is scored against, a game's
winning policy) with the same responses, written by a scripted policy from the first one (which may read its
gold, as an oracle does), and asserts that both show the same prompt and have the same ``done`` at every step.
A test using it should also check that the gold did matter (a success or a reward that differs), so a twin
that failed to differ cannot pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from pettingllms.envs.base import StepResult
from pettingllms.registry import make_agents


def play_twins(
    first: Any, second: Any, env_name: str, order: Sequence[str], respond: Callable[[Any, Any], str], seed: int,
    max_steps: int = 80,
) -> tuple[list[StepResult], list[StepResult]]:
    """Play ``first`` and ``second`` (reset to ``seed``) with the same responses, ``respond(agent, first)``,
    asserting equal prompts and equal ``done`` at every step. Returns the step results of both."""
    agents = make_agents(env_name, order), make_agents(env_name, order)

    async def run() -> tuple[list[StepResult], list[StepResult]]:
        await first.reset(seed)
        await second.reset(seed)
        results: tuple[list[StepResult], list[StepResult]] = ([], [])
        for step in range(max_steps):
            if first.done:
                assert second.done, f"step {step}: the second episode goes on after the first ended"
                return results
            position = first.state.position
            one, two = agents[0][position], agents[1][position]
            prompt = one.update_from_env(first.state.turn, first)
            assert two.update_from_env(second.state.turn, second) == prompt, (
                f"step {step} ({one.role}): the prompts differ though only hidden gold does")
            text = respond(one, first)
            one.update_from_model(text)
            two.update_from_model(text)
            results[0].append(await first.step_agent(one))
            results[1].append(await second.step_agent(two))
            assert first.done == second.done, f"step {step} ({one.role}): `done` differs ({first.done} vs {second.done})"
        raise AssertionError(f"no end within {max_steps} steps")

    return asyncio.run(run())
