"""Rewards of the math workflow, as small pure functions over what the environment observed.

The environment parses each response (:mod:`pettingllms.envs.math.answers`), runs the tool agent's
program in the sandbox or its expression in the calculator, checks answers with
:func:`pettingllms.envs.math.verify.verify_answer`, and hands the results here; nothing in this module
runs code or verifies anything.

* **Tool outcome** (:func:`tool_outcome`), one of :data:`TOOL_OUTCOMES`, in this order of precedence:
  ``unparseable`` (the response holds no program / expression), ``failed`` (it raised, timed out, or
  printed no answer), ``verified`` (its answer verifies against the reference), ``wrong`` (it ran and
  answered, but the answer does not verify).
* **Tool local reward** (:func:`tool_local_reward`): ``+1`` verified, ``0`` wrong, ``-0.5`` failed,
  ``-1`` unparseable. A wrong answer scores above a failure: running code that answers is the skill
  the tool agent learns first.
* **Reasoner local reward** (:func:`reasoner_local_reward`): ``+1`` when its final answer verifies,
  ``0`` when it answers wrongly, ``-1`` when no answer parses (no ``\\boxed{}``).
* **Global reward** (:func:`global_reward`): ``1.0`` when the episode's final answer verifies, else ``0.0``.
* **Reasoner judgement part** (:func:`reasoner_judgement_reward`, ``env.judgement_reward = b``, default ``0``:
  off), added to the reasoner's local reward::

      judgement = b   if the latest tool result is wrong, the reasoner does not take it (its answer does not
                      agree with the tool's answer) and its own answer verifies
                  0   otherwise (no tool result to judge, the tool result is right, the reasoner takes it, its
                      own answer is wrong or missing)

  It teaches the reasoner's role, catching a wrong tool result. Without it a right answer pays the same
  whether the tool was right (copying it suffices) or wrong (the reasoner had to see past it), so the step
  that needs the judgement is worth no more than the one that needs none; on ``math/arith`` the trained
  reasoner copies every tool result, the wrong ones too (``docs/math.md``). Only a *right* rejection is paid,
  so disagreeing as a policy (always answering something else) earns nothing, and a reasoner cannot earn it
  by making the tool wrong: the tool result is another agent's step. Keeping a right tool result earns no
  bonus: the local and global rewards already pay it in full, and copying is what the reasoner over-does.
  The single agent (L0) is never paid this part: it makes the tool result it would reject, so the part would
  pay it for calling its tool wrongly first (a "miscompute, then answer" policy would score above an honest
  one). The verdicts it reads are computed after the step, for the reward alone; nothing of it reaches a
  prompt, ``last_report``, ``feedback`` or when the episode ends. Being a local reward, it reaches the
  trainers through the step reward (tree sampling) and independent sampling's ``"sum"`` return, not through
  ``"final"`` (the global reward alone).

An answer whose check runs past ``verify_timeout_s`` does not verify (it scores as wrong; the agents label
the step ``verify_timeout``). Contradictory inputs (an answer that verifies although none was parsed) raise
ValueError naming the arguments: they are bugs in the caller, not outcomes.
"""

from __future__ import annotations

import math

__all__ = ["REASONER_NO_ANSWER_REWARD", "REASONER_VERIFIED_REWARD", "REASONER_WRONG_REWARD", "TOOL_OUTCOMES", "TOOL_REWARDS", "global_reward", "reasoner_judgement_reward", "reasoner_local_reward", "tool_local_reward", "tool_outcome"]

#: Every tool outcome, best first.
TOOL_OUTCOMES: tuple[str, ...] = ("verified", "wrong", "failed", "unparseable")
#: Tool agent's local reward per outcome.
TOOL_REWARDS: dict[str, float] = {"verified": 1.0, "wrong": 0.0, "failed": -0.5, "unparseable": -1.0}
#: Reasoner's local reward when its answer verifies / is wrong / is missing.
REASONER_VERIFIED_REWARD = 1.0
REASONER_WRONG_REWARD = 0.0
REASONER_NO_ANSWER_REWARD = -1.0


def _bool(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be a bool, got {value!r}")
    return value


def _present(answer: str | None, name: str) -> bool:
    if answer is not None and not isinstance(answer, str):
        raise ValueError(f"`{name}` must be a string or None, got {type(answer).__name__}")
    return answer is not None and bool(answer.strip())


def tool_outcome(*, parsed: bool, error: bool, answer: str | None, verified: bool) -> str:
    """The tool agent's outcome this turn (see the module docstring).

    ``parsed``: a program / expression was found in the response; ``error``: running it raised or timed
    out; ``answer``: what it printed / evaluated to (None or blank: nothing); ``verified``: that answer
    verifies against the reference.
    """
    parsed, error, verified = _bool(parsed, "parsed"), _bool(error, "error"), _bool(verified, "verified")
    has_answer = _present(answer, "answer")
    if verified and (not parsed or error or not has_answer):
        raise ValueError(
            f"`verified=True` needs a parsed program that ran and answered "
            f"(got parsed={parsed}, error={error}, answer={answer!r})"
        )
    if not parsed:
        return "unparseable"
    if error or not has_answer:
        return "failed"
    return "verified" if verified else "wrong"


def tool_local_reward(outcome: str) -> float:
    """The tool agent's local reward for ``outcome`` (one of :data:`TOOL_OUTCOMES`)."""
    try:
        return TOOL_REWARDS[outcome]
    except (KeyError, TypeError):
        raise ValueError(f"unknown tool outcome {outcome!r}; expected one of {TOOL_OUTCOMES}") from None


def reasoner_local_reward(answer: str | None, verified: bool) -> float:
    """The reasoner's local reward: +1 its answer verifies, 0 it is wrong, -1 no answer parsed."""
    verified = _bool(verified, "verified")
    if not _present(answer, "answer"):
        if verified:
            raise ValueError(f"`verified=True` with no answer (answer={answer!r})")
        return REASONER_NO_ANSWER_REWARD
    return REASONER_VERIFIED_REWARD if verified else REASONER_WRONG_REWARD


def reasoner_judgement_reward(tool_verified: bool | None, took_tool_answer: bool, own_verified: bool,
                              bonus: float) -> float:
    """The reasoner's judgement part (see the module docstring): ``bonus`` when it turned down a wrong tool result
    and its own answer verifies, else ``0.0``.

    ``tool_verified``: whether the latest tool result the reasoner saw verifies (``None``: there is no tool
    result to judge: no tool run yet, or the latest one failed or printed nothing); ``took_tool_answer``: the
    reasoner's answer agrees with the tool's answer (``\\boxed{tool}``, or the same value written out);
    ``own_verified``: the reasoner's answer verifies (``False`` when it gave none); ``bonus``: the value of a
    right rejection, ``env.judgement_reward`` (a finite number >= 0).
    """
    if tool_verified is not None:
        tool_verified = _bool(tool_verified, "tool_verified")
    took_tool_answer = _bool(took_tool_answer, "took_tool_answer")
    own_verified = _bool(own_verified, "own_verified")
    if isinstance(bonus, bool) or not isinstance(bonus, (int, float)) or not (math.isfinite(bonus) and bonus >= 0):
        raise ValueError(f"`bonus` must be a finite number >= 0, got {bonus!r}")
    return float(bonus) if tool_verified is False and not took_tool_answer and own_verified else 0.0


def global_reward(final_answer_verified: bool) -> float:
    """Task reward: 1.0 when the episode's final answer verifies, else 0.0."""
    return 1.0 if _bool(final_answer_verified, "final_answer_verified") else 0.0
