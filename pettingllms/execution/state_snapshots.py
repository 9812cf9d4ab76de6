"""What a transcript keeps of the state an agent's step left behind, and the opt-in limit on its size.

A snapshot is plain JSON (:func:`state_snapshot`)::

    {"env": "plan_path", "text": "<the environment's own rendering, or null>",
     "fields": {<the state dataclass as plain values>}, "truncated_chars": 0}

``fields`` holds every field of the state dataclass (nested dataclasses, tuples, sets and enums become
dicts, lists and values; anything else its ``repr``), ``text`` the environment's ``render(state)`` where it
has one (the puzzles' boards). The engine takes a snapshot right after a step, only for the episodes whose
transcripts are written, so training pays nothing for the others.

Size limit (``rollout.transcript_state_max_chars``, off by default). :func:`limit_snapshot` makes a
snapshot fit ``max_chars`` characters (:func:`snapshot_size`: the text plus the JSON of the fields). It
first cuts every long string to one common length, the longest that fits, each cut string ending in
``… [N more chars]``, so the structure stays readable; when even that does not fit (many small values),
the text and the fields' JSON are cut as strings. ``truncated_chars`` counts the characters dropped, so a
cut is marked in the file and never silent; the transcript writer also counts and logs it.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

__all__ = ["cut_marker", "limit_snapshot", "plain_value", "snapshot_size", "state_snapshot"]

_MAX_DEPTH = 16


def cut_marker(dropped: int) -> str:
    """What ends a string cut by :func:`limit_snapshot`: how many characters were dropped."""
    return f"… [{dropped} more chars]"


def plain_value(value: Any, _depth: int = 0, _seen: frozenset[int] = frozenset()) -> Any:
    """``value`` as plain JSON values: dataclasses become dicts of their fields, tuples / lists / sets
    lists, mappings dicts with string keys, enums their value; anything else (and a cycle, or nesting
    deeper than 16) its ``repr``. New containers throughout, so a later change of the state leaves the
    result alone."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return plain_value(value.value, _depth + 1, _seen)
    if _depth >= _MAX_DEPTH or id(value) in _seen:
        return repr(value)
    seen = _seen | {id(value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain_value(getattr(value, f.name), _depth + 1, seen) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain_value(v, _depth + 1, seen) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_value(v, _depth + 1, seen) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [plain_value(v, _depth + 1, seen) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return sorted(items, key=repr)
    return repr(value)


def state_snapshot(env: Any) -> dict[str, Any]:
    """The snapshot of ``env``'s current state (see the module docstring)."""
    state = env.state
    render = getattr(env, "render", None)
    text = render(state) if callable(render) else None
    return {
        "env": getattr(env, "name", "") or type(env).__name__,
        "text": None if text is None else str(text),
        "fields": plain_value(state),
        "truncated_chars": 0,
    }


def _fields_size(fields: Any) -> int:
    return len(fields) if isinstance(fields, str) else len(json.dumps(fields, ensure_ascii=False))


def snapshot_size(snapshot: dict[str, Any]) -> int:
    """Characters of a snapshot that count against the limit: its text plus its fields' JSON (or the cut
    JSON string that replaced them)."""
    return len(snapshot.get("text") or "") + _fields_size(snapshot.get("fields"))


def _cap_strings(value: Any, cap: int) -> tuple[Any, int]:
    """Every string longer than ``cap`` + its marker cut to ``cap`` characters and the marker; the
    characters dropped."""
    if isinstance(value, str):
        if len(value) > cap + len(cut_marker(len(value) - cap)):
            return value[:cap] + cut_marker(len(value) - cap), len(value) - cap
        return value, 0
    if isinstance(value, dict):
        out, dropped = {}, 0
        for k, v in value.items():
            out[k], n = _cap_strings(v, cap)
            dropped += n
        return out, dropped
    if isinstance(value, list):
        items, dropped = [], 0
        for v in value:
            item, n = _cap_strings(v, cap)
            items.append(item)
            dropped += n
        return items, dropped
    return value, 0


def _cut(text: str, keep: int) -> tuple[str, int]:
    """``text`` cut to at most ``keep`` characters, marker included (an empty string when even the marker
    does not fit); the characters dropped."""
    if len(text) <= keep:
        return text, 0
    marker = cut_marker(len(text))  # at least as long as the marker of any smaller count
    kept = max(0, keep - len(marker))
    if kept == 0 and keep < len(marker):
        return "", len(text)
    return text[:kept] + cut_marker(len(text) - kept), len(text) - kept


def limit_snapshot(snapshot: dict[str, Any], max_chars: int | None) -> dict[str, Any]:
    """``snapshot`` made to fit ``max_chars`` (:func:`snapshot_size`), ``truncated_chars`` set to the
    characters dropped; unchanged when ``max_chars`` is None or it fits. A new dict; the input is left alone."""
    if max_chars is None or snapshot_size(snapshot) <= max_chars:
        return dict(snapshot)
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 0:
        raise ValueError(f"`max_chars` must be None or an integer >= 0, got {max_chars!r}")
    text, fields = snapshot.get("text"), snapshot.get("fields")
    core = {"text": text, "fields": fields}

    def capped(cap: int) -> tuple[dict[str, Any], int]:
        out, dropped = _cap_strings(core, cap)
        return out, dropped

    longest = _longest_string(core)
    low, high, best = 0, longest, None
    while low <= high:  # the largest common cap whose result fits
        middle = (low + high) // 2
        candidate, dropped = capped(middle)
        if snapshot_size(candidate) <= max_chars:
            best, low = (candidate, dropped), middle + 1
        else:
            high = middle - 1
    if best is not None:
        candidate, dropped = best
        return {**snapshot, **candidate, "truncated_chars": int(snapshot.get("truncated_chars", 0)) + dropped}
    # Too many values to fit even with every string cut: cut the text and the fields' JSON as strings.
    text = text or ""
    fields_json = fields if isinstance(fields, str) else json.dumps(fields, ensure_ascii=False)
    text_keep = min(len(text), max_chars // 2)
    cut_text, dropped_text = _cut(text, text_keep)
    cut_fields, dropped_fields = _cut(fields_json, max_chars - len(cut_text))
    return {
        **snapshot,
        "text": cut_text if snapshot.get("text") is not None else None,
        "fields": cut_fields,
        "truncated_chars": int(snapshot.get("truncated_chars", 0)) + dropped_text + dropped_fields,
    }


def _longest_string(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return max((_longest_string(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return max((_longest_string(v) for v in value), default=0)
    return 0
