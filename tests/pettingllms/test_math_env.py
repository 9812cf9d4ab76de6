"""The math environment and its agents: scripted episodes with hand-computed rewards, the state after each
step, parse errors, tool failures (calculator and sandboxed Python), termination, and the oracle eval through
the CLI on math/arith and every dataset fixture."""

from __future__ import annotations

import asyncio
import json
import sys
from fractions import Fraction

import pytest

from pettingllms.agents.failures import ToolConfigurationError
from pettingllms.config import load_config
from pettingllms.envs.math.arith import generate
from pettingllms.envs.math.calculator import evaluate, format_number
from pettingllms.envs.math.data import MathDataError, MathProblem, write_jsonl
from pettingllms.envs.math.scripted import MathOraclePolicy, WrongMathPolicy, wrong_answer
from pettingllms.registry import make_agents, make_env
from pettingllms.scripted import RolePolicy, play_episode

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

HALF = MathProblem(problem_id="fixture/half", dataset="gsm8k", split="test", question="What is 1 divided by 2?",
                   answer="\\frac{1}{2}")
SEVEN = MathProblem(problem_id="fixture/seven", dataset="gsm8k", split="test", question="What is 3 + 4?", answer="7")


class Fixed:
    """Answers each role with a fixed text, or the next of a list of texts."""

    def __init__(self, **texts):
        self.texts = {role: list(t) if isinstance(t, list) else [t] for role, t in texts.items()}

    def respond(self, agent, env):
        queue = self.texts[agent.role]
        return queue.pop(0) if len(queue) > 1 else queue[0]


def setup(**fields):
    env = make_env("math", {"tool": "calculator", "max_turns": 2, **fields})
    return env, make_agents("math", env.config.turn_order)


def play(env, agents, policy, seed=0, worker=None):
    return asyncio.run(play_episode(env, agents, policy, seed=seed, env_worker=worker))


@pytest.fixture(scope="module")
def pool():
    from pettingllms.sandbox import SandboxConfig, SandboxPool

    config = SandboxConfig(cpu_time_s=2, wall_time_s=10, memory_mb=256, file_size_mb=1, scratch_mb=8,
                           max_processes=16, max_open_files=32, max_output_bytes=1 << 18)
    with SandboxPool(config, max_workers=2) as p:
        yield p


def test_oracle_team_solves_an_arith_problem_in_one_turn():
    env, agents = setup()
    result = play(env, agents, MathOraclePolicy(), seed=5)
    problem = generate(5, 2)
    state = env.state
    assert result.success and env.done and state.agreed and state.turn == 1
    assert state.tool_run.source == problem.metadata["expression"]
    assert state.tool_run.answer == format_number(evaluate(problem.metadata["expression"])) == problem.answer
    assert state.answers == [problem.answer] and state.answers_verified == [True]
    # the tool agent acts before any answer exists: global 0, local +1
    assert result.rewards("tool_generator") == [1.0] and result.rewards("reasoning_generator") == [2.0]


def test_wrong_team_agrees_on_a_wrong_answer_and_the_episode_ends_in_failure():
    env, agents = setup()
    result = play(env, agents, WrongMathPolicy(), seed=3)
    expected = format_number(Fraction(generate(3, 2).answer) + 1)
    assert wrong_answer(generate(3, 2)) == expected
    assert env.done and env.state.agreed and not result.success and env.state.turn == 1
    assert env.state.tool_run.answer == expected and env.state.tool_run.outcome == "wrong"
    # alpha 1: global 0, tool local 0 (ran, wrong), reasoner local 0 (wrong)
    assert result.rewards("tool_generator") == [0.0] and result.rewards("reasoning_generator") == [0.0]


def test_reasoner_overriding_a_wrong_tool_answer_succeeds_but_the_episode_goes_on_until_they_agree():
    env, agents = setup()
    answer = generate(0, 2).answer
    policy = RolePolicy({"tool_generator": WrongMathPolicy(), "reasoning_generator": MathOraclePolicy()})
    result = play(env, agents, policy)
    assert not env.state.agreed and env.state.out_of_turns and env.state.turn == 2
    assert result.success and env.state.answers == [answer, answer]
    # tool: global 0 before any answer then 1 in turn 2 (the reasoner's turn-1 answer verifies), local 0 each turn
    assert result.rewards("tool_generator") == [0.0, 1.0]
    assert result.rewards("reasoning_generator") == [2.0, 2.0]


