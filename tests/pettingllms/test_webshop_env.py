"""The webshop environment: the reward formula by hand, the roles' local rewards, scripted policies, copies for
tree sampling, the server's lifetime under the environment, the eval command line and the shipped configs."""

from __future__ import annotations

import asyncio
import copy
import json
import pickle
import threading

import pytest
import yaml

from pettingllms.agents import InfrastructureError
from pettingllms.envs.webshop import WebShopEnv, server
from pettingllms.envs.webshop.catalogue import RESULTS_PER_PAGE
from pettingllms.envs.webshop.generator import HELD_OUT_SEED_START
from pettingllms.envs.webshop.rewards import (
    RewardParts,
    best_item_reward,
    buyer_local_reward,
    purchase_for,
    purchase_reward,
    searcher_local_reward,
    single_local_reward,
    type_reward,
)
from pettingllms.envs.webshop.scripted import oracle_query
from pettingllms.registry import list_agents, make_agents, make_env
from pettingllms.scripted import make_scripted_policy, play_episode

GOAL = dict(goal_attributes=["cotton", "long sleeve"], goal_options={"size": "m", "color": "red"}, price_bound=30.0,
            goal_ptype="shirt", goal_category="clothing")


def run(coro):
    return asyncio.run(coro)


def setup(order=("searcher", "buyer"), **config):
    env = make_env("webshop", {"turn_order": list(order), **config})
    return env, make_agents("webshop", list(order))


def act(env, agent, text):
    agent.update_from_env(env.state.turn, env)
    agent.update_from_model(text)
    return run(env.step_agent(agent))


def server_threads():
    return [t for t in threading.enumerate() if t.name.startswith("webshop-server-")]


@pytest.fixture(autouse=True)
def fresh_server():
    server.shutdown()
    yield
    server.shutdown()


# ---- the reward formula ------------------------------------------------------------------------------

def reward(**bought):
    return purchase_reward(**{**dict(attributes=["cotton", "long sleeve"], options={"size": "m", "color": "red"},
                                     price=25.0, ptype="shirt", category="clothing"), **bought}, **GOAL)


def test_purchase_reward_by_hand():
    assert reward().reward == 1.0 and reward().success  # (2 + 2 + 1) / 5
    # 1 of 2 attributes, 1 of 2 options, price ok: (1 + 1 + 1) / 5
    assert reward(attributes=["cotton", "short sleeve"], options={"size": "m", "color": "blue"}).reward == pytest.approx(0.6)
    # the same purchase of a t-shirt (same category, another type): 0.5 * 0.6
    half = reward(attributes=["cotton", "short sleeve"], options={"size": "m", "color": "blue"}, ptype="t-shirt")
    assert half.reward == pytest.approx(0.3) and not half.success
    # everything matched but the price: 4 / 5; no option chosen: 3 / 5; another category: 0
    assert reward(price=30.01).reward == pytest.approx(0.8)
    assert reward(price=30.0).reward == 1.0  # the bound itself is within it
    assert reward(options={}).reward == pytest.approx(0.6)
    assert reward(ptype="mug", category="home").reward == 0.0
    parts = reward(attributes=["linen"], options={"size": "s"}, price=31.0)
    assert parts == RewardParts(0, 2, 0, 2, False, 1.0) and parts.reward == 0.0
    assert type_reward("shirt", "clothing", "shirt", "clothing") == 1.0
    assert type_reward("jacket", "clothing", "shirt", "clothing") == 0.5
    assert type_reward("boots", "shoes", "shirt", "clothing") == 0.0
    with pytest.raises(ValueError, match="prices must be finite"):
        reward(price=float("nan"))


def test_local_rewards_by_hand():
    assert searcher_local_reward(0.6) == 0.6 and searcher_local_reward(None) == 0.0
    assert searcher_local_reward(0.6, invalid=True, penalty=0.1) == pytest.approx(0.5)
    assert buyer_local_reward(0.8, False, 0.1) == 0.8 and buyer_local_reward(None, True, 0.1) == -0.1
    assert single_local_reward(1.0, 0.4, False, 0.1) == 1.0  # bought: the purchase reward
    assert single_local_reward(None, 0.4, False, 0.1) == pytest.approx(0.2)  # half its results score
    assert single_local_reward(None, None, True, 0.1) == -0.1
    with pytest.raises(ValueError, match="must be in"):
        buyer_local_reward(1.5, False, 0.1)


def test_best_item_reward_chooses_the_goals_options_where_offered():
    env, _ = setup()
    goal = env.goal(3)
    target = env.product(goal.target)
    assert best_item_reward(target, goal) == 1.0
    assert purchase_for(target, {}, goal).reward == pytest.approx(
        (len(goal.attributes) + 1) / (len(goal.attributes) + len(goal.options) + 1))


# ---- episodes --------------------------------------------------------------------------------------------

