"""An episode as plain text for the terminal, decision by decision (``pettingllms show``).

Each decision reads as the agent-environment cycle: the prompt ``update_from_env`` built, the model's
response, the action ``update_from_model`` parsed, then what ``step`` did (the environment's feedback,
the state after it: its rendering and the fields the step changed) and the reward parts. In tree sampling
the other candidates of the decision point follow in one line each.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from pettingllms.viewer.content import (
    NOT_RECORDED,
    action_text,
    prompt_messages,
    reward_parts,
    state_view,
    value_text,
)
from pettingllms.viewer.episodes import Decision, Episode

__all__ = ["episode_text", "listing_text"]

_INDENT = "    "


def _block(text: str, indent: str = _INDENT) -> str:
    return textwrap.indent(text if text else "(empty)", indent, lambda line: True)


def _candidate_line(record: dict) -> str:
    action = action_text(record).replace("\n", " | ")
    parts = reward_parts(record)
    return f"  candidate {record.get('candidate', '?')}: {parts.line()} | action {action}"


def _decision_text(number: int, decision: Decision, previous_state: object) -> list[str]:
    record = decision.record
    head = (f"--- [{number}] Turn {decision.turn + 1} · {decision.role} (agent {decision.agent_index + 1}) · "
            f"policy {record.get('policy', '?')} v{record.get('policy_version', '?')}")
    if decision.siblings:
        head += f" · candidate {record.get('candidate', '?')} of {len(decision.siblings) + 1}, "
        head += "selected" if record.get("selected") else "no branch selected"
    lines = [f"{head} ---", "  1. update_from_env -> prompt"]
    for role, content in prompt_messages(record.get("prompt")):
        lines += [f"  [{role}]", _block(content)]
    lines += ["  2. model -> response", _block(value_text(record.get("response", "")))]
    lines += ["  3. update_from_model -> action", _block(action_text(record))]
    lines += ["  4. step -> feedback", _block(value_text(record.get("feedback") or ""))]
    view = state_view(record.get("state"), previous_state)
    if not view.recorded:
        lines.append(f"  state after the step: {NOT_RECORDED}")
    else:
        cut = f" (cut: {view.truncated_chars} chars dropped by the size limit)" if view.truncated_chars else ""
        lines.append(f"  state after the step{cut}:")
        if view.text is not None:
            lines.append(_block(view.text))
        if view.raw is not None:
            lines += [f"{_INDENT}fields (JSON, cut):", _block(view.raw, _INDENT * 2)]
        changed = [name for name in view.fields if name in view.changed]
        for name in changed:
            value = view.fields[name]
            if "\n" in value:
                lines += [f"{_INDENT}{name}:", _block(value, _INDENT * 2)]
            else:
                lines.append(f"{_INDENT}{name}: {value}")
        unchanged = [name for name in view.fields if name not in view.changed]
        if unchanged:
            lines.append(f"{_INDENT}unchanged: {', '.join(unchanged)}")
    lines.append(f"  rewards: {reward_parts(record).line()}")
    if decision.siblings:
        lines.append(f"  other candidates at this decision point ({len(decision.siblings)}):")
        lines += [_candidate_line(sibling) for sibling in decision.siblings]
    return lines


def episode_text(episode: Episode) -> str:
    """The whole episode as text (see the module docstring)."""
    where = f" of stage {episode.stage}" if episode.stage else ""
    sampling = "tree sampling" if episode.mode == "tree" else f"{episode.mode} sampling"
    lines = [
        f"=== Episode {episode.index}{where}: {episode.label()} ===",
        f"environment {episode.env or '(not recorded)'} | {sampling} | source {episode.source or '?'}",
        f"outcome: {episode.outcome()}",
        "",
    ]
    previous = None
    for number, decision in enumerate(episode.decisions, start=1):
        lines += _decision_text(number, decision, previous)
        lines.append("")
        previous = decision.record.get("state")
    return "\n".join(lines).rstrip() + "\n"


def listing_text(stages: dict[str, Sequence[Episode]], episodes: bool = True) -> str:
    """Stages with their episode counts and, with ``episodes``, their episodes one line each (what
    ``pettingllms show`` lists to choose from)."""
    lines = []
    for stage, found in stages.items():
        lines.append(f"stage {stage}: {len(found)} episode{'s' * (len(found) != 1)}")
        if episodes:
            lines += [f"  {episode.summary()}" for episode in found]
    return "\n".join(lines) + "\n"
