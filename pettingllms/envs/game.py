"""The game-and-planning workflow shared by Plan-Path, Sokoban and Sudoku.

Roles. Each turn the **tool agent** calls tools (the environment's own tool, ``simulate`` or ``check``,
and, when enabled, ``python``, which runs code through an env worker) and leaves a report and a
proposal in the state; then the **plan agent** gives the final action, which changes the real state.
The **single agent** (policy level L0) is a plan agent that works alone; given the team's tools (its
``tools`` option, e.g. ``env.agent_options.single.tools: [simulate]``) each of its turns is either a tool
turn (calls as the tool agent's, its best result becomes its own proposal, shown in its next prompt) or an
action turn (``#### <answer>``, or ``#### proposal`` to play that proposal), so with twice the team's turns it
has the team's model calls and tool calls per episode (the fair single-agent baseline). The workflow repeats
until the goal, an unwinnable state, or the turn budget.

Rewards (defaults in :class:`GameConfig`; every environment documents its task reward):

* global: ``task_reward(state)`` of the state right after the step, a *level*, not an increment:
  1.0 when solved, else ``0.5 * progress`` with ``progress`` in [0, 1) (0 for an unwinnable state).
* plan / single agent, local, an *increment*:
  ``task_reward(after) - task_reward(before) - invalid_action_penalty * invalid``, where ``invalid``
  counts the parts of the action the rules rejected (no-op moves into walls, changed givens);
  ``parse_error_reward`` (state unchanged) when the answer does not parse.
* tool agent, local, an *increment* measured on a copy (the real state does not change):
  the same formula for its proposal against the current state; ``tool_failure_reward`` when no call
  produced a proposal (invalid argument, code that errors, times out, hits a limit or prints no answer);
  ``parse_error_reward`` when the response holds no tool call.
* single agent with tools: an action turn as the plan agent's; a tool turn earns 0 (it changes nothing, so
  calling tools forever earns nothing in any return mode), ``tool_failure_reward`` when no call worked.

Proposal. A tool agent may try several candidates in one response (up to ``max_tool_calls``); its
proposal is the candidate whose simulated result is best *as the agents can judge it*: the highest
increment of :meth:`GameEnv.observable_reward_of` (the task reward computed from the rules and the
shown board alone), the earliest among equals, as a search through the simulator would keep. The plan
agent sees every call's report and the proposal, so the choice must read no hidden gold: were it made by
the task reward of a game that scores against a hidden solution (Sudoku), trying every value of a cell
would make the proposal the solution's value. The tool agent's local reward is then the task-reward
increment of the proposal it kept.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from pettingllms.agents.base import Agent, Prompt, build_prompt
from pettingllms.agents.code_runner import EXECUTION_STATUSES
from pettingllms.agents.failures import InfrastructureError, ParseError, ToolConfigurationError
from pettingllms.envs.base import BaseEnv, EnvConfig, EnvState
from pettingllms.envs.game_parsers import PYTHON_TOOL, ToolCall, extract_final_answer, parse_tool_calls

_STATUS_FAILURE = {"error": "tool_error", "timeout": "tool_timeout", "killed": "tool_killed"}
_OUTPUT_LIMIT = 300


def action_local_reward(before: float, after: float, invalid: int, penalty: float) -> float:
    """Local reward of an action (or a proposal): the task-reward increment minus the invalid-part penalty."""
    if invalid < 0:
        raise ValueError(f"`invalid` must be >= 0, got {invalid}")
    return (after - before) - penalty * invalid


def level_reward(solved: bool, progress: float) -> float:
    """The games' task reward: 1.0 when solved, else ``0.5 * progress`` (``progress`` clipped to [0, 1])."""
    if solved:
        return 1.0
    return 0.5 * min(1.0, max(0.0, progress))


@dataclass(frozen=True)
class GameConfig(EnvConfig):
    """Settings shared by the game environments (see :class:`~pettingllms.envs.base.EnvConfig`).

    > Rewards

    - ``parse_error_reward``: local reward of a response that does not parse.
    - ``tool_failure_reward``: local reward of a tool turn in which no call produced a proposal.
    - ``invalid_action_penalty``: subtracted per rejected part of an action or proposal.
    """

    parse_error_reward: float = -1.0
    tool_failure_reward: float = -0.5
    invalid_action_penalty: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("parse_error_reward", "tool_failure_reward", "invalid_action_penalty"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"`{name}` must be a finite number, got {value!r}")
        if self.invalid_action_penalty < 0:
            raise ValueError(f"`invalid_action_penalty` must be >= 0, got {self.invalid_action_penalty}")


