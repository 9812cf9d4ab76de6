"""The math agents: :class:`ToolGenerationAgent` (the tool agent), :class:`ReasoningAgent` (the reasoner) and
:class:`MathSingleAgent` (the reasoner alone, policy level L0, with ``single_tool``), with the seed's role names.

* tool agent: its program runs in the sandbox (``env_worker.run_tests``: no worker is a
  :class:`~pettingllms.agents.failures.ToolConfigurationError`), or its expression in the calculator; the
  printed answer is verified. Local reward: :func:`~pettingllms.envs.math.rewards.tool_local_reward`.
* reasoner: its ``\\boxed{}`` answer is verified and becomes the latest final answer. Local reward:
  :func:`~pettingllms.envs.math.rewards.reasoner_local_reward`, plus
  :func:`~pettingllms.envs.math.rewards.reasoner_judgement_reward` (``env.judgement_reward``; 0: off) for
  turning down a wrong tool result with an answer that verifies.
* single agent: a response may call the tool and/or answer; a turn with an answer scores as the reasoner's
  (without the judgement part: the tool result it would reject is its own), a turn that only calls the tool
  as the tool agent's.

After either agent of the team acts, ``state.agreed`` says whether the latest tool answer and the latest
final answer are equivalent (the episode then ends). A response that does not parse changes nothing and
scores -1 (failure ``parse_error``).

What an agent sees. Its prompt (:mod:`pettingllms.envs.math.prompts`) shows the problem, the latest tool run
(source, output or error, the answer read from it) and the latest final answer: the team's own work. The
verdicts against the reference (``ToolRun.verified``, ``state.answers_verified``) are written for the
rewards, the success metric and the episode viewer only; no prompt reads them, and ``state.last_report``
(one line on what the step did) holds no verdict either. ``feedback`` (the step's report in transcripts, for
people and the benchmarks' breakdowns) adds the verdict, ``(correct)`` / ``(wrong)``; nothing renders it
into a prompt.

Checks run in :mod:`pettingllms.envs.math.verify`'s worker pool off the event loop. A check past
``verify_timeout_s`` counts as a no (the answer as wrong, the answers as not agreeing); it is counted in
``state.verify_timeouts`` and labels the step ``verify_timeout`` (:data:`VERIFY_TIMEOUT`) unless the step
already failed otherwise, so the engine counts it with the other failures.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pettingllms.agents.base import Agent, Prompt, build_prompt
from pettingllms.agents.failures import InfrastructureError, ParseError, ToolConfigurationError
from pettingllms.envs.math import prompts, rewards
from pettingllms.envs.math.answers import (
    calculator_expression,
    extract_answer,
    last_code_block,
    printed_answer,
)
from pettingllms.envs.math.calculator import CalculatorError, evaluate, format_number
from pettingllms.envs.math.env import MathEnv, MathState, ToolRun
from pettingllms.envs.math.verify import check_answer

__all__ = ["TOOL_ANSWER", "VERIFY_TIMEOUT", "MathAgent", "MathSingleAgent", "ReasoningAgent", "ToolGenerationAgent",
           "format_answer", "format_tool_call", "run_tool"]

#: The final answer that takes the latest tool answer (with ``env.accept_tool_answer``): ``\\boxed{tool}``.
TOOL_ANSWER = "tool"
# Tool-run failures and the model-failure label the engine counts for each.
_FAILURE_LABELS = {"timeout": "tool_timeout", "output_limit": "tool_killed"}
#: The failure label of a step one of whose answer checks ran past ``verify_timeout_s``.
VERIFY_TIMEOUT = "verify_timeout"


def format_tool_call(tool: str, source: str) -> str:
    """A response the tool parser reads back as ``source`` (a program or an expression)."""
    fence = "python" if tool == "python" else "calc"
    return f"```{fence}\n{source.strip()}\n```"


def format_answer(answer: str) -> str:
    """A response the answer parser reads back as ``answer``."""
    return f"\\boxed{{{answer}}}"


def parse_tool_call(tool: str, response: str) -> str | None:
    """The program (``python``) or expression (``calculator``) of a response, None when it has none."""
    return last_code_block(response) if tool == "python" else calculator_expression(response)


async def _check(env: MathEnv, a: str | None, b: str | None, *, symmetric: bool) -> bool:
    """Whether ``a`` verifies against ``b`` (``symmetric``: either against the other), checked in a worker
    thread; a check past ``verify_timeout_s`` is a no, counted in ``state.verify_timeouts``."""
    if a is None or b is None:
        return False
    check = await asyncio.to_thread(check_answer, a, b, symmetric=symmetric, timeout_s=env.config.verify_timeout_s)
    if check.timed_out:
        env.state.verify_timeouts += 1
    return check.verdict


async def _verify(env: MathEnv, answer: str | None) -> bool:
    """Whether ``answer`` is the problem's answer (for the rewards and the state, never for a prompt)."""
    return await _check(env, answer, env.state.problem.answer, symmetric=False)


