"""The search environment and its agents on the generated task: the synthetic worlds (deterministic, multi-hop,
held-out seeds disjoint from training's), scripted episodes with hand-computed rewards, the state after each step,
parse errors, requests, termination, the single agent, prompts, copies, config errors, any text fuzzed through
every agent, and the oracle / wrong / random policies through `pettingllms eval`."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pettingllms.config import ConfigError, load_config, validate_config
from pettingllms.envs.search.answers import answer_in_text, f1_score
from pettingllms.envs.search.scripted import SearchOraclePolicy, WrongSearchPolicy, evidence_complete
from pettingllms.envs.search.synthetic import TEMPLATES, generate
from pettingllms.registry import make_agents, make_env
from pettingllms.scripted import RolePolicy, play_episode

TEAM = ["web_search_agent", "search_reasoning_agent"]


class Fixed:
    """Answers each role with a fixed text, or the next of a list of texts."""

    def __init__(self, **texts):
        self.texts = {role: list(t) if isinstance(t, list) else [t] for role, t in texts.items()}

    def respond(self, agent, env):
        queue = self.texts[agent.role]
        return queue.pop(0) if len(queue) > 1 else queue[0]


def setup(**fields):
    env = make_env("search", fields)
    return env, make_agents("search", env.config.turn_order)


def play(env, agents, policy, seed=0):
    return asyncio.run(play_episode(env, agents, policy, seed=seed))


def seed_of(template, hops=2):
    return next(s for s in range(200) if generate(s, hops).problem.metadata["template"] == template)


# ---- the synthetic task --------------------------------------------------------------------------------------


def test_synthetic_worlds_are_deterministic_and_need_every_hop():
    for hops, templates in TEMPLATES.items():
        seen = set()
        for seed in range(60):
            task = generate(seed, hops)
            assert task == generate(seed, hops) and task.problem.metadata["hops"] == hops
            titles = [p.title for p in task.passages]
            assert len(task.passages) == 19 and len(set(titles)) == 19
            by_title = {p.title: p for p in task.passages}
            support = task.problem.supporting_titles
            assert len(support) == hops and all(t in by_title for t in support)
            # only the last hop's passage states the answer; no passage names the entity of the next hop's
            # passage except the one before it (a person's passage never names the company they founded)
            golden = task.problem.answers
            assert answer_in_text(golden, by_title[support[-1]].text)
            assert not any(answer_in_text(golden, by_title[t].text) for t in support[:-1])
            for before, after in zip(support, support[1:]):
                assert after in by_title[before].text and before not in by_title[after].text
            seen.add(task.problem.metadata["template"])
        assert seen == set(templates)
    assert generate(1, 2).problem.question != generate(2, 2).problem.question
    assert generate(3, 1).passages == generate(3, 3).passages  # the world does not depend on the hop count


def test_three_hop_questions_defeat_the_headquarters_shortcut():
    for seed in range(40):
        problem = generate(seed, 3).problem
        company = problem.supporting_titles[0]
        text = {p.title: p.text for p in generate(seed, 3).passages}
        hq = text[company].split("headquarters are in ")[1].rstrip(".")
        assert not answer_in_text(problem.answers, text[hq])


def test_held_out_seeds_are_disjoint_from_training_seeds_and_share_no_question():
    config = load_config("search/synthetic")
    validate_config(config)  # checks the at_grpo / sft seeds against the eval seeds
    train, held_out = config["at_grpo"]["train_seed_range"], config["eval"]["seed_start"]
    assert train == [0, 100000] and held_out == 10**6 and config["sft"]["seed_start"] + 200 <= train[1]
    with pytest.raises(ConfigError, match="at_grpo.train_seed_range"):
        validate_config(load_config("search/synthetic", ["at_grpo.train_seed_range=[999990, 1000010]"]))
    eval_names = {p.title for s in range(held_out, held_out + 50) for p in generate(s, 2).passages}
    train_questions = {generate(s, 2).problem.question for s in range(0, 100000, 250)}
    eval_questions = {generate(s, 2).problem.question for s in range(held_out, held_out + 50)}
    assert not eval_questions & train_questions
    train_names = {p.title for s in range(0, 100000, 250) for p in generate(s, 2).passages}
    assert len(eval_names & train_names) <= 0.01 * len(eval_names)  # names come from a space of millions


# ---- episodes and rewards ------------------------------------------------------------------------------------


def test_oracle_team_searches_each_hop_then_answers():
    env, agents = setup()
    seed = seed_of("founder_birth_city")
    result = play(env, agents, SearchOraclePolicy(), seed=seed)
    state, problem = env.state, generate(seed, 2).problem
    assert result.success and env.done and state.turn == 2 and state.answer == problem.answers[0]
    assert state.queries == problem.supporting_titles and state.requests == [problem.supporting_titles[1]]
    assert state.exact_match and state.f1 == 1.0 and evidence_complete(state) and state.request is None
    # search 1: the company's passage (new evidence, +0.5); the reasoner asks for the founder (0); search 2: the
    # founder's passage holds the city (+1); the answer: global 1 + F1 1
    assert [(s.role, s.reward) for s in result.steps] == [
        ("web_search_agent", 0.5), ("search_reasoning_agent", 0.0), ("web_search_agent", 1.0),
        ("search_reasoning_agent", 2.0)]
    assert [s.global_reward for s in result.steps] == [0.0, 0.0, 0.0, 1.0]


def test_a_wrong_answer_ends_the_episode_and_partial_answers_score_their_f1():
    env, agents = setup(synthetic_hops=1)
    seed = seed_of("founder", hops=1)
    problem = generate(seed, 1).problem
    company, founder = problem.supporting_titles[0], problem.answers[0]
    surname = founder.split()[1]
    result = play(env, agents, Fixed(web_search_agent=f"<search>{company}</search>",
                                     search_reasoning_agent=f"<answer>{surname}</answer>"), seed=seed)
    assert env.done and not result.success and env.state.turn == 1 and env.state.answer == surname
    assert result.rewards("web_search_agent") == [1.0]  # the company's passage names the founder
    assert result.rewards("search_reasoning_agent") == [pytest.approx(2 / 3)]  # F1 of one name of two
    assert f1_score(surname, problem.answers) == pytest.approx(2 / 3)
    env, agents = setup()
    result = play(env, agents, RolePolicy({"web_search_agent": SearchOraclePolicy(),
                                           "search_reasoning_agent": WrongSearchPolicy()}), seed=seed)
    assert not result.success and env.state.turn == 1 and result.steps[-1].reward == 0.0


def test_parse_errors_and_requests_score_their_local_rewards():
    env, agents = setup(max_turns=2)
    result = play(env, agents, Fixed(web_search_agent="I would look it up.", search_reasoning_agent="No idea."))
    assert env.state.out_of_turns and env.state.retrievals == [] and env.state.answer is None
    assert all(s.local_reward == -1.0 and s.failure == "parse_error" for s in result.steps) and len(result.steps) == 4
    assert "<search>" in result.steps[0].parse_error and "<answer>" in result.steps[1].parse_error
    env, agents = setup(max_turns=2)
    result = play(env, agents, Fixed(web_search_agent="<search>zzzz qqqq</search>",
                                     search_reasoning_agent="<search>who else</search>"))
    assert [s.local_reward for s in result.steps] == [0.0, 0.0, 0.0, -0.5]  # nothing found; the last request -0.5
    assert env.state.retrievals[0].passages == [] and env.state.retrievals[0].outcome == "nothing_new"
    assert env.state.requests == ["who else", "who else"] and not result.success


def test_the_single_agent_searches_then_answers():
    env, agents = setup(turn_order=["single"])
    seed = seed_of("founder_birth_year")
    result = play(env, agents, SearchOraclePolicy(), seed=seed)
    assert result.success and env.state.turn == 3 and result.rewards("single") == [0.5, 1.0, 2.0]
    env, agents = setup(turn_order=["single"], max_turns=1)
    problem = generate(seed, 2).problem
    both = f"<search>{problem.supporting_titles[0]}</search> <answer>{problem.answers[0]}</answer>"
    result = play(env, agents, Fixed(single=both), seed=seed)
    assert result.success and len(env.state.retrievals) == 1 and result.rewards("single") == [2.0]
    assert "<search>query</search>" in agents[0].prompt[0]["content"]


def test_prompts_show_the_request_the_queries_and_the_passages_never_the_answer():
    env, (searcher, reasoner) = setup(max_passage_chars=40, max_passages_shown=1)
    seed = seed_of("founder_birth_city")
    asyncio.run(env.reset(seed))
    problem = env.state.problem
    first = searcher.update_from_env(0, env)[-1]["content"]
    assert problem.question in first and "Passages: none yet." in first and problem.answers[0] not in first
    searcher.update_from_model(f"<search>{problem.supporting_titles[0]}</search>")
    asyncio.run(env.step_agent(searcher))
    text = reasoner.update_from_env(0, env)[-1]["content"]
    assert f'The search agent\'s searches: "{problem.supporting_titles[0]}"' in text
    assert "[1] " + problem.supporting_titles[0] in text and "..." in text  # clipped to 40 characters
    reasoner.update_from_model(f"<search>{problem.supporting_titles[1]}</search>")
    asyncio.run(env.step_agent(reasoner))
    assert f"look up: {problem.supporting_titles[1]}" in searcher.update_from_env(1, env)[-1]["content"]


def test_copies_are_independent_and_build_the_same_prompts():
    env, agents = setup()
    play(env, agents, Fixed(web_search_agent="<search>city</search>", search_reasoning_agent="<search>x</search>"))
    copy = env.clone()
    copy.state.retrievals[0].passages.clear()
    copy.state.requests.append("y")
    assert env.state.retrievals[0].passages and env.state.requests == ["x", "x", "x"]
    assert agents[0].update_from_env(0, env) == agents[0].update_from_env(0, env.clone())


def test_config_errors_name_the_field():
    for fields, name in (({"dataset": "triviaqa"}, "`dataset`"), ({"synthetic_hops": 4}, "`synthetic_hops`"),
                         ({"topk": 0}, "`topk`"), ({"retriever": "google"}, "`retriever`"),
                         ({"retriever_url": "ftp://x"}, "`retriever_url`"), ({"retriever": "http"}, "`retriever: http`"),
                         ({"retriever_timeout_s": 0}, "`retriever_timeout_s`"),
                         ({"dataset": "bamboogle", "train_split": None, "purpose": "train"}, "`train_split`")):
        with pytest.raises(ValueError, match=name):
            make_env("search", fields)
    with pytest.raises(ValueError, match="needs a server"):
        make_env("search", {"dataset": "nq", "retriever": "http"}).retriever()


# ---- any text --------------------------------------------------------------------------------------------------

PIECES = ["<search>", "</search>", "<answer>", "</answer>", " ", "\n", "Systems", "born", "the", "1950", "<", "/"]
TEXT = st.one_of(st.text(max_size=120), st.lists(st.sampled_from(PIECES), max_size=30).map("".join))
_BASE = {}


def _base(order):
    if order not in _BASE:
        env = make_env("search", {"turn_order": list(order), "synthetic_hops": 2})
        asyncio.run(env.reset(11))
        _BASE[order] = env
    return _BASE[order]


@settings(max_examples=150)
@given(TEXT, st.sampled_from([("web_search_agent",), ("search_reasoning_agent",), ("single",)]))
def test_any_text_is_rewarded_never_raised(text, role):
    order = tuple(TEAM) if role[0] != "single" else role
    env = _base(order).clone()
    env.state.position = order.index(role[0])
    agent = make_agents("search", list(order))[env.state.position]
    agent.update_from_env(0, env)
    agent.update_from_model(text)
    assert (agent.action is None) == (agent.parse_error is not None)
    result = asyncio.run(env.step_agent(agent))
    assert math.isfinite(result.reward) and -1.0 <= result.local_reward <= 1.0 and result.global_reward in (0.0, 1.0)
    if agent.parse_error is not None:
        assert result.local_reward == -1.0 and result.failure == "parse_error"


@pytest.mark.parametrize("order", [TEAM, ["single"]])
def test_the_generic_random_policy_plays_every_role(order):
    from pettingllms.scripted import RandomPolicy

    env, agents = setup(turn_order=order)
    for seed in range(5):
        result = play(env, agents, RandomPolicy(seed=seed, malformed_prob=0.3), seed=seed)
        assert env.done and all(math.isfinite(s.reward) for s in result.steps)


# ---- through the CLI -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("config", "policy", "success"), [
    ("search/L1", "oracle", 1.0), ("search/L1", "scripted:wrong", 0.0), ("search/L0", "oracle", 1.0)])
def test_eval_cli_on_the_synthetic_task(config, policy, success, tmp_path, capsys):
    from pettingllms.cli import main

    overrides = ["eval.num_instances=20", f"run.output_dir={tmp_path}", "run.progress=false"]
    assert main(["eval", config, "--policy", policy, *overrides]) == 0
    assert f"success {success:.3f} on 20 held-out instances (seeds 1000000..1000019)" in capsys.readouterr().out
    report = json.loads((tmp_path / "eval_results.json").read_text())
    assert report["metrics"]["success_rate"] == success


def test_the_random_policy_mixes_the_two(tmp_path, capsys):
    from pettingllms.cli import main

    assert main(["eval", "search/L1", "--policy", "random", "eval.num_instances=30", f"run.output_dir={tmp_path}",
                 "run.progress=false"]) == 0
    rate = json.loads((tmp_path / "eval_results.json").read_text())["metrics"]["success_rate"]
    assert 0.0 < rate < 1.0
