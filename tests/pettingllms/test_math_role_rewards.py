"""The math reasoner's judgement part (``env.judgement_reward``, issue #36) and its red team.

The part pays the reasoner ``b`` when it turns down a wrong tool result (its answer does not agree with the
tool's) and its own answer verifies (:func:`~pettingllms.envs.math.rewards.reasoner_judgement_reward`). Here:

* the pure function pays exactly in the one hand-computed case of every combination of its inputs;
* scripted teams play math/arith (generated offline, the in-process calculator: no sandbox) over fixed seeds
  with a tool agent that is right on even seeds and wrong on odd ones, and degenerate reasoners (always copy
  the tool, always disagree with it, always defer) score strictly below the honest reasoner in every return
  the trainers use (the reasoner's tree-sampling step reward ``alpha * global + local``, independent
  sampling's ``"final"`` and ``"sum"`` trajectory returns), with the part on, and in every tree group of a
  decision point the honest candidate is never beaten;
* with the part off (the default, or ``0``) every number is today's: the reward functions recomputed from the
  state, and the returns pinned by hand;
* the part never reaches an agent: the prompts after a paid step are the same with the part on or off, and
  name no verdict, reward or bonus;
* the single agent is never paid it (it makes the tool result it would turn down);
* the field is validated and reaches the run configs' ``env`` section.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
import re

import pytest

from pettingllms.config import load_config
from pettingllms.config.env_section import env_arguments
from pettingllms.envs.math import rewards
from pettingllms.envs.math.agents import TOOL_ANSWER, format_answer, format_tool_call
from pettingllms.envs.math.calculator import evaluate, format_number
from pettingllms.envs.math.scripted import MathOraclePolicy
from pettingllms.execution.samples import trajectory_return
from pettingllms.registry import make_agents, make_env
from pettingllms.scripted import RolePolicy, play_episode

TOOL, REASONER = "tool_generator", "reasoning_generator"
SEEDS = tuple(range(8))  # even: the tool is right, odd: it is wrong (every turn)
BONUS = 1.0
#: Words that would carry a verdict or the part; none may appear in a prompt.
LEAK_WORDS = re.compile(r"check|correct|wrong|verif|right|success|solved|true|false|bonus|reward|judg|reject|score",
                        re.IGNORECASE)


# ---- the pure function -------------------------------------------------------------------------------------


@pytest.mark.parametrize("tool_verified, took, own", list(itertools.product((True, False, None), (True, False),
                                                                            (True, False))))
def test_the_part_pays_exactly_a_right_rejection_of_a_wrong_tool_result(tool_verified, took, own):
    paid = tool_verified is False and not took and own  # the one case, by hand
    for bonus in (0.0, 0.25, 1.0, 3):
        value = rewards.reasoner_judgement_reward(tool_verified, took, own, bonus)
        assert type(value) is float and value == (float(bonus) if paid else 0.0)


@pytest.mark.parametrize("bonus", [-0.5, math.nan, math.inf, True, "1", None])
def test_a_bad_bonus_or_argument_is_an_error_naming_it(bonus):
    with pytest.raises(ValueError, match="`bonus`"):
        rewards.reasoner_judgement_reward(False, False, True, bonus)
    for args, name in (((0, False, True), "tool_verified"), ((False, None, True), "took_tool_answer"),
                       ((False, False, 1), "own_verified")):
        with pytest.raises(ValueError, match=f"`{name}`"):
            rewards.reasoner_judgement_reward(*args, 1.0)


# ---- scripted policies -------------------------------------------------------------------------------------


class RightOnEvenSeeds:
    """The tool agent: the oracle's expression on even seeds, the same plus one (a wrong result) on odd ones."""

    def respond(self, agent, env):
        expression = env.state.problem.metadata["expression"]
        return format_tool_call("calculator", expression if env.state.seed % 2 == 0 else f"({expression}) + 1")