async def _agree(env: MathEnv, a: str | None, b: str | None) -> bool:
    """Whether the two answers agree (the episode's end: no reference involved)."""
    return await _check(env, a, b, symmetric=True)


def _with_verdict(report: str, verified: bool) -> str:
    """A report line with its verdict, for ``feedback`` (transcripts) only."""
    return f"{report} ({'correct' if verified else 'wrong'})"


async def run_tool(env: MathEnv, env_worker: Any, tool: str, source: str) -> ToolRun:
    """Run one parsed tool call (a program in the sandbox, or an expression in the calculator) and verify
    the answer it gives against the problem's."""
    config = env.config
    quantities = env.state.problem.metadata.get("quantities") or {}
    if tool == "calculator":
        try:
            output, error = format_number(evaluate(source, quantities)), ""
        except CalculatorError as exc:
            output, error = "", str(exc)
    else:
        if env_worker is None or not hasattr(env_worker, "run_tests"):
            raise ToolConfigurationError(
                "the math tool agent runs Python in the sandbox: it needs an env worker with `run_tests` "
                f"(a pettingllms.sandbox.SandboxPool), got {env_worker!r}; or set `env.tool: calculator`"
            )
        from pettingllms.sandbox.judge import TestCase  # only the Python tool needs the sandbox

        # A generated problem's labelled quantities are defined for the program (a = 6402, ...).
        program = "".join(f"{name} = {value}\n" for name, value in quantities.items()) + source
        try:
            verdicts = await env_worker.run_tests([program], [TestCase(stdin="", expected_stdout="")],
                                                  time_limit_s=float(config.time_limit_s), compare="exact")
        except InfrastructureError:
            raise
        except Exception as exc:  # the sandbox, not the program, failed: never reward it
            raise InfrastructureError(f"the sandbox could not run the tool program: {exc!r}") from exc
        verdict = verdicts[0][0]
        if verdict.status in ("passed", "wrong_answer"):  # it ran to the end (nothing is expected of it)
            output, error = verdict.output, ""
        else:
            detail = verdict.error.strip().splitlines()[-1] if verdict.error.strip() else ""
            output, error = "", verdict.status.replace("_", " ") + (f": {detail}" if detail else "")
    answer = printed_answer(output) if not error else None
    verified = await _verify(env, answer)
    outcome = rewards.tool_outcome(parsed=True, error=bool(error), answer=answer, verified=verified)
    return ToolRun(tool=tool, source=source, output=output, error=error, answer=answer, verified=verified,
                   outcome=outcome)


