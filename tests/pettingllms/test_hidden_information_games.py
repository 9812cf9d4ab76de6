"""Games: no hidden gold reaches an agent, in a prompt or through when the episode ends (ARCHITECTURE.md
principle 10).

Plan-Path, Sokoban, Eight Queens and Blocksworld hold no hidden gold: their task reward reads only the shown
board, the rules and the start. Sudoku stores its solution: the tool proposal a plan agent is shown is chosen
by a rules-only score and the episode ends on a complete grid that breaks no rule, so two puzzles with the
same givens and different stored solutions play alike (:func:`~tests.helpers.hidden_information.play_twins`).
Every game ends exactly when the report the agents are shown says it is won or lost.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from pettingllms.envs.sudoku import SudokuEnv
from pettingllms.envs.sudoku.generator import generate_puzzle
from pettingllms.envs.sudoku.parsers import format_answer
from pettingllms.envs.sudoku.state import SudokuPuzzle, SudokuState, is_complete_and_valid
from pettingllms.registry import make_agents, make_env
from pettingllms.scripted import OraclePolicy, RandomPolicy
from tests.helpers.hidden_information import play_twins


class Scripted:
    """Answers with the next text of a list."""

    def __init__(self, texts):
        self.texts = list(texts)

    def respond(self, agent, env):
        return self.texts.pop(0)


# ---- Sudoku: the stored solution is hidden gold ------------------------------------------------------------

def twin_puzzles() -> tuple[SudokuPuzzle, SudokuPuzzle]:
    """Two 4x4 puzzles with the same givens and different stored solutions: a solution ``S`` and ``S'`` (the
    1s and 2s of ``S`` swapped, also valid); the givens are the cells where they agree."""
    solution = generate_puzzle(0, 4).solution
    swapped = tuple(tuple({1: 2, 2: 1}.get(v, v) for v in row) for row in solution)
    givens = tuple(tuple(0 if v in (1, 2) else v for v in row) for row in solution)
    assert is_complete_and_valid(swapped, 2, 2) and swapped != solution
    return SudokuPuzzle(2, 2, givens, solution), SudokuPuzzle(2, 2, givens, swapped)


class FixedSudoku(SudokuEnv):
    """Every seed plays ``puzzle``."""

    def __init__(self, config, puzzle: SudokuPuzzle) -> None:
        super().__init__(config)
        self.puzzle = puzzle

    def initial_state(self, seed: int) -> SudokuState:
        return SudokuState(seed=seed, puzzle=self.puzzle, grid=self.puzzle.givens)


def grid_text(grid) -> str:
    return format_answer(tuple((r, c, v) for r, row in enumerate(grid) for c, v in enumerate(row)))


@pytest.mark.parametrize("order", [("tool", "plan"), ("single",)], ids=["tool+plan", "single"])
def test_sudoku_prompts_and_done_do_not_depend_on_the_stored_solution(order):
    first_puzzle, second_puzzle = twin_puzzles()
    config = {"size": 4, "turn_order": list(order), "max_turns": 3}
    first, second = FixedSudoku(config, first_puzzle), FixedSudoku(config, second_puzzle)
    r, c = next((r, c) for r in range(4) for c in range(4) if not first_puzzle.givens[r][c])
    every_value = "\n".join(f"check: R{r + 1}C{c + 1}={v}" for v in (1, 2, 3, 4))
    both_grids = f"check: {grid_text(first_puzzle.solution)}\ncheck: {grid_text(second_puzzle.solution)}"
    # Ends by playing the second puzzle's solution: a valid completion of both (the rules say solved).
    last = f"#### {grid_text(second_puzzle.solution)}"
    if order == ("single",):
        texts = [f"#### R{r + 1}C{c + 1}=1", f"#### R{r + 1}C{c + 1}=2", last]
    else:  # every value of one cell, then both full grids: a proposal chosen by the gold would differ
        texts = [every_value, "#### proposal", both_grids, last]
    results = play_twins(first, second, "sudoku", order, Scripted(texts).respond, seed=0)
    assert first.success and second.success and first.state.turn == second.state.turn
    # the gold mattered: the same plays earned different task rewards along the way
    assert [s.global_reward for s in results[0]] != [s.global_reward for s in results[1]]


def first_rule_free_value(puzzle: SudokuPuzzle, r: int, c: int) -> int:
    """The smallest value the givens' row, column and box allow at (r, c), computed here from the rules."""
    r0, c0 = r - r % puzzle.box_rows, c - c % puzzle.box_cols
    seen = {puzzle.givens[r][k] for k in range(puzzle.size)} | {puzzle.givens[k][c] for k in range(puzzle.size)}
    seen |= {puzzle.givens[i][j] for i in range(r0, r0 + puzzle.box_rows) for j in range(c0, c0 + puzzle.box_cols)}
    return min(v for v in range(1, puzzle.size + 1) if v not in seen)


