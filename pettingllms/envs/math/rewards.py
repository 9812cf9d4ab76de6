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

An answer whose check runs past ``verify_timeout_s`` does not verify (it scores as wrong; the agents label
the step ``verify_timeout``). Contradictory inputs (an answer that verifies although none was parsed) raise
ValueError naming the arguments: they are bugs in the caller, not outcomes.
"""

from __future__ import annotations

__all__ = ["REASONER_NO_ANSWER_REWARD", "REASONER_VERIFIED_REWARD", "REASONER_WRONG_REWARD", "TOOL_OUTCOMES", "TOOL_REWARDS", "global_reward", "reasoner_local_reward", "tool_local_reward", "tool_outcome"]

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


def global_reward(final_answer_verified: bool) -> float:
    """Task reward: 1.0 when the episode's final answer verifies, else 0.0."""
    return 1.0 if _bool(final_answer_verified, "final_answer_verified") else 0.0