class MathAgent(Agent):
    """Shared parts of the math agents: the environment check and the tool the agent uses."""

    def __init__(self, *, role: str | None = None, prompt_style: str = "chat") -> None:
        super().__init__(role=role, prompt_style=prompt_style)
        self.tool = "none"  # set from the environment's config by update_from_env
        self._timeouts_before = 0  # state.verify_timeouts when the current step began

    @staticmethod
    def _check_env(env: Any) -> MathEnv:
        if not isinstance(env, MathEnv):
            raise TypeError(f"math agents play the `math` environment, got {getattr(env, 'name', env)!r}")
        return env

    def _state_lines(self, env: MathEnv, turn_idx: int, tool_owner: str, answers_owner: str | None) -> list[str]:
        """The problem, the latest tool run (as ``tool_owner``'s) and, with ``answers_owner``, the latest
        final answer; no verdict (see the module docstring)."""
        state = env.state
        lines = prompts.problem_lines(state.problem, turn_idx, env.config.max_turns)
        lines += prompts.tool_lines(state.tool_run, tool_owner)
        if answers_owner is not None:
            lines += prompts.answers_lines(state.answers, answers_owner)
        return lines

    def _prompt(self, system: str, lines: list[str]) -> Prompt:
        self.prompt = build_prompt(system, "\n".join(lines), self.prompt_style)
        return self.prompt

    def _begin_step(self, env_data: Any) -> MathEnv | None:
        """The environment of this step, or None when the decision did not parse (then scored -1 and
        reported, the state unchanged)."""
        env = self._check_env(env_data)
        self.failure = None
        if self.action is None:
            self._parse_failed(env)
            return None
        self._timeouts_before = env.state.verify_timeouts
        return env

    def _end_step(self, env: MathEnv, report: str, feedback: str) -> None:
        """Write the step's report (``state.last_report``, no verdict) and its ``feedback`` (with the
        verdicts), and label a step whose checks timed out (when it did not fail otherwise)."""
        env.state.last_report = report
        self.feedback = feedback
        if self.failure is None and env.state.verify_timeouts > self._timeouts_before:
            self.failure = VERIFY_TIMEOUT

    def _parse_failed(self, env: MathEnv) -> None:
        state = env.state
        state.last_report = f"{self.role} response not understood ({self.parse_error}); nothing changed"
        self.local_reward = rewards.reasoner_local_reward(None, False)  # -1, as for the tool agent
        self.failure = "parse_error"
        self.feedback = state.last_report

    def _record_tool_run(self, state: MathState, run: ToolRun) -> tuple[str, str]:
        """Append ``run`` and set the step's failure from its outcome; its report line without and with the verdict."""
        state.tool_runs.append(run)
        self.failure = None if run.outcome != "failed" else _failure_label(run)
        what = "its program" if run.tool == "python" else "the calculator"
        if run.answer is None:
            report = f"{self.role} ran {what}: failed ({run.error or 'printed nothing'})"
            return report, report
        report = f"{self.role} ran {what}: gave {run.answer}"
        return report, _with_verdict(report, run.verified)

    @staticmethod
    def _takes_tool_answer(env: MathEnv, answer: str) -> bool:
        """Whether ``answer`` is ``tool`` under ``accept_tool_answer`` (it then stands for the tool's answer)."""
        return env.config.accept_tool_answer and answer.strip().lower() == TOOL_ANSWER

    def _resolve(self, env: MathEnv, answer: str) -> str | None:
        """The answer ``answer`` stands for: the latest tool answer for ``tool`` (with ``accept_tool_answer``;
        None when there is none to take), else ``answer`` itself."""
        return env.state.tool_answer if self._takes_tool_answer(env, answer) else answer

    def _no_tool_answer(self, env: MathEnv) -> None:
        state = env.state
        state.last_report = f"{self.role} took the tool's answer, but there is none; nothing changed"
        self.local_reward = rewards.reasoner_local_reward(None, False)
        self.failure = "parse_error"
        self.feedback = state.last_report

    async def _record_answer(self, env: MathEnv, given: str, answer: str) -> tuple[bool, str, str]:
        """Verify and append ``answer`` (what ``given`` stands for); whether it verifies, and its report line
        without and with the verdict."""
        state = env.state
        verified = await _verify(env, answer)
        state.answers.append(answer)
        state.answers_verified.append(verified)
        took = "took the tool's answer: " if self._takes_tool_answer(env, given) else ""
        report = f"{self.role} {took}answered {answer}"
        return verified, report, _with_verdict(report, verified)


def _failure_label(run: ToolRun) -> str:
    status = run.error.split(":", 1)[0].replace(" ", "_")
    return _FAILURE_LABELS.get(status, "tool_error")


class ToolGenerationAgent(MathAgent):
    """The tool agent: a program printing the answer (``tool: python``) or an expression (``calculator``)."""

    default_role = "tool_generator"

    def update_from_env(self, turn_idx: int, env_data: Any) -> Prompt:
        env = self._check_env(env_data)
        state: MathState = env.state
        self.tool = env.config.tool
        lines = self._state_lines(env, turn_idx, "Your", "The reasoner's")
        lines.append("Compute the answer now." if state.tool_run is None else "Fix or improve your computation.")
        named = bool(state.problem.metadata.get("quantities"))
        return self._prompt(prompts.tool_system(self.tool, named), lines)

    def parse(self, response: str) -> str:
        source = parse_tool_call(self.tool, response)
        if not source:
            fence = "```python" if self.tool == "python" else "```calc"
            raise ParseError(f"no {fence} block in the response")
        return source

    def format_response(self, source: str) -> str:
        """A response this agent's parser reads back as ``source`` (for scripted policies)."""
        return format_tool_call(self.tool, source)

    async def step(self, env_data: Any, env_worker: Any = None) -> None:
        env = self._begin_step(env_data)
        if env is None:
            return
        state: MathState = env.state
        run = await run_tool(env, env_worker, self.tool, self.action)
        report, feedback = self._record_tool_run(state, run)
        state.agreed = await _agree(env, run.answer, state.answer)
        self.local_reward = rewards.tool_local_reward(run.outcome)
        self._end_step(env, report, feedback)


