"""Sudoku: solver against known counts, unique-solution generator, the bank, parsers, rewards."""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pettingllms.envs.sudoku import (
    SudokuConfig,
    SudokuEnv,
    SudokuPlanAgent,
    SudokuPuzzle,
    SudokuState,
    SudokuToolAgent,
)
from pettingllms.envs.sudoku.generator import build_bank, default_bank_path, generate_puzzle, load_bank
from pettingllms.envs.sudoku.parsers import GridSpec, format_answer, parse_answer
from pettingllms.envs.sudoku.rewards import observable_task_reward, progress, task_reward
from pettingllms.envs.sudoku.solver import count_solutions, solve
from pettingllms.envs.sudoku.state import (
    apply_fills,
    box_shape,
    clashing_cells,
    conflicts,
    decode_grid,
    encode_grid,
    is_complete_and_valid,
)

WIKI_PUZZLE = "53..7....6..195....98....6.8...6...34..8.3..17...2...6.6....28....419..5....8..79"
WIKI_SOLUTION = "534678912672195348198342567859761423426853791713924856961537284287419635345286179"
SOLUTION_4 = ((1, 2, 3, 4), (3, 4, 1, 2), (2, 1, 4, 3), (4, 3, 2, 1))


def _all_4x4_grids() -> list[tuple[tuple[int, ...], ...]]:
    """Every valid 4x4 Sudoku, by brute force over row permutations (independent of the solver)."""
    perms = list(itertools.permutations(range(1, 5)))
    grids = []
    for rows in itertools.product(perms, repeat=4):
        cols_ok = all(len({rows[r][c] for r in range(4)}) == 4 for c in range(4))
        boxes_ok = all(
            len({rows[r][c] for r in range(br, br + 2) for c in range(bc, bc + 2)}) == 4
            for br in (0, 2) for bc in (0, 2)
        )
        if cols_ok and boxes_ok:
            grids.append(rows)
    return grids


@pytest.fixture(scope="module")
def all_4x4():
    return _all_4x4_grids()


def test_box_shapes_and_size_errors():
    assert [box_shape(n) for n in (4, 6, 8, 9, 12, 16)] == [(2, 2), (2, 3), (2, 4), (3, 3), (3, 4), (4, 4)]
    with pytest.raises(ValueError, match="`size` must not be prime"):
        box_shape(7)
    with pytest.raises(ValueError, match="`size`"):
        SudokuConfig(size=3)


def test_solver_counts_match_brute_force(all_4x4):
    empty = tuple((0,) * 4 for _ in range(4))
    assert len(all_4x4) == 288 == count_solutions(empty, 2, 2, limit=1000)
    puzzle = ((1, 0, 0, 0), (0, 0, 0, 2), (0, 0, 0, 0), (0, 0, 0, 0))
    brute = sum(all(g[r][c] in (0, grid[r][c]) for r in range(4) for c in range(4) for g in [puzzle]) for grid in all_4x4)
    assert count_solutions(puzzle, 2, 2, limit=1000) == brute


def test_solver_on_a_known_9x9_puzzle():
    assert encode_grid(solve(decode_grid(WIKI_PUZZLE, 9), 3, 3)) == WIKI_SOLUTION
    assert count_solutions(decode_grid(WIKI_PUZZLE, 9), 3, 3) == 1
    broken = list(WIKI_PUZZLE)
    broken[2] = "5"  # a second 5 in row 1
    assert solve(decode_grid("".join(broken), 9), 3, 3) is None


def test_generated_4x4_puzzles_have_exactly_one_solution_by_brute_force(all_4x4):
    for seed in range(40):
        puzzle = generate_puzzle(seed, 4)
        assert puzzle == generate_puzzle(seed, 4)
        matches = [g for g in all_4x4 if all(v in (0, g[r][c]) for r, row in enumerate(puzzle.givens) for c, v in enumerate(row))]
        assert matches == [puzzle.solution]


@pytest.mark.parametrize("size,seeds", [(6, 6), (9, 3)])
def test_generated_larger_puzzles_are_unique_and_consistent(size, seeds):
    for seed in range(seeds):
        puzzle = generate_puzzle(seed, size)
        assert count_solutions(puzzle.givens, puzzle.box_rows, puzzle.box_cols) == 1
        assert is_complete_and_valid(puzzle.solution, puzzle.box_rows, puzzle.box_cols)
        assert all(g in (0, s) for grow, srow in zip(puzzle.givens, puzzle.solution) for g, s in zip(grow, srow))
    assert generate_puzzle(0, size) != generate_puzzle(1, size)


def test_givens_target_is_respected():
    puzzle = generate_puzzle(3, 4, givens=10)
    assert 16 - puzzle.empty_cells == 10 and count_solutions(puzzle.givens, 2, 2) == 1