@dataclass(frozen=True)
class ToolReport:
    """One tool call as the plan agent sees it: tool, argument (shortened), whether it worked, output."""

    name: str
    argument: str
    ok: bool
    output: str


@dataclass(kw_only=True)
class GameState(EnvState):
    """Blackboard fields shared by the games (each game's state adds its board).

    - ``tool_reports``: the tool agent's calls of its latest step.
    - ``proposal``: canonical text of the tool agent's latest proposal, ``None`` if it made none.
    - ``last_report``: what the latest real action did (or why it was rejected).
    - ``actions_taken``: real actions applied so far (plan / single steps that parsed).
    """

    tool_reports: list[ToolReport] = field(default_factory=list)
    proposal: str | None = None
    last_report: str = ""
    actions_taken: int = 0


@dataclass(frozen=True)
class Outcome:
    """Effect of applying an answer: number of rejected parts and a one-line report."""

    invalid: int
    report: str


@dataclass(frozen=True)
class GamePrompts:
    """The text pieces of one game's prompts (kept short: small models read them).

    ``task`` states the rules and symbols; ``tool_help`` describes the environment tool;
    ``python_help`` says what a python tool call reads on stdin and must print; ``answer_help`` and
    ``answer_example`` describe the final answer.
    """

    task: str
    tool_help: str
    python_help: str
    answer_help: str
    answer_example: str


@dataclass(frozen=True)
class GameSpec:
    """What the agents of one game need without holding the environment: names, prompts, parser."""

    env_name: str
    env_tool: str
    prompts: GamePrompts
    parse_answer: Callable[[str, Any], Any]
    format_answer: Callable[[Any], str]


GS = TypeVar("GS", bound=GameState)


class GameEnv(BaseEnv[GS], Generic[GS]):
    """Base of the game environments: answer parsing/applying hooks, rendering, oracle and random answers.

    Subclasses set ``spec`` and implement :meth:`answer_spec`, :meth:`apply_answer` (pure: returns a
    new state, never mutates its argument), :meth:`render`, :meth:`oracle_answer` and
    :meth:`random_answer`, plus the :class:`~pettingllms.envs.base.BaseEnv` hooks.
    """

    config_class: ClassVar[type[EnvConfig]] = GameConfig
    roles: ClassVar[tuple[str, ...]] = ("tool", "plan", "single")
    spec: ClassVar[GameSpec]
    # Every game has a solver (oracle_answer) and random well-formed answers (random_answer).
    scripted_policies: ClassVar[Mapping[str, str]] = {
        "oracle": "pettingllms.scripted:OraclePolicy",
        "random": "pettingllms.scripted:RandomPolicy",
    }

    def answer_spec(self) -> Any:
        """Immutable parameters the answer parser needs (limits, board size)."""
        raise NotImplementedError

    def parse_answer(self, text: str) -> Any:
        return self.spec.parse_answer(text, self.answer_spec())

    def format_answer(self, answer: Any) -> str:
        return self.spec.format_answer(answer)

    def apply_answer(self, state: GS, answer: Any) -> tuple[GS, Outcome]:
        raise NotImplementedError

    def observable_reward_of(self, state: GS) -> float:
        """The task reward as the agents can work it out from the rules and what their prompts show: the tool
        agent keeps the candidate that raises it most as its proposal, which the plan agent's prompt shows,
        so it must read no hidden gold. Default: :meth:`task_reward_of`, right where the task reward is a
        function of the shown board (Plan-Path, Sokoban, Eight Queens, Blocksworld); a game that scores
        against a hidden solution overrides it (Sudoku)."""
        return self.task_reward_of(state)

    def render(self, state: GS) -> str:
        raise NotImplementedError

    def oracle_answer(self, state: GS) -> Any:
        """An answer that solves ``state`` (from the env's solver); ValueError when none exists."""
        raise NotImplementedError

    def random_answer(self, state: GS, rng: random.Random) -> Any:
        """A well-formed random answer drawn from ``rng``."""
        raise NotImplementedError


# ---- prompts -----------------------------------------------------------------------------------------

