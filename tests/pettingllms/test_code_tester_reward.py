"""The tester's reward from evidence, through the real path: agents -> parsers -> ``env.step_agent(agent, pool)``
with a real SandboxPool. Degenerate and adversarial tests (a tautology, ``assert True``, a test that
fingerprints the program, an ill-typed input a lenient reference accepts, a stdio input a reference rejects or
two references answer differently, any test before a program exists) get nothing positive; an honest test
that fails a known-wrong program (the current one, an earlier one, a mutant of the reference) gets +1, a valid
test no known-wrong program fails gets 0; nothing of the evidence reaches a prompt or a report; the sandbox
work of a tester step is one batch per program set, and the problem's evidence is computed once per pool."""

from __future__ import annotations

import asyncio
import dataclasses
import sys

import pytest

from pettingllms.envs.code import CodeProblem, write_jsonl
from pettingllms.envs.code.evidence import MAX_MUTANTS, MUTANT_SEED
from pettingllms.envs.code.mutants import mutants
from pettingllms.registry import make_agents, make_env
from pettingllms.sandbox import SandboxConfig, SandboxPool
from pettingllms.scripted import play_episode

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

ADD_SOLUTION = "def add(a, b):\n    return a + b\n"
ALT_ADD = "def add(a, b):\n    return int(float(a) + float(b))\n"  # right on small numbers, wrong on 10**18
ADD = CodeProblem(
    problem_id="mbpp/1", dataset="mbpp", split="test", style="function", prompt="Return a + b for integers.",
    entry_point="add", solutions=[ADD_SOLUTION],
    tests=[{"assertion": "assert add(1, 2) == 3"}, {"assertion": "assert add(-3, 3) == 0"},
           {"assertion": "assert add(10**18, 1) == 1000000000000000001"}],
)
COUNT_EVEN = CodeProblem(
    problem_id="apps/2", dataset="apps", split="test", style="function", prompt="Count the even numbers of xs.",
    starter_code="class Solution:\n    def countEven(self, xs):\n        ", entry_point="countEven",
    solutions=["class Solution:\n    def countEven(self, xs):\n        return sum(1 for x in xs if x % 2 == 0)\n"],
    tests=[{"assertion": f"_got = Solution().countEven({xs!r})\n_want = [{n}]\nassert _got == _want or _got == _want[0]"}
           for xs, n in (([1, 2, 3, 4], 2), ([], 0), ([2, 4, 6, 7], 3))],
)
LENIENT_SUM = "nums = input().split()\nprint(int(nums[0]) + int(nums[1]))\n"  # ignores extra numbers
STRICT_SUM = "a, b = map(int, input().split())\nprint(a + b)\n"  # rejects a third number
ALL_SUM = "print(sum(map(int, input().split())))\n"  # adds every number
ALT_SUM = "nums = list(map(int, input().split()))\nprint(sum(nums) if min(nums) >= 0 else 0)\n"  # wrong on negatives
SUM = CodeProblem(
    problem_id="codecontests/sum", dataset="codecontests", split="test", style="stdio",
    prompt="Read two integers a and b and print a + b.", solutions=[LENIENT_SUM, STRICT_SUM],
    tests=[{"stdin": "5 7\n", "expected_stdout": "12\n"}, {"stdin": "-4 10\n", "expected_stdout": "6\n"}],
)
SUM_DISAGREE = dataclasses.replace(SUM, problem_id="codecontests/sum2", solutions=[LENIENT_SUM, ALL_SUM])
SUM_LENIENT = dataclasses.replace(SUM, problem_id="codecontests/sum3", solutions=[LENIENT_SUM])
SUM_STRICT = dataclasses.replace(SUM, problem_id="codecontests/sum4", solutions=[STRICT_SUM])
BROKEN = dataclasses.replace(SUM, problem_id="codecontests/broken", solutions=["print(0)\n"])
PROBLEMS = [ADD, COUNT_EVEN, SUM, SUM_DISAGREE, SUM_LENIENT, SUM_STRICT, BROKEN]


