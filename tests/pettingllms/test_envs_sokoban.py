"""Sokoban: reverse-play generator, BFS oracle, pushes/walls/deadlocks, rewards on hand-built states."""

from __future__ import annotations

import asyncio
import random

import pytest

from pettingllms.envs.sokoban import (
    SokobanConfig,
    SokobanEnv,
    SokobanLevel,
    SokobanPlanAgent,
    SokobanState,
    SokobanToolAgent,
)
from pettingllms.envs.sokoban.generator import generate_level
from pettingllms.envs.sokoban.rewards import box_distance, progress, task_reward
from pettingllms.envs.sokoban.solver import solve
from pettingllms.envs.sokoban.state import apply_moves, is_corner_deadlocked, is_solved


def parse_level(rows: list[str]) -> tuple[SokobanLevel, tuple[int, int], frozenset]:
    """Level from the usual text (# wall, _ floor, . goal, $ box, * box on goal, @ player)."""
    walls, goals, boxes, player = set(), set(), set(), None
    for r, line in enumerate(rows):
        for c, ch in enumerate(line):
            if ch == "#":
                walls.add((r, c))
            if ch in ".*+":
                goals.add((r, c))
            if ch in "$*":
                boxes.add((r, c))
            if ch in "@+":
                player = (r, c)
    level = SokobanLevel(len(rows), len(rows[0]), frozenset(walls), frozenset(goals), player, frozenset(boxes))
    return level, player, frozenset(boxes)


CORRIDOR = ["#######", "#_____#", "#_@$_.#", "#_____#", "#######"]


def hand_env(rows=CORRIDOR, **overrides) -> SokobanEnv:
    level, player, boxes = parse_level(rows)
    env = SokobanEnv({"rows": level.rows, "cols": level.cols, "turn_order": ["tool", "plan"], **overrides})
    env.state = SokobanState(seed=0, level=level, player=player, boxes=boxes)
    return env


def test_pushes_walls_and_blocked_pushes():
    level, player, boxes = parse_level(["######", "#_$$@#", "#____#", "######"])
    result = apply_moves(level, player, boxes, ("L",))  # two boxes in a row cannot move
    assert (result.player, result.boxes, result.invalid) == (player, boxes, 1)
    result = apply_moves(level, player, boxes, ("U", "D", "L", "U", "L"))
    # U: wall (invalid); D: down to (2,4); L: (2,3); U: push box (1,3) into the wall -> invalid; L: (2,2)
    assert result.player == (2, 2) and result.boxes == boxes and result.invalid == 2 and result.pushes == 0
    level, player, boxes = parse_level(CORRIDOR)
    result = apply_moves(level, player, boxes, ("R",))
    assert result.player == (2, 3) and result.boxes == frozenset({(2, 4)}) and result.pushes == 1


def test_move_list_stops_at_solved_and_at_deadlock():
    level, player, boxes = parse_level(CORRIDOR)
    result = apply_moves(level, player, boxes, ("R", "R", "L", "L"))
    assert result.solved and result.applied == 2 and result.boxes == level.goals
    level, player, boxes = parse_level(["#####", "#_$@#", "#__.#", "#####"])
    result = apply_moves(level, player, boxes, ("L", "R", "D"))
    assert result.deadlocked and result.applied == 1 and result.boxes == frozenset({(1, 1)})
    assert is_corner_deadlocked(level, result.boxes) and not is_solved(level, result.boxes)


def test_rewards_on_hand_built_states():
    level, player, boxes = parse_level(CORRIDOR)
    start = SokobanState(seed=0, level=level, player=player, boxes=boxes)
    assert box_distance(level, boxes) == 2 and task_reward(start) == 0.0
    halfway = SokobanState(seed=0, level=level, player=(2, 3), boxes=frozenset({(2, 4)}))
    assert progress(halfway) == pytest.approx(0.5) and task_reward(halfway) == pytest.approx(0.25)
    done = SokobanState(seed=0, level=level, player=(2, 4), boxes=frozenset({(2, 5)}))
    assert task_reward(done) == 1.0
    corner_level, p, b = parse_level(["#####", "#$_@#", "#__.#", "#####"])
    assert task_reward(SokobanState(seed=0, level=corner_level, player=p, boxes=b)) == 0.0