def test_parse_errors_and_a_calculator_error_score_their_local_rewards():
    env, agents = setup(max_turns=1)
    result = play(env, agents, Fixed(tool_generator="I think it is big.", reasoning_generator="No idea."))
    steps = {s.role: s for s in result.steps}
    assert steps["tool_generator"].local_reward == -1.0 and steps["tool_generator"].failure == "parse_error"
    assert steps["reasoning_generator"].local_reward == -1.0 and "boxed" in steps["reasoning_generator"].parse_error
    assert env.state.tool_runs == [] and env.state.answers == []

    env, agents = setup(max_turns=1)
    result = play(env, agents, Fixed(tool_generator="```calc\n1/0\n```", reasoning_generator="\\boxed{1}"))
    tool = result.steps[0]
    assert tool.local_reward == -0.5 and tool.failure == "tool_error"
    run = env.state.tool_run
    assert run.outcome == "failed" and run.answer is None and "zero" in run.error.lower()


def test_the_reasoner_sees_the_tool_result_but_not_its_check_in_its_prompt():
    env, agents = setup()
    asyncio.run(env.reset(1))
    tool, reasoner = agents
    tool.update_from_env(0, env)
    tool.update_from_model("```calc\n2 + 2\n```")
    asyncio.run(env.step_agent(tool))
    assert env.state.tool_run.verified is False  # the environment knows it is wrong ...
    prompt = reasoner.update_from_env(0, env)
    text = prompt[-1]["content"]
    assert generate(1, 2).question.strip() in text
    assert "```calc\n2 + 2\n```" in text and "Result: 4\n" in text
    assert "check" not in text and "wrong" not in text  # ... the reasoner does not
    assert "\\boxed" in prompt[0]["content"]


@pytest.mark.parametrize("single_tool, turns, calls", [("none", 1, 0), ("calculator", 2, 1)])
def test_single_agent_with_and_without_its_tool(single_tool, turns, calls):
    env, agents = setup(turn_order=["single"], single_tool=single_tool)
    result = play(env, agents, MathOraclePolicy(), seed=2)
    assert result.success and env.state.turn == turns and len(env.state.tool_runs) == calls
    rewards = result.rewards("single")
    # with the calculator: turn 1 only calls the tool (tool local +1, global 0), turn 2 answers (1 + 1)
    assert rewards == ([2.0] if single_tool == "none" else [1.0, 2.0])
    assert ("```calc" in agents[0].prompt[0]["content"]) == (single_tool != "none")


def test_single_agent_without_a_tool_ignores_tool_blocks():
    env, agents = setup(turn_order=["single"], single_tool="none")
    agent = agents[0]
    asyncio.run(env.reset(0))
    agent.update_from_env(0, env)
    assert agent.update_from_model("```calc\n1+1\n```") is None and "boxed" in agent.parse_error


def test_config_errors_name_the_field():
    for fields, field in (({"tool": "abacus"}, "`tool`"), ({"single_tool": "python3"}, "`single_tool`"),
                          ({"dataset": "gsm9k"}, "`dataset`"), ({"arith_level": 4}, "`arith_level`"),
                          ({"verify_timeout_s": 0}, "`verify_timeout_s`"),
                          ({"dataset": "aime24", "train_split": None, "purpose": "train"}, "`train_split`")):
        with pytest.raises(ValueError, match=field):
            make_env("math", fields)


def test_sandbox_only_where_a_role_runs_python():
    from pettingllms.stages.context import make_env_worker

    assert make_env_worker(load_config("math/arith")) is None
    env_class = type(make_env("math"))
    assert env_class.sandbox_needed(env_class.config_class(tool="python"))
    assert not env_class.sandbox_needed(env_class.config_class(tool="python", turn_order=("single",)))
    assert env_class.sandbox_needed(env_class.config_class(single_tool="python", turn_order=("single",)))