class Honest(MathOraclePolicy):
    """The honest reasoner (a test harness: it reads the verdict and the reference from the environment):
    ``\\boxed{tool}`` where the tool's result verifies, else the reference answer."""


class Copy:
    """Always takes the tool's result (``\\boxed{tool}``)."""

    def respond(self, agent, env):
        return format_answer(TOOL_ANSWER)


class CopyValue:
    """Always writes the tool's result out as its own answer."""

    def respond(self, agent, env):
        return format_answer(env.state.tool_answer)


class Disagree:
    """Always answers something else than the tool: its result plus one."""

    def respond(self, agent, env):
        return format_answer(format_number(evaluate(env.state.tool_answer) + 1))


class Defer:
    """Never answers (the environment's way of asking for another turn: the episode goes on)."""

    def respond(self, agent, env):
        return "Let me wait for the tool agent's next result."


REASONERS = {"honest": Honest, "copy": Copy, "copy_value": CopyValue, "disagree": Disagree, "defer": Defer}
DEGENERATE = [name for name in REASONERS if name != "honest"]


def _env(part: float | None, **fields):
    settings = {"tool": "calculator", "accept_tool_answer": True, "max_turns": 2, **fields}
    if part is not None:
        settings["judgement_reward"] = part
    env = make_env("math", settings)
    return env, make_agents("math", env.config.turn_order)


def _play(reasoner: str, part: float | None, seed: int):
    env, agents = _env(part)
    policy = RolePolicy({TOOL: RightOnEvenSeeds(), REASONER: REASONERS[reasoner]()})
    result = asyncio.run(play_episode(env, agents, policy, seed=seed))
    return env, result


def returns(reasoner: str, part: float | None) -> dict[str, float]:
    """The mean returns of ``reasoner`` over :data:`SEEDS`: ``step``, the reasoner's step reward (what tree
    sampling compares), pooled over its steps; ``final`` and ``sum``, independent sampling's trajectory
    returns (:func:`~pettingllms.execution.samples.trajectory_return` over every step of the episode)."""
    steps, finals, sums = [], [], []
    for seed in SEEDS:
        env, result = _play(reasoner, part, seed)
        step_rewards = [s.reward for s in result.steps]
        steps += result.rewards(REASONER)
        finals.append(trajectory_return(step_rewards, env.task_reward, "final"))
        sums.append(trajectory_return(step_rewards, env.task_reward, "sum"))
    return {"step": sum(steps) / len(steps), "final": sum(finals) / len(finals), "sum": sum(sums) / len(sums)}


# By hand (alpha 1, 2 turns, 4 right and 4 wrong tool seeds; b = the part). Honest: a right tool is taken (tool
# +1, reasoner 2, done); a wrong one is turned down with the reference (reasoner 2 + b; the tool then gets the
# global 1 in turn 2; reasoner 2 + b again). Copy: 2 / 0 and done. Disagree: 0 every step (tool +1 per turn on
# right seeds). Defer: -1 every step (the same tool rewards).
def expected(part: float) -> dict[str, dict[str, float]]:
    copy = {"step": 1.0, "final": 0.5, "sum": 1.5}
    return {"honest": {"step": 2 + part * 8 / 12, "final": 1.0, "sum": 4 + part},
            "copy": copy, "copy_value": copy,
            "disagree": {"step": 0.0, "final": 0.0, "sum": 1.0},
            "defer": {"step": -1.0, "final": 0.0, "sum": -1.0}}


@pytest.mark.parametrize("part", [BONUS, 0.5])
def test_degenerate_reasoners_score_strictly_below_the_honest_one_with_the_part_on(part):
    measured = {name: returns(name, part) for name in REASONERS}
    for name, values in expected(part).items():
        assert measured[name] == pytest.approx(values), name
    for name in DEGENERATE:
        for kind in ("step", "final", "sum"):
            assert measured["honest"][kind] > measured[name][kind], (name, kind, measured)