def _tool_lines(prompts: GamePrompts, env_tool: str, tools: tuple[str, ...]) -> str:
    lines = []
    for tool in tools:
        lines.append(f"- {prompts.tool_help}" if tool == env_tool else f"- {prompts.python_help}")
    return "\n".join(lines)


def _shorten(text: str, limit: int = _OUTPUT_LIMIT) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _status_lines(env: GameEnv, state: GameState, turn_idx: int, instruction: str) -> list[str]:
    """Turn, instruction, last action, then the board last: what the answer depends on sits right before
    it, at a fixed distance, which small models learn to read far sooner than text further back."""
    return [
        f"Turn {turn_idx + 1} of {env.config.max_turns}. {instruction}",
        f"Last action: {state.last_report or 'none yet'}",
        "Current state:",
        env.render(state),
    ]


def _report_lines(state: GameState) -> list[str]:
    if not state.tool_reports and state.proposal is None:
        return ["Tool report: none yet."]
    lines = ["Tool report:"]
    for report in state.tool_reports:
        mark = "" if report.ok else " (failed)"
        argument = f": {_shorten(report.argument, 80)}" if report.argument else ""
        lines.append(f"- {report.name}{argument}{mark} -> {report.output}")
    lines.append(f"Tool proposal: {state.proposal if state.proposal is not None else 'none'}")
    return lines


# ---- agents ------------------------------------------------------------------------------------------

class GameAgent(Agent):
    """Shared parts of the game agents: the game spec, the parse context captured from the env."""

    spec: ClassVar[GameSpec]

    def __init__(self, *, role: str | None = None, prompt_style: str = "chat") -> None:
        super().__init__(role=role, prompt_style=prompt_style)
        self._answer_spec: Any = None

    def _check_env(self, env: Any) -> GameEnv:
        if not isinstance(env, GameEnv) or env.spec.env_name != self.spec.env_name:
            raise TypeError(
                f"{type(self).__name__} plays {self.spec.env_name!r}, got env {getattr(env, 'name', env)!r}"
            )
        return env

    def _answer_context(self) -> Any:
        if self._answer_spec is None:
            raise RuntimeError(f"{type(self).__name__}: call update_from_env before update_from_model")
        return self._answer_spec

    def format_response(self, answer: Any) -> str:
        """A response that this agent's parser reads back as ``answer`` (used by scripted policies)."""
        raise NotImplementedError


#: The plan agent's answer that plays the tool agent's proposal.
ACCEPT_PROPOSAL = "proposal"


def _checked_tools(spec: GameSpec, tools: Any, max_tool_calls: Any, code_timeout: Any) -> tuple[str, ...]:
    """``tools`` as a tuple after the checks every tool-calling agent's options pass (errors name the option)."""
    allowed = (spec.env_tool, PYTHON_TOOL)
    if isinstance(tools, str) or not tools:
        raise ValueError(f"`tools` must be a list of at least one of {list(allowed)}, got {tools!r}")
    tools = tuple(tools)
    for tool in tools:
        if tool not in allowed:
            raise ValueError(f"`tools` entry {tool!r} is not a {spec.env_name} tool; choose from {list(allowed)}")
    if len(set(tools)) != len(tools):
        raise ValueError(f"`tools` must not repeat a tool, got {list(tools)}")
    if isinstance(max_tool_calls, bool) or not isinstance(max_tool_calls, int) or max_tool_calls < 1:
        raise ValueError(f"`max_tool_calls` must be an integer >= 1, got {max_tool_calls!r}")
    if code_timeout is not None and not code_timeout > 0:
        raise ValueError(f"`code_timeout` must be > 0 seconds or None, got {code_timeout!r}")
    return tools


def _tool_call_text(spec: GameSpec, tools: tuple[str, ...], answer: Any) -> str:
    """One tool call (of the agent's first tool) whose result is ``answer`` (what scripted policies write)."""
    text = spec.format_answer(answer)
    if tools[0] == PYTHON_TOOL:
        return f"```python\nprint({('#### ' + text)!r})\n```"
    return f"{tools[0]}: {text}"


