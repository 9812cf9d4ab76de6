"""Sudoku environment: complete a grid with a unique solution."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pettingllms.envs.game import GameConfig, GameEnv, GameSpec, Outcome
from pettingllms.envs.sudoku import parsers, prompts, rewards
from pettingllms.envs.sudoku.generator import default_bank_path, generate_puzzle, load_bank
from pettingllms.envs.sudoku.solver import solve
from pettingllms.envs.sudoku.state import Fill, SudokuState, apply_fills, box_shape, conflicts

SPEC = GameSpec(
    env_name="sudoku",
    env_tool="check",
    prompts=prompts.PROMPTS,
    parse_answer=parsers.parse_answer,
    format_answer=parsers.format_answer,
)

SOURCES = ("generate", "bank")


@dataclass(frozen=True)
class SudokuConfig(GameConfig):
    """Sudoku settings (see :class:`~pettingllms.envs.game.GameConfig` for the shared ones).

    > Instances

    - ``size``: grid side (4, 6, 8, 9, 12, 16, ...; not prime).
    - ``source``: ``"generate"`` (a fresh puzzle per seed) or ``"bank"`` (puzzle ``seed % len(bank)``
      of a pre-generated bank; a missing bank is an error).
    - ``bank_path``: bank file; ``None`` is the packaged ``data/sudoku_{size}x{size}.json``.
    - ``givens``: with ``"generate"``, stop emptying cells at this many givens (``None``: as few as
      uniqueness allows).

    > Scripted play

    - ``random_max_fills``: most fills the random scripted policy draws per answer.
    """

    size: int = 4
    source: str = "generate"
    bank_path: str | None = None
    givens: int | None = None
    random_max_fills: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        box_shape(self.size)
        if self.source not in SOURCES:
            raise ValueError(f"`source` must be one of {list(SOURCES)}, got {self.source!r}")
        if self.givens is not None and not 0 <= self.givens <= self.size * self.size:
            raise ValueError(f"`givens` must be in [0, {self.size * self.size}] or None, got {self.givens!r}")
        if isinstance(self.random_max_fills, bool) or not isinstance(self.random_max_fills, int) or self.random_max_fills < 1:
            raise ValueError(f"`random_max_fills` must be an integer >= 1, got {self.random_max_fills!r}")

    @property
    def resolved_bank_path(self) -> Path:
        return Path(self.bank_path) if self.bank_path is not None else default_bank_path(self.size)


class SudokuEnv(GameEnv[SudokuState]):
    """Sudoku. Success: every cell filled, no rule broken (checked from the rules, not against the stored
    solution; for a unique-solution puzzle the two agree). Never unwinnable (cells can be reset)."""

    name: ClassVar[str] = "sudoku"
    config_class: ClassVar[type[GameConfig]] = SudokuConfig
    spec: ClassVar[GameSpec] = SPEC
    config: SudokuConfig

    def __init__(self, config=None) -> None:
        super().__init__(config)
        if self.config.source == "bank":  # fail at construction, not at the first reset
            load_bank(str(self.config.resolved_bank_path), self.config.size)

    def initial_state(self, seed: int) -> SudokuState:
        cfg = self.config
        if cfg.source == "bank":
            bank = load_bank(str(cfg.resolved_bank_path), cfg.size)
            puzzle = bank[seed % len(bank)]
        else:
            puzzle = generate_puzzle(seed, cfg.size, cfg.givens)
        return SudokuState(seed=seed, puzzle=puzzle, grid=puzzle.givens)

    def task_reward_of(self, state: SudokuState) -> float:
        return rewards.task_reward(state)

    def observable_reward_of(self, state: SudokuState) -> float:
        return rewards.observable_task_reward(state)

    def is_success(self, state: SudokuState) -> bool:
        return rewards.is_solved(state)

    def answer_spec(self) -> parsers.GridSpec:
        return parsers.GridSpec(self.config.size)

    def apply_answer(self, state: SudokuState, answer: tuple[Fill, ...]) -> tuple[SudokuState, Outcome]:
        puzzle = state.puzzle
        result = apply_fills(puzzle, state.grid, answer)
        new_state = dataclasses.replace(state, grid=result.grid, invalid_fills=state.invalid_fills + result.invalid)
        problems = conflicts(result.grid, puzzle.box_rows, puzzle.box_cols)
        empty = sum(v == 0 for row in result.grid for v in row)
        report = f"{result.changed} cell(s) changed, {result.invalid} given(s) kept, {empty} empty"
        if problems:
            report += f"; conflicts: {', '.join(problems[:3])}" + (" ..." if len(problems) > 3 else "")
        elif empty == 0:
            report += "; complete, no conflicts"
        else:
            report += "; no conflicts"
        return new_state, Outcome(invalid=result.invalid, report=report)

    def render(self, state: SudokuState) -> str:
        return prompts.render(state)

    def oracle_answer(self, state: SudokuState) -> tuple[Fill, ...]:
        puzzle = state.puzzle
        solution = solve(puzzle.givens, puzzle.box_rows, puzzle.box_cols)
        if solution is None:
            raise ValueError(f"sudoku seed {state.seed}: the givens have no solution")
        return tuple((r, c, v) for r, row in enumerate(solution) for c, v in enumerate(row))

    def random_answer(self, state: SudokuState, rng: random.Random) -> tuple[Fill, ...]:
        size = state.puzzle.size
        open_cells = [(r, c) for r in range(size) for c in range(size) if not state.puzzle.givens[r][c]]
        count = min(len(open_cells), rng.randint(1, self.config.random_max_fills))
        return tuple((r, c, rng.randint(1, size)) for r, c in rng.sample(open_cells, count))