@pytest.mark.parametrize("size", [4, 9])
def test_packaged_banks_hold_unique_puzzles(size):
    bank = load_bank(str(default_bank_path(size)), size)
    assert len(bank) == 200
    for puzzle in bank:
        assert count_solutions(puzzle.givens, puzzle.box_rows, puzzle.box_cols) == 1
        assert is_complete_and_valid(puzzle.solution, puzzle.box_rows, puzzle.box_cols)
    raw = json.loads(default_bank_path(size).read_text())
    assert raw["puzzles"][0]["givens"] == encode_grid(generate_puzzle(raw["puzzles"][0]["seed"], size).givens)


def test_missing_bank_is_an_error_not_a_fallback(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(FileNotFoundError, match="`bank_path`"):
        SudokuEnv({"source": "bank", "bank_path": str(missing)})
    with pytest.raises(FileNotFoundError, match="Sudoku bank not found"):
        SudokuEnv({"source": "bank", "size": 6})  # no packaged 6x6 bank


def test_bank_of_the_wrong_size_is_an_error(tmp_path):
    path = tmp_path / "bank.json"
    path.write_text(json.dumps(build_bank(4, 3)))
    with pytest.raises(ValueError, match="bank `size` is 4.*`size` 9"):
        load_bank(str(path), 9)
    env = SudokuEnv({"source": "bank", "bank_path": str(path)})
    states = [asyncio.run(env.reset(seed)).puzzle for seed in range(4)]
    assert states[3] == states[0] and states[0] != states[1]  # puzzle = seed % len(bank)


def test_parse_grid_and_fill_formats():
    spec = GridSpec(4)
    grid = parse_answer("1234/3412/2143/4321", spec)
    assert grid == tuple((r, c, SOLUTION_4[r][c]) for r in range(4) for c in range(4))
    assert parse_answer("12 34 / 3,4,1,2 / 2143 / 4321", spec) == grid
    assert parse_answer("1.3_/0412/2143/4321", spec)[:4] == ((0, 0, 1), (0, 1, 0), (0, 2, 3), (0, 3, 0))
    assert parse_answer("R1C2=3, r4c1 = 2", spec) == ((0, 1, 3), (3, 0, 2))
    for bad, message in [
        ("1234/3412/2143", "needs 4 rows"),
        ("1234/3412/2143/432", "row 4 needs 4 cells"),
        ("1235/3412/2143/4321", "cell '5'"),
        ("R5C1=2", "outside the 4x4 grid"),
        ("R1C1=9", "value above 4"),
        ("R1C1=2 and more", "unexpected text"),
        ("   ", "empty"),
    ]:
        with pytest.raises(Exception, match=message):
            parse_answer(bad, spec)


def test_parse_16x16_needs_separators():
    rows = [" ".join(str((r * 4 + r // 4 + c) % 16 + 1) for c in range(16)) for r in range(16)]
    fills = parse_answer("/".join(rows), GridSpec(16))
    assert len(fills) == 256 and fills[1] == (0, 1, 2)
    assert parse_answer(format_answer(fills), GridSpec(16)) == fills


@given(st.integers(4, 9).filter(lambda n: n in (4, 6, 8, 9)), st.data())
def test_format_then_parse_round_trips(size, data):
    spec = GridSpec(size)
    cell = st.tuples(st.integers(0, size - 1), st.integers(0, size - 1), st.integers(0, size))
    fills = tuple(data.draw(st.lists(cell, min_size=1, max_size=size * size)))
    assert parse_answer(format_answer(fills), spec) == fills
    grid = tuple((r, c, data.draw(st.integers(0, size))) for r in range(size) for c in range(size))
    assert parse_answer(format_answer(grid), spec) == grid


PUZZLE_4 = SudokuPuzzle(2, 2, ((1, 0, 0, 4), (0, 4, 0, 0), (2, 0, 4, 0), (0, 0, 0, 1)), SOLUTION_4)


def _state(grid) -> SudokuState:
    return SudokuState(seed=0, puzzle=PUZZLE_4, grid=grid)


def test_rewards_on_hand_built_states():
    # 10 empty cells in PUZZLE_4
    assert PUZZLE_4.empty_cells == 10 and task_reward(_state(PUZZLE_4.givens)) == 0.0
    four_right = apply_fills(PUZZLE_4, PUZZLE_4.givens, ((0, 1, 2), (0, 2, 3), (1, 0, 3), (1, 2, 1))).grid
    assert progress(_state(four_right)) == pytest.approx(0.4) and task_reward(_state(four_right)) == pytest.approx(0.2)
    # one wrong value cancels one right one: (4 - 1) / 10
    with_wrong = apply_fills(PUZZLE_4, four_right, ((1, 3, 3),)).grid
    assert progress(_state(with_wrong)) == pytest.approx(0.3)
    assert task_reward(_state(SOLUTION_4)) == 1.0


def test_fills_cannot_change_givens_and_the_plan_step_is_scored():
    result = apply_fills(PUZZLE_4, PUZZLE_4.givens, ((0, 0, 3), (0, 0, 1), (0, 1, 2)))
    assert result.invalid == 1 and result.changed == 1 and result.grid[0][:2] == (1, 2)
    env = SudokuEnv({"turn_order": ["plan"], "alpha": 1.0})
    env.state = _state(PUZZLE_4.givens)
    plan = SudokuPlanAgent()
    plan.update_from_env(0, env)
    plan.update_from_model("#### R1C1=3 R1C2=2")
    step = asyncio.run(env.step_agent(plan))
    # one right cell: progress 0.1 -> task 0.05; one given change rejected: local = 0.05 - 0.1
    assert step.local_reward == pytest.approx(-0.05) and step.global_reward == pytest.approx(0.05)
    assert env.state.invalid_fills == 1


def test_check_tool_reports_conflicts_without_the_solution():
    env = SudokuEnv({"turn_order": ["tool", "plan"]})
    env.state = _state(PUZZLE_4.givens)
    tool = SudokuToolAgent()
    prompt = tool.update_from_env(0, env)[1]["content"]
    assert "1..4/.4../2.4./...1" in prompt and encode_grid(SOLUTION_4) not in prompt
    tool.update_from_model("check: R1C2=4")
    step = asyncio.run(env.step_agent(tool))
    report = env.state.tool_reports[0].output
    # a wrong value from the start: progress stays clipped at 0, so the proposal is worth 0
    assert "row 1 has 2 4s" in report and step.local_reward == 0.0 and step.failure is None
    assert env.state.grid == PUZZLE_4.givens


def test_conflicts_lists_rows_columns_and_boxes():
    grid = ((1, 1, 0, 0), (0, 0, 0, 0), (1, 0, 0, 0), (0, 0, 0, 0))
    assert conflicts(grid, 2, 2) == ["row 1 has 2 1s", "column 1 has 2 1s", "box 1 has 2 1s"]
    assert clashing_cells(grid, 2, 2) == {(0, 0), (0, 1), (2, 0)}
    assert clashing_cells(SOLUTION_4, 2, 2) == frozenset()


def test_observable_reward_reads_the_rules_not_the_solution():
    """What the tool proposal is chosen by: a value the rules allow scores the same right or wrong (R2C4 is 2 in
    the solution; 3 breaks no rule there), a clashing one scores like a wrong one; the task reward differs."""
    right, wrong = (_state(apply_fills(PUZZLE_4, PUZZLE_4.givens, ((1, 3, v),)).grid) for v in (2, 3))
    clashing = _state(apply_fills(PUZZLE_4, PUZZLE_4.givens, ((1, 3, 4),)).grid)
    # 10 empty cells: one rule-free fill is 0.5 * 1 / 10; a clashing one cancels to 0 (clipped)
    assert observable_task_reward(right) == observable_task_reward(wrong) == pytest.approx(0.05)
    assert observable_task_reward(clashing) == 0.0
    assert task_reward(right) == pytest.approx(0.05) and task_reward(wrong) == 0.0
    assert observable_task_reward(_state(SOLUTION_4)) == 1.0


def test_a_valid_completion_other_than_the_stored_solution_solves_the_puzzle():
    """Success is checked by the rules: with several solutions, any of them ends the episode as solved (the
    agents could not tell a stored one apart)."""
    empty = tuple((0,) * 4 for _ in range(4))
    other = tuple(tuple({1: 2, 2: 1}.get(v, v) for v in row) for row in SOLUTION_4)
    env = SudokuEnv({"turn_order": ["single"]})
    env.state = SudokuState(seed=0, puzzle=SudokuPuzzle(2, 2, empty, SOLUTION_4), grid=other)
    assert env.is_success(env.state) and env.done and env.task_reward == 1.0
    assert progress(env.state) < 1.0  # it is not the stored one: 8 of 16 cells differ


def test_oracle_solves_bank_9x9():
    env = SudokuEnv({"size": 9, "source": "bank", "turn_order": ["single"]})
    for seed in range(5):
        state = asyncio.run(env.reset(seed))
        answer = env.oracle_answer(state)
        new_state, outcome = env.apply_answer(state, answer)
        assert outcome.invalid == 0 and env.is_success(new_state) and task_reward(new_state) == 1.0
