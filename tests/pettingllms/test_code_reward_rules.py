"""What the code environment counts and when its episodes end, played through the agents with a stand-in
judge (no sandbox): training sets the statement's examples aside and caps the rest, a problem with nothing
left is skipped and counted; older data files are classified when read; a constant program earns nothing
in training; verdicts that are the test's fault count toward nothing; function tests reach the judge with
the entry point and the trusted setup; and nothing computed from the ground truth reaches an agent, in a
prompt, a report or through when the episode ends (the red-team check: two problems that differ only in
their hidden tests play identically)."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import json

import pytest

from pettingllms.envs.code import CodeProblem, write_jsonl
from pettingllms.envs.code.data import load_problems
from pettingllms.envs.code.env import is_example_test, statement_shown, training_tests
from pettingllms.registry import make_agents, make_env
from pettingllms.sandbox.judge import TestVerdict
from pettingllms.scripted import play_episode

STATEMENT = "Read two integers and print their sum.\n\nExample\nInput\n1 2\nOutput\n3\n"


def stdio(stdin: str, out: str) -> dict[str, str]:
    return {"stdin": stdin, "expected_stdout": out}


def program(answers: dict[str, str], default: str = "") -> str:
    """A stand-in program: the answer to each input (whitespace-normalised), ``default`` otherwise."""
    return f"ANSWERS = {answers!r}\nDEFAULT = {default!r}\n"


class FakeJudge:
    """``run_tests`` of a SandboxPool for stand-in programs: a stdio test passes when the program's answer has
    the expected tokens; an input holding ``ERR`` is a test error (the test's fault); every function test
    passes. It keeps the TestCases it was given."""

    def __init__(self) -> None:
        self.batches: list[list] = []

    async def run_tests(self, programs, tests, *, time_limit_s, compare):
        self.batches.append(list(tests))
        return [[self._verdict(p, t) for t in tests] for p in programs]

    @staticmethod
    def _verdict(source: str, test) -> TestVerdict:
        if test.kind != "stdio":
            return TestVerdict("passed")
        if "ERR" in test.stdin:
            return TestVerdict("test_error")
        values = {n.targets[0].id: ast.literal_eval(n.value) for n in ast.parse(source).body}
        answer = values["ANSWERS"].get(" ".join(test.stdin.split()), values["DEFAULT"])
        ok = answer.split() == test.expected_stdout.split()
        return TestVerdict("passed" if ok else "wrong_answer", output=answer)


class Scripted:
    """Answers each role from a list of texts (the last one repeats) and records every prompt it was shown."""

    def __init__(self, **texts):
        self.texts = {role: list(t) for role, t in texts.items()}
        self.prompts: list[tuple[str, str]] = []

    def respond(self, agent, env):
        self.prompts.append((agent.role, json.dumps(agent.prompt)))
        queue = self.texts[agent.role]
        return queue.pop(0) if len(queue) > 1 else queue[0]


def fenced(body: str) -> str:
    return f"```python\n{body.rstrip()}\n```\n"


def stdio_tests(*pairs: tuple[str, str]) -> str:
    return "".join(f"**Test Input:**\n```\n{i}\n```\n**Test Output:**\n```\n{o}\n```\n" for i, o in pairs)


def split_folder(tmp_path, problems, split="train"):
    folder = tmp_path / "data"
    write_jsonl(folder / f"{split}.jsonl", [dataclasses.replace(p, split=split) for p in problems])
    return str(folder)


def env_of(folder, purpose="eval", **fields):
    split = {"split": "train"} if purpose == "eval" else {}
    return make_env("code", {"dataset": "apps", "data_dir": folder, "purpose": purpose, "max_turns": 2,
                             **split, **fields})


def play(env, policy, judge, seed=0):
    agents = make_agents("code", env.config.turn_order)
    return asyncio.run(play_episode(env, agents, policy, seed, judge))


ADD_RIGHT = program({"1 2": "3", "5 7": "12", "10 -3": "7", "2 2": "4", "9 9": "18"})
ADD = CodeProblem(
    problem_id="apps/train/1", dataset="apps", split="train", style="stdio", prompt=STATEMENT,
    tests=[stdio("1 2\n", "3\n"), stdio("5 7\n", "12\n"), stdio("10 -3\n", "7\n"), stdio("2 2\n", "4\n")],
    public_tests=[stdio("1 2\n", "3\n")], solutions=[ADD_RIGHT],
)
ONLY_EXAMPLE = dataclasses.replace(ADD, problem_id="apps/train/2", tests=[stdio("1 2\n", "3\n")])


# ---- the tests training counts ------------------------------------------------------------------------


def test_training_sets_the_examples_aside_and_caps_the_rest(tmp_path):
    assert is_example_test(ADD.tests[0], ADD, statement_shown(ADD))
    assert not any(is_example_test(t, ADD, statement_shown(ADD)) for t in ADD.tests[1:])
    assert training_tests(ADD, 2) == ADD.tests[1:3] and training_tests(ADD, None) == ADD.tests[1:]
    folder = split_folder(tmp_path, [ADD])
    train = env_of(folder, "train", max_train_tests=2)
    assert train.problems()[0].tests == ADD.tests[1:3]
    assert env_of(folder).problems()[0].tests == ADD.tests  # evaluation judges every test


def test_the_shown_statement_is_what_the_prompt_shows():
    env = make_env("code", {"max_turns": 1})
    asyncio.run(env.reset(0))
    agent = make_agents("code", ["code_generator"])[0]
    agent.update_from_env(0, env)
    shown = statement_shown(env.state.problem)
    assert shown and shown in agent.prompt[1]["content"] and not shown.startswith("Turn")


def test_a_problem_with_only_examples_is_skipped_from_training_and_counted(tmp_path, caplog):
    folder = split_folder(tmp_path, [ONLY_EXAMPLE, ADD])
    with caplog.at_level("WARNING", logger="pettingllms.envs.code.env"):
        ids = [p.problem_id for p in env_of(folder, "train").problems()]
    assert ids == ["apps/train/1"]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "skipped 1 problem(s) for training" in messages[0] and "apps/train/2" in messages[0]
    assert [p.problem_id for p in env_of(folder).problems()] == ["apps/train/2", "apps/train/1"]  # eval keeps it
    only = split_folder(tmp_path, [ONLY_EXAMPLE])
    with pytest.raises(ValueError, match=r"holds no apps problem of split 'train' with a test that is not one of the "
                                         r"statement's examples"):
        env_of(only, "train").problems()


def test_older_files_are_classified_when_read(tmp_path, caplog):
    pair = "assert chain([Pair(1, 2)]) == 1"
    base = dict(dataset="mbpp", split="test", style="function", prompt="Chain pairs.", entry_point="chain",
                solutions=["class Pair:\n    def __init__(self, a, b):\n        pass\ndef chain(xs):\n    return 1\n"])
    mixed = CodeProblem(problem_id="mbpp/1", tests=[{"assertion": pair}, {"assertion": "assert chain([]) == 1"}], **base)
    only = CodeProblem(problem_id="mbpp/2", tests=[{"assertion": pair}], **base)
    folder = tmp_path / "mbpp"
    write_jsonl(folder / "test.jsonl", [mixed, only])  # as written before classification existed
    env = make_env("code", {"dataset": "mbpp", "data_dir": str(folder)})
    with caplog.at_level("WARNING", logger="pettingllms.envs.code.data"):
        (problem,) = env.problems()
    assert problem.tests == ({"assertion": "assert chain([]) == 1"},)
    assert problem.unsupported_tests == ({"assertion": pair, "reason": "uses `Pair`, which the solution defines"},)
    assert "dropped 1 problem(s) with no test the judge can run (e.g. mbpp/2)" in caplog.text


# ---- what a program earns ---------------------------------------------------------------------------------

YES_NO = CodeProblem(
    problem_id="apps/train/3", dataset="apps", split="train", style="stdio", prompt="Print YES if n is even.",
    tests=[stdio(f"{n}\n", "YES\n" if n % 2 == 0 else "NO\n") for n in range(10)],
    solutions=[program({str(n): "NO" for n in range(1, 10, 2)}, "YES")],
)


@pytest.mark.parametrize(
    ("purpose", "answers", "expected"),
    [
        ("train", {}, 0.0),  # a constant YES passes the 5 even inputs: p = c = 0.5, nothing earned
        ("eval", {}, 0.5),  # evaluation reports the plain pass rate
        ("train", {"1": "NO", "3": "NO", "5": "NO"}, (0.8 - 0.5) / 0.5),
        ("train", {str(n): "NO" for n in range(1, 10, 2)}, 1.0),
    ],
)
def test_a_constant_program_earns_nothing_in_training(tmp_path, purpose, answers, expected):
    env = env_of(split_folder(tmp_path, [YES_NO]), purpose, turn_order=["single"], max_turns=1)
    result = play(env, Scripted(single=[fenced(program(answers, "YES"))]), FakeJudge())
    (step,) = result.steps
    assert step.local_reward == pytest.approx(expected) and step.global_reward == pytest.approx(expected)
    assert result.success is (expected == 1.0)


def test_the_plain_pass_rate_is_a_config_choice(tmp_path):
    env = env_of(split_folder(tmp_path, [YES_NO]), "train", turn_order=["single"], max_turns=1,
                 partial_credit="pass_rate")
    assert play(env, Scripted(single=[fenced(program({}, "YES"))]), FakeJudge()).steps[0].global_reward == 0.5
    with pytest.raises(ValueError, match=r"`partial_credit` must be one of \['beyond_constant', 'pass_rate'\]"):
        make_env("code", {"partial_credit": "half"})


def test_verdicts_that_are_the_tests_fault_count_toward_nothing(tmp_path):
    broken = dataclasses.replace(ADD, problem_id="apps/train/4", prompt="Add.", public_tests=[],
                                 tests=[stdio("1 2\n", "3\n"), stdio("ERR\n", "0\n"), stdio("5 7\n", "12\n")])
    env = env_of(split_folder(tmp_path, [broken]), turn_order=["single"], max_turns=1)
    right = program({"1 2": "3", "5 7": "12"})
    result = play(env, Scripted(single=[fenced(right)]), FakeJudge())
    assert result.success and result.steps[0].global_reward == 1.0  # 2 of 2 counted tests, the error not counted
    assert env.state.ground_truth.counted == (True, False, True)
    only_error = dataclasses.replace(broken, problem_id="apps/train/5", tests=[stdio("ERR\n", "0\n")])
    env = env_of(split_folder(tmp_path, [only_error]), turn_order=["single"], max_turns=1)
    result = play(env, Scripted(single=[fenced(right)]), FakeJudge())
    assert not result.success and result.steps[0].global_reward == 0.0  # no counted test: never a success


def test_function_tests_reach_the_judge_with_the_entry_point_and_the_trusted_setup():
    judge = FakeJudge()
    env = make_env("code", {"max_turns": 1})  # the packaged HumanEval
    tester = fenced("assert find_zero([1, 2]) == -0.5")
    play(env, Scripted(code_generator=[fenced("def find_zero(xs):\n    return 0\n")], test_generator=[tester]), judge, 32)
    prompt = load_problems("humaneval", None)[32].prompt
    cases = [case for batch in judge.batches for case in batch]
    assert len(cases) == 2  # the ground-truth check; the tester's test on the program (32 gives no evidence)
    check, generated = cases
    assert check.kind == "assertion" and check.entry_point == "find_zero" and check.setup == prompt
    # The tester's test is a call test of plain values: nothing of its text runs as code on the trusted side.
    assert (generated.kind, generated.args, generated.expected, generated.entry_point, generated.setup) == (
        "call", ([1, 2],), -0.5, "find_zero", "")
    assert "def poly(" in prompt


# ---- when episodes end, and what the agents are told ------------------------------------------------------


def test_the_episode_ends_on_the_testers_tests_never_on_the_hidden_ones(tmp_path):
    folder = split_folder(tmp_path, [ADD])
    right = fenced(ADD_RIGHT)
    # The right program and a wrong tester's test: the hidden tests pass, the episode plays on.
    env = env_of(folder, max_turns=3)
    result = play(env, Scripted(code_generator=[right], test_generator=[stdio_tests(("1 2", "4"))]), FakeJudge())
    assert len(result.steps) == 6 and result.success
    # A wrong program that passes the tester's test: it ends there, a failure.
    wrong = fenced(program({"1 2": "3"}))
    env = env_of(folder, max_turns=3)
    result = play(env, Scripted(code_generator=[wrong], test_generator=[stdio_tests(("1 2", "3"))]), FakeJudge())
    assert len(result.steps) == 2 and result.done and not result.success
    # `turns` plays the whole budget whatever the tests say.
    env = env_of(folder, max_turns=3, terminate_on="turns")
    result = play(env, Scripted(code_generator=[right], test_generator=[stdio_tests(("1 2", "3"))]), FakeJudge())
    assert len(result.steps) == 6 and result.success


def test_a_single_coder_plays_its_turn_budget(tmp_path):
    env = env_of(split_folder(tmp_path, [ADD]), turn_order=["single"], max_turns=3)
    result = play(env, Scripted(single=[fenced(ADD_RIGHT)]), FakeJudge())
    assert len(result.steps) == 3 and result.success  # no tester: nothing ends it early; the final program counts


def test_ground_truth_termination_is_refused_in_a_config():
    with pytest.raises(ValueError, match=r"`terminate_on: ground_truth` is no longer accepted.*use `generated_tests`"):
        make_env("code", {"terminate_on": "ground_truth"})


def test_hidden_tests_do_not_change_what_the_agents_see_or_when_the_episode_ends(tmp_path):
    # Two problems alike in all an agent may see (statement, public test) whose hidden parts differ: the same
    # program passes one's hidden tests and fails the other's, and the reference solution passes the tester's
    # test in one and fails it in the other. Every prompt, report and the episode's length must be equal.
    passes = dataclasses.replace(ADD, problem_id="apps/train/6", tests=[stdio("1 2\n", "3\n"), stdio("5 7\n", "12\n")])
    fails = dataclasses.replace(passes, problem_id="apps/train/7", tests=[stdio("1 2\n", "3\n"), stdio("5 7\n", "13\n")],
                                solutions=[program({"1 2": "3"})])
    folder = split_folder(tmp_path, [passes, fails])
    coder = [fenced(program({"1 2": "3", "5 7": "12"})), fenced(program({"1 2": "3", "5 7": "12"}, "0"))]
    seen = []
    for seed in (0, 1):
        env = env_of(folder, max_turns=3)
        policy = Scripted(code_generator=list(coder), test_generator=[stdio_tests(("9 9", "18"))])
        result = play(env, policy, FakeJudge(), seed)
        seen.append((policy.prompts, [(s.role, s.done, s.feedback) for s in result.steps], result.turns))
        assert result.success is (seed == 0)
        # seed 0: "9 9" -> 18 is valid, but no known-wrong program fails it; seed 1: the reference fails its own
        # hidden tests, so there is no local reward.
        assert result.steps[1].local_reward == 0.0
    assert seen[0] == seen[1]
    assert seen[0][1][:2] == [("code_generator", False, "code_generator wrote a program"),
                              ("test_generator", False, "test_generator wrote 1 test(s); the current program passes 0")]
    assert seen[0][1][2] == ("code_generator", False, "code_generator wrote a program; it passes 0 of the tester's "
                                                      "1 test(s)")