def test_with_the_part_off_every_number_is_todays():
    for name in REASONERS:
        for seed in SEEDS:
            (env_default, default), (env_zero, zero) = _play(name, None, seed), _play(name, 0.0, seed)
            assert default.steps == zero.steps and env_default.state == env_zero.state
            state = env_default.state
            answers = iter(zip(state.answers, state.answers_verified))
            runs = iter(state.tool_runs)
            for step in default.steps:  # every part from today's reward functions
                if step.role == TOOL:
                    assert step.local_reward == rewards.tool_local_reward(next(runs).outcome)
                elif step.parse_error is None:
                    assert step.local_reward == rewards.reasoner_local_reward(*next(answers))
                else:
                    assert step.local_reward == rewards.REASONER_NO_ANSWER_REWARD
                assert step.reward == step.global_reward + step.local_reward
            assert default.steps[-1].global_reward == rewards.global_reward(state.answer_verified)
        assert returns(name, None) == returns(name, 0.0)
        assert returns(name, 0.0) == pytest.approx(expected(0.0)[name]), name


def test_the_part_changes_only_the_paid_steps_and_never_the_episode():
    for name, seed in itertools.product(REASONERS, SEEDS):
        (env_off, off), (env_on, on) = _play(name, 0.0, seed), _play(name, BONUS, seed)
        assert env_off.state == env_on.state and off.turns == on.turns  # same path, same end
        for a, b in zip(off.steps, on.steps, strict=True):
            paid = name == "honest" and a.role == REASONER and seed % 2 == 1  # a wrong tool result turned down
            assert b.local_reward == a.local_reward + (BONUS if paid else 0.0)
            assert b.reward == a.reward + (BONUS if paid else 0.0)
            assert dataclasses.replace(b, local_reward=a.local_reward, reward=a.reward) == a  # feedback included


def test_in_every_tree_group_the_honest_candidate_is_never_beaten():
    """At each reasoner decision point of the honest path, every policy's response is stepped on its own copy
    (a tree group): the honest response's reward is the highest, strictly where the tool's result is wrong."""

    async def run(seed: int) -> int:
        env, agents = _env(BONUS)
        policy = RolePolicy({TOOL: RightOnEvenSeeds(), REASONER: Honest()})
        await env.reset(seed)
        groups = 0
        while not env.done:
            agent = agents[env.state.position]
            if agent.role == REASONER:
                rewards_by_policy = {}
                for name, reasoner in REASONERS.items():
                    branch = env.clone()
                    candidate = make_agents("math", env.config.turn_order)[env.state.position]
                    candidate.update_from_env(branch.state.turn, branch)
                    candidate.update_from_model(reasoner().respond(candidate, branch))
                    rewards_by_policy[name] = (await branch.step_agent(candidate)).reward
                honest = rewards_by_policy.pop("honest")
                tool_wrong = not env.state.tool_run.verified
                assert all(honest > r if tool_wrong else honest >= r for r in rewards_by_policy.values()), \
                    (seed, env.state.turn, honest, rewards_by_policy)
                groups += 1
            agent.update_from_env(env.state.turn, env)
            agent.update_from_model(policy.respond(agent, env))
            await env.step_agent(agent)
        return groups

    assert sum(asyncio.run(run(seed)) for seed in SEEDS) == 4 * 1 + 4 * 2


# ---- nothing reaches an agent ------------------------------------------------------------------------------


def _text(prompt) -> str:
    return prompt if isinstance(prompt, str) else "\n".join(f"[{m['role']}] {m['content']}" for m in prompt)