def test_a_tool_agent_cannot_read_a_cells_solution_off_the_proposal():
    """Trying every value of an empty cell: the proposal is the first value the rules allow (the earliest of
    equals), not the solution's; the tool agent is still rewarded by the solution for the proposal it kept."""
    env = make_env("sudoku", {"size": 4, "turn_order": ["tool", "plan"]})
    tool = make_agents("sudoku", ["tool"])[0]
    hits = 0
    for seed in range(40):
        state = asyncio.run(env.reset(seed))
        puzzle = state.puzzle
        r, c = next((r, c) for r in range(4) for c in range(4) if not puzzle.givens[r][c])
        tool.update_from_env(0, env)
        tool.update_from_model("\n".join(f"check: R{r + 1}C{c + 1}={v}" for v in (1, 2, 3, 4)))
        result = asyncio.run(env.step_agent(tool))
        kept = first_rule_free_value(puzzle, r, c)
        assert env.state.proposal == f"R{r + 1}C{c + 1}={kept}"
        right = kept == puzzle.solution[r][c]
        hits += right
        # the true increment of the kept proposal: 0.5 * 1 / empty when right, 0 (clipped) when wrong
        assert result.local_reward == pytest.approx(0.5 / puzzle.empty_cells if right else 0.0)
    assert 0 < hits < 40  # sometimes right by the rules alone, never by the gold


# ---- every game: the episode ends exactly when the shown report says so -----------------------------------

GAMES = {
    "plan_path": ({"rows": 5, "cols": 5, "wall_density": 0.2}, ("goal reached",)),
    "sokoban": ({"rows": 6, "cols": 6, "num_boxes": 1}, ("; solved", "; deadlock")),
    "sudoku": ({"size": 4}, ("complete, no conflicts",)),
    "eight_queens": ({"size": 6, "givens": 1}, ("; solved",)),
    "blocksworld": ({"num_blocks": 4}, ("goal reached",)),
}


class Mixed:
    """The oracle's answer with probability ``oracle_prob`` (where the state can still be solved: a Sokoban box
    against a wall is stuck without a corner), else a random (sometimes malformed) one."""

    def __init__(self, seed: int, oracle_prob: float = 0.25) -> None:
        self.rng = random.Random(seed)
        self.oracle_prob = oracle_prob
        self.oracle, self.random = OraclePolicy(tool_candidates=3, seed=seed), RandomPolicy(seed, malformed_prob=0.1)

    def respond(self, agent, env):
        if self.rng.random() < self.oracle_prob:
            try:
                return self.oracle.respond(agent, env)
            except ValueError:  # no solution from here
                pass
        return self.random.respond(agent, env)


@pytest.mark.parametrize("env_name", sorted(GAMES))
def test_a_game_ends_exactly_when_the_shown_report_says_it_is_won_or_lost(env_name):
    config, markers = GAMES[env_name]
    counts = {"ended": 0, "went_on": 0}
    for order in (("tool", "plan"), ("single",)):
        env = make_env(env_name, {**config, "turn_order": list(order), "max_turns": 4})
        agents = make_agents(env_name, order)
        policy = Mixed(seed=len(order))
        for seed in range(12):
            asyncio.run(env.reset(seed))
            while not env.done:
                agent = agents[env.state.position]
                agent.update_from_env(env.state.turn, env)
                agent.update_from_model(policy.respond(agent, env))
                asyncio.run(env.step_agent(agent))
                state = env.state
                ended = env.is_success(state) or env.is_failed(state)
                if agent.role == "tool":  # a tool call plays on a copy: it can never end the episode
                    assert not ended
                    continue
                shown = any(marker in state.last_report for marker in markers)
                assert ended == shown, f"{env_name} seed {seed}: ended={ended} but the report shows {state.last_report!r}"
                counts["ended" if ended else "went_on"] += 1
    assert min(counts.values()) > 3, counts