def seed_of(problem: CodeProblem) -> int:
    """Its seed: the data folder's split holds every problem, and the seeds index those of its dataset."""
    return [p for p in PROBLEMS if p.dataset == problem.dataset].index(problem)


def fenced(body: str) -> str:
    return f"```python\n{body.rstrip()}\n```\n"


def stdio(*pairs: tuple[str, str]) -> str:
    return "".join(f"**Test Input:**\n```\n{i}\n```\n**Test Output:**\n```\n{o}\n```\n" for i, o in pairs)


class Answers:
    """Answers each role with the next of its texts (the last one repeats); keeps every prompt it was shown."""

    def __init__(self, **texts: list[str]) -> None:
        self.texts = {role: list(t) for role, t in texts.items()}
        self.prompts: list = []

    def respond(self, agent, env) -> str:
        self.prompts.append(agent.prompt)
        queue = self.texts[agent.role]
        return queue.pop(0) if len(queue) > 1 else queue[0]


class CountingPool:
    """A SandboxPool's ``run_tests`` that records each batch as (programs, tests, test kinds)."""

    def __init__(self, pool: SandboxPool) -> None:
        self.pool, self.batches = pool, []

    async def run_tests(self, programs, tests, **options):
        self.batches.append((len(programs), len(tests), sorted({t.kind for t in tests})))
        return await self.pool.run_tests(programs, tests, **options)


@pytest.fixture(scope="module")
def pool():
    config = SandboxConfig(cpu_time_s=2, wall_time_s=10, memory_mb=256, file_size_mb=1, scratch_mb=8,
                           max_processes=16, max_open_files=32, max_output_bytes=1 << 18)
    with SandboxPool(config, max_workers=2) as p:
        yield p


