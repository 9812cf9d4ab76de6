"""Blocksworld: moves and their rejections, the A* planner against brute-force BFS, the seeded generator,
parsers (fuzzed), rewards, copies, scripted play, tree sampling and a short AT-GRPO run."""

from __future__ import annotations

import asyncio
import copy
import itertools
import random
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pettingllms.agents import ParseError
from pettingllms.envs.blocksworld import (
    BlocksProblem,
    BlocksState,
    BlocksworldConfig,
    BlocksworldEnv,
    BlocksworldPlanAgent,
    BlocksworldSingleAgent,
    BlocksworldToolAgent,
)
from pettingllms.envs.blocksworld.generator import generate_problem, random_stacks
from pettingllms.envs.blocksworld.parsers import PlanSpec, format_answer, parse_answer
from pettingllms.envs.blocksworld.rewards import progress, task_reward
from pettingllms.envs.blocksworld.solver import astar_plan, bfs_plan, plan, simple_plan
from pettingllms.envs.blocksworld.state import (
    TABLE,
    apply_moves,
    block_names,
    canonical,
    clear_blocks,
    misplaced,
    step_move,
)
from pettingllms.registry import list_agents, make_agents, make_env
from pettingllms.scripted import OraclePolicy, RandomPolicy, play_episode
from tests.helpers.game_checks import (
    check_any_text_is_rewarded_finitely,
    check_at_grpo_step_moves_the_shared_policy,
    check_tree_rollout_replays,
)

ABCD = block_names(4)
# Start: C on A, B and D alone; goal: the tower A B C D (bottom to top). Shortest plan: 3 moves.
START = canonical([("A", "C"), ("B",), ("D",)])
GOAL = canonical([("A", "B", "C", "D")])
PROBLEM = BlocksProblem(ABCD, START, GOAL, 3)


def hand_env(stacks=START, problem=PROBLEM, **overrides) -> BlocksworldEnv:
    env = BlocksworldEnv({"num_blocks": len(problem.blocks), "turn_order": ["tool", "plan"], **overrides})
    env.state = BlocksState(seed=0, problem=problem, stacks=stacks)
    return env


def all_configurations(blocks) -> set:
    """Every configuration, from every block order and every way to cut it into stacks (independent of the
    generator and the planner)."""
    found = set()
    for order in itertools.permutations(blocks):
        for cuts in itertools.product((False, True), repeat=len(blocks) - 1):
            stacks, current = [], [order[0]]
            for block, cut in zip(order[1:], cuts):
                if cut:
                    stacks.append(current)
                    current = []
                current.append(block)
            stacks.append(current)
            found.add(canonical(stacks))
    return found


def brute_force_distances(start, blocks) -> dict:
    """Shortest move counts from ``start`` to every configuration: BFS trying every (block, destination)
    pair through the dynamics (not the planner's successor list)."""
    dist = {start: 0}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for block, dest in itertools.product(blocks, (*blocks, TABLE)):
            nxt, valid = step_move(node, (block, dest))
            if valid and nxt not in dist:
                dist[nxt] = dist[node] + 1
                queue.append(nxt)
    return dist


# ---- rules --------------------------------------------------------------------------------------------

def test_moves_need_clear_blocks_and_a_real_destination():
    assert clear_blocks(START) == ("B", "C", "D")
    assert step_move(START, ("C", "B")) == (canonical([("A",), ("B", "C"), ("D",)]), True)
    assert step_move(START, ("C", TABLE)) == (canonical([("A",), ("B",), ("C",), ("D",)]), True)
    for move in [("A", TABLE), ("A", "B"), ("B", "A"), ("B", TABLE), ("C", "C"), ("E", TABLE)]:
        # A is under C; A is not clear; B is alone on the table already; onto itself; no block E
        assert step_move(START, move) == (START, False), move
    result = apply_moves(START, GOAL, (("C", TABLE), ("B", "A"), ("B", "A"), ("C", "B"), ("D", "C")))
    assert result.solved and (result.applied, result.invalid) == (5, 1)
    passing = apply_moves(START, GOAL, (("C", TABLE), ("B", "A"), ("C", "B"), ("D", "C"), ("D", TABLE)))
    assert not passing.solved and passing.stacks == canonical([("A", "B", "C"), ("D",)])  # the last move counts