async def _run_python(agent: GameAgent, env: GameEnv, code: str, env_worker: Any) -> tuple[Any, str, str | None]:
    """(answer or None, report text, failure label or None) of one python call."""
    if env_worker is None or not hasattr(env_worker, "run"):
        raise ToolConfigurationError(
            f"{type(agent).__name__}: the python tool needs an env worker with `run`, got {env_worker!r}"
        )
    try:
        result = await env_worker.run(code, stdin=env.render(env.state) + "\n", timeout=agent.code_timeout)
    except InfrastructureError:
        raise
    except Exception as exc:  # the worker, not the program, failed: never reward it
        raise InfrastructureError(f"env worker could not run the python tool: {exc!r}") from exc
    status = getattr(result, "status", None)
    if status not in EXECUTION_STATUSES:
        raise InfrastructureError(f"env worker returned an unknown status {status!r}")
    if status != "ok":
        detail = _shorten(result.stderr or result.stdout or "", 160)
        return None, f"{status}: {detail}".rstrip(": "), _STATUS_FAILURE[status]
    try:
        answer = env.parse_answer(extract_final_answer(result.stdout))
    except ParseError as exc:
        return None, f"no answer in output ({exc}); stdout: {_shorten(result.stdout, 120)}", "no_proposal"
    return answer, "", None


async def _tool_turn(agent: GameAgent, env: GameEnv, calls: tuple[ToolCall, ...], env_worker: Any) -> None:
    """Run ``calls`` on copies of the current state (the real state does not change): every call's report and
    the best candidate as the proposal go into the state; the agent's local reward is the proposal's increment
    (``tool_failure_reward`` when no call gave one) and its failure label, if any, is set."""
    state = env.state
    config: GameConfig = env.config
    reports: list[ToolReport] = []
    proposal, proposal_state, proposal_outcome, proposal_value, last_failure = None, None, None, 0.0, None
    penalty = config.invalid_action_penalty
    for call in calls:
        if call.name == PYTHON_TOOL:
            answer, output, failure = await _run_python(agent, env, call.argument, env_worker)
        else:
            try:
                answer, output, failure = env.parse_answer(call.argument), "", None
            except ParseError as exc:
                answer, output, failure = None, f"error: {exc}", "tool_error"
        if answer is not None:
            new_state, outcome = env.apply_answer(state, answer)
            # Chosen by what the agents can see (the proposal is shown), never by hidden gold.
            value = action_local_reward(
                env.observable_reward_of(state), env.observable_reward_of(new_state), outcome.invalid, penalty
            )
            if proposal_state is None or value > proposal_value:  # the best candidate, earliest on ties
                proposal, proposal_state, proposal_outcome, proposal_value = answer, new_state, outcome, value
            output = (output + " " if output else "") + outcome.report
        else:
            last_failure = failure
        argument = call.argument if call.name != PYTHON_TOOL else f"<{len(call.argument)} chars of code>"
        reports.append(ToolReport(call.name, _shorten(argument, 80), answer is not None, _shorten(output)))
    state.tool_reports = reports
    state.proposal = env.format_answer(proposal) if proposal is not None else None
    if proposal_state is None:
        agent.local_reward = config.tool_failure_reward
        agent.failure = last_failure or "no_proposal"
    else:
        agent.local_reward = action_local_reward(
            env.task_reward_of(state), env.task_reward_of(proposal_state), proposal_outcome.invalid, penalty
        )
    agent.feedback = "\n".join(f"{r.name}: {r.output}" for r in reports)


