"""Eight Queens: solver against brute force, seeded solvable generator, parsers (fuzzed), rewards, copies,
scripted play, tree sampling and a short AT-GRPO run."""

from __future__ import annotations

import asyncio
import copy
import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pettingllms.agents import ParseError
from pettingllms.envs.eight_queens import (
    EightQueensConfig,
    EightQueensEnv,
    EightQueensPlanAgent,
    EightQueensSingleAgent,
    EightQueensToolAgent,
    QueensPuzzle,
    QueensState,
)
from pettingllms.envs.eight_queens.generator import generate_puzzle
from pettingllms.envs.eight_queens.parsers import BoardSpec, format_answer, parse_answer
from pettingllms.envs.eight_queens.rewards import progress, task_reward
from pettingllms.envs.eight_queens.solver import count_solutions, solve
from pettingllms.envs.eight_queens.state import apply_actions, attacked_queens, attacking_pairs, is_solved
from pettingllms.registry import list_agents, make_agents, make_env
from pettingllms.scripted import OraclePolicy, RandomPolicy, play_episode
from tests.helpers.game_checks import (
    check_any_text_is_rewarded_finitely,
    check_at_grpo_step_moves_the_shared_policy,
    check_tree_rollout_replays,
)

# 4 x 4 with one fixed queen at row 1, column 2 (0-based (0, 1)): the completion is 2 4 1 3.
PUZZLE_4 = QueensPuzzle(4, frozenset({(0, 1)}))


def hand_env(queens=PUZZLE_4.fixed, puzzle=PUZZLE_4, **overrides) -> EightQueensEnv:
    env = EightQueensEnv({"size": puzzle.size, "givens": len(puzzle.fixed), "turn_order": ["tool", "plan"], **overrides})
    env.state = QueensState(seed=0, puzzle=puzzle, queens=frozenset(queens))
    return env


def brute_force_solutions(size: int, fixed=()) -> list[tuple[int, ...]]:
    """Every placement as a column per row, by permutations (independent of the solver)."""
    found = []
    for cols in itertools.permutations(range(size)):
        if len({r + c for r, c in enumerate(cols)}) == size and len({r - c for r, c in enumerate(cols)}) == size:
            if all(cols[r] == c for r, c in fixed):
                found.append(cols)
    return found


# ---- rules --------------------------------------------------------------------------------------------

def test_attacks_rows_columns_and_diagonals():
    queens = frozenset({(0, 0), (1, 2), (3, 0), (2, 3)})
    # column 1; row 2 / row 3 diagonal; row 2 / row 4 anti-diagonal
    assert attacking_pairs(queens) == [((0, 0), (3, 0)), ((1, 2), (2, 3)), ((1, 2), (3, 0))]
    assert attacked_queens(queens) == queens
    assert is_solved(4, frozenset({(0, 1), (1, 3), (2, 0), (3, 2)}))
    assert not is_solved(4, frozenset({(0, 1), (1, 3), (2, 0)}))  # three queens, no attack: not solved


def test_actions_place_remove_and_set_rows_and_the_rejections():
    fixed = PUZZLE_4.fixed
    result = apply_actions(PUZZLE_4, fixed, (("+", 1, 3), ("+", 1, 3), ("-", 2, 2), ("-", 0, 1)))
    # placed once; the second place is on an occupied cell, the first removal on an empty one, the second
    # removes a fixed queen: three rejections
    assert result.queens == fixed | {(1, 3)} and (result.changed, result.invalid) == (1, 3)
    result = apply_actions(PUZZLE_4, result.queens | {(1, 0)}, (("=", 1, 2), ("=", 3, -1), ("=", 0, 3)))
    # row 2 -> exactly (1, 2): two queens removed, one placed; row 4 already empty; row 1 would drop the fixed queen
    assert result.queens == fixed | {(1, 2)} and (result.changed, result.invalid) == (3, 1)
    with pytest.raises(ValueError, match="outside"):
        apply_actions(PUZZLE_4, fixed, (("+", 4, 0),))