def test_misplaced_counts_blocks_not_on_their_goal_support():
    assert misplaced(START, GOAL) == 3  # A stands on the table as in the goal; B, C, D do not
    assert misplaced(GOAL, GOAL) == 0
    assert misplaced(canonical([("B", "A")]), canonical([("A", "B")])) == 2
    # B on the table and C on B are right; D on the table and A on D are wrong (the goal has D on A)
    assert misplaced(canonical([("B", "C"), ("D", "A")]), canonical([("A", "D"), ("B", "C")])) == 2


def test_rewards_on_hand_built_states():
    start = hand_env().state
    assert task_reward(start) == 0.0 and progress(start) == 0.0
    one_step = hand_env(canonical([("A",), ("B",), ("C",), ("D",)])).state  # C to the table: still 3 misplaced
    assert progress(one_step) == 0.0
    two = hand_env(canonical([("A", "B"), ("C",), ("D",)])).state
    assert progress(two) == pytest.approx(1 / 3) and task_reward(two) == pytest.approx(1 / 6)
    three = hand_env(canonical([("A", "B", "C"), ("D",)])).state
    assert task_reward(three) == pytest.approx(0.5 * 2 / 3)
    assert task_reward(hand_env(GOAL).state) == 1.0


def test_plan_step_rewards_and_the_invalid_penalty():
    env = hand_env(alpha=2.0)
    env.state.position = 1  # the tool agent already acted this turn
    plan_agent = BlocksworldPlanAgent()
    plan_agent.update_from_env(0, env)
    plan_agent.update_from_model("First clear A.\n#### move C table, move B A, move A D")
    result = asyncio.run(env.step_agent(plan_agent))
    # B on A: progress 1/3, task 1/6; `move A D` is rejected (A is under B): local = 1/6 - 0.1
    assert result.global_reward == pytest.approx(1 / 6) and result.local_reward == pytest.approx(1 / 6 - 0.1)
    assert result.reward == pytest.approx(2 / 6 + 1 / 6 - 0.1)
    assert env.state.invalid_moves == 1 and env.state.moves_made == 3
    env.state.position = 1
    plan_agent.update_from_env(1, env)
    plan_agent.update_from_model("#### move c b; move D C")  # any case, semicolons
    result = asyncio.run(env.step_agent(plan_agent))
    assert result.success and result.done and result.local_reward == pytest.approx(1.0 - 1 / 6)


def test_tool_simulate_reports_the_goal_distance_without_changing_the_stacks():
    env = hand_env()
    tool = BlocksworldToolAgent()
    prompt = tool.update_from_env(0, env)
    assert prompt[1]["content"].endswith("Goal: A B C D\nNow: A C | B | D\nClear blocks: B C D; 3 of 4 blocks out of place.")
    tool.update_from_model("simulate: move C table\nsimulate(move C table, move B A, move C B, move D C)\ncheck: x")
    result = asyncio.run(env.step_agent(tool))
    first, second = env.state.tool_reports
    assert "3 block(s) out of place" in first.output and "goal reached" in second.output
    assert result.local_reward == pytest.approx(1.0) and env.state.proposal.startswith("move C table, move B A")
    assert env.state.stacks == START and not result.done


# ---- parsers ------------------------------------------------------------------------------------------

def test_parse_moves_and_errors():
    spec = PlanSpec(ABCD, max_moves=3)
    assert parse_answer("move C table, move B A", spec) == (("C", TABLE), ("B", "A"))
    assert parse_answer("MOVE c TABLE;move b a", spec) == parse_answer("move C table move B A", spec)
    for bad, message in [
        ("", "empty plan"),
        ("C table", "expected `move`"),
        ("move C", "cut short"),
        ("move C on B", "'on' is not a block"),
        ("move E table", "'E' is not a block A..D"),
        ("move table A", "'table' is not a block A..D$"),
        ("move AB C", "'AB' is not"),
        ("move A B, then move C D", "expected `move`, got 'then'"),
        ("move A B " * 4, "too many moves"),
    ]:
        with pytest.raises(ParseError, match=message):
            parse_answer(bad, spec)


@given(st.integers(2, 26), st.data())
def test_format_then_parse_round_trips(num_blocks, data):
    blocks = block_names(num_blocks)
    move = st.tuples(st.sampled_from(blocks), st.sampled_from([*blocks, TABLE]))
    moves = tuple(data.draw(st.lists(move, min_size=1, max_size=6)))
    assert parse_answer(format_answer(moves), PlanSpec(blocks, 10)) == moves


