"""An episode as one self-contained HTML page (``pettingllms show --html PATH``).

The page holds everything inline: its CSS in a ``<style>`` element, no script, no image, no font, no
link to anything outside it, and a Content-Security-Policy that forbids loading any (so a page opened
from a shared run folder cannot reach out). Every piece of transcript text (prompts, responses, actions,
feedback, states, role and policy names) goes through :func:`html.escape`, so a response that contains
``<script>`` shows as text.

The layout follows the text rendering (:mod:`pettingllms.viewer.text`): a header with the episode's
outcome and a strip of its decisions, then one card per decision: the prompt (system messages folded),
the response and the parsed action on the left; the environment's feedback, the state after the step (its
rendering, the fields the step changed, all fields folded) and the reward parts on the right; in tree
sampling the other candidates of the decision point, folded.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from pettingllms.viewer.content import (
    NOT_RECORDED,
    action_text,
    number_text,
    prompt_messages,
    reward_parts,
    state_view,
    value_text,
)
from pettingllms.viewer.episodes import Decision, Episode

__all__ = ["CONTENT_SECURITY_POLICY", "episode_html"]

CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

_CSS = """
:root { --ink: #1d2330; --muted: #5c6578; --line: #d9dee8; --card: #ffffff; --page: #f3f5f9;
  --good: #1c7c3c; --bad: #b3261e; --accent: #2f5fb3; --code: #f6f8fb; --changed: #fff4cc; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 40px; background: var(--page); color: var(--ink);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
h1 { font-size: 20px; margin: 0 0 6px; }
h3 { font-size: 12px; text-transform: uppercase; letter-spacing: .06em; color: var(--muted); margin: 12px 0 4px; }
.meta { color: var(--muted); margin: 0 0 10px; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 600;
  border: 1px solid var(--line); background: var(--card); }
.badge.good { color: #fff; background: var(--good); border-color: var(--good); }
.badge.bad { color: #fff; background: var(--bad); border-color: var(--bad); }
.strip { display: flex; flex-wrap: wrap; gap: 6px; margin: 12px 0 18px; padding: 0; list-style: none; }
.strip a { display: block; text-decoration: none; color: inherit; padding: 4px 10px; border-radius: 6px;
  background: var(--card); border: 1px solid var(--line); font-size: 12px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; margin: 0 0 16px;
  padding: 12px 16px 14px; box-shadow: 0 1px 2px rgba(20, 30, 60, .05); }
.card header { display: flex; flex-wrap: wrap; align-items: center; gap: 8px; border-bottom: 1px solid var(--line);
  padding-bottom: 8px; }
.turn { font-weight: 700; }
.role { font-weight: 700; padding: 1px 10px; border-radius: 10px; color: #fff; }
.role.a0 { background: #2f5fb3; } .role.a1 { background: #8a4fbf; } .role.a2 { background: #c0612b; }
.role.a3 { background: #2b8a7e; } .role.a4 { background: #7a6a1f; }
.cols { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 0 24px; }
@media (max-width: 900px) { .cols { grid-template-columns: minmax(0, 1fr); } }
pre { margin: 0; padding: 8px 10px; background: var(--code); border: 1px solid var(--line); border-radius: 6px;
  white-space: pre-wrap; word-break: break-word; font: 12.5px/1.4 ui-monospace, "DejaVu Sans Mono", Menlo, monospace; }
pre.board { display: inline-block; min-width: 40%; font-size: 14px; line-height: 1.25; }
.msg { margin: 0 0 6px; }
.who { font-size: 11px; font-weight: 700; color: var(--muted); text-transform: uppercase; margin: 2px 0; }
details > summary { cursor: pointer; color: var(--accent); font-size: 12.5px; margin: 4px 0; }
.parse-error { color: var(--bad); font-weight: 600; }
.missing { color: var(--muted); font-style: italic; }
table { border-collapse: collapse; width: 100%; font-size: 12.5px; }
th, td { text-align: left; vertical-align: top; padding: 3px 8px; border-bottom: 1px solid var(--line); }
th { color: var(--muted); font-weight: 600; white-space: nowrap; }
td.value { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, monospace; word-break: break-word; white-space: pre-wrap; }
tr.changed td, tr.changed th { background: var(--changed); }
.rewards td { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, monospace; }
.note { color: var(--muted); font-size: 12px; margin: 4px 0; }
footer { color: var(--muted); font-size: 12px; margin-top: 24px; }
"""


def _e(value: Any) -> str:
    return html.escape(value_text(value), quote=True)


def _pre(text: Any, css: str = "") -> str:
    klass = f' class="{css}"' if css else ""
    content = value_text(text) if text not in (None, "") else ""
    return f"<pre{klass}>{html.escape(content, quote=True) if content else '<span class=missing>(empty)</span>'}</pre>"


def _prompt(record: Mapping[str, Any]) -> str:
    parts = ["<h3>Prompt <span class=note>(update_from_env)</span></h3>"]
    messages = prompt_messages(record.get("prompt"))
    if not messages:
        parts.append('<p class="missing">no prompt recorded</p>')
    for role, content in messages:
        block = f'<div class="msg"><div class="who">{html.escape(role)}</div>{_pre(content)}</div>'
        if role == "system":
            lines = content.count("\n") + 1
            block = f"<details><summary>system message ({lines} line{'s' * (lines != 1)})</summary>{block}</details>"
        parts.append(block)
    return "".join(parts)


def _state(record: Mapping[str, Any], previous: Any) -> str:
    view = state_view(record.get("state"), previous)
    parts = ["<h3>State after the step</h3>"]
    if not view.recorded:
        return parts[0] + f'<p class="missing">{NOT_RECORDED}</p>'
    if view.truncated_chars:
        parts.append(f'<p class="note">cut: {view.truncated_chars} characters dropped by the size limit '
                     "(rollout.transcript_state_max_chars)</p>")
    if view.text is not None:
        parts.append(_pre(view.text, "board"))
    if view.raw is not None:
        parts.append("<p class=note>fields (JSON, cut)</p>" + _pre(view.raw))
    changed = [name for name in view.fields if name in view.changed]
    if changed:
        rows = "".join(f'<tr class="changed"><th>{html.escape(n)}</th><td class="value">{_e(view.fields[n])}</td></tr>'
                       for n in changed)
        label = "fields this step set or changed" if isinstance(previous, Mapping) else "fields"
        parts.append(f"<p class=note>{label}</p><table>{rows}</table>")
    if view.fields:
        rows = "".join(
            f'<tr{" class=changed" if n in view.changed else ""}><th>{html.escape(n)}</th>'
            f'<td class="value">{_e(v)}</td></tr>' for n, v in view.fields.items()
        )
        parts.append(f"<details><summary>all {len(view.fields)} fields</summary><table>{rows}</table></details>")
    return "".join(parts)


def _rewards(record: Mapping[str, Any]) -> str:
    parts = reward_parts(record)
    group = "this step's reward (tree)" if record.get("mode") == "tree" else "the trajectory's return"
    cells = [("global", parts.global_reward), ("alpha", parts.alpha), ("local", parts.local_reward),
             ("reward", parts.reward), ("group", parts.group_reward)]
    head = "".join(f"<th>{html.escape(name)}</th>" for name, _ in cells)
    body = "".join(f"<td>{html.escape(number_text(value))}</td>" for _, value in cells)
    flags = [("done", parts.done), ("success", parts.success)]
    badges = " ".join(f'<span class="badge {"good" if on else ""}">{name} {"yes" if on else "no"}</span>' for name, on in flags)
    if parts.failure:
        badges += f' <span class="badge bad">failure {html.escape(parts.failure)}</span>'
    note = f"reward = alpha · global + local; group: what the trainer groups, {group}"
    return (f'<h3>Rewards</h3><table class="rewards"><tr>{head}</tr><tr>{body}</tr></table>'
            f'<p class="note">{html.escape(note)}</p><p>{badges}</p>')


def _siblings(decision: Decision) -> str:
    if not decision.siblings:
        return ""
    rows = []
    for sibling in decision.siblings:
        parts = reward_parts(sibling)
        rows.append(
            f"<tr><td>{_e(sibling.get('candidate', '?'))}</td><td>{_e(number_text(parts.global_reward))}</td>"
            f"<td>{_e(number_text(parts.local_reward))}</td><td>{_e(number_text(parts.reward))}</td>"
            f'<td class="value">{_e(action_text(sibling))}</td>'
            f'<td class="value">{_e(sibling.get("response", ""))}</td></tr>'
        )
    n = len(decision.siblings)
    return (f"<details><summary>{n} other candidate{'s' * (n != 1)} at this decision point</summary><table>"
            "<tr><th>candidate</th><th>global</th><th>local</th><th>reward</th><th>action</th><th>response</th></tr>"
            f"{''.join(rows)}</table></details>")


def _card(number: int, decision: Decision, previous: Any) -> str:
    record = decision.record
    candidate = ""
    if decision.siblings:
        chosen = "selected" if record.get("selected") else "no branch selected"
        candidate = (f'<span class="badge">candidate {_e(record.get("candidate", "?"))} of '
                     f"{len(decision.siblings) + 1}, {chosen}</span>")
    header = (
        f'<header><span class="turn">Turn {decision.turn + 1}</span>'
        f'<span class="role a{decision.agent_index % 5}">{html.escape(decision.role)}</span>'
        f'<span class="note">agent {decision.agent_index + 1} · policy {_e(record.get("policy", "?"))} '
        f'v{_e(record.get("policy_version", "?"))}</span>{candidate}</header>'
    )
    error = record.get("parse_error")
    action = (f'<p class="parse-error">parse error: {_e(error)}</p>' if record.get("action") is None and error
              else _pre(action_text(record)))
    left = (_prompt(record) + "<h3>Response <span class=note>(model)</span></h3>" + _pre(record.get("response", ""))
            + "<h3>Parsed action <span class=note>(update_from_model)</span></h3>" + action)
    right = ("<h3>Feedback <span class=note>(step)</span></h3>" + _pre(record.get("feedback") or "")
             + _state(record, previous) + _rewards(record))
    return (f'<section class="card" id="d{number}">{header}<div class="cols"><div>{left}</div><div>{right}</div></div>'
            f"{_siblings(decision)}</section>")


def episode_html(episode: Episode, title: str | None = None) -> str:
    """The whole episode as one self-contained HTML page (see the module docstring)."""
    where = f" · stage {episode.stage}" if episode.stage else ""
    title = title or f"Episode {episode.index}{where}: {episode.label()}"
    status = "good" if episode.success else "bad"
    sampling = "tree sampling" if episode.mode == "tree" else f"{episode.mode} sampling"
    strip = []
    previous = None
    cards = []
    for number, decision in enumerate(episode.decisions, start=1):
        reward = number_text(decision.record.get("reward"))
        strip.append(f'<li><a href="#d{number}">T{decision.turn + 1} · {html.escape(decision.role)} · '
                     f"reward {html.escape(reward)}</a></li>")
        cards.append(_card(number, decision, previous))
        previous = decision.record.get("state")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{html.escape(CONTENT_SECURITY_POLICY, quote=True)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        f'<p class="meta">environment {_e(episode.env or "(not recorded)")} · {html.escape(sampling)} · '
        f'<span class="badge {status}">{html.escape(episode.outcome())}</span></p>'
        f'<ol class="strip">{"".join(strip)}</ol>'
        f"{''.join(cards)}"
        f"<footer>pettingllms show · {_e(episode.source or '')}</footer>"
        "</body></html>\n"
    )