def test_rewards_on_hand_built_states():
    start = hand_env().state
    assert PUZZLE_4.open_rows == 3 and progress(start) == 0.0 and task_reward(start) == 0.0
    one_safe = hand_env(PUZZLE_4.fixed | {(1, 3)}).state
    assert progress(one_safe) == pytest.approx(1 / 3) and task_reward(one_safe) == pytest.approx(1 / 6)
    two_safe = PUZZLE_4.fixed | {(1, 3), (2, 0)}
    assert progress(hand_env(two_safe).state) == pytest.approx(2 / 3)
    # (3, 1) shares the fixed queen's column and (2, 0)'s diagonal: 1 safe, 2 attacked -> clipped to 0
    assert progress(hand_env(two_safe | {(3, 1)}).state) == 0.0
    # a queen attacked only by the fixed one counts as attacked: (0 - 1) / 3 clips to 0
    assert progress(hand_env(PUZZLE_4.fixed | {(1, 0)}).state) == 0.0
    assert task_reward(hand_env(two_safe | {(3, 2)}).state) == 1.0
    # 8 x 8, fixed (0, 0): (1, 2) and (2, 4) safe, (7, 0) in the fixed queen's column: (2 - 1) / 7
    big = QueensPuzzle(8, frozenset({(0, 0)}))
    state = QueensState(seed=0, puzzle=big, queens=big.fixed | {(1, 2), (2, 4), (7, 0)})
    assert progress(state) == pytest.approx(1 / 7) and task_reward(state) == pytest.approx(1 / 14)


def test_plan_step_rewards_and_the_invalid_penalty():
    env = hand_env(alpha=2.0)
    env.state.position = 1  # the tool agent already acted this turn
    plan = EightQueensPlanAgent()
    plan.update_from_env(0, env)
    plan.update_from_model("Row 2 needs column 4.\n#### R2C4 -R1C2")
    result = asyncio.run(env.step_agent(plan))
    # one safe queen: task 0.5 * 1/3; the removal of the fixed queen is rejected: local = 1/6 - 0.1
    assert result.global_reward == pytest.approx(1 / 6) and result.local_reward == pytest.approx(1 / 6 - 0.1)
    assert result.reward == pytest.approx(2 * (1 / 6) + 1 / 6 - 0.1)
    assert env.state.invalid_actions == 1 and "1 action(s) rejected" in env.state.last_report
    env.state.position = 1
    plan.update_from_env(1, env)
    plan.update_from_model("#### 2413")
    result = asyncio.run(env.step_agent(plan))
    assert result.success and result.done and result.local_reward == pytest.approx(1.0 - 1 / 6)


def test_tool_check_reports_attacks_without_changing_the_board():
    env = hand_env()
    tool = EightQueensToolAgent()
    prompt = tool.update_from_env(0, env)
    assert "check: <answer>" in prompt[0]["content"] and ".Q..\n....\n....\n....\nAs one line: 2..." in prompt[1]["content"]
    tool.update_from_model("check: R2C1 R3C4\ncheck: 2413\nsimulate: R2C4")
    result = asyncio.run(env.step_agent(tool))
    reports = env.state.tool_reports
    assert [r.name for r in reports] == ["check", "check"]  # `simulate` is not an eight_queens tool
    assert "attacks: R1C2-R2C1" in reports[0].output and "solved" in reports[1].output
    assert result.local_reward == pytest.approx(1.0) and env.state.proposal == "2413"
    assert env.state.queens == PUZZLE_4.fixed and not result.done


def test_render_shows_fixed_and_placed_queens_and_attacks():
    env = hand_env(PUZZLE_4.fixed | {(1, 0), (2, 3)})
    board = env.render(env.state)
    assert board.splitlines()[:5] == [".Q..", "q...", "...q", "....", "As one line: 214."]
    assert "3 of 4 queens (1 fixed); attacks: R1C2-R2C1" in board
    crowded = hand_env(PUZZLE_4.fixed | {(0, 3)})
    assert "As one line" not in crowded.render(crowded.state)  # two queens in a row: no rows form


# ---- parsers ------------------------------------------------------------------------------------------