_PIECES = ["####", "simulate:", "move", "MOVE", "table", "Table", "A", "B", "c", "d", "E", "Z", "AB", " ", ",",
           ";", "\n", "(", ")", "->", "onto", "\u00df", "\u0130", "x", "1", "\t"]
TEXT = st.one_of(st.text(max_size=120), st.lists(st.sampled_from(_PIECES), max_size=30).map(" ".join))


@settings(max_examples=200)
@given(TEXT, st.sampled_from([2, 4, 26]))
def test_parser_raises_nothing_but_parse_error(text, num_blocks):
    blocks = block_names(num_blocks)
    try:
        moves = parse_answer(text, PlanSpec(blocks, 16))
    except ParseError as exc:
        assert str(exc)
        return
    assert 1 <= len(moves) <= 16 and all(x in blocks and (y in blocks or y == TABLE) for x, y in moves)


_ENV_4 = BlocksworldEnv({"turn_order": ["tool", "plan"]})
asyncio.run(_ENV_4.reset(1))


@settings(max_examples=100)
@given(
    st.one_of(TEXT, st.builds("simulate: {b}\n#### {b}".format, b=TEXT)),
    st.sampled_from([BlocksworldToolAgent, BlocksworldPlanAgent, BlocksworldSingleAgent]),
)
def test_agents_reward_any_text_finitely_and_the_tool_never_moves_a_block(text, agent_cls):
    check_any_text_is_rewarded_finitely(_ENV_4, agent_cls, text, BlocksworldToolAgent, lambda env: env.state.stacks)


# ---- planner and generator ----------------------------------------------------------------------------

def test_configuration_counts():
    # sets of ordered stacks: the Lah numbers 1, 3, 13, 73, 501
    assert [len(all_configurations(block_names(n))) for n in (2, 3, 4, 5)] == [3, 13, 73, 501]


@pytest.mark.parametrize("num_blocks,starts", [(2, None), (3, None), (4, 10)])
def test_astar_is_optimal_against_brute_force_on_small_configurations(num_blocks, starts):
    blocks = block_names(num_blocks)
    configurations = sorted(all_configurations(blocks))
    if starts is not None:  # every goal from a sample of starts (all 73 x 73 pairs take seconds)
        configurations_from = random.Random(num_blocks).sample(configurations, starts)
    else:
        configurations_from = configurations
    for start in configurations_from:
        dist = brute_force_distances(start, blocks)
        assert set(dist) == set(configurations)  # every configuration reaches every other
        for goal in configurations:
            moves = astar_plan(start, goal)
            assert len(moves) == dist[goal], (start, goal, moves)
            result = apply_moves(start, goal, moves)
            assert result.solved and result.invalid == 0
            assert misplaced(start, goal) <= dist[goal]  # the heuristic is admissible


def test_astar_is_optimal_on_random_five_block_pairs():
    blocks = block_names(5)
    rng = random.Random(0)
    for _ in range(3):
        start = random_stacks(rng, blocks)
        dist = brute_force_distances(start, blocks)
        for goal in rng.sample(sorted(dist), 25):
            moves = astar_plan(start, goal)
            assert len(moves) == dist[goal] == len(bfs_plan(start, goal))
            assert apply_moves(start, goal, moves).solved
    assert max(dist.values()) >= 6  # the sample reaches beyond trivial distances


@settings(max_examples=40)
@given(st.integers(2, 10), st.randoms(use_true_random=False))
def test_simple_plan_is_valid_and_at_most_twice_the_misplaced_count(num_blocks, rng):
    blocks = block_names(num_blocks)
    start, goal = random_stacks(rng, blocks), random_stacks(rng, blocks)
    moves = simple_plan(start, goal)
    result = apply_moves(start, goal, moves)
    assert result.solved and result.invalid == 0 and len(moves) <= 2 * misplaced(start, goal)
    fallback = plan(start, goal, max_states=1)  # past the search limit: the simple plan (or A*'s, if found)
    assert fallback == moves or apply_moves(start, goal, fallback).solved