# (Measured once on 1,000 training and 300 held-out seeds: the oracle succeeds on all of them, in both workflows.)
SEEDS = [*range(0, 12), *range(HELD_OUT_SEED_START, HELD_OUT_SEED_START + 12)]


@pytest.mark.parametrize(("order", "turns"), [(("searcher", "buyer"), 3), (("single",), 5)])
def test_oracle_buys_a_matching_item_on_every_instance_and_wrong_never_does(order, turns):
    env, agents = setup(order, max_turns=turns)

    async def play(name, seeds=SEEDS):
        policy = make_scripted_policy(env, name)
        return [await play_episode(env, agents, policy, seed) for seed in seeds]

    oracle = run(play("oracle"))
    assert all(r.success and r.turns == 1 for r in oracle)  # one turn: search, item, options, buy
    assert all(r.steps[-1].global_reward == 1.0 for r in oracle)
    wrong = run(play("wrong"))
    assert not any(r.success for r in wrong) and all(r.done for r in wrong)
    rand = run(play("random", SEEDS[::4]))
    assert all(r.done and all(-1.0 <= s.local_reward <= 1.0 for s in r.steps) for r in rand)
    run(env.close())


def test_team_episode_state_rewards_and_prompts():
    env, (searcher, buyer) = setup()
    run(env.reset(5))
    goal = env.state.goal
    prompt = searcher.update_from_env(0, env)
    assert "search[your query]" in prompt[0]["content"]
    assert f"Instruction: {goal.text}" in prompt[1]["content"] and "[search box]" in prompt[1]["content"]
    query = oracle_query(env)
    result = act(env, searcher, f"search[{query}]")
    state = env.state
    assert state.page.kind == "results" and state.last_query == query and state.actions == [f"search[{query}]"]
    expected = max(best_item_reward(env.product(pid), goal) for pid in env.search_results(query)[:RESULTS_PER_PAGE])
    assert result.local_reward == expected == state.results_score == 1.0
    assert result.global_reward == 0.0 and result.reward == 1.0 and not result.done  # alpha 1: 1 * 0 + 1

    prompt = buyer.update_from_env(0, env)
    assert "click[buy now] buys" in prompt[0]["content"] and "Clickable: [back to search]" in prompt[1]["content"]
    pid = next(pid for pid in env.search_results(query) if best_item_reward(env.product(pid), goal) == 1.0)
    clicks = [f"click[{pid.lower()}]", *(f"click[{value}]" for _, value in goal.options), "click[buy now]"]
    result = act(env, buyer, "\n".join(clicks))
    assert env.state.purchase.pid == pid and dict(env.state.purchase.options) == dict(goal.options)
    assert result.local_reward == 1.0 and result.global_reward == 1.0 and result.reward == 2.0
    assert result.done and result.success and env.state.page.kind == "done"
    assert env.state.last_report.endswith(f"-> bought {pid.lower()} (reward 1.00)")
    run(env.close())


def test_invalid_clicks_and_parse_errors_score_their_rewards():
    env, (searcher, buyer) = setup()
    run(env.reset(2))
    before = copy.deepcopy(env.state)
    result = act(env, searcher, "I would search for shirts")
    assert result.parse_error and result.failure == "parse_error" and result.local_reward == -1.0
    assert env.state.page == before.page and env.state.actions == []
    result = act(env, buyer, "click[next >]")  # nothing to click on the search page
    assert result.local_reward == pytest.approx(-0.1) and result.failure is None and env.state.invalid_actions == 1
    assert "not possible on the search page" in env.state.last_report
    act(env, searcher, "search[cotton]")
    result = act(env, buyer, "click[next >]\nclick[no such thing]\nclick[next >]")
    assert env.state.actions == ["search[cotton]", "click[next >]"]  # played up to the invalid click
    assert result.local_reward == pytest.approx(-0.1)
    assert "page=2" in env.state.page.url
    result = act(env, searcher, "click[next >]")  # a searcher only searches
    assert result.parse_error and "not an action of this role" in result.parse_error
    run(env.close())


def test_the_single_agent_searches_and_clicks_in_one_response():
    env, (single,) = setup(("single",), max_turns=5)
    run(env.reset(9))
    query = oracle_query(env)
    result = act(env, single, f"search[{query}]")
    assert result.local_reward == pytest.approx(0.5 * env.state.results_score)
    first = env.state.page.items[0]
    result = act(env, single, f"click[{first}]\nclick[buy now]\nclick[< prev]")
    assert env.state.purchase is not None and result.done  # the line after the purchase is not played
    assert result.local_reward == env.state.reward.reward == result.global_reward
    run(env.close())


# ---- copies, the server, failures -------------------------------------------------------------------------