def test_parse_rows_and_items():
    spec = BoardSpec(4)
    assert parse_answer("2413", spec) == (("=", 0, 1), ("=", 1, 3), ("=", 2, 0), ("=", 3, 2))
    assert parse_answer("2 4, 1 3", spec) == parse_answer(" 24 13 ", spec) == parse_answer("2413", spec)
    assert parse_answer("2.._", spec) == (("=", 0, 1), ("=", 1, -1), ("=", 2, -1), ("=", 3, -1))
    assert parse_answer("R2C4, -r3c1; +R4C3", spec) == (("+", 1, 3), ("-", 2, 0), ("+", 3, 2))
    ten = parse_answer("10 2 . 1 3 4 5 6 7 8", BoardSpec(10))
    assert ten[0] == ("=", 0, 9) and ten[2] == ("=", 2, -1)
    for bad, message in [
        ("241", "needs 4 entries"),
        ("24135", "needs 4 entries"),
        ("2415", "entry '5'"),
        ("R5C1", "outside the 4x4 board"),
        ("R1C0", "outside the 4x4 board"),
        ("R1C1 and more", "unexpected text"),
        ("place R1C1", "unexpected text"),
        ("1 2 3 4 5 6 7 8 9 10", "needs 4 entries"),
        ("   ", "empty"),
    ]:
        with pytest.raises(ParseError, match=message):
            parse_answer(bad, spec)


@given(st.integers(4, 12), st.data())
def test_format_then_parse_round_trips(size, data):
    spec = BoardSpec(size)
    cell = st.tuples(st.sampled_from("+-"), st.integers(0, size - 1), st.integers(0, size - 1))
    items = tuple(data.draw(st.lists(cell, min_size=1, max_size=12)))
    assert parse_answer(format_answer(items), spec) == items
    rows = tuple(("=", r, data.draw(st.integers(-1, size - 1))) for r in range(size))
    assert parse_answer(format_answer(rows), spec) == rows


_PIECES = ["####", "check:", "R", "C", "r", "c", "-", "+", "1", "2", "3", "4", "8", "9", "10", "0", ".", "_", " ",
           ",", ";", "\n", "R1C2", "-R3C3", "R12C1", "2413", "\u00b2", "\u0663", "x", "/", "=", "\t"]
TEXT = st.one_of(st.text(max_size=120), st.lists(st.sampled_from(_PIECES), max_size=30).map("".join))


@settings(max_examples=200)
@given(TEXT, st.sampled_from([4, 8, 12]))
def test_parser_raises_nothing_but_parse_error(text, size):
    try:
        actions = parse_answer(text, BoardSpec(size))
    except ParseError as exc:
        assert str(exc)
        return
    assert actions and all(op in "+-=" and 0 <= r < size and -1 <= c < size for op, r, c in actions)
    assert all(c >= 0 for op, _, c in actions if op != "=")


_ENV_8 = EightQueensEnv({"turn_order": ["tool", "plan"]})
asyncio.run(_ENV_8.reset(1))


@settings(max_examples=100)
@given(
    st.one_of(TEXT, st.builds("check: {b}\n#### {b}".format, b=TEXT)),
    st.sampled_from([EightQueensToolAgent, EightQueensPlanAgent, EightQueensSingleAgent]),
)
def test_agents_reward_any_text_finitely_and_the_tool_never_moves_the_board(text, agent_cls):
    check_any_text_is_rewarded_finitely(_ENV_8, agent_cls, text, EightQueensToolAgent, lambda env: env.state.queens)


# ---- solver and generator -----------------------------------------------------------------------------

def test_solver_counts_match_brute_force():
    assert [count_solutions(n) for n in range(4, 9)] == [2, 10, 4, 40, 92]
    assert [len(brute_force_solutions(n)) for n in range(4, 8)] == [2, 10, 4, 40]
    rng = random.Random(0)
    for _ in range(6):
        cols = rng.choice(brute_force_solutions(7))
        fixed = [(r, cols[r]) for r in rng.sample(range(7), 2)]
        assert count_solutions(7, fixed) == len(brute_force_solutions(7, fixed)) >= 1
        assert solve(7, fixed) in brute_force_solutions(7, fixed)
    assert solve(4, [(0, 0)]) is None  # no 4-queens solution has a queen in a corner
    assert solve(8, [(0, 0), (1, 1)]) is None  # fixed queens that attack each other