@given(st.integers(0, 10**9), st.integers(2, 7), st.integers(1, 3), st.data())
def test_generated_problems_are_seeded_solvable_and_in_range(seed, num_blocks, low, data):
    high = data.draw(st.one_of(st.none(), st.integers(low + 1, low + 4)))
    try:
        problem = generate_problem(seed, num_blocks, low, high)
    except ValueError as exc:  # a range the size cannot reach (2 blocks: at most 2 moves)
        assert "no Blocksworld problem" in str(exc) and num_blocks <= 3
        return
    assert problem == generate_problem(seed, num_blocks, low, high)
    assert problem.blocks == block_names(num_blocks) and problem.start != problem.goal
    assert sorted(b for stack in problem.start for b in stack) == list(problem.blocks)
    assert sorted(b for stack in problem.goal for b in stack) == list(problem.blocks)
    assert low <= problem.optimal_moves <= (high or 99)
    moves = astar_plan(problem.start, problem.goal)
    assert len(moves) == problem.optimal_moves and apply_moves(problem.start, problem.goal, moves).solved


def test_seeds_give_different_problems_of_varied_difficulty():
    problems = [generate_problem(seed, 4, 2) for seed in range(40)]
    assert len({(p.start, p.goal) for p in problems}) >= 38
    assert len({p.optimal_moves for p in problems}) >= 3


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="`num_blocks`"):
        BlocksworldConfig(num_blocks=1)
    with pytest.raises(ValueError, match="`num_blocks`"):
        BlocksworldConfig(num_blocks=27)
    with pytest.raises(ValueError, match="`max_plan_length`"):
        BlocksworldConfig(min_plan_length=3, max_plan_length=2)
    with pytest.raises(ValueError, match="`solver_max_states`"):
        BlocksworldConfig(solver_max_states=0)


# ---- oracle, random, copies, tree sampling ------------------------------------------------------------

def test_oracle_solves_every_generated_instance_optimally():
    for num_blocks, seeds in ((4, 300), (3, 50), (6, 30), (8, 10)):
        env = BlocksworldEnv({"num_blocks": num_blocks})
        for seed in range(seeds):
            state = asyncio.run(env.reset(seed))
            answer = env.oracle_answer(state)
            new_state, outcome = env.apply_answer(state, answer)
            assert outcome.invalid == 0 and env.is_success(new_state) and task_reward(new_state) == 1.0
            assert len(answer) == state.problem.optimal_moves
            messy, _ = env.apply_answer(state, env.random_answer(state, random.Random(seed)))
            if not env.is_success(messy):  # from any configuration
                assert env.is_success(env.apply_answer(messy, env.oracle_answer(messy))[0])


def _play_many(order, policy, seeds, **config):
    env = make_env("blocksworld", {"num_blocks": 4, "turn_order": list(order), **config})
    agents = make_agents("blocksworld", order)

    async def run_all():
        return [await play_episode(env, agents, policy, seed) for seed in seeds]

    return asyncio.run(run_all())


@pytest.mark.parametrize("order", [("tool", "plan"), ("single",)], ids=["tool+plan", "single"])
def test_scripted_oracle_succeeds_in_one_turn_and_random_rarely(order):
    assert list_agents("blocksworld") == ["blocksworld.plan", "blocksworld.single", "blocksworld.tool"]
    oracle = _play_many(order, OraclePolicy(), range(40))
    assert all(r.success and r.turns <= 1 for r in oracle)
    accepting = _play_many(order, OraclePolicy(tool_candidates=3, seed=1, accept_proposals=True), range(20))
    assert all(r.success for r in accepting)
    random_results = _play_many(order, RandomPolicy(seed=7, malformed_prob=0.2), range(40), max_turns=3)
    assert all(r.done for r in random_results) and sum(r.success for r in random_results) <= 8


def test_state_copies_are_independent():
    env = hand_env()
    snap = env.snapshot()
    clone = env.clone()
    assert clone.state == env.state and clone.state.problem is env.state.problem  # the immutable part is shared
    clone.state.tool_reports.append("x")
    clone.state.stacks = GOAL
    assert env.state.tool_reports == [] and env.state.stacks == START and not env.success and clone.success
    env.state.stacks = GOAL
    env.restore(snap)
    assert env.state == snap and env.state is not snap
    assert copy.deepcopy(env.state) == env.state


def test_tree_rollout_candidates_share_their_state_and_the_episode_follows_the_selected_one():
    check_tree_rollout_replays("blocksworld", {"num_blocks": 4})


# ---- training -----------------------------------------------------------------------------------------

def test_at_grpo_step_on_blocksworld_changes_the_shared_policy(tmp_path, tiny_model_path):
    check_at_grpo_step_moves_the_shared_policy("blocksworld", {"num_blocks": 3}, tiny_model_path, str(tmp_path / "run"))
