"""What the text and the HTML rendering show of one decision, as plain values (no markup).

Both renderings follow the agent-environment cycle of a decision (the seed's "Workflow Example"):
``update_from_env`` builds the prompt, the model answers, ``update_from_model`` parses the action,
``step`` changes the shared state and scores it. This module turns a transcript record into those parts:
the prompt as messages, the action as text, the state after the step (its rendering, and its fields with
those the step changed), the reward parts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "NOT_RECORDED",
    "RewardParts",
    "StateView",
    "action_text",
    "number_text",
    "prompt_messages",
    "reward_parts",
    "state_view",
    "value_text",
]

NOT_RECORDED = "state not recorded"


def value_text(value: Any) -> str:
    """A JSON value as text: strings as they are, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def prompt_messages(prompt: Any) -> list[tuple[str, str]]:
    """``[(role, content), ...]``: chat messages as they are, a text prompt as one ``prompt`` message."""
    if isinstance(prompt, list) and all(isinstance(m, Mapping) for m in prompt):
        return [(str(m.get("role", "message")), value_text(m.get("content", ""))) for m in prompt]
    if prompt is None:
        return []
    return [("prompt", value_text(prompt))]


def action_text(record: Mapping[str, Any]) -> str:
    """The parsed action (compact JSON; a list of moves like ``U``, ``R`` joined by spaces), or why there
    is none."""
    action = record.get("action")
    if action is None:
        error = record.get("parse_error")
        return f"none (parse error: {error})" if error else "none"
    if isinstance(action, list) and action and all(isinstance(a, str) and 0 < len(a) <= 2 for a in action):
        return " ".join(action)  # moves like U D L R
    return value_text(action)


@dataclass
class StateView:
    """The state after a step: recorded or not, its rendering, its fields (name -> text) and which of
    them the step changed, and the characters a size limit cut (0: whole)."""

    recorded: bool
    env: str = ""
    text: str | None = None
    fields: dict[str, str] = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)
    raw: str | None = None  # the fields' JSON, cut as a string by the size limit
    truncated_chars: int = 0


def state_view(state: Any, previous: Any = None) -> StateView:
    """A record's ``state`` snapshot as a :class:`StateView`; ``previous`` is the snapshot of the decision
    before it in the episode (fields that differ from it are ``changed``; all of them when there is none)."""
    if not isinstance(state, Mapping):
        return StateView(recorded=False)
    view = StateView(
        recorded=True,
        env=str(state.get("env") or ""),
        text=None if state.get("text") is None else str(state["text"]),
        truncated_chars=int(state.get("truncated_chars") or 0),
    )
    fields = state.get("fields")
    if isinstance(fields, Mapping):
        view.fields = {str(k): value_text(v) for k, v in fields.items()}
        before = previous.get("fields") if isinstance(previous, Mapping) else None
        if isinstance(before, Mapping):
            view.changed = [k for k, v in fields.items() if k not in before or before[k] != v]
        else:
            view.changed = list(view.fields)
    elif fields is not None:
        view.raw = value_text(fields)
    return view


@dataclass
class RewardParts:
    """The step's reward parts: ``reward = alpha * global + local``; ``group_reward`` is what the
    trainer groups (tree: this step's reward; independent: the trajectory's return)."""

    global_reward: Any
    alpha: Any
    local_reward: Any
    reward: Any
    group_reward: Any
    done: bool
    success: bool
    failure: str | None

    def line(self) -> str:
        n = number_text
        text = (f"global {n(self.global_reward)} x alpha {n(self.alpha)} + local {n(self.local_reward)} "
                f"= reward {n(self.reward)}")
        if self.group_reward is not None and self.group_reward != self.reward:
            text += f" | group reward {n(self.group_reward)}"
        text += f" | done {'yes' if self.done else 'no'} | success {'yes' if self.success else 'no'}"
        if self.failure:
            text += f" | failure {self.failure}"
        return text


def number_text(value: Any) -> str:
    """A reward as the renderings print it: floats to 4 significant digits, a missing one as ``?``."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return "?" if value is None else str(value)


def reward_parts(record: Mapping[str, Any]) -> RewardParts:
    return RewardParts(
        global_reward=record.get("global_reward"),
        alpha=record.get("alpha"),
        local_reward=record.get("local_reward"),
        reward=record.get("reward"),
        group_reward=record.get("group_reward"),
        done=bool(record.get("done")),
        success=bool(record.get("success")),
        failure=record.get("failure"),
    )
