"""Eight Queens environment (N-Queens on an N x N board): complete the fixed queens to a full placement."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import ClassVar

from pettingllms.envs.eight_queens import parsers, prompts, rewards
from pettingllms.envs.eight_queens.generator import check_size, generate_puzzle
from pettingllms.envs.eight_queens.solver import solve
from pettingllms.envs.eight_queens.state import (
    Action,
    QueensState,
    apply_actions,
    attacking_pairs,
    cell_name,
    is_solved,
)
from pettingllms.envs.game import GameConfig, GameEnv, GameSpec, Outcome

SPEC = GameSpec(
    env_name="eight_queens",
    env_tool="check",
    prompts=prompts.PROMPTS,
    parse_answer=parsers.parse_answer,
    format_answer=parsers.format_answer,
)


@dataclass(frozen=True)
class EightQueensConfig(GameConfig):
    """Eight Queens settings (see :class:`~pettingllms.envs.game.GameConfig` for the shared ones).

    > Instances

    - ``size``: board side N (4 to 16; N queens make a solution).
    - ``givens``: fixed queens of the start, 0 to N - 1 (taken from a random solution, so the puzzle
      is solvable; 0 is the same empty board for every seed). 8x8 holds 1,052 distinct puzzles with 2
      givens, 4,032 with 3 and 6,040 with 4.

    > Scripted play

    - ``random_max_actions``: most place / remove items the random scripted policy draws per answer.
    """

    size: int = 8
    givens: int = 3
    random_max_actions: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        check_size(self.size, self.givens)
        value = self.random_max_actions
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`random_max_actions` must be an integer >= 1, got {value!r}")


class EightQueensEnv(GameEnv[QueensState]):
    """N-Queens. Success: N queens on the board, no two attacking. Never unwinnable (queens can be removed)."""

    name: ClassVar[str] = "eight_queens"
    config_class: ClassVar[type[GameConfig]] = EightQueensConfig
    spec: ClassVar[GameSpec] = SPEC
    config: EightQueensConfig

    def initial_state(self, seed: int) -> QueensState:
        puzzle = generate_puzzle(seed, self.config.size, self.config.givens)
        return QueensState(seed=seed, puzzle=puzzle, queens=puzzle.fixed)

    def task_reward_of(self, state: QueensState) -> float:
        return rewards.task_reward(state)

    def is_success(self, state: QueensState) -> bool:
        return is_solved(state.puzzle.size, state.queens)

    def answer_spec(self) -> parsers.BoardSpec:
        return parsers.BoardSpec(self.config.size)

    def apply_answer(self, state: QueensState, answer: tuple[Action, ...]) -> tuple[QueensState, Outcome]:
        puzzle = state.puzzle
        result = apply_actions(puzzle, state.queens, answer)
        new_state = dataclasses.replace(
            state, queens=result.queens, invalid_actions=state.invalid_actions + result.invalid
        )
        pairs = attacking_pairs(result.queens)
        report = (
            f"{result.changed} queen(s) placed or removed, {result.invalid} action(s) rejected, "
            f"{len(result.queens)} of {puzzle.size} queens"
        )
        if pairs:
            shown = ", ".join(f"{cell_name(a)}-{cell_name(b)}" for a, b in pairs[:3])
            report += f"; attacks: {shown}" + (" ..." if len(pairs) > 3 else "")
        elif len(result.queens) == puzzle.size:
            report += "; solved"
        else:
            report += "; no attacks"
        return new_state, Outcome(invalid=result.invalid, report=report)

    def render(self, state: QueensState) -> str:
        return prompts.render(state)

    def oracle_answer(self, state: QueensState) -> tuple[Action, ...]:
        """The full placement (every row) completing the fixed queens; it replaces whatever else stands."""
        puzzle = state.puzzle
        solution = solve(puzzle.size, puzzle.fixed)
        if solution is None:
            raise ValueError(f"eight_queens seed {state.seed}: the fixed queens have no completion")
        return tuple(("=", r, c) for r, c in enumerate(solution))

    def random_answer(self, state: QueensState, rng: random.Random) -> tuple[Action, ...]:
        size = state.puzzle.size
        removable = sorted(state.queens - state.puzzle.fixed)
        actions: list[Action] = []
        for _ in range(rng.randint(1, self.config.random_max_actions)):
            if removable and rng.random() < 0.3:
                r, c = rng.choice(removable)
                actions.append(("-", r, c))
            else:
                actions.append(("+", rng.randrange(size), rng.randrange(size)))
        return tuple(actions)