@pytest.fixture(scope="module")
def data_path(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tester")
    write_jsonl(folder / "test.jsonl", PROBLEMS)
    return str(folder)


def play(data_path, pool, problem, program, tests, *, first=False, **fields):
    """The tester's step after the coder's ``program`` (or before any program, ``first``); the episode."""
    order = ["test_generator", "code_generator"] if first else ["code_generator", "test_generator"]
    env = make_env("code", {"dataset": problem.dataset, "split": "test", "data_dir": data_path, "max_turns": 1,
                            "time_limit_s": 2.0, "turn_order": order, **fields})
    agents = make_agents("code", order)
    coder = program if isinstance(program, list) else [program]
    policy = Answers(code_generator=[fenced(p) for p in coder], test_generator=tests if isinstance(tests, list)
                     else [tests])
    result = asyncio.run(play_episode(env, agents, policy, seed_of(problem), pool))
    return [s for s in result.steps if s.role == "test_generator"], env


def local_of(data_path, pool, problem, program, tests, **kwargs) -> float:
    steps, _ = play(data_path, pool, problem, program, tests, **kwargs)
    return steps[0].local_reward


# ---- nothing for degenerate and adversarial tests ----------------------------------------------------------------


@pytest.mark.parametrize(
    "test",
    [
        "assert add(1, 2) == add(1, 2)",  # a tautology
        "assert True",
        "assert add(1, 2) == 3 and 'float' not in open('solution.py').read()",  # fingerprints the program text
        "assert add(1, 2) == 3 and 'float' not in add.__code__.co_names",
        "assert add(1, 2) == 3 or True",
    ],
)
def test_tautologies_and_fingerprints_are_not_tests(data_path, pool, test):
    steps, env = play(data_path, pool, ADD, ALT_ADD, fenced(test))
    assert steps[0].parse_error and steps[0].local_reward == -1.0  # nothing parsed: parse_error_reward
    assert env.state.generated_tests == []


def test_an_ill_typed_input_a_lenient_reference_accepts_is_invalid(data_path, pool):
    # The reference returns 'xy' and the wrong program fails on float('x'): the old reward paid +1.
    steps, env = play(data_path, pool, ADD, ALT_ADD, fenced("assert add('x', 'y') == 'xy'"))
    assert steps[0].local_reward == -1.0
    assert env.state.tester_evidence.well_typed == (False,) and env.state.generated.passed == (False,)


@pytest.mark.parametrize(
    ("problem", "expected"),
    [(SUM, "3"),  # the strict reference rejects a third number
     (SUM_DISAGREE, "3"), (SUM_DISAGREE, "6")],  # the references answer 3 and 6: no expected output is theirs
)
def test_a_stdio_input_a_reference_rejects_or_references_disagree_on_is_invalid(data_path, pool, problem, expected):
    # The wrong program prints 6 on "1 2 3" and fails a hidden negative test: it is known wrong.
    assert local_of(data_path, pool, problem, ALT_SUM, stdio(("1 2 3", expected))) == -1.0


def test_before_any_program_nothing_is_paid_for_catching(data_path, pool):
    honest = fenced("assert add(1000000000000000000, 1) == 1000000000000000001")
    steps, env = play(data_path, pool, ADD, ADD_SOLUTION, honest, first=True)
    assert steps[0].local_reward == 0.0 and env.state.tester_evidence.catches is None
    assert env.state.tester_evidence.valid == (True,)
    assert local_of(data_path, pool, SUM, LENIENT_SUM, stdio(("1 2", "3")), first=True) == 0.0
    assert local_of(data_path, pool, ADD, ADD_SOLUTION, fenced("assert add('x', 'y') == 'xy'"), first=True) == -1.0


# ---- honest tests are paid for what they catch ----------------------------------------------------------------


def test_an_honest_test_that_the_wrong_program_fails_earns_one(data_path, pool):
    big = "assert add(1000000000000000000, 1) == 1000000000000000001"
    steps, env = play(data_path, pool, ADD, ALT_ADD, fenced(big))
    assert steps[0].local_reward == 1.0 and env.state.generated.passed == (False,)
    assert local_of(data_path, pool, SUM, ALT_SUM, stdio(("-1 5", "4"))) == 1.0
    # A LeetCode-style problem: the method through Solution(), written either way.
    wrong = "class Solution:\n    def countEven(self, xs):\n        return len(xs)\n"
    tests = fenced("assert Solution().countEven([1, 2, 3]) == 1\nassert countEven([]) == 0")
    steps, env = play(data_path, pool, COUNT_EVEN, wrong, tests)
    assert env.state.generated_tests == [{"call": "assert Solution().countEven([1, 2, 3]) == 1"},
                                         {"call": "assert Solution().countEven([]) == 0"}]
    # [] -> 0: valid, but the wrong program returns 0 too and no mutant fails it (`x % 2 == 0` flipped counts
    # the odd numbers: 0 of none; `2` -> `3`, `0` -> `1`: 0 of none): 0.
    assert env.state.tester_evidence.valid == (True, True) and steps[0].local_reward == 0.5


def test_a_test_only_a_mutant_or_an_earlier_program_fails_earns_one_and_otherwise_nothing(data_path, pool):
    # The current program is right. "1 2" -> 3 fails the reference's mutant `a - b`: +1.
    steps, env = play(data_path, pool, SUM_STRICT, STRICT_SUM, stdio(("1 2", "3")))
    assert steps[0].local_reward == 1.0 and env.state.generated.passed == (True,)
    # "5 0" -> 5: the mutant `a - b` answers 5 too and the right program passes: no known-wrong program fails it.
    assert local_of(data_path, pool, SUM_STRICT, STRICT_SUM, stdio(("5 0", "5"))) == 0.0
    # An earlier program that failed a hidden test (-4 10; it prints 0 unless both are positive) fails it: +1.
    earlier = "a, b = map(int, input().split())\nprint(a + b if a > 0 and b > 0 else 0)\n"
    steps, env = play(data_path, pool, SUM_STRICT, [earlier, STRICT_SUM], [stdio(("1 1", "2")), stdio(("5 0", "5"))],
                      max_turns=2, terminate_on="turns")
    assert env.state.programs == [earlier, STRICT_SUM] and env.state.failed_ground_truth == [True, False]
    assert [s.local_reward for s in steps] == [1.0, 1.0]  # "1 1": the mutant; "5 0": the earlier program


# ---- problems without evidence ----------------------------------------------------------------------------------


def test_no_local_reward_without_a_good_reference_or_a_signature(data_path, pool, caplog):
    with caplog.at_level("WARNING", logger="pettingllms.envs.code.evidence"):
        steps, env = play(data_path, pool, BROKEN, ALT_SUM, stdio(("-1 5", "4")))
    assert steps[0].local_reward == 0.0 and env.state.tester_evidence is None  # the reference fails its own tests
    assert "codecontests/broken: 1 of its first 1 reference solution(s) fail their own ground-truth tests" in caplog.text
    # HumanEval 32 calls find_zero only with computed arguments: no types to check a generated call against.
    env = make_env("code", {"max_turns": 1})
    agents = make_agents("code", env.config.turn_order)
    policy = Answers(code_generator=[fenced("def find_zero(xs):\n    return 0.0\n")],
                     test_generator=[fenced("assert find_zero([1, 2]) == -0.5")])
    result = asyncio.run(play_episode(env, agents, policy, 32, pool))
    assert result.steps[1].local_reward == 0.0 and env.state.tester_evidence is None
    assert env.state.generated.passed == (False,)  # the coder still sees how its program did


# ---- hidden from the agents; the work of a step ----------------------------------------------------------------


def test_whether_a_test_is_valid_reaches_no_prompt_or_report(data_path, pool):
    # The same responses on two problems that differ only in their hidden reference: "1 2 3" -> 3 is valid
    # with the lenient one and invalid with the strict one. Rewards differ; what the agents see does not.
    seen, rewards = [], []
    for problem in (SUM_LENIENT, SUM_STRICT):
        env = make_env("code", {"dataset": "codecontests", "split": "test", "data_dir": data_path, "max_turns": 2,
                                "time_limit_s": 2.0, "terminate_on": "turns"})
        agents = make_agents("code", env.config.turn_order)
        policy = Answers(code_generator=[fenced(ALT_SUM)], test_generator=[stdio(("1 2 3", "3"))])
        result = asyncio.run(play_episode(env, agents, policy, seed_of(problem), pool))
        seen.append((policy.prompts, [(s.role, s.feedback, s.done) for s in result.steps]))
        rewards.append([s.local_reward for s in result.steps if s.role == "test_generator"])
    assert rewards == [[1.0, 1.0], [-1.0, -1.0]]
    assert seen[0] == seen[1]
    assert seen[0][1][1] == ("test_generator", "test_generator wrote 1 test(s); the current program passes 0", False)


def test_a_tester_step_is_one_batch_per_program_set_and_the_evidence_is_computed_once(pool):
    env = make_env("code", {"max_turns": 1})  # the packaged HumanEval; problem 0, has_close_elements
    problem = env.problems()[0]
    made = [text for kind, text in mutants(problem.solutions[0], MAX_MUTANTS, MUTANT_SEED, within=problem.entry_point)
            if kind != "return_none"]
    counting = CountingPool(pool)
    wrong = "def has_close_elements(numbers, threshold):\n    return False\n"
    tests = fenced("assert has_close_elements([1.0, 2.0, 2.05], 0.1) == True\n"
                   "assert has_close_elements([True, False], 2) == True")  # bools: ill-typed
    for episode in range(2):
        counting.batches.clear()
        agents = make_agents("code", env.config.turn_order)
        policy = Answers(code_generator=[fenced(wrong)], test_generator=[tests])
        result = asyncio.run(play_episode(env, agents, policy, 0, counting))
        evidence = env.state.tester_evidence
        assert result.steps[1].local_reward == 0.0  # (+1 caught, -1 ill-typed) / 2
        assert evidence.valid == (True, False) and evidence.catches[0] and evidence.references == 1
        known_wrong = evidence.wrong_programs - 1  # less the current program
        coder = [(1, 1, ["assertion"])]  # the program on the ground-truth check (no tester's tests yet)
        # Evidence, first time only: the reference and its mutants on the check, in one batch.
        first = [(1 + len(made), 1, ["assertion"])] if episode == 0 else []
        # The step: the current program on both tests; the reference and the other known-wrong programs (the
        # mutants that fail the check) on the well-typed one.
        step = [(1, 2, ["call"]), (1 + known_wrong, 1, ["call"])]
        assert counting.batches == coder + first + step
        assert 1 <= known_wrong <= len(made)


def test_concurrent_steps_share_one_evidence_computation_and_a_failure_is_not_kept(pool):
    from pettingllms.agents.failures import InfrastructureError

    wrong = "def has_close_elements(numbers, threshold):\n    return False\n"
    tests = fenced("assert has_close_elements([1.0, 2.0, 2.05], 0.1) == True")

    async def episodes(worker, count):
        runs = []
        for _ in range(count):
            env = make_env("code", {"max_turns": 1})
            policy = Answers(code_generator=[fenced(wrong)], test_generator=[tests])
            runs.append(play_episode(env, make_agents("code", env.config.turn_order), policy, 0, worker))
        return await asyncio.gather(*runs)

    counting = CountingPool(pool)  # a fresh worker: its own evidence cache
    results = asyncio.run(episodes(counting, 3))
    assert [r.steps[1].local_reward for r in results] == [1.0] * 3
    evidence_batches = [b for b in counting.batches if b[0] > 1 and b[2] == ["assertion"]]
    assert len(evidence_batches) == 1  # the reference and its mutants on the check, once for three episodes

    class FailingOnce(CountingPool):
        async def run_tests(self, programs, tests, **options):
            if len(programs) > 1 and not getattr(self, "failed", False):
                self.failed = True
                raise RuntimeError("the sandbox is gone")
            return await super().run_tests(programs, tests, **options)

    failing = FailingOnce(pool)
    with pytest.raises(InfrastructureError, match="the sandbox could not judge the code"):
        asyncio.run(episodes(failing, 1))
    (result,) = asyncio.run(episodes(failing, 1))  # computed again, not a cached failure
    assert result.steps[1].local_reward == 1.0


def test_the_testers_next_prompt_says_how_many_lines_were_not_understood(data_path, pool):
    env = make_env("code", {"dataset": "mbpp", "split": "test", "data_dir": data_path, "max_turns": 2,
                            "time_limit_s": 2.0, "terminate_on": "turns"})
    first = fenced("assert add(1, 2) == 3\nassert add(1, 2) == add(2, 1)\nimport os")
    policy = Answers(code_generator=[fenced(ALT_ADD)], test_generator=[first, fenced("assert add(2, 2) == 4")])
    result = asyncio.run(play_episode(env, make_agents("code", env.config.turn_order), policy, seed_of(ADD), pool))
    assert result.steps[1].feedback == ("test_generator wrote 1 test(s) (2 part(s) not understood); the current "
                                        "program passes 1")
    system, first_prompt = policy.prompts[1][0]["content"], policy.prompts[1][1]["content"]
    second_prompt = policy.prompts[3][1]["content"]
    assert "assert add(arguments) == expected" in system and "Python literals" in system
    assert "not understood" not in first_prompt
    assert "2 part(s) of your last answer were not understood and were ignored." in second_prompt
    assert env.state.generated_dropped == 0  # the second answer was all understood