def test_python_tool_without_a_worker_is_a_configuration_error():
    env, agents = setup(tool="python")
    with pytest.raises(ToolConfigurationError, match="run_tests"):
        play(env, agents, MathOraclePolicy())


@linux_only
@pytest.mark.parametrize("program, outcome, reward, failure", [
    ("print(1)\nprint(7)", "verified", 1.0, None),  # the last line printed is the answer
    ("print(8)", "wrong", 0.0, None),
    ("raise ValueError('no')", "failed", -0.5, "tool_error"),
    ("x = 7", "failed", -0.5, "tool_error"),  # printed nothing
    ("while True:\n    pass", "failed", -0.5, "tool_timeout"),
])
def test_python_tool_runs_in_the_sandbox(pool, tmp_path, program, outcome, reward, failure):
    write_jsonl(tmp_path / "test.jsonl", [SEVEN, HALF])
    env, agents = setup(dataset="gsm8k", data_dir=str(tmp_path), tool="python", max_turns=1, time_limit_s=1.0)
    result = play(env, agents, Fixed(tool_generator=f"```python\n{program}\n```", reasoning_generator="\\boxed{7}"),
                  worker=pool)
    tool = result.steps[0]
    assert env.state.tool_run.outcome == outcome and tool.local_reward == reward
    assert tool.failure == failure
    assert result.success  # the reasoner's 7 verifies whatever the tool did


@linux_only
def test_python_oracle_verifies_latex_and_fraction_answers(pool, tmp_path):
    write_jsonl(tmp_path / "test.jsonl", [SEVEN, HALF])
    env, agents = setup(dataset="gsm8k", data_dir=str(tmp_path), tool="python")
    result = play(env, agents, MathOraclePolicy(), seed=1, worker=pool)
    assert result.success and env.state.agreed and env.state.tool_run.verified
    assert env.num_instances() == 2 and env.instance_id(1) == "fixture/half"
    # arith with the Python tool: the oracle program prints the exact value
    env, agents = setup(tool="python")
    assert play(env, agents, MathOraclePolicy(), seed=9, worker=pool).success


def test_dataset_seeds_index_the_split_and_a_missing_file_names_the_command(tmp_path):
    write_jsonl(tmp_path / "test.jsonl", [SEVEN, HALF])
    env = make_env("math", {"dataset": "gsm8k", "data_dir": str(tmp_path)})
    with pytest.raises(ValueError, match="past the 2 problems"):
        asyncio.run(env.reset(2))
    env = make_env("math", {"dataset": "gsm8k", "data_dir": str(tmp_path / "none")})
    with pytest.raises(MathDataError, match="pettingllms dataprocess math"):
        env.num_instances()


def test_states_copy_for_tree_sampling():
    env, agents = setup()
    play(env, agents, RolePolicy({"tool_generator": WrongMathPolicy(), "reasoning_generator": MathOraclePolicy()}))
    copy = env.clone()
    copy.state.answers.append("1")
    copy.state.tool_runs[0].answer = "2"
    assert env.state.answers != copy.state.answers and env.state.tool_runs[0].answer != "2"


@pytest.mark.parametrize(("policy", "success"), [("oracle", 1.0), ("scripted:wrong", 0.0)])
def test_eval_cli_on_arith(policy, success, tmp_path, capsys):
    from pettingllms.cli import main

    overrides = ["eval.num_instances=20", f"run.output_dir={tmp_path}", "run.progress=false"]
    assert main(["eval", "math/arith", "--policy", policy, *overrides]) == 0
    assert f"success {success:.3f} on 20 held-out instances (seeds 1000000..1000019)" in capsys.readouterr().out
    report = json.loads((tmp_path / "eval_results.json").read_text())
    assert report["metrics"]["success_rate"] == success


@linux_only
@pytest.mark.parametrize("dataset", ["gsm8k", "math", "math500", "aime24", "aime25", "aime_past", "olympiadbench",
                                     "polaris", "dapo"])