def test_plan_step_rewards_and_deadlock_ends_the_episode():
    env = hand_env(alpha=2.0)
    env.state.position = 1  # the tool agent already acted this turn
    plan = SokobanPlanAgent()
    plan.update_from_env(0, env)
    plan.update_from_model("#### U R")  # walks above the box: nothing pushed, nothing gained
    result = asyncio.run(env.step_agent(plan))
    assert (result.local_reward, result.global_reward) == (pytest.approx(0.0), 0.0)
    env = hand_env(alpha=2.0)
    env.state.position = 1
    plan.update_from_env(0, env)
    plan.update_from_model("#### R")
    result = asyncio.run(env.step_agent(plan))
    # one push: local = 0.25 - 0.0 - 0 invalid; global = 0.25; reward = 2 * 0.25 + 0.25
    assert result.local_reward == pytest.approx(0.25) and result.reward == pytest.approx(0.75)
    env = hand_env(["#####", "#_$@#", "#__.#", "#####"], turn_order=["single"])
    single = SokobanPlanAgent(role="single")
    single.update_from_env(0, env)
    single.update_from_model("#### L")
    result = asyncio.run(env.step_agent(single))
    assert result.done and not result.success and env.is_failed(env.state)
    assert result.global_reward == 0.0 and "deadlock" in env.state.last_report


def test_tool_simulate_reports_without_changing_the_board():
    env = hand_env()
    tool = SokobanToolAgent()
    tool.update_from_env(0, env)
    tool.update_from_model("simulate(R R)")
    result = asyncio.run(env.step_agent(tool))
    assert result.local_reward == pytest.approx(1.0) and "solved" in env.state.tool_reports[0].output
    assert env.state.boxes == frozenset({(2, 3)}) and env.state.player == (2, 2)


def test_solver_finds_shortest_solutions_on_hand_built_levels():
    level, player, boxes = parse_level(CORRIDOR)
    assert solve(level, player, boxes) == ("R", "R")
    level, player, boxes = parse_level(["#######", "#_____#", "#_.$@_#", "#_____#", "#######"])
    assert solve(level, player, boxes) == ("L",)
    level, player, boxes = parse_level(["######", "#.$__#", "#___@#", "######"])
    assert solve(level, player, boxes) == ("U", "L", "L")
    # the player stands on the wrong side and must walk around the box (moves tried U, D, L, R)
    level, player, boxes = parse_level(["#######", "#_____#", "#.@$__#", "#_____#", "#######"])
    moves = solve(level, player, boxes)
    assert moves == ("U", "R", "R", "D", "L", "L") and apply_moves(level, player, boxes, moves).solved
    corner, player, boxes = parse_level(["#####", "#$_@#", "#__.#", "#####"])
    assert solve(corner, player, boxes) is None


@pytest.mark.parametrize("rows,cols,boxes", [(6, 6, 1), (6, 6, 2), (7, 7, 2), (5, 8, 1)])
def test_generated_levels_are_seeded_and_solvable(rows, cols, boxes):
    sizes = set()
    for seed in range(40):
        level = generate_level(seed, rows, cols, boxes)
        assert level == generate_level(seed, rows, cols, boxes)
        assert (level.rows, level.cols) == (rows, cols)
        assert len(level.goals) == len(level.start_boxes) == boxes
        assert not is_solved(level, level.start_boxes)
        assert level.start_player not in level.walls and level.start_player not in level.start_boxes
        border = [(r, c) for r in range(rows) for c in range(cols) if r in (0, rows - 1) or c in (0, cols - 1)]
        assert all(cell in level.walls for cell in border)
        moves = solve(level, level.start_player, level.start_boxes)
        assert moves, f"seed {seed} not solvable"
        assert apply_moves(level, level.start_player, level.start_boxes, moves).solved
        sizes.add(len(moves))
    assert len(sizes) > 3  # varied difficulty


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="`rows`"):
        SokobanConfig(rows=3)
    with pytest.raises(ValueError, match="`num_boxes`"):
        SokobanConfig(rows=4, cols=4, num_boxes=4)


def test_render_shows_current_positions():
    env = hand_env()
    plan = SokobanPlanAgent()
    env.state.position = 1
    plan.update_from_env(0, env)
    plan.update_from_model("#### R")
    asyncio.run(env.step_agent(plan))
    board = env.render(env.state)
    assert board.splitlines()[2] == "#__@$.#" and "0 of 1 boxes on goals" in board


def test_random_answers_are_well_formed():
    env = SokobanEnv()
    asyncio.run(env.reset(3))
    rng = random.Random(1)
    for _ in range(30):
        moves = env.random_answer(env.state, rng)
        assert env.parse_answer(env.format_answer(moves)) == moves
