"""Red team of the math environment's prompts: no verdict against the reference reaches an agent.

The environment verifies every answer against the problem's reference, for the rewards. If a prompt showed
that verdict, a team could guess, keep whatever the prompt calls correct and succeed without solving
anything (in training and in evaluation alike). So, for every role and tool:

* two episodes that differ only in the reference answer (same question, same responses, so the answers are
  right in one and wrong in the other) get identical prompts at every step, and end at the same step;
* prompt building never reads a verdict: the verdict fields are swapped for objects that raise on any use
  while each prompt is built;
* no prompt and no ``last_report`` says checked / correct / wrong; the verdicts stay in the state and in the
  step's ``feedback`` (transcripts, for people), and the rewards still follow them;
* a "guess and keep" policy, which keeps an answer its prompt marks correct, does no better than guessing
  blind, while against a leaky prompt (the version-1 text, rebuilt here) it solves every problem;
* a check that times out counts as wrong, is counted in the state and labels its step ``verify_timeout``.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import re
import sys
from contextlib import contextmanager

import pytest

from pettingllms.envs.math import prompts
from pettingllms.envs.math.agents import VERIFY_TIMEOUT, MathAgent
from pettingllms.envs.math.data import MathProblem, write_jsonl
from pettingllms.registry import make_agents, make_env
from pettingllms.scripted import RolePolicy, play_episode

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

QUESTION = "A box holds some apples. How many apples are in the box?"
#: Words that would carry a verdict; none may appear in a prompt or in ``last_report``.
VERDICT_WORDS = re.compile(r"check|correct|wrong|verif|right|success|solved|true|false", re.IGNORECASE)


@pytest.fixture(scope="module")
def pool():
    from pettingllms.sandbox import SandboxConfig, SandboxPool

    config = SandboxConfig(cpu_time_s=2, wall_time_s=10, memory_mb=256, file_size_mb=1, scratch_mb=8,
                           max_processes=16, max_open_files=32, max_output_bytes=1 << 18)
    with SandboxPool(config, max_workers=2) as p:
        yield p


def _env(tmp_path, reference: str, **fields):
    """A math environment whose only problem is :data:`QUESTION` with ``reference`` as its answer."""
    folder = tmp_path / f"reference-{reference}"
    folder.mkdir(exist_ok=True)
    write_jsonl(folder / "test.jsonl", [MathProblem(problem_id="fixture/apples", dataset="gsm8k", split="test",
                                                    question=QUESTION, answer=reference)])
    env = make_env("math", {"dataset": "gsm8k", "data_dir": str(folder), "max_turns": 3, **fields})
    return env, make_agents("math", env.config.turn_order)


class _Poison:
    """Stands in for a verdict while a prompt is built: any use of it (truth, comparison, text, indexing)
    fails the test."""

    def _fail(self, *args, **kwargs):
        raise AssertionError("a prompt builder read a verdict")

    __bool__ = __eq__ = __ne__ = __str__ = __repr__ = __format__ = __len__ = __iter__ = __getitem__ = _fail
    __hash__ = None


@contextmanager
def _verdicts_hidden(state):
    runs_verified = [run.verified for run in state.tool_runs]
    answers_verified = state.answers_verified
    for run in state.tool_runs:
        run.verified = _Poison()
    state.answers_verified = _Poison()
    try:
        yield
    finally:
        for run, verified in zip(state.tool_runs, runs_verified):
            run.verified = verified
        state.answers_verified = answers_verified


def _text(prompt) -> str:
    return prompt if isinstance(prompt, str) else "\n".join(f"[{m['role']}] {m['content']}" for m in prompt)


def _play(env, agents, responses: dict[str, list[str]], worker=None) -> dict:
    """Play one episode with fixed responses per role, building every prompt with the verdicts hidden.
    Returns the prompts, the reports and feedback of each step, the verdicts and the outcome."""

    async def run():
        await env.reset(0)
        for agent in agents:
            agent.reset()
        queues = {role: list(texts) for role, texts in responses.items()}
        record = {"prompts": [], "reports": [], "feedback": [], "rewards": []}
        while not env.done:
            agent = agents[env.state.position]
            with _verdicts_hidden(env.state):
                prompt = agent.update_from_env(env.state.turn, env)
            record["prompts"].append((agent.role, env.state.turn, _text(copy.deepcopy(prompt))))
            agent.update_from_model(queues[agent.role].pop(0))
            result = await env.step_agent(agent, worker)
            record["reports"].append(env.state.last_report)
            record["feedback"].append(result.feedback)
            record["rewards"].append(result.reward)
        state = env.state
        record["verdicts"] = ([run.verified for run in state.tool_runs], list(state.answers_verified))
        record["success"] = env.success
        return record

    return asyncio.run(run())


def _calc(expression: str) -> str:
    return f"```calc\n{expression}\n```"


def _python(program: str) -> str:
    return f"```python\n{program}\n```"


# Each workflow: env fields and responses for a 2-3 turn episode whose answers are right under one reference
# (7) and wrong under the other (8), and the other way round. The team never agrees (7 vs 8, then 9 vs 7, then
# the tool fails); the single agent computes twice and answers in its third turn.
WORKFLOWS = {
    "team-calculator": ({"tool": "calculator"}, {
        "tool_generator": [_calc("3 + 4"), _calc("4 + 5"), _calc("1/0")],
        "reasoning_generator": ["\\boxed{8}", "\\boxed{7}", "\\boxed{7}"]}),
    "team-calculator-accept": ({"tool": "calculator", "accept_tool_answer": True}, {
        "tool_generator": [_calc("4 + 4"), _calc("3 + 4")],
        "reasoning_generator": ["\\boxed{7}", "\\boxed{tool}"]}),
    "team-python": ({"tool": "python"}, {
        "tool_generator": [_python("print(3 + 4)"), _python("print(9)"), _python("raise ValueError('no')")],
        "reasoning_generator": ["\\boxed{8}", "\\boxed{7}", "\\boxed{7}"]}),
    "single-none": ({"turn_order": ["single"], "single_tool": "none"}, {
        "single": ["I would rather not say.", "\\boxed{7}"]}),
    "single-calculator": ({"turn_order": ["single"], "single_tool": "calculator"}, {
        "single": [_calc("3 + 4"), _calc("4 + 4"), "\\boxed{7}"]}),
    "single-calculator-accept": ({"turn_order": ["single"], "single_tool": "calculator", "accept_tool_answer": True}, {
        "single": [_calc("4 + 4"), _calc("3 + 4") + "\n\\boxed{tool}"]}),
    "single-python": ({"turn_order": ["single"], "single_tool": "python"}, {
        "single": [_python("print(3 + 4)"), _python("print(8)"), "\\boxed{7}"]}),
}
NEEDS_SANDBOX = {"team-python", "single-python"}


def _params():
    for name in WORKFLOWS:
        marks = [linux_only] if name in NEEDS_SANDBOX else []
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("workflow", _params())
def test_prompts_do_not_depend_on_whether_the_answers_are_right(workflow, tmp_path, request):
    fields, responses = WORKFLOWS[workflow]
    worker = request.getfixturevalue("pool") if workflow in NEEDS_SANDBOX else None
    right = _play(*_env(tmp_path, "7", **fields), responses, worker)
    wrong = _play(*_env(tmp_path, "8", **fields), responses, worker)

    # The two episodes differ in every verdict and in what the environment rewards ...
    assert right["verdicts"] != wrong["verdicts"]
    assert right["rewards"] != wrong["rewards"]
    assert right["success"] is True and wrong["success"] is False
    # ... but not in anything an agent saw, nor in when they ended.
    assert right["prompts"] == wrong["prompts"]
    turns = {turn for _, turn, _ in right["prompts"]}
    assert len(turns) >= 2  # a multi-turn episode: later prompts show earlier results
    roles = {role for role, _, _ in right["prompts"]}
    assert roles == set(responses)
    for episode in (right, wrong):
        for role, turn, text in episode["prompts"]:
            assert not VERDICT_WORDS.search(text), f"{workflow}, {role} turn {turn}: {text}"
        assert not any(VERDICT_WORDS.search(report) for report in episode["reports"]), episode["reports"]
    # Tool results are shown (that is the workflow), only without their check.
    assert re.search(r"Result: [789]\n", "\n".join(text for _, _, text in right["prompts"])) or workflow == "single-none"
    # The verdicts went to the transcripts' feedback instead, and there they differ.
    verdicts_in_feedback = [re.findall(r"\((correct|wrong)\)", f) for f in right["feedback"]]
    assert any(verdicts_in_feedback) and verdicts_in_feedback != [re.findall(r"\((correct|wrong)\)", f)
                                                                  for f in wrong["feedback"]]


class GuessAndKeep:
    """An adversarial reasoner: it answers the next of ``guesses`` each turn, unless its prompt marks its last
    answer correct, in which case it keeps that answer. It reads only its prompt."""

    def __init__(self, guesses: list[str]) -> None:
        self.guesses = guesses
        self.responses: list[str] = []

    def respond(self, agent, env) -> str:
        text = _text(agent.prompt)
        kept = re.search(r"last answer: (\S+) \(checked: correct\)", text)
        turn = int(re.search(r"Turn (\d+) of", text).group(1))
        answer = kept.group(1) if kept else self.guesses[turn - 1]
        self.responses.append(f"\\boxed{{{answer}}}")
        return self.responses[-1]


class _Fixed:
    def __init__(self, text: str) -> None:
        self.text = text

    def respond(self, agent, env) -> str:
        return self.text


def _guess_and_keep(tmp_path, reference: str) -> tuple[bool, list[str]]:
    """One episode of the guesser as the reasoner beside a tool agent that always computes 0 (never a guess:
    the two never agree, so every turn is played); its success and responses."""
    guesser = GuessAndKeep(["5", "6", "7"])
    env, agents = _env(tmp_path, reference, tool="calculator")
    policy = RolePolicy({"tool_generator": _Fixed(_calc("0")), "reasoning_generator": guesser})
    result = asyncio.run(play_episode(env, agents, policy, seed=0))
    assert env.state.turn == 3 and not env.state.agreed
    return result.success, guesser.responses


def _leaky_state_lines(self, env, turn_idx, tool_owner, answers_owner):
    """The version-1 prompt lines, verdict included (what this test must show to be exploitable)."""
    state = env.state
    lines = prompts.problem_lines(state.problem, turn_idx, env.config.max_turns)
    lines += prompts.tool_lines(state.tool_run, tool_owner)
    if answers_owner is not None and state.answers:
        check = "correct" if state.answers_verified[-1] else "wrong"
        lines.append(f"{answers_owner} last answer: {state.answers[-1]} (checked: {check})")
    return lines


def test_guess_and_keep_learns_nothing_from_the_prompts(tmp_path, monkeypatch):
    references = ["5", "6", "7"]
    played = {reference: _guess_and_keep(tmp_path, reference) for reference in references}
    # Blind: the same three guesses whatever the reference, so it succeeds only where its last guess is right.
    assert len({tuple(responses) for _, responses in played.values()}) == 1
    assert {reference: success for reference, (success, _) in played.items()} == {"5": False, "6": False, "7": True}
    # The same policy against prompts that show the check finds and keeps every reference: the test has teeth.
    monkeypatch.setattr(MathAgent, "_state_lines", _leaky_state_lines)
    leaky = {reference: _guess_and_keep(tmp_path, reference) for reference in references}
    assert all(success for success, _ in leaky.values())
    assert leaky["5"][1] == ["\\boxed{5}"] * 3


def test_an_answer_whose_check_times_out_is_wrong_counted_and_labelled(tmp_path):
    env, agents = _env(tmp_path, "7", turn_order=["single"], single_tool="none", verify_timeout_s=0.5)
    nested = "(" * 3000 + "7" + ")" * 3000  # math-verify takes seconds over it (see test_math_verify)
    result = asyncio.run(play_episode(env, agents, _Fixed(f"\\boxed{{{nested}}}"), seed=0))
    step = result.steps[0]
    assert not result.success and env.done  # the first answer ends a single agent's episode, as always
    assert env.state.answers == [nested] and env.state.answers_verified == [False]
    assert env.state.verify_timeouts == 1
    assert step.failure == VERIFY_TIMEOUT and step.local_reward == 0.0 and step.feedback.endswith("(wrong)")
    # a quick answer in the same environment is not labelled
    result = asyncio.run(play_episode(env, agents, _Fixed("\\boxed{7}"), seed=0))
    assert result.success and result.steps[0].failure is None and env.state.verify_timeouts == 0


def _prompt_digest(tmp_path) -> str:
    """A digest of every system prompt and of every user prompt of three fixed calculator episodes (their
    problem, settings and responses are part of the digest: leave them as they are)."""
    texts = [prompts.tool_system(tool, named) for tool in prompts.TOOL_HELP for named in (False, True)]
    texts += [prompts.reasoner_system(tool, accept) for tool in prompts.TOOL_HELP for accept in (False, True)]
    texts += [prompts.single_system(tool, named, accept) for tool in ("none", *prompts.TOOL_HELP)
              for named in (False, True) for accept in (False, True)]
    episodes = [
        ({"tool": "calculator"}, {"tool_generator": [_calc("3 + 4"), "no call", _calc("1/0")],
                                  "reasoning_generator": ["\\boxed{8}", "no answer", "\\boxed{9}"]}),
        ({"turn_order": ["single"], "single_tool": "calculator"}, {"single": [_calc("3 + 4"), "\\boxed{7}"]}),
        ({"turn_order": ["single"], "single_tool": "none"}, {"single": ["\\boxed{7}"]}),
    ]
    for fields, responses in episodes:
        texts += [text for _, _, text in _play(*_env(tmp_path, "7", **fields), responses)["prompts"]]
    return hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:16]


#: The digest of the prompt text of each PROMPT_VERSION (since version 2).
PROMPT_DIGESTS = {2: "97755df5d1834068"}


def test_prompt_text_changes_bump_the_prompt_version(tmp_path):
    assert isinstance(prompts.PROMPT_VERSION, int) and not isinstance(prompts.PROMPT_VERSION, bool)
    digest = _prompt_digest(tmp_path)
    assert PROMPT_DIGESTS.get(prompts.PROMPT_VERSION) == digest, (
        f"the math prompt text changed (digest {digest}): bump PROMPT_VERSION in pettingllms/envs/math/prompts.py "
        f"and record the new digest in PROMPT_DIGESTS"
    )