class ReasoningAgent(MathAgent):
    """The reasoner: reads the tool's result and gives the final answer as ``\\boxed{...}``."""

    default_role = "reasoning_generator"

    def update_from_env(self, turn_idx: int, env_data: Any) -> Prompt:
        env = self._check_env(env_data)
        self.tool = env.config.tool
        lines = self._state_lines(env, turn_idx, "The tool agent's", "Your")
        lines.append("Give your final answer as \\boxed{answer}.")
        return self._prompt(prompts.reasoner_system(self.tool, env.config.accept_tool_answer), lines)

    def parse(self, response: str) -> str:
        answer = extract_answer(response)
        if answer is None:
            raise ParseError("no \\boxed{answer} (or #### answer) in the response")
        return answer

    def format_response(self, answer: str) -> str:
        return format_answer(answer)

    async def step(self, env_data: Any, env_worker: Any = None) -> None:
        env = self._begin_step(env_data)
        if env is None:
            return
        state: MathState = env.state
        answer = self._resolve(env, self.action)
        if answer is None:
            self._no_tool_answer(env)
            return
        verified, report, feedback = await self._record_answer(env, self.action, answer)
        state.agreed = await _agree(env, answer, state.tool_answer)
        # The judgement part (env.judgement_reward; 0: off) reads the verdicts after the step, for the reward
        # alone: the report and feedback stay as they are, and no prompt reads a reward.
        run = state.tool_run
        tool_verified = None if run is None or run.answer is None else run.verified
        judgement = rewards.reasoner_judgement_reward(tool_verified, state.agreed, verified,
                                                      env.config.judgement_reward)
        self.local_reward = rewards.reasoner_local_reward(answer, verified) + judgement
        self._end_step(env, report, feedback)


class MathSingleAgent(MathAgent):
    """The reasoner alone (policy level L0) with the tool of ``single_tool``: a response may call the tool
    (its result shows next turn) and/or give the final answer; the first answer ends the episode."""

    default_role = "single"

    def update_from_env(self, turn_idx: int, env_data: Any) -> Prompt:
        env = self._check_env(env_data)
        state: MathState = env.state
        self.tool = env.config.single_tool
        if self.tool != "none":
            lines = self._state_lines(env, turn_idx, "Your", None)
        else:
            lines = prompts.problem_lines(state.problem, turn_idx, env.config.max_turns)
        lines.append("Give your final answer as \\boxed{answer}." if self.tool == "none" else
                     "Compute, or give your final answer as \\boxed{answer}.")
        named = bool(state.problem.metadata.get("quantities"))
        return self._prompt(prompts.single_system(self.tool, named, env.config.accept_tool_answer), lines)

    def parse(self, response: str) -> tuple[str | None, str | None]:
        source = parse_tool_call(self.tool, response) if self.tool != "none" else None
        answer = extract_answer(response)
        if not source and answer is None:
            wanted = "\\boxed{answer}" + ("" if self.tool == "none" else f" or a {self.tool} call")
            raise ParseError(f"no {wanted} in the response")
        return source or None, answer

    def format_response(self, action: tuple[str | None, str | None]) -> str:
        """A response this agent's parser reads back as ``(tool source, answer)`` (either may be None)."""
        source, answer = action
        parts = ([format_tool_call(self.tool, source)] if source else []) + ([format_answer(answer)] if answer else [])
        if not parts:
            raise ValueError("`action` must hold a tool call or an answer")
        return "\n".join(parts)

    async def step(self, env_data: Any, env_worker: Any = None) -> None:
        env = self._begin_step(env_data)
        if env is None:
            return
        state: MathState = env.state
        source, given = self.action
        run = None
        reports: list[tuple[str, str]] = []  # (report, feedback) of the tool call, then of the answer
        if source is not None:
            run = await run_tool(env, env_worker, self.tool, source)
            reports.append(self._record_tool_run(state, run))
        answer = None if given is None else self._resolve(env, given)
        if given is not None and answer is None and run is None:
            self._no_tool_answer(env)
            return
        if answer is not None:
            verified, report, feedback = await self._record_answer(env, given, answer)
            reports.append((report, feedback))
            self.local_reward = rewards.reasoner_local_reward(answer, verified)
        else:
            assert run is not None
            self.local_reward = rewards.tool_local_reward(run.outcome)
        # The report is the step's last part (the answer, when there is one); the feedback lists both.
        self._end_step(env, reports[-1][0], "\n".join(feedback for _, feedback in reports))
