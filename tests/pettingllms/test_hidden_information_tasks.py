"""Search, web shop and household: no hidden gold reaches an agent, in a prompt or through when the episode
ends (ARCHITECTURE.md principle 10), checked on twins (:func:`~tests.helpers.hidden_information.play_twins`):
the same observations with another golden answer (search), another goal behind the same instruction text
(web shop), another winning policy (household).
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from pettingllms.envs.household import HouseholdEnv, HouseholdOraclePolicy, HouseholdSettings, compiled_game
from pettingllms.envs.search import SearchEnv, SearchOraclePolicy, WrongSearchPolicy
from pettingllms.envs.search.synthetic import generate
from pettingllms.envs.webshop import WebShopEnv, WebShopOraclePolicy, server
from tests.helpers.hidden_information import play_twins

# ---- search: the golden answers and supporting titles are hidden gold --------------------------------------

class OtherGoldSearch(SearchEnv):
    """The same questions and corpus, with another golden answer and other supporting titles: titles of the
    seed's corpus that support nothing."""

    def problem(self, seed: int):
        real = super().problem(seed)
        decoys = [p.title for p in generate(seed, 1).passages if p.title not in real.supporting_titles]
        metadata = {**real.metadata, "supporting_titles": decoys[:2]}
        return dataclasses.replace(real, answers=[decoys[-1]], metadata=metadata)


@pytest.mark.parametrize("order", [("web_search_agent", "search_reasoning_agent"), ("single",)],
                         ids=["team", "single"])
@pytest.mark.parametrize("policy", [SearchOraclePolicy(), WrongSearchPolicy()], ids=["oracle", "wrong"])
def test_search_prompts_and_done_do_not_depend_on_the_golden_answers(order, policy):
    outcomes = []
    for seed in range(4):
        config = {"turn_order": list(order), "max_turns": 3}
        first, second = SearchEnv(config), OtherGoldSearch(config)
        results = play_twins(first, second, "search", order, policy.respond, seed)
        assert first.state.answer == second.state.answer  # the same answer ends both episodes
        outcomes.append((first.success, second.success, [s.local_reward for s in results[0]] ==
                         [s.local_reward for s in results[1]]))
    if isinstance(policy, SearchOraclePolicy):  # the gold mattered: the first's answer is right, the second's not
        assert all(one and not two and not same for one, two, same in outcomes), outcomes
    else:
        assert not any(one or two for one, two, _ in outcomes)


# ---- webshop: the goal the purchase is scored against is hidden gold (but for its text) --------------------

class OtherGoalShop(WebShopEnv):
    """The same instruction text (the site renders it from the instruction id), scored against the goal of
    another instruction: its type, attributes, options, price bound and target product."""

    def goal(self, seed: int):
        real, other = super().goal(seed), super().goal(seed + 1)
        return dataclasses.replace(other, seed=seed, text=real.text)


@pytest.fixture
def fresh_server():
    server.shutdown()
    yield
    server.shutdown()


@pytest.mark.parametrize("order", [("searcher", "buyer"), ("single",)], ids=["team", "single"])
def test_webshop_prompts_and_done_do_not_depend_on_the_scored_goal(order, fresh_server):
    policy = WebShopOraclePolicy()
    for seed in range(3):
        config = {"turn_order": list(order)}
        first, second = WebShopEnv(config), OtherGoalShop(config)
        try:
            play_twins(first, second, "webshop", order, policy.respond, seed)
            # both bought the same product, which ended both episodes; only the first goal scores it 1.0
            assert first.state.purchase == second.state.purchase is not None
            assert first.success and not second.success
            assert first.task_reward == 1.0 > second.task_reward
        finally:
            asyncio.run(first.close())
            asyncio.run(second.close())


# ---- household: the game's winning policy and walkthrough are hidden gold ----------------------------------

@pytest.fixture(scope="module")
def household_cache(tmp_path_factory) -> str:
    folder = tmp_path_factory.getbasetemp() / "household-games"  # the folder test_household_env fills
    compiled_game(0, HouseholdSettings(), folder)
    return str(folder)


class OtherPolicyHousehold(HouseholdEnv):
    """The same game, with another winning policy in every view (a command the game has not) and no walkthrough."""

    def view_of(self, game, history):
        return dataclasses.replace(super().view_of(game, history), policy=("examine nothing",))

    def game_info(self, seed: int):
        return dataclasses.replace(super().game_info(seed), walkthrough=())


@pytest.mark.parametrize("order", [("planner", "actor"), ("single",)], ids=["team", "single"])
def test_household_prompts_and_done_do_not_depend_on_the_winning_policy(order, household_cache):
    config = {"cache_dir": household_cache, "turn_order": list(order)}
    first, second = HouseholdEnv(config), OtherPolicyHousehold(config)
    results = play_twins(first, second, "household", order, HouseholdOraclePolicy().respond, seed=0)
    assert first.success and second.success  # the game's own win, which the game shows
    if order == ("planner", "actor"):  # the gold mattered: only the first planner is on its policy's path
        planner = [[s.local_reward for s in steps if s.role == "planner"] for steps in results]
        assert all(r == 1.0 for r in planner[0]) and all(r == 0.0 for r in planner[1]), planner