@given(st.integers(0, 10**9), st.integers(4, 12), st.data())
def test_generated_puzzles_are_seeded_consistent_and_solvable(seed, size, data):
    givens = data.draw(st.integers(0, size - 1))
    puzzle = generate_puzzle(seed, size, givens)
    assert puzzle == generate_puzzle(seed, size, givens)
    assert puzzle.size == size and len(puzzle.fixed) == givens and len({r for r, _ in puzzle.fixed}) == givens
    assert not attacking_pairs(puzzle.fixed)
    solution = solve(size, puzzle.fixed)
    assert solution is not None and is_solved(size, frozenset(enumerate(solution)))


def test_seeds_give_different_puzzles():
    puzzles = {generate_puzzle(seed, 8, 2).fixed for seed in range(40)}
    assert len(puzzles) >= 36  # 2 of 8 queens from one of 92 solutions: a repeat is rare, not impossible
    assert len({generate_puzzle(seed, 8, 0).fixed for seed in range(5)}) == 1  # no givens: the empty board


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="`size`"):
        EightQueensConfig(size=3)
    with pytest.raises(ValueError, match="`givens`"):
        EightQueensConfig(size=6, givens=6)
    with pytest.raises(ValueError, match="`random_max_actions`"):
        EightQueensConfig(random_max_actions=0)


# ---- oracle, random, copies, tree sampling ------------------------------------------------------------

def test_oracle_solves_every_generated_instance():
    for size, givens, seeds in ((8, 2, 300), (4, 1, 50), (6, 2, 50), (10, 3, 20)):
        env = EightQueensEnv({"size": size, "givens": givens})
        for seed in range(seeds):
            state = asyncio.run(env.reset(seed))
            new_state, outcome = env.apply_answer(state, env.oracle_answer(state))
            assert outcome.invalid == 0 and env.is_success(new_state) and task_reward(new_state) == 1.0
            messy, _ = env.apply_answer(state, env.random_answer(state, random.Random(seed)))
            assert env.is_success(env.apply_answer(messy, env.oracle_answer(messy))[0])  # from any board


def _play_many(order, policy, seeds, **config):
    env = make_env("eight_queens", {"size": 6, "givens": 1, "turn_order": list(order), **config})
    agents = make_agents("eight_queens", order)

    async def run_all():
        return [await play_episode(env, agents, policy, seed) for seed in seeds]

    return asyncio.run(run_all())


@pytest.mark.parametrize("order", [("tool", "plan"), ("single",)], ids=["tool+plan", "single"])
def test_scripted_oracle_succeeds_in_one_turn_and_random_rarely(order):
    assert list_agents("eight_queens") == ["eight_queens.plan", "eight_queens.single", "eight_queens.tool"]
    oracle = _play_many(order, OraclePolicy(), range(40))
    assert all(r.success and r.turns <= 1 for r in oracle)
    accepting = _play_many(order, OraclePolicy(tool_candidates=3, seed=1, accept_proposals=True), range(20))
    assert all(r.success for r in accepting)
    random_results = _play_many(order, RandomPolicy(seed=7, malformed_prob=0.2), range(40), max_turns=3)
    assert all(r.done for r in random_results) and sum(r.success for r in random_results) <= 4


def test_state_copies_are_independent():
    env = hand_env()
    snap = env.snapshot()
    clone = env.clone()
    assert clone.state == env.state and clone.state.puzzle is env.state.puzzle  # the immutable part is shared
    clone.state.tool_reports.append("x")
    clone.state.queens = clone.state.queens | {(1, 3)}
    assert env.state.tool_reports == [] and env.state.queens == PUZZLE_4.fixed
    env.state.queens = frozenset()
    env.restore(snap)
    assert env.state == snap and env.state is not snap
    assert copy.deepcopy(env.state) == env.state


def test_tree_rollout_candidates_share_their_state_and_the_episode_follows_the_selected_one():
    check_tree_rollout_replays("eight_queens", {"size": 5, "givens": 1})


# ---- training -----------------------------------------------------------------------------------------

def test_at_grpo_step_on_eight_queens_changes_the_shared_policy(tmp_path, tiny_model_path):
    check_at_grpo_step_moves_the_shared_policy("eight_queens", {"size": 4, "givens": 1}, tiny_model_path, str(tmp_path / "run"))