def _after_a_paid_step(part: float):
    """Turn 1 of a wrong-tool seed (the honest reasoner turns the result down, paid with the part on), then the
    prompts both agents get next: the texts, the reasoner's step and the state's report."""

    async def run():
        env, (tool, reasoner) = _env(part)
        policy = RolePolicy({TOOL: RightOnEvenSeeds(), REASONER: Honest()})
        await env.reset(1)
        steps = []
        for agent in (tool, reasoner):
            agent.update_from_env(env.state.turn, env)
            agent.update_from_model(policy.respond(agent, env))
            steps.append(await env.step_agent(agent))
        texts = [_text(tool.update_from_env(env.state.turn, env))]
        tool.update_from_model(policy.respond(tool, env))
        await env.step_agent(tool)
        texts.append(_text(reasoner.update_from_env(env.state.turn, env)))
        return texts, steps[1], env.state.last_report

    return asyncio.run(run())


def test_the_prompts_after_a_paid_step_show_no_verdict_and_no_part():
    off_texts, off_step, off_report = _after_a_paid_step(0.0)
    on_texts, on_step, on_report = _after_a_paid_step(BONUS)
    assert on_step.local_reward == off_step.local_reward + BONUS  # the step was paid ...
    assert on_texts == off_texts and _after_a_paid_step(7.5)[0] == on_texts  # ... and nothing an agent sees moved
    assert on_step.feedback == off_step.feedback and on_report == off_report
    for text in on_texts:
        assert "Turn 2 of 2" in text and not LEAK_WORDS.search(text), text
    assert not LEAK_WORDS.search(on_report) and not re.search(r"bonus|reward|judg", on_step.feedback, re.IGNORECASE)


# ---- the single agent --------------------------------------------------------------------------------------


class SingleHonest:
    """The single agent computes right and takes its result, in one response."""

    def respond(self, agent, env):
        call = format_tool_call("calculator", env.state.problem.metadata["expression"])
        return f"{call}\n{format_answer(TOOL_ANSWER)}"


class SingleMiscomputeAndAnswer:
    """The single agent's degenerate policy the part would pay: a wrong calculator call and the reference, in one
    response (it "turns down" a wrong result it made itself)."""

    def respond(self, agent, env):
        call = format_tool_call("calculator", f"({env.state.problem.metadata['expression']}) + 1")
        return f"{call}\n{format_answer(env.state.problem.answer)}"


def test_the_single_agent_is_never_paid_the_part():
    played = {}
    for (name, policy), part in itertools.product({"honest": SingleHonest, "miscompute": SingleMiscomputeAndAnswer}
                                                  .items(), (0.0, BONUS)):
        env, agents = _env(part, turn_order=["single"], single_tool="calculator")
        result = asyncio.run(play_episode(env, agents, policy(), seed=1))
        assert result.success and [run.verified for run in env.state.tool_runs] == [name == "honest"]
        played[name, part] = [s.reward for s in result.steps]
    # Both answer right in one step (local 1 + global 1), part on or off: in one tree group they tie. Paid, the
    # miscomputing response would rank above the honest one, for any bonus > 0.
    assert played["honest", 0.0] == played["honest", BONUS] == [2.0]
    assert played["miscompute", 0.0] == played["miscompute", BONUS] == [2.0]
    assert 2.0 + rewards.reasoner_judgement_reward(False, False, True, BONUS) > played["honest", BONUS][0]


# ---- config ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [-0.1, math.nan, math.inf, True, "0.5", None])
def test_a_bad_judgement_reward_is_an_error_naming_the_field(value):
    with pytest.raises(ValueError, match="`judgement_reward` must be a finite number >= 0"):
        make_env("math", {"judgement_reward": value})


def test_the_field_reaches_the_run_configs_env_section():
    config = load_config("math/arith")
    assert config["env"]["judgement_reward"] == 0.0
    config = load_config("math/arith", ["env.judgement_reward=0.5"])
    name, fields, _ = env_arguments(config, purpose="train")
    assert make_env(name, fields).config.judgement_reward == 0.5
    bad = load_config("math/arith", ["env.judgement_reward=-1"])
    with pytest.raises(ValueError, match="`judgement_reward`"):
        make_env(*env_arguments(bad)[:2])
