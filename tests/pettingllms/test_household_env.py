"""The household environment on generated TextWorld games: generator and cache, workflows, rewards, state
copies and their replay, scripted policies, prompts, the CLI's oracle evaluation, and the alfworld source.

Games are compiled once per test session into a temporary cache (``household_cache``); every test plays
those seeds with the default settings, so no test compiles a game of its own but the cache test.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import json
import math
import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pettingllms.envs.household import (
    GamePool,
    HouseholdEnv,
    HouseholdOraclePolicy,
    HouseholdSettings,
    HouseholdSetupError,
    RandomHouseholdPolicy,
    WrongHouseholdPolicy,
    make_spec,
)
from pettingllms.envs.household.generator import compiled_game, game_path, read_game_metadata
from pettingllms.registry import make_agents, make_env
from pettingllms.scripted import RolePolicy, play_episode

SEEDS = (0,)  # one compiled game (a compile takes 2-4 s); more games are built, not compiled, below
TEAM, SINGLE = ("planner", "actor"), ("single",)


@pytest.fixture(scope="session")
def household_cache(tmp_path_factory) -> str:
    """A cache holding the compiled games of :data:`SEEDS` (default settings), made once per session (the
    training test's fixture finds them there)."""
    folder = tmp_path_factory.getbasetemp() / "household-games"
    for seed in SEEDS:
        compiled_game(seed, HouseholdSettings(), folder)
    return str(folder)


def make(cache, order=TEAM, **extra):
    env = make_env("household", {"cache_dir": cache, "turn_order": list(order), **extra})
    return env, make_agents("household", order)


def play(env, agents, policy, seed):
    return asyncio.run(play_episode(env, agents, policy, seed))


def act(env, agent, response):
    agent.update_from_env(env.state.turn, env)
    agent.update_from_model(response)
    return asyncio.run(env.step_agent(agent))


# ---- the generator -----------------------------------------------------------------------------------

def test_specs_are_seeded_and_bounded_at_every_difficulty():
    for settings_ in (HouseholdSettings(1, 2, 1, 2), HouseholdSettings(), HouseholdSettings(3, 4, 2, 2),
                      HouseholdSettings(4, 6, 3, 3)):
        specs = [make_spec(seed, settings_) for seed in range(60)]
        assert specs[7] == make_spec(7, settings_)
        assert len({s.walkthrough for s in specs}) > 30  # seeds make different games
        for spec in specs:
            assert len(spec.rooms) == settings_.rooms and len(spec.objects) == settings_.objects
            assert len(spec.task) == settings_.quest_length
            assert len(spec.walkthrough) <= settings_.max_walkthrough()
            names = [*spec.rooms, *(p for _, ps in spec.furniture for p in ps), *(o for o, _ in spec.objects)]
            assert len(names) == len(set(names))
            assert all(p.target != dict(spec.objects)[p.obj] for p in spec.task)
    assert make_spec(3, HouseholdSettings(rooms=3)) != make_spec(3, HouseholdSettings(rooms=2))
    with pytest.raises(ValueError, match="quest_length"):
        HouseholdSettings(objects=1, quest_length=2)


@pytest.mark.parametrize("settings_", [HouseholdSettings(), HouseholdSettings(3, 4, 2, 2), HouseholdSettings(4, 6, 3, 3)],
                         ids=lambda s: s.name)
def test_built_games_are_won_by_their_walkthrough_and_by_textworlds_policy(household_cache, settings_):
    """TextWorld's own game logic (no compile): the walkthrough is checked by ``build_game``; its winning policy,
    which the oracle plays, wins too, within the walkthrough's length."""
    from textworld.generator.game import GameProgression
    from textworld.generator.inform7 import Inform7Game

    from pettingllms.envs.household.generator import build_game

    for seed in range(3):
        game = build_game(make_spec(seed, settings_))
        meta = game.metadata["household"]
        assert game.objective == meta["objective"] and game.max_score == meta["max_score"] == settings_.quest_length
        progression, inform7 = GameProgression(game), Inform7Game(game)
        for _ in range(len(meta["walkthrough"])):
            if progression.completed:
                break
            command = inform7.gen_commands_from_actions(progression.winning_policy)[0]
            commands = inform7.gen_commands_from_actions(progression.valid_actions)
            progression.update(progression.valid_actions[commands.index(command)])
        assert progression.completed and progression.score == settings_.quest_length


def test_compiled_games_are_cached_under_a_deterministic_name(household_cache):
    path = compiled_game(0, HouseholdSettings(), household_cache)
    assert path == game_path(0, HouseholdSettings(), household_cache)
    assert path.name == "seed0.z8" and path.parent.name == "r2-o3-q1-f2" and path.parent.parent.name.startswith("textworld-v1-tw")
    stamp = path.stat().st_mtime_ns
    start = time.perf_counter()
    assert compiled_game(0, HouseholdSettings(), household_cache) == path
    assert time.perf_counter() - start < 0.1 and path.stat().st_mtime_ns == stamp  # served, not rebuilt
    meta = read_game_metadata(path)
    spec = make_spec(0, HouseholdSettings())
    assert meta["objective"] == spec.objective and meta["walkthrough"] == list(spec.walkthrough)
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no work folder left behind


# ---- workflows and scripted policies -------------------------------------------------------------------

@pytest.mark.parametrize("order", [TEAM, SINGLE], ids=["planner+actor", "single"])
def test_oracle_wins_every_game_and_wrong_never_does(household_cache, order):
    env, agents = make(household_cache, order)
    for seed in SEEDS:
        result = play(env, agents, HouseholdOraclePolicy(), seed)
        assert result.success and result.done and result.turns <= len(env.state.game.walkthrough)
        assert env.state.view.score == env.state.game.max_score and env.task_reward == 1.0
        assert env.state.inadmissible == 0
        if order == TEAM:  # the planner names milestones, the actor walks there and reaches every one
            assert 1 <= env.state.subgoals_set == env.state.subgoals_reached <= result.turns
            assert env.state.subgoal == env.state.history[-1]
            assert all(s.local_reward == 1.0 for s in result.steps if s.role == "planner")
            actor = [s.local_reward for s in result.steps if s.role == "actor"]
            assert all(r == pytest.approx(0.2) or r == pytest.approx(0.7) for r in actor)
            assert sum(r > 0.5 for r in actor) == env.state.subgoals_reached
        wrong = play(env, agents, WrongHouseholdPolicy(), seed)
        assert not wrong.success and wrong.turns == env.config.max_turns
        assert all(s.local_reward == 0.0 and s.global_reward == 0.0 for s in wrong.steps)


def test_oracle_wins_after_a_random_detour(household_cache):
    """The oracle follows the game's policy from the current state, so it also wins after random turns (the
    ``sft`` stage's late-turn demonstrations)."""
    env, agents = make(household_cache, max_turns=12)

    class Detour:
        def __init__(self, seed):
            self.random, self.oracle = RandomHouseholdPolicy(seed), HouseholdOraclePolicy()

        def respond(self, agent, env_):
            return (self.random if env_.state.turn < 4 else self.oracle).respond(agent, env_)

    for seed in SEEDS:
        for detour_seed in range(3):
            result = play(env, agents, Detour(detour_seed), seed)
            assert result.success, (seed, env.state.history)


def test_random_policy_is_seeded(household_cache):
    env, agents = make(household_cache, max_turns=4)
    first = [play(env, agents, RandomHouseholdPolicy(seed=3), s) for s in SEEDS]
    histories = [list(env.state.history)]
    second = [play(env, agents, RandomHouseholdPolicy(seed=3), s) for s in SEEDS]
    assert first == second and histories == [list(env.state.history)]


def test_rewards_of_every_outcome(household_cache):
    env, (planner, actor) = make(household_cache, alpha=0.5)
    asyncio.run(env.reset(0))
    policy = env.state.view.policy
    assert policy and env.state.history == []
    # The planner: on the path, off it, unparseable. It never plays a command.
    assert act(env, planner, f"#### {policy[0]}").local_reward == 1.0
    assert env.state.subgoal == policy[0] and env.state.history == []
    result = act(env, actor, "#### look")  # admissible, changes nothing
    assert (result.local_reward, result.global_reward, result.reward) == (0.0, 0.0, 0.0)
    assert act(env, planner, "#### look").local_reward == 0.0
    result = act(env, actor, "#### dance")
    assert result.local_reward == -0.5 and env.state.history == ["look"] and env.state.inadmissible == 1
    assert env.state.log[-1].admissible is False
    result = act(env, planner, "no marker")
    assert result.local_reward == -1.0 and result.parse_error and result.failure == "parse_error"
    result = act(env, actor, "#### 99")
    assert result.local_reward == -1.0 and result.failure == "parse_error" and env.state.history == ["look"]
    # Reaching the sub-goal pays the actor; the last placement wins the game (global 1.0, alpha 0.5).
    while not env.done:
        step = env.state.view.policy[0]
        act(env, planner, f"#### {step}")
        result = act(env, actor, "#### subgoal")
        assert env.state.history[-1] == step and result.local_reward == pytest.approx(0.7)
    assert result.success and result.global_reward == 1.0 and result.reward == pytest.approx(0.5 + 0.7)


def test_global_reward_counts_the_objects_placed(household_cache):
    env, (single,) = make(household_cache, SINGLE)
    asyncio.run(env.reset(SEEDS[0]))
    rewards_seen = []
    while not env.done:
        rewards_seen.append(act(env, single, f"#### {env.oracle_command(env.state)}").global_reward)
    assert rewards_seen[-1] == 1.0 and set(rewards_seen[:-1]) == {0.0}  # one object: 0 until it is placed
    assert env.state.game.max_score == 1


def test_prompts_show_the_task_the_room_and_numbered_commands_never_the_policy(household_cache):
    env, (planner, actor) = make(household_cache)
    asyncio.run(env.reset(0))
    state = env.state
    user = planner.update_from_env(0, env)[1]["content"]
    assert state.game.objective in user and "Current sub-goal: none yet" in user
    assert user.rstrip().endswith(f"{len(state.view.admissible)}. {state.view.admissible[-1]}")
    assert state.view.description.splitlines()[0] in user
    act(env, planner, f"#### {state.view.policy[0]}")
    user = actor.update_from_env(0, env)[1]["content"]
    assert f"Planner's sub-goal: {state.view.policy[0]}" in user and "1. " in user
    act(env, actor, "#### subgoal")
    user = planner.update_from_env(1, env)[1]["content"]
    assert f"- {state.history[0]} -> " in user and "reached" in user
    assert "policy" not in user.lower()


# ---- copies for tree sampling ---------------------------------------------------------------------------

def test_clone_snapshot_and_restore_are_independent_and_replay_faithfully(household_cache):
    env, (planner, actor) = make(household_cache)
    asyncio.run(env.reset(0))
    act(env, planner, f"#### {env.state.view.policy[0]}")
    act(env, actor, "#### subgoal")
    saved = env.snapshot()
    twin = env.clone()
    act(twin, copy.deepcopy(planner), "#### look")
    act(twin, copy.deepcopy(actor), "#### look")
    assert twin.state.history == [*env.state.history, "look"] and env.state == saved
    for branch in (env, twin):  # both play on from their own history
        act(branch, planner, "#### look")
        act(branch, actor, f"#### {branch.oracle_command(branch.state)}")
    env.restore(saved)
    assert env.state == saved and env.state is not saved
    # A fresh pool (no cache, no live game) replays the history to the very same view.
    fresh = make(household_cache)[0]
    fresh.pool = GamePool()
    assert fresh.view_of(env.state.game, env.state.history) == env.state.view
    assert fresh.view_of(twin.state.game, twin.state.history) == twin.state.view
    assert fresh.pool.stats.resets >= 1 and fresh.pool.stats.commands >= len(twin.state.history)


def test_the_pool_serves_repeated_histories_from_its_cache_and_replays_only_on_a_miss(household_cache):
    env, _ = make(household_cache)
    env.pool = pool = GamePool(max_views=64)
    asyncio.run(env.reset(0))
    game, start = env.state.game, env.state.view
    assert pool.stats.starts == 1 and pool.stats.resets == 1 and pool.stats.commands == 0
    branches = [c for c in start.admissible if c != "look"][:3]
    views = [env.view_of(game, [c]) for c in branches]  # K branches of one state
    assert pool.stats.commands == 3 and pool.stats.resets == 3  # each branch after the first reset the game
    assert [env.view_of(game, [c]) for c in branches] == views and pool.stats.cache_hits >= 3
    env.view_of(game, [branches[-1], "look"])  # the live game stands at the last branch: one command more
    assert pool.stats.commands == 4 and pool.stats.resets == 3
    pool.clear()
    assert pool.stats.commands == 0 and env.view_of(game, [branches[0]]) == views[0]


def test_tree_sampling_runs_on_copies_of_the_state(household_cache):
    from pettingllms.execution import EngineConfig, RolloutEngine
    from pettingllms.execution.policies import ScriptedBackend
    from pettingllms.execution.router import Router

    router = Router({"planner": "scripted", "actor": "scripted"}, ScriptedBackend({"scripted": RolePolicy(
        {"planner": HouseholdOraclePolicy(), "actor": RandomHouseholdPolicy()})}))
    engine = RolloutEngine.from_registry("household", {"cache_dir": household_cache, "max_turns": 3}, router,
                                         EngineConfig(num_generations=3, sampling_mode="tree", seed=1))
    batch = engine.rollout(list(SEEDS))
    assert batch.mode == "tree" and not batch.notices and batch.dropped_samples == 0
    assert batch.samples and len(batch.samples) % 3 == 0  # K candidates per decision
    assert {s.role for s in batch.samples} == {"planner", "actor"}
    assert all(math.isfinite(s.reward) for s in batch.samples)


# ---- the agents under arbitrary text ----------------------------------------------------------------------

_PIECES = ["####", "#### ", "\n", " ", "go", "east", "west", "open", "take", "from", "the", "subgoal", "look", "1",
           "2", "3", "99", ".", "`", "insert", "into", "put", "on", "\u00e9"]
TEXT = st.one_of(st.text(max_size=120), st.lists(st.sampled_from(_PIECES), max_size=30).map("".join))


@pytest.fixture(scope="module")
def ready(household_cache):
    env, agents = make(household_cache)
    asyncio.run(env.reset(SEEDS[0]))
    act(env, agents[0], f"#### {env.state.view.policy[0]}")
    return env


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(TEXT, st.sampled_from(["planner", "actor"]))
def test_any_text_gives_finite_rewards_and_only_admissible_commands_are_played(ready, text, role):
    env = ready.clone()
    agent = make_agents("household", [role])[0]
    agent.update_from_env(env.state.turn, env)
    agent.update_from_model(text)
    assert (agent.action is None) == (agent.parse_error is not None)
    before = list(env.state.history)
    asyncio.run(agent.step(env))
    assert math.isfinite(agent.local_reward) and 0.0 <= env.task_reward <= 1.0
    if agent.parse_error is not None:
        assert agent.local_reward == -1.0 and agent.failure == "parse_error"
    played = env.state.history[len(before):]
    assert env.state.history[: len(before)] == before and len(played) <= (role == "actor")
    assert all(c in ready.view_of(env.state.game, before).admissible for c in played)


# ---- configs and the command line --------------------------------------------------------------------------

def test_config_errors_name_the_field():
    for fields, message in [({"source": "web"}, "`source`"), ({"rooms": 0}, "`rooms`"),
                            ({"objects": 1, "quest_length": 2}, "quest_length"), ({"subgoal_horizon": 0}, "subgoal_horizon"),
                            ({"alfworld_split": "test"}, "alfworld_split"), ({"alfworld_task_types": [9]}, "task_types"),
                            ({"changed_reward": float("nan")}, "changed_reward")]:
        with pytest.raises(ValueError, match=message):
            make_env("household", fields)
    assert make_env("household", {"alfworld_task_types": [1, 2]}).config.alfworld_task_types == (1, 2)


def test_eval_cli_oracle_scores_one(household_cache, tmp_path, capsys):
    from pettingllms.cli import main

    overrides = [f"env.cache_dir={household_cache}", "eval.seed_start=0", "eval.num_instances=1",
                 f"run.output_dir={tmp_path}", "run.progress=false"]
    assert main(["eval", "household/L1", "--policy", "oracle", *overrides]) == 0
    assert "success 1.000 on 1 held-out instance (seeds 0..0)" in capsys.readouterr().out
    report = json.loads((tmp_path / "eval_results.json").read_text())
    assert report["metrics"]["success_rate"] == 1.0
    assert report["metrics"]["agent/planner/reward_mean"] > 0 and report["metrics"]["agent/actor/parse_error_rate"] == 0


# ---- the alfworld source --------------------------------------------------------------------------------------

HAS_ALFWORLD = importlib.util.find_spec("alfworld") is not None


@pytest.mark.skipif(HAS_ALFWORLD, reason="alfworld is installed: the missing-package error cannot be shown")
def test_alfworld_source_without_alfworld_is_one_line_naming_the_install(tmp_path, capsys):
    env = make_env("household", {"source": "alfworld"})
    with pytest.raises(HouseholdSetupError, match=r"pip install alfworld.*alfworld-download.*ALFWORLD_DATA"):
        env.num_instances()
    from pettingllms.cli import main

    assert main(["eval", "household/L1", "--policy", "oracle", "env.source=alfworld", f"run.output_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install alfworld" in err


def _alfworld_data() -> str | None:
    root = os.environ.get("ALFWORLD_DATA") or os.path.expanduser("~/.cache/alfworld")
    return root if os.path.isdir(os.path.join(root, "json_2.1.1", "valid_seen")) else None


@pytest.mark.skipif(not HAS_ALFWORLD or _alfworld_data() is None,
                    reason="the alfworld source needs `pip install alfworld` (textworld[pddl] builds fast-downward-textworld "
                           "from source) and its games (`alfworld-download`, $ALFWORLD_DATA)")
@pytest.mark.slow
def test_alfworld_oracle_wins_its_games():
    env = make_env("household", {"source": "alfworld", "max_turns": 50})
    agents = make_agents("household", TEAM)
    assert env.num_instances() > 0
    for seed in range(2):
        result = play(env, agents, HouseholdOraclePolicy(), seed)
        assert result.success, env.state.history
        assert env.state.game.objective.startswith("Your task is to:")


class FakeAlfredGame:
    """A stand-in for one ALFWorld game as ALFWorld's wrappers present it (feedback, admissible commands, the win,
    the expert plan), to check the source's plumbing where ALFWorld is not installed."""

    PLAN = ("go to countertop 1", "take apple 1 from countertop 1", "go to fridge 1", "open fridge 1",
            "put apple 1 in/on fridge 1")

    def __init__(self, path):
        self.path, self.done = path, 0

    def _state(self, feedback):
        won = self.done == len(self.PLAN)
        return {"feedback": feedback, "admissible_commands": ["look", "inventory", *self.PLAN[self.done:self.done + 1]],
                "won": won, "extra.expert_plan": list(self.PLAN[self.done:self.done + 1]), "facts": [f"step{self.done}"]}

    def reset(self):
        self.done = 0
        return self._state("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly "
                           "around you, you see a countertop 1, and a fridge 1.\n\nYour task is to: put some apple in fridge.")

    def step(self, command):
        if self.done < len(self.PLAN) and command == self.PLAN[self.done]:
            self.done += 1
        return self._state(f"You did {command}."), 0, self.done == len(self.PLAN)


def test_alfworld_source_plumbing_with_a_stand_in_for_alfworld(tmp_path, monkeypatch):
    import types

    from pettingllms.envs.household import alfworld

    games = [tmp_path / "json_2.1.1" / "valid_seen" / f"pick_and_place_simple-{i}" / "trial" / "game.tw-pddl" for i in (1, 0)]
    for game in games:
        game.parent.mkdir(parents=True)
        game.write_text("{}")
    seen = {}

    class AlfredTWEnv:
        def __init__(self, config, train_eval):
            seen.update(config=config, train_eval=train_eval)
            print("Initializing AlfredTWEnv...")
            self.game_files = [str(g) for g in games]

    fake = types.SimpleNamespace(AlfredTWEnv=AlfredTWEnv)
    monkeypatch.setattr(alfworld, "require_alfworld", lambda: fake)
    monkeypatch.setattr(alfworld, "start_game", lambda path, expert: FakeAlfredGame(path))
    alfworld._game_files.cache_clear()
    env = make_env("household", {"source": "alfworld", "alfworld_data": str(tmp_path), "alfworld_task_types": [1]})
    env.pool = GamePool()
    assert env.num_instances() == 2 and seen["train_eval"] == "eval_in_distribution"
    assert seen["config"]["env"]["task_types"] == [1]
    assert seen["config"]["dataset"]["eval_id_data_path"] == str(tmp_path.resolve() / "json_2.1.1" / "valid_seen")
    assert env.alfworld_games() == tuple(sorted(str(g.resolve()) for g in games))
    agents = make_agents("household", TEAM)
    result = play(env, agents, HouseholdOraclePolicy(), 1)
    state = env.state
    assert result.success and state.game.objective == "Your task is to: put some apple in fridge."
    assert state.game.max_score == 1 and env.task_reward == 1.0 and state.history == list(FakeAlfredGame.PLAN)
    asyncio.run(env.reset(0))
    assert env.state.view.description.startswith("You are in the middle of a room") and env.state.view.feedback == ""
    assert env.instance_id(0) != env.instance_id(1)
    with pytest.raises(ValueError, match="past the 2 ALFWorld games"):
        asyncio.run(env.reset(2))
    alfworld._game_files.cache_clear()
    with pytest.raises(HouseholdSetupError, match="alfworld-download"):
        make_env("household", {"source": "alfworld", "alfworld_data": str(tmp_path / "none")}).num_instances()
    alfworld._game_files.cache_clear()


def test_the_env_module_imports_no_textworld_until_a_game_is_played():
    import subprocess
    import sys

    code = ("import sys; from pettingllms.registry import make_env; "
            "e = make_env('household', {}); e.num_instances(); print('textworld' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr


def test_a_copied_env_shares_the_pool(household_cache):
    env, _ = make(household_cache)
    assert isinstance(env, HouseholdEnv) and env.clone().pool is env.pool
    env.pool = GamePool()
    assert copy.deepcopy(env).pool is env.pool
