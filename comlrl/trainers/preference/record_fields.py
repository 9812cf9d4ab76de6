"""The checks of one preference record's fields as :meth:`~comlrl.trainers.preference.records.PreferencePair.from_record`
reads them (a replay draw runs them for every record it loads, so they stay cheap); each error names the
field."""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

__all__ = ["optional_float", "optional_number", "record_index", "record_number", "text_list"]


def record_index(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 0:
        raise ValueError(f"record field {name!r} must be an integer >= 0 or null, got {value!r}")
    return int(value)


def optional_float(value: float | None) -> float | None:
    return None if value is None else float(value)


def text_list(record: dict, name: str) -> list[str]:
    value = record[name]
    # map(type) keeps this check in C: it runs for every record a replay draw loads.
    if type(value) is not list or not {*map(type, value)} <= {str}:
        raise ValueError(f"record field {name!r} must be a list of strings (one per agent)")
    return value


def record_number(value: Any, name: str) -> float:
    if type(value) is float or type(value) is int:
        return float(value)
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"record field {name!r} must be a number, got {type(value).__name__}")
    return float(value)


def optional_number(value: Any, name: str) -> float | None:
    return None if value is None else record_number(value, name)
