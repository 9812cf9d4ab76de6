"""The code environment and its agents: scripted episodes with hand-computed rewards, the state after
each step, parse errors, termination rules, and the oracle eval through the CLI on HumanEval."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from pettingllms.agents.failures import ToolConfigurationError
from pettingllms.config import load_config, validate_config
from pettingllms.envs.code import CodeDataError, CodeOraclePolicy, CodeProblem, WrongCodePolicy, write_jsonl
from pettingllms.envs.code.scripted import oracle_tests
from pettingllms.registry import make_agents, make_env
from pettingllms.sandbox import SandboxConfig, SandboxPool
from pettingllms.scripted import RolePolicy, play_episode

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

SOLUTION = "a, b = map(int, input().split())\nprint(a + b)\n"
# Right on the first two ground-truth tests, wrong on the third (prints 0 once a >= 10).
PARTIAL = "a, b = map(int, input().split())\nprint(a + b if a < 10 else 0)\n"
ADD = CodeProblem(
    problem_id="fixture/add", dataset="apps", split="test", style="stdio", prompt="Print the sum of two integers.",
    tests=[{"stdin": "1 2\n", "expected_stdout": "3"}, {"stdin": "5 7\n", "expected_stdout": "12"},
           {"stdin": "10 -3\n", "expected_stdout": "7"}],
    public_tests=[{"stdin": "1 2\n", "expected_stdout": "3"}],
    solutions=[SOLUTION],
)
SQUARE = CodeProblem(
    problem_id="fixture/square", dataset="apps", split="test", style="function", prompt="Return x squared.",
    entry_point="square", tests=[{"assertion": "assert square(3) == 9"}, {"assertion": "assert square(-2) == 4"}],
    solutions=["def square(x):\n    return x * x\n"],
)


def fenced(body: str, tag: str = "python") -> str:
    return f"```{tag}\n{body.rstrip()}\n```\n"


def stdio_tests(*pairs: tuple[str, str]) -> str:
    return "".join(f"**Test Input:**\n{fenced(i, '')}**Test Output:**\n{fenced(o, '')}" for i, o in pairs)


class Fixed:
    """Answers each role with a fixed text, or the next of a list of texts."""

    def __init__(self, **texts):
        self.texts = {role: list(t) if isinstance(t, list) else [t] for role, t in texts.items()}

    def respond(self, agent, env):
        queue = self.texts[agent.role]
        return queue.pop(0) if len(queue) > 1 else queue[0]


@pytest.fixture(scope="module")
def pool():
    config = SandboxConfig(cpu_time_s=2, wall_time_s=10, memory_mb=256, file_size_mb=1, scratch_mb=8,
                           max_processes=16, max_open_files=32, max_output_bytes=1 << 18)
    with SandboxPool(config, max_workers=2) as p:
        yield p


@pytest.fixture(scope="module")
def data_path(tmp_path_factory):
    """A data folder whose test split holds ADD and SQUARE."""
    folder = tmp_path_factory.mktemp("code")
    write_jsonl(folder / "test.jsonl", [ADD, SQUARE])
    return str(folder)


def setup(data_path, **fields):
    env = make_env("code", {"dataset": "apps", "split": "test", "data_dir": data_path, "time_limit_s": 2.0,
                            "max_turns": 2, **fields})
    return env, make_agents("code", env.config.turn_order)


def play(env, agents, policy, pool, seed=0):
    return asyncio.run(play_episode(env, agents, policy, seed, pool))


def parts(result):
    return [(s.role, pytest.approx(s.local_reward), pytest.approx(s.global_reward), pytest.approx(s.reward))
            for s in result.steps]


# ---- scripted episodes, rewards by hand ----------------------------------------------------------------


def test_right_coder_and_tester_end_the_episode_in_one_turn(data_path, pool):
    env, agents = setup(data_path)
    result = play(env, agents, CodeOraclePolicy(), pool)
    # The reference passes every hidden test, but only the tester's (public) test, which it passes, ends it.
    assert result.success and result.done and len(result.steps) == 2
    # The public test "1 2" -> 3 is valid and fails the reference's mutant `a - b`, a known-wrong program: +1.
    assert parts(result) == [("code_generator", 1.0, 1.0, 2.0),  # alpha 1: 1 * 1.0 + 1.0
                             ("test_generator", 1.0, 1.0, 2.0)]
    assert [s.feedback for s in result.steps] == ["code_generator wrote a program",
                                                  "test_generator wrote 1 test(s); the current program passes 1"]


def test_wrong_coder_and_oracle_tester_play_the_whole_budget(data_path, pool):
    env, agents = setup(data_path)
    result = play(env, agents, RolePolicy({"code_generator": WrongCodePolicy()}, CodeOraclePolicy()), pool)
    assert not result.success and result.turns == 2
    # The public test: the reference passes it and the wrong program fails it, +1 for the tester.
    assert parts(result) == [("code_generator", 0.0, 0.0, 0.0), ("test_generator", 1.0, 0.0, 1.0)] * 2


def test_partial_coder_and_a_tester_with_one_wrong_test(data_path, pool):
    env, agents = setup(data_path, alpha=0.5, max_turns=1)
    policy = Fixed(code_generator=fenced(PARTIAL), test_generator=stdio_tests(("1 2", "3"), ("2 2", "5")))
    result = play(env, agents, policy, pool)
    # coder: 2 of 3 ground-truth tests. tester: test 1 is valid and fails the mutant `a - b` (+1), test 2 the
    # reference fails (-1).
    coder, tester = 2 / 3, (1.0 - 1.0) / 2
    assert parts(result) == [("code_generator", coder, coder, 0.5 * coder + coder),
                             ("test_generator", tester, coder, 0.5 * coder + tester)]


def test_a_tester_that_catches_the_bug_scores_one_and_the_coder_sees_it(data_path, pool):
    env, agents = setup(data_path)
    policy = Fixed(code_generator=[fenced(PARTIAL), fenced(SOLUTION)], test_generator=stdio_tests(("10 -3", "7")))
    result = play(env, agents, policy, pool)
    assert parts(result) == [("code_generator", 2 / 3, 2 / 3, 4 / 3), ("test_generator", 1.0, 2 / 3, 5 / 3),
                             ("code_generator", 1.0, 1.0, 2.0)]
    assert result.success and result.turns == 1
    prompt = agents[0].prompt[1]["content"]  # the coder's second prompt: the tester's failing test
    assert "passes 0 of 1" in prompt and "10 -3" in prompt and "Program output:\n0" in prompt
    assert "5 7" not in prompt  # ground-truth tests never reach a prompt


def test_function_problem_with_assert_tests(data_path, pool):
    env, agents = setup(data_path, max_turns=1)
    wrong = "def square(x):\n    return x + x\n"  # right for 2, wrong for 3 and -2
    policy = Fixed(code_generator=fenced(wrong),
                   test_generator=fenced("assert square(2) == 4\nassert square(3) == 9\nassert True"))
    result = play(env, agents, policy, pool, seed=1)
    # square(2) == 4: valid, and the wrong program passes it (the reference has no mutant but `return None`,
    # which is left out): 0. square(3) == 9: valid, the wrong program fails it: +1. `assert True` is dropped.
    assert parts(result) == [("code_generator", 0.0, 0.0, 0.0), ("test_generator", 0.5, 0.0, 0.5)]
    assert env.state.generated_tests == [{"call": "assert square(2) == 4"}, {"call": "assert square(3) == 9"}]
    assert env.state.generated_dropped == 1
    assert result.steps[1].feedback == ("test_generator wrote 2 test(s) (1 part(s) not understood); "
                                        "the current program passes 1")


# ---- the state after each step ---------------------------------------------------------------------------


def test_state_after_each_step(data_path, pool):
    env, agents = setup(data_path)
    coder, tester = agents
    asyncio.run(env.reset(0))
    state = env.state
    assert state.problem == ADD and state.programs == [] and state.ground_truth is None and env.task_reward == 0.0

    coder.update_from_env(0, env)
    coder.update_from_model("Here it is:\n" + fenced(PARTIAL))
    asyncio.run(env.step_agent(coder, pool))
    assert state.programs == [PARTIAL] and state.program == PARTIAL
    assert state.ground_truth.passed == (True, True, False)
    failure = state.ground_truth.first_failure
    assert "Input:\n10 -3" in failure and "Expected output:\n7" in failure and "Program output:\n0" in failure
    assert state.generated is None and state.tester_evidence is None and state.generated_tests == []
    assert state.failed_ground_truth == [True]  # hidden: only the tester's reward reads it

    tester.update_from_env(0, env)
    assert "Current program:" in tester.prompt[1]["content"] and "a < 10" in tester.prompt[1]["content"]
    tester.update_from_model(stdio_tests(("1 2", "3"), ("10 -3", "7"), ("0 0", "1")))
    asyncio.run(env.step_agent(tester, pool))
    assert state.generated_tests == [{"stdin": "1 2\n", "expected_stdout": "3"},
                                     {"stdin": "10 -3\n", "expected_stdout": "7"},
                                     {"stdin": "0 0\n", "expected_stdout": "1"}]
    evidence = state.tester_evidence
    assert state.generated.passed == (True, False, False) and evidence.valid == (True, True, False)
    # "1 2" fails the mutant `a - b`, "10 -3" the program itself; "0 0" -> 1 is invalid whatever it fails.
    assert evidence.catches == (True, True, True) and evidence.references == 1
    assert state.position == 0 and state.turn == 1
    assert tester.local_reward == pytest.approx((1.0 + 1.0 - 1.0) / 3)

    coder.update_from_env(1, env)
    coder.update_from_model(fenced(SOLUTION))
    asyncio.run(env.step_agent(coder, pool))
    assert state.programs == [PARTIAL, SOLUTION] and state.ground_truth.passed == (True, True, True)
    assert state.failed_ground_truth == [True, False]
    assert state.generated.passed == (True, True, False)  # the solution on the tester's tests, rejudged
    # Every hidden test passes, but the tester's wrong test fails: the episode plays on (no hidden verdict ends it).
    assert env.success and not env.done
    assert state.last_report == "code_generator wrote a program; it passes 2 of the tester's 3 test(s)"


def test_single_coder_and_a_tester_that_goes_first(data_path, pool):
    env, agents = setup(data_path, turn_order=["single"])
    result = play(env, agents, WrongCodePolicy(), pool)
    assert parts(result) == [("single", 0.0, 0.0, 0.0)] * 2
    assert "Tester" not in agents[0].prompt[1]["content"] and "tester" not in agents[0].prompt[0]["content"]
    assert play(env, agents, CodeOraclePolicy(), pool).success

    env, agents = setup(data_path, turn_order=["test_generator", "code_generator"], max_turns=1)
    result = play(env, agents, CodeOraclePolicy(), pool)
    # No program yet: the public test is valid, but nothing is paid for catching before a program exists: 0.
    assert parts(result) == [("test_generator", 0.0, 0.0, 0.0), ("code_generator", 1.0, 1.0, 2.0)]
    evidence = env.state.tester_evidence
    assert evidence.valid == (True,) and evidence.catches is None and env.state.generated.passed == (True,)


# ---- parse errors, workers, termination, data -----------------------------------------------------------


def test_parse_errors_score_the_penalty_and_change_nothing(data_path, pool):
    env, agents = setup(data_path, parse_error_reward=-0.5, max_turns=1)
    result = play(env, agents, Fixed(code_generator="I cannot solve this one.", test_generator="no tests, sorry"), pool)
    assert parts(result) == [("code_generator", -0.5, 0.0, -0.5), ("test_generator", -0.5, 0.0, -0.5)]
    assert [s.failure for s in result.steps] == ["parse_error", "parse_error"]
    assert all(s.parse_error for s in result.steps)
    assert env.state.programs == [] and env.state.generated_tests == [] and env.state.ground_truth is None


def test_a_step_without_a_sandbox_worker_is_a_clear_error(data_path):
    env, (coder, _) = setup(data_path)
    asyncio.run(env.reset(0))
    coder.update_from_env(0, env)
    coder.update_from_model(fenced(SOLUTION))
    with pytest.raises(ToolConfigurationError, match="run_tests"):
        asyncio.run(env.step_agent(coder, None))
    assert env.state.programs == [] and env.state.position == 0  # rolled back


def test_terminate_on_generated_tests_ends_without_success(data_path, pool):
    env, agents = setup(data_path, max_turns=3)  # generated_tests, the default
    result = play(env, agents, Fixed(code_generator=fenced(PARTIAL), test_generator=stdio_tests(("1 2", "3"))), pool)
    assert result.done and not result.success and len(result.steps) == 2  # the partial program passes "1 2"
    env, agents = setup(data_path, max_turns=3, terminate_on="turns")
    result = play(env, agents, Fixed(code_generator=fenced(SOLUTION), test_generator=stdio_tests(("1 2", "3"))), pool)
    assert len(result.steps) == 6 and result.success  # `turns` plays the whole budget


def test_seeds_index_the_split_and_missing_data_names_the_command(data_path, tmp_path):
    env, _ = setup(data_path)
    assert [p.problem_id for p in env.problems()] == ["fixture/add", "fixture/square"]
    with pytest.raises(ValueError, match=r"`seed` 2 is past the 2 problems .* 0 \.\. 1"):
        asyncio.run(env.reset(2))
    missing = tmp_path / "none"
    env = make_env("code", {"dataset": "apps", "data_dir": str(missing)})
    with pytest.raises(CodeDataError, match=rf"{missing}/test.jsonl.*pettingllms dataprocess code .*--dataset apps"):
        asyncio.run(env.reset(0))
    with pytest.raises(ValueError, match="`terminate_on` must be one of"):
        make_env("code", {"terminate_on": "first_pass"})
    with pytest.raises(ValueError, match="`terminate_on: ground_truth` is no longer accepted"):
        make_env("code", {"terminate_on": "ground_truth"})


def test_random_policy_mixes_oracle_and_wrong_answers(data_path, pool):
    from pettingllms.envs.code.scripted import RandomCodePolicy

    env, agents = setup(data_path, max_turns=1)
    seen = {play(env, agents, RandomCodePolicy(seed), pool).success for seed in range(8)}
    assert seen == {True, False}
    with pytest.raises(ValueError, match="`oracle_prob`"):
        RandomCodePolicy(oracle_prob=2.0)


def test_oracle_tests_of_humaneval_pass_the_reference_and_catch_a_wrong_program(pool):
    env = make_env("code", {"max_turns": 1})
    agents = make_agents("code", env.config.turn_order)
    policy = RolePolicy({"code_generator": WrongCodePolicy()}, CodeOraclePolicy())
    for seed in range(3):
        result = play(env, agents, policy, pool, seed)
        assert 1 <= len(env.state.generated_tests) <= 3
        assert all(env.state.tester_evidence.valid) and not any(env.state.generated.passed)
        assert result.steps[1].local_reward == 1.0
    assert oracle_tests(env.problems()[0])[0] == {"call": "assert has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], "
                                                          "0.3) == True"}



def test_the_oracle_tester_without_a_standalone_test_scores_a_turn_without_tests(pool):
    # HumanEval 32 checks through a loop over random polynomials: no assert line can be lifted out of it.
    env = make_env("code", {"max_turns": 1, "parse_error_reward": -1.0})
    agents = make_agents("code", env.config.turn_order)
    assert oracle_tests(env.problems()[32]) == []
    result = play(env, agents, RolePolicy({"code_generator": WrongCodePolicy()}, CodeOraclePolicy()), pool, 32)
    assert result.steps[1].failure == "parse_error" and result.steps[1].local_reward == -1.0
    assert not result.success

# ---- configs and the CLI ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "dataset", "pipeline", "eval_count"),
    [("code/L0", "apps", ["sft", "at_grpo", "eval"], 4), ("code/L3", "apps", ["sft", "at_grpo", "eval"], 4),
     ("code/apps", "apps", ["sft", "at_grpo", "eval"], 4), ("code/mbpp", "mbpp", ["sft", "at_grpo", "eval"], 4),
     ("code/codecontests", "codecontests", ["sft", "at_grpo", "eval"], 4),
     ("code/livecodebench", "livecodebench", ["eval"], 4), ("code/humaneval", "humaneval", ["eval"], 164)],
)
def test_code_configs_train_on_the_train_split_and_evaluate_the_whole_test_split(
    name, dataset, pipeline, eval_count, code_data_root, monkeypatch
):
    from pettingllms.stages.eval import eval_settings

    monkeypatch.setenv("PETTINGLLMS_DATA", code_data_root)
    # six: the APPS fixture's seventh problem has no reference solution, which the sft oracle refuses up front
    config = load_config(name, ["sft.num_problems=6"])
    validate_config(config)
    assert config["env"]["name"] == "code" and config["model"]["name"] == "smollm2-135m-instruct"
    assert config["env"]["dataset"] == dataset and config["pipeline"] == pipeline
    # eval.num_instances null: every problem of the test split (fixtures: 4; HumanEval: 164)
    assert config["eval"]["num_instances"] is None
    assert eval_settings("eval", config).seeds == range(0, eval_count)


def test_the_stages_make_a_sandbox_worker_for_the_code_env():
    from pettingllms.stages.context import make_env_worker

    worker = make_env_worker(load_config("code/L0"))
    try:
        assert isinstance(worker, SandboxPool)
    finally:
        worker.close()


@pytest.mark.parametrize(("policy", "success"), [("oracle", 1.0), ("scripted:wrong", 0.0)])
def test_eval_cli_plays_humaneval_through_the_sandbox(policy, success, tmp_path, capsys):
    from pettingllms.cli import main

    overrides = ["eval.num_instances=3", "env.max_turns=1", f"run.output_dir={tmp_path}", "run.progress=false"]
    assert main(["eval", "code/humaneval", "--policy", policy, *overrides]) == 0
    assert f"success {success:.3f} on 3 held-out instances" in capsys.readouterr().out
    report = json.loads((tmp_path / "eval_results.json").read_text())
    assert report["metrics"]["success_rate"] == success