def test_clones_diverge_independently_and_snapshots_restore():
    env, (searcher, buyer) = setup()
    run(env.reset(1))
    act(env, searcher, "search[cotton]")
    snapshot = env.snapshot()
    a, b = env.clone(), env.clone()
    assert a.server_port is None and b.server_port is None  # copies hold no lease of their own yet
    items = env.state.page.items
    act(a, copy.deepcopy(buyer), f"click[{items[0]}]")
    act(b, copy.deepcopy(buyer), f"click[{items[1]}]\nclick[buy now]")
    assert a.state.page.meta_value("webshop-pid").lower() == items[0] and a.state.purchase is None
    assert b.state.purchase.pid.lower() == items[1] and b.done and not a.done
    assert env.state.page.kind == "results" and env.state.actions == ["search[cotton]"]  # the original is untouched
    assert a.server_port == b.server_port == env.server_port  # one server per process
    act(a, copy.deepcopy(searcher), "search[lamp]")  # a goes on after b finished
    assert a.state.last_query == "lamp" and a.state.page.kind == "results" and b.state.page.kind == "done"
    env.restore(snapshot)
    assert env.state == snapshot and env.state is not snapshot
    c = pickle.loads(pickle.dumps(a))  # a pickled copy carries no lease either and fetches anew
    assert c.server_port is None and c.state == a.state
    act(c, copy.deepcopy(buyer), "click[back to search]")
    assert c.state.page.kind == "search" and a.state.page.kind == "results"
    for copy_env in (a, b, c):
        run(copy_env.close())
    port = env.server_port
    run(env.close())
    assert server.current_server() is None and not server_threads() and port is not None


def test_dropped_clones_release_the_server():
    env, (searcher, _) = setup()
    run(env.reset(1))
    clones = [env.clone() for _ in range(3)]
    for clone in clones:
        act(clone, copy.deepcopy(searcher), "search[mug]")
    del clone
    run(env.close())
    assert server.current_server() is not None  # the clones still hold it
    clones.clear()  # tree sampling drops its copies; the last one stops the server
    assert server.current_server() is None and not server_threads()


def test_a_stopped_server_is_replaced_and_a_failed_request_rolls_back(monkeypatch):
    env, (searcher, buyer) = setup()
    run(env.reset(4))
    first = env.server_port
    server.shutdown()  # the site is stateless: the next fetch starts a server on another port
    act(env, searcher, "search[tea]")
    assert env.state.page.kind == "results" and env.server_port not in (None, first)
    before = env.snapshot()

    def broken(*args, **kwargs):
        raise ConnectionRefusedError("down")

    monkeypatch.setattr(server, "fetch", broken)
    buyer.update_from_env(0, env)
    buyer.update_from_model("click[next >]")
    with pytest.raises(InfrastructureError, match="failed"):
        run(env.step_agent(buyer))
    assert env.state == before  # rolled back
    run(env.close())


def test_config_errors_name_the_field():
    for key, value, pattern in (("num_products", 5, "num_products"), ("max_actions", 0, "max_actions"),
                                ("fetch_timeout_s", 0, "fetch_timeout_s"), ("invalid_action_penalty", -1, "penalty"),
                                ("catalogue_seed", True, "catalogue_seed")):
        with pytest.raises(ValueError, match=pattern):
            make_env("webshop", {key: value})
    assert isinstance(make_env("webshop"), WebShopEnv) and server.current_server() is None  # built lazily


# ---- registry, command line, configs -----------------------------------------------------------------

def test_registered_with_its_roles():
    assert list_agents("webshop") == ["webshop.buyer", "webshop.searcher", "webshop.single"]
    assert sorted(WebShopEnv.scripted_policies) == ["oracle", "random", "wrong"]


@pytest.mark.parametrize(("policy", "success"), [("oracle", 1.0), ("scripted:wrong", 0.0)])
def test_eval_cli(policy, success, tmp_path, capsys):
    from pettingllms.cli import main

    overrides = ["eval.num_instances=10", f"run.output_dir={tmp_path}", "run.progress=false"]
    assert main(["eval", "webshop/L1", "--policy", policy, *overrides]) == 0
    assert f"success {success:.3f} on 10 held-out instances (seeds 1000000..1000009)" in capsys.readouterr().out
    report = json.loads((tmp_path / "eval_results.json").read_text())
    assert report["metrics"]["success_rate"] == success
    assert server.current_server() is None  # every environment of the evaluation was closed


@pytest.mark.parametrize("level", ["L0", "L1", "L2", "L3"])
def test_shipped_configs_load_validate_and_build(level, tmp_path):
    from pettingllms.config import env_arguments, load_config, save_resolved_config, validate_config
    from pettingllms.registry import get_env_class

    config = load_config(f"webshop/{level}")
    validate_config(config)
    assert config["env"]["name"] == "webshop" and config["policy"]["level"] == level
    roles = ["single"] if level == "L0" else ["searcher", "buyer"]
    assert config["env"]["turn_order"] == roles and sorted(config["policy"]["agents"]) == sorted(roles)
    name, fields, _ = env_arguments(config)
    assert get_env_class(name).config_class.from_dict(fields).turn_order == tuple(roles)
    saved = save_resolved_config(config, tmp_path / "run")
    assert yaml.safe_load(saved.read_text()) == config