class ToolAgent(GameAgent):
    """Acts through tools; its action is a tuple of :class:`~pettingllms.envs.game_parsers.ToolCall`.

    ``tools`` (configuration) lists the tools it may use: the environment's own tool and/or ``python``.
    ``code_timeout`` is passed to the env worker for python calls (``None``: the worker's default).
    """

    default_role = "tool"

    def __init__(
        self,
        *,
        role: str | None = None,
        tools: list[str] | tuple[str, ...] | None = None,
        prompt_style: str = "chat",
        max_tool_calls: int = 4,
        code_timeout: float | None = None,
    ) -> None:
        super().__init__(role=role, prompt_style=prompt_style)
        tools = (self.spec.env_tool,) if tools is None else tools
        self.tools = _checked_tools(self.spec, tools, max_tool_calls, code_timeout)
        self.max_tool_calls, self.code_timeout = max_tool_calls, code_timeout

    def update_from_env(self, turn_idx: int, env_data: Any) -> Prompt:
        env = self._check_env(env_data)
        self._answer_spec = env.answer_spec()
        prompts = self.spec.prompts
        system = (
            f"{prompts.task}\nYou are the tool agent: use tools to find a good answer; the plan agent "
            f"then acts.\nTools (one call per line, at most {self.max_tool_calls}; the best result is your "
            f"proposal):\n{_tool_lines(prompts, self.spec.env_tool, self.tools)}"
        )
        example = self.spec.env_tool if self.spec.env_tool in self.tools else PYTHON_TOOL
        closing = (
            f"Call tools now, e.g. `{self.spec.env_tool}: {prompts.answer_example}`."
            if example != PYTHON_TOOL
            else "Call the python tool now with a ```python block."
        )
        user = "\n".join(_status_lines(env, env.state, turn_idx, closing))
        self.prompt = build_prompt(system, user, self.prompt_style)
        return self.prompt

    def parse(self, response: str) -> tuple[ToolCall, ...]:
        return parse_tool_calls(response, self.tools, self.max_tool_calls)

    def format_response(self, answer: Any) -> str:
        return _tool_call_text(self.spec, self.tools, answer)

    async def step(self, env_data: Any, env_worker: Any = None) -> None:
        env = self._check_env(env_data)
        state = env.state
        config: GameConfig = env.config
        self.failure = None
        if self.action is None:
            self.feedback = f"response not understood: {self.parse_error}"
            state.tool_reports = [ToolReport("response", "", False, _shorten(self.feedback))]
            state.proposal = None
            self.local_reward = config.parse_error_reward
            self.failure = "parse_error"
            return
        await _tool_turn(self, env, self.action, env_worker)


class PlanAgent(GameAgent):
    """Gives the final action (``#### <answer>``), applied to the real state; sees the tool report.

    ``#### proposal`` (:data:`ACCEPT_PROPOSAL`, any case) plays the tool agent's current proposal as it
    is; without a proposal it is a parse error. Approving a plan is then one short answer, which a small
    model learns far sooner than copying the plan token by token.
    """

    default_role = "plan"
    #: Whether the prompt shows the tool agent's latest report and proposal (and ``#### proposal`` works).
    sees_tool_report: ClassVar[bool] = True

    def __init__(self, *, role: str | None = None, prompt_style: str = "chat") -> None:
        super().__init__(role=role, prompt_style=prompt_style)
        self._proposal: str | None = None

    def _role_text(self) -> str:
        return (
            "You are the plan agent: read the tool report and give the action to play, or "
            f"`#### {ACCEPT_PROPOSAL}` to play the tool proposal."
        )

    def update_from_env(self, turn_idx: int, env_data: Any) -> Prompt:
        env = self._check_env(env_data)
        self._answer_spec = env.answer_spec()
        self._proposal = env.state.proposal if self.sees_tool_report else None
        prompts = self.spec.prompts
        system = f"{prompts.task}\n{self._role_text()}\n{prompts.answer_help}"
        lines = _status_lines(env, env.state, turn_idx, self._closing())
        if self.sees_tool_report:  # last: the proposal is what a plan agent most often plays
            lines += _report_lines(env.state)
        self.prompt = build_prompt(system, "\n".join(lines), self.prompt_style)
        return self.prompt

    def _closing(self) -> str:
        return f"End with one line `#### <answer>`, e.g. `#### {self.spec.prompts.answer_example}`."

    def parse(self, response: str) -> Any:
        final = extract_final_answer(response)
        if self.sees_tool_report and final.strip().lower() == ACCEPT_PROPOSAL:
            if self._proposal is None:
                raise ParseError(f"`#### {ACCEPT_PROPOSAL}` but the tool agent made no proposal this turn")
            final = self._proposal
        return self.spec.parse_answer(final, self._answer_context())

    def format_response(self, answer: Any) -> str:
        return f"#### {self.spec.format_answer(answer)}"

    async def step(self, env_data: Any, env_worker: Any = None) -> None:
        env = self._check_env(env_data)
        state = env.state
        config: GameConfig = env.config
        self.failure = None
        if self.action is None:
            state.last_report = f"{self.role} answer not understood ({self.parse_error}); nothing changed"
            self.local_reward = config.parse_error_reward
            self.failure = "parse_error"
            self.feedback = state.last_report
            return
        before = env.task_reward_of(state)
        new_state, outcome = env.apply_answer(state, self.action)
        new_state = dataclasses.replace(
            new_state,
            actions_taken=state.actions_taken + 1,
            last_report=f"{self.role} played {env.format_answer(self.action)}: {outcome.report}",
        )
        env.state = new_state
        self.local_reward = action_local_reward(
            before, env.task_reward_of(new_state), outcome.invalid, config.invalid_action_penalty
        )
        self.feedback = new_state.last_report


