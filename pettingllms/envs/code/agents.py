"""The code agents: :class:`CodeGenerationAgent` (the coder), :class:`UnitTestGenerationAgent` (the
tester) and :class:`CodeSingleAgent` (the coder alone, policy level L0), with the seed's names and protocol.

Each step judges in the sandbox through the env worker (``env_worker.run_tests``; no worker is a
:class:`~pettingllms.agents.failures.ToolConfigurationError`):

* coder: its program on the ground-truth tests and on the tester's latest tests; the program becomes the
  current one, and whether it failed a counted ground-truth test is recorded (hidden: the tester's reward
  reads it). Local reward: its score on the counted ground-truth tests (the environment's
  ``partial_credit`` in training, the pass rate in evaluation).
* tester: its tests (call tests of the entry point or stdin/stdout pairs: ``parsing.py``) on the current
  program, and on the problem's evidence (good references, known-wrong programs: ``evidence.py``); they
  replace the earlier tests. Local reward: :func:`~pettingllms.envs.code.rewards.generated_tests_reward`,
  0 where the problem gives no evidence (the global part alone then).

A response that does not parse changes nothing and scores the environment's ``parse_error_reward``
(failure ``parse_error``), for either role.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pettingllms.agents.base import Agent, Prompt, build_prompt
from pettingllms.envs.code import prompts, rewards
from pettingllms.envs.code.data import CodeProblem
from pettingllms.envs.code.env import CodeEnv, CodeState, counted_verdicts, judge, require_judge
from pettingllms.envs.code.evidence import judge_generated_tests
from pettingllms.envs.code.parsing import (
    StdioTestCase,
    format_program,
    format_stdio_tests,
    is_solution_class,
    parse_call_tests,
    parse_program,
    parse_stdio_tests,
)

__all__ = ["CodeAgent", "CodeGenerationAgent", "CodeSingleAgent", "UnitTestGenerationAgent", "format_tests"]


def format_tests(problem: CodeProblem, tests: list[dict[str, str]]) -> str:
    """Generated tests (``{"call"}`` texts, or stdin/stdout pairs) as a tester response its parser reads back."""
    if problem.style == "function":
        return "```python\n" + "\n".join(t["call"].strip() for t in tests) + "\n```\n"
    return format_stdio_tests([StdioTestCase(t["stdin"], t["expected_stdout"]) for t in tests])


class CodeAgent(Agent):
    """Shared parts of the code agents: the environment check and the problem captured for parsing."""

    def __init__(self, *, role: str | None = None, prompt_style: str = "chat") -> None:
        super().__init__(role=role, prompt_style=prompt_style)
        self._problem: CodeProblem | None = None
        self._max_tests = 8
        self._dropped = 0  # parts of the last parsed response that were not understood (dropped by the parser)

    @staticmethod
    def _check_env(env: Any) -> CodeEnv:
        if not isinstance(env, CodeEnv):
            raise TypeError(f"code agents play the `code` environment, got {getattr(env, 'name', env)!r}")
        return env

    def _context(self) -> CodeProblem:
        if self._problem is None:
            raise RuntimeError(f"{type(self).__name__}: call update_from_env before update_from_model")
        return self._problem

    def _parse_failed(self, env: CodeEnv) -> None:
        state = env.state
        state.last_report = f"{self.role} response not understood ({self.parse_error}); nothing changed"
        self.local_reward = float(env.config.parse_error_reward)
        self.failure = "parse_error"
        self.feedback = state.last_report


class CodeGenerationAgent(CodeAgent):
    """The coder: writes or refines the program (one ```python block)."""

    default_role = "code_generator"
    #: Whether a tester works with this coder (its prompt then shows the tester's tests).
    with_tester = True

    def update_from_env(self, turn_idx: int, env_data: Any) -> Prompt:
        env = self._check_env(env_data)
        state: CodeState = env.state
        self._problem = state.problem
        lines = prompts.problem_lines(state.problem, turn_idx, env.config.max_turns)
        lines += prompts.program_lines(state.program)
        if self.with_tester:
            generated = state.generated
            lines += prompts.tests_lines(len(state.generated_tests), None if generated is None else generated.passed,
                                         "" if generated is None else generated.first_failure)
        lines.append("Write the complete program now." if state.program is None else
                     "Fix or improve the program; give the complete program.")
        system = prompts.coder_system(state.problem, self.with_tester)
        self.prompt = build_prompt(system, "\n".join(lines), self.prompt_style)
        return self.prompt

    def parse(self, response: str) -> str:
        self._context()
        return parse_program(response)

    def format_response(self, program: str) -> str:
        """A response this agent's parser reads back as ``program`` (for scripted policies)."""
        return format_program(program)

    async def step(self, env_data: Any, env_worker: Any = None) -> None:
        env = self._check_env(env_data)
        state: CodeState = env.state
        self.failure = None
        require_judge(env_worker)  # a missing worker is a setup error, whatever the response
        if self.action is None:
            self._parse_failed(env)
            return
        program: str = self.action
        tests = list(state.generated_tests)
        truth, generated = await asyncio.gather(
            judge(env_worker, [program], list(state.problem.tests), env.config, state.problem),
            judge(env_worker, [program], tests, env.config, state.problem),
        )
        state.programs.append(program)
        state.failed_ground_truth.append(truth[0].failed_a_counted_test)
        state.ground_truth = truth[0]
        state.generated = generated[0] if tests else None
        passed, outputs = counted_verdicts(truth[0], state.expected_outputs)
        self.local_reward = rewards.coder_local_reward(passed, outputs, partial_credit=env.partial_credit)
        # The report (transcripts, the viewer) names the tester's tests only, never a hidden verdict.
        state.last_report = f"{self.role} wrote a program" + (
            f"; it passes {sum(state.generated.passed)} of the tester's {len(tests)} test(s)" if tests else "")
        self.feedback = state.last_report


class CodeSingleAgent(CodeGenerationAgent):
    """The coder alone (policy level L0): no tester, so no generated tests in its prompt."""

    default_role = "single"
    with_tester = False


class UnitTestGenerationAgent(CodeAgent):
    """The tester: writes unit tests (input/output pairs, or ``assert f(<literals>) == <literal>`` lines for
    function problems); the environment's ``max_generated_tests`` caps the tests kept per response."""

    default_role = "test_generator"

    def update_from_env(self, turn_idx: int, env_data: Any) -> Prompt:
        env = self._check_env(env_data)
        state: CodeState = env.state
        self._problem = state.problem
        self._max_tests = env.config.max_generated_tests
        lines = prompts.problem_lines(state.problem, turn_idx, env.config.max_turns)
        lines += prompts.program_lines(state.program)
        generated = state.generated
        lines += prompts.tests_lines(len(state.generated_tests), None if generated is None else generated.passed,
                                     "" if generated is None else generated.first_failure)
        lines += prompts.dropped_lines(state.generated_dropped)
        lines.append("Write your tests now.")
        system = prompts.tester_system(state.problem, self._max_tests)
        self.prompt = build_prompt(system, "\n".join(lines), self.prompt_style)
        return self.prompt

    def parse(self, response: str) -> list[dict[str, str]]:
        problem = self._context()
        if problem.style == "function":
            found = parse_call_tests(response, problem.entry_point, is_solution_class(problem.starter_code),
                                     self._max_tests)
            self._dropped = found.dropped
            return [{"call": test.assertion} for test in found.tests]
        parsed = parse_stdio_tests(response, self._max_tests)
        self._dropped = parsed.dropped
        return [{"stdin": c.input, "expected_stdout": c.output} for c in parsed.cases]

    def format_response(self, tests: list[dict[str, str]]) -> str:
        """A response this agent's parser reads back as ``tests`` (for scripted policies)."""
        if not tests:
            raise ValueError("`tests` must hold at least one test")
        return format_tests(self._context(), tests)

    async def step(self, env_data: Any, env_worker: Any = None) -> None:
        env = self._check_env(env_data)
        state: CodeState = env.state
        self.failure = None
        require_judge(env_worker)
        if self.action is None:
            self._parse_failed(env)
            return
        tests: list[dict[str, str]] = self.action
        generated, evidence = await judge_generated_tests(env_worker, env.config, state, tests)
        state.generated_tests = tests
        state.generated_dropped = self._dropped
        state.generated = generated
        state.tester_evidence = evidence
        local = None if evidence is None else rewards.generated_tests_reward(valid=evidence.valid,
                                                                             catches=evidence.catches)
        self.local_reward = 0.0 if local is None else local
        # The report shows the current program on the tester's tests only: no reference or mutant verdict,
        # nor whether a test was valid (hidden information).
        state.last_report = f"{self.role} wrote {len(tests)} test(s)" + (
            f" ({self._dropped} part(s) not understood)" if self._dropped else "") + (
            "" if state.generated is None else f"; the current program passes {sum(state.generated.passed)}")
        self.feedback = state.last_report