def test_eval_cli_oracle_solves_every_dataset_fixture_through_the_sandbox(dataset, math_data_root, tmp_path,
                                                                         monkeypatch, capsys):
    """The oracle team (a Python program printing the reference answer, the reasoner boxing it) verifies on
    every problem of every loader's fixture: the loaders' answers are ones math-verify accepts."""
    from pettingllms.cli import main
    from pettingllms.config.loader import config_descriptions

    monkeypatch.setenv("PETTINGLLMS_DATA", math_data_root)
    config = f"math/{dataset}" if f"math/{dataset}" in config_descriptions() else "math/gsm8k"
    overrides = [f"env.dataset={dataset}", "env.train_split=null", "pipeline=[eval]", f"run.output_dir={tmp_path}",
                 "run.progress=false"]
    assert main(["eval", config, "--policy", "oracle", *overrides]) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "eval_results.json").read_text())
    assert report["metrics"]["success_rate"] == 1.0 and "success 1.000 on" in out, out


def test_named_arith_problems_let_the_tools_use_the_letters(tmp_path):
    problem = generate(4, 2, named=True)
    plain = generate(4, 2)
    quantities = problem.metadata["quantities"]
    # same numbers, answer and expression; the question labels each number in order of appearance
    assert problem.answer == plain.answer and problem.metadata["expression"] == plain.metadata["expression"]
    assert list(quantities) == list("abcd"[: len(quantities)])
    assert all(f"{k} = {v}" in problem.question for k, v in quantities.items())
    assert evaluate(problem.metadata["named_expression"], quantities) == Fraction(problem.answer)
    env, agents = setup(arith_named=True)
    result = play(env, agents, MathOraclePolicy(), seed=4)
    assert result.success and env.state.tool_run.source == problem.metadata["named_expression"]
    assert "letters" in agents[0].prompt[0]["content"] and "letters" not in setup()[1][0].update_from_env(
        0, _reset(setup()[0], 4))[0]["content"]


@linux_only
def test_named_quantities_are_defined_for_the_python_tool(pool):
    env, agents = setup(arith_named=True, tool="python", max_turns=1)
    problem = generate(4, 2, named=True)
    tool = f"```python\nprint({problem.metadata['named_expression']})\n```"
    result = play(env, agents, Fixed(tool_generator=tool, reasoning_generator=f"\\boxed{{{problem.answer}}}"),
                  seed=4, worker=pool)
    assert env.state.tool_run.outcome == "verified" and result.success


def _reset(env, seed):
    asyncio.run(env.reset(seed))
    return env


def test_boxed_tool_takes_the_latest_tool_answer_when_accepted():
    problem = generate(6, 2, named=True)
    env, agents = setup(arith_named=True, accept_tool_answer=True)
    result = play(env, agents, MathOraclePolicy(), seed=6)
    assert result.success and env.state.answers == [problem.answer] and env.state.agreed
    assert "took the tool's answer: answered" in result.steps[1].feedback
    assert "\\boxed{tool}" in agents[1].prompt[0]["content"]
    # without the setting, "tool" is an answer like any other (and a wrong one)
    env, agents = setup(arith_named=True)
    wrong = play(env, agents, Fixed(tool_generator=f"```calc\n{problem.metadata['named_expression']}\n```",
                                    reasoning_generator="\\boxed{tool}"), seed=6)
    assert not wrong.success and env.state.answers[0] == "tool" and "\\boxed{tool}" not in agents[1].prompt[0]["content"]


def test_boxed_tool_without_a_tool_answer_scores_like_no_answer():
    env, agents = setup(accept_tool_answer=True, max_turns=1)
    result = play(env, agents, Fixed(tool_generator="```calc\n1/0\n```", reasoning_generator="\\boxed{tool}"))
    reasoner = result.steps[1]
    assert reasoner.local_reward == -1.0 and reasoner.failure == "parse_error" and env.state.answers == []
    assert "there is none" in reasoner.feedback
    # the single agent: a call and "tool" in one response takes the call's result
    env, agents = setup(turn_order=["single"], single_tool="calculator", accept_tool_answer=True)
    problem = generate(2, 2)
    result = play(env, agents, Fixed(single=f"```calc\n{problem.metadata['expression']}\n```\n\\boxed{{tool}}"), seed=2)
    assert result.success and env.state.turn == 1 and result.rewards("single") == [2.0]