class SingleAgent(PlanAgent):
    """Does the whole task alone (policy level L0): a plan agent without a tool agent.

    ``tools`` / ``max_tool_calls`` / ``code_timeout`` (the tool agent's options; default: no tools) give it
    the team's tools: a response either calls tools (a *tool turn*, run as the tool agent's, its report and
    proposal shown next turn; it earns 0, or ``tool_failure_reward`` when no call worked) or ends with
    ``#### <answer>`` (an *action turn*, as the plan agent's; ``#### proposal`` plays the proposal, which an
    action clears). A response with both plays the answer and says that its calls were not run."""

    default_role = "single"
    sees_tool_report = False

    def __init__(
        self,
        *,
        role: str | None = None,
        prompt_style: str = "chat",
        tools: list[str] | tuple[str, ...] | None = None,
        max_tool_calls: int = 4,
        code_timeout: float | None = None,
    ) -> None:
        super().__init__(role=role, prompt_style=prompt_style)
        self.tools: tuple[str, ...] = ()
        self.max_tool_calls: int | None = None  # scripted policies read it: set only for a tool user
        self.code_timeout, self._tool_turn, self._ignored_calls = code_timeout, False, 0
        if tools is not None:
            self.tools = _checked_tools(self.spec, tools, max_tool_calls, code_timeout)
            self.max_tool_calls, self.sees_tool_report = max_tool_calls, True  # it sees its own tool report

    @property
    def uses_tools(self) -> bool:
        """Whether each turn may be a tool turn (the agent has the team's tools)."""
        return bool(self.tools)

    def _role_text(self) -> str:
        if not self.uses_tools:
            return "You solve the task alone: give the action to play."
        return (
            "You solve the task alone. Each turn, either call tools (one call per line, at most "
            f"{self.max_tool_calls}; the best result becomes your proposal, shown next turn):\n"
            f"{_tool_lines(self.spec.prompts, self.spec.env_tool, self.tools)}\n"
            f"or give the action to play, or `#### {ACCEPT_PROPOSAL}` to play your proposal."
        )

    def _closing(self) -> str:
        if not self.uses_tools:
            return super()._closing()
        example = self.spec.prompts.answer_example
        call = f"{self.tools[0]}: {example}" if self.tools[0] != PYTHON_TOOL else "a ```python block"
        return f"Call tools (e.g. `{call}`) or end with one line `#### <answer>`."

    def parse(self, response: str) -> Any:
        self._tool_turn, self._ignored_calls = False, 0
        if not self.uses_tools:
            return super().parse(response)
        try:
            extract_final_answer(response)
        except ParseError:
            try:
                calls = parse_tool_calls(response, self.tools, self.max_tool_calls)
            except ParseError as exc:
                raise ParseError(f"no tool call and no `#### <answer>` line ({exc})") from exc
            self._tool_turn = True
            return calls
        answer = super().parse(response)
        try:
            self._ignored_calls = len(parse_tool_calls(response, self.tools, self.max_tool_calls))
        except ParseError:
            pass
        return answer

    def format_tool_response(self, answer: Any) -> str:
        """A tool turn's response whose call finds ``answer`` (used by scripted policies)."""
        if not self.uses_tools:
            raise ValueError(f"{type(self).__name__} has no tools: it answers with `#### <answer>` only")
        return _tool_call_text(self.spec, self.tools, answer)

    async def step(self, env_data: Any, env_worker: Any = None) -> None:
        if not (self.uses_tools and self.action is not None):
            await super().step(env_data, env_worker)
            return
        env = self._check_env(env_data)
        self.failure = None
        if self._tool_turn:
            await _tool_turn(self, env, self.action, env_worker)
            self.local_reward = self.local_reward if self.failure else 0.0  # nothing to farm
            return
        await super().step(env_data, env_worker)
        state = env.state
        if self._ignored_calls:
            state.last_report += f" ({self._ignored_calls} tool call(s) in the same response were not run)"
            self.feedback = state.last_report
        state.proposal, state.tool_reports = None, []  # simulated on the state before the action
