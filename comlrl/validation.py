"""The validator vocabulary of every config in ``comlrl`` and ``pettingllms``.

Each check raises a ValueError whose message starts with the field in backticks. Two wordings exist
because both are released and tested: comlrl's trainer configs say what failed (``must be an integer`` for
the kind, ``must be >= 1`` for the bound; :func:`canonical_choice` lists ``one of: a, b``), pettingllms'
configs spell out both (``must be an integer >= 1``: pass ``spell_out=True``; :func:`check_choice` lists
``one of ['a', 'b']``). Where the public CoMLRL library rejects the same value, its sentence follows ours
in parentheses (:func:`public_wording`: the checks take ``public=``; the device checks always add it), so
code matching either wording keeps matching. :func:`strict_from_dict` (or the :class:`StrictFromDict`
mixin) is the one
``from_dict`` of every dataclass config: unknown keys are an error naming the class, those keys and the
known fields, with the closest field (:func:`closest_name`) where one is near. It reads through
:func:`strict_arguments`, the one strict reader, which pettingllms' config sections use too
(``pettingllms.config.section_to_dataclass`` words the same errors with the section's dotted keys).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import sys
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, field
from numbers import Integral, Real
from typing import Any, ClassVar

__all__ = [
    "MissingFieldsError",
    "StrictFromDict",
    "UnknownFieldsError",
    "canonical_choice",
    "check_bool",
    "check_choice",
    "check_device_count",
    "check_devices",
    "check_float",
    "check_int",
    "check_str",
    "closest_name",
    "help_field",
    "normalize_devices",
    "normalize_mapping",
    "override_field",
    "public_wording",
    "strict_arguments",
    "strict_from_dict",
    "warn",
]


# --------------------------------------------------------------------------------------------------
# The public library's wording
# --------------------------------------------------------------------------------------------------


def public_wording(message: str, public: str | None) -> str:
    """``message`` followed by the public CoMLRL library's sentence for the same rejection, in parentheses
    (users of that library match on it); ``message`` itself when there is none."""
    return f"{message} ({public})" if public else message


def _bound_sentence(name: str, bounds: str, optional: bool) -> str:
    """The public library's sentence of a one-sided bound: ``x must be >= 1.``, ``x must be > 0 or null.``"""
    return f"{name} must be {bounds}{' or null' if optional else ''}."


# --------------------------------------------------------------------------------------------------
# Choices
# --------------------------------------------------------------------------------------------------


def canonical_choice(
    name: str,
    value: Any,
    choices: tuple[str, ...],
    aliases: dict[str, str] | None = None,
    *,
    public: str | None = None,
) -> str:
    """``value`` lower-cased, stripped and de-aliased; a ValueError naming ``name`` unless in ``choices``
    (``public``: the public library's sentence for it, appended)."""
    aliases = aliases or {}
    key = value.strip().lower() if isinstance(value, str) else None
    key = aliases.get(key, key)
    if key not in choices:
        hint = f" (aliases: {', '.join(f'{a} -> {t}' for a, t in aliases.items())})" if aliases else ""
        message = f"`{name}` must be one of: {', '.join(choices)}{hint}, got {value!r}"
        raise ValueError(public_wording(message, public))
    return key


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    """``value`` exactly one of ``choices`` (no case folding, no aliases), in pettingllms' wording."""
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {list(choices)}, got {value!r}")


# --------------------------------------------------------------------------------------------------
# Scalars
# --------------------------------------------------------------------------------------------------


def check_int(
    name: str,
    value: Any,
    minimum: int | None = None,
    *,
    optional: bool = False,
    spell_out: bool = False,
    public: bool | str = False,
) -> None:
    """An integer (not a bool), at least ``minimum``; ``None`` too with ``optional``. ``public``: append the
    public library's sentence (``True``: ``name must be >= minimum[ or null].``; a string: that sentence)."""
    if value is None and optional:
        return
    is_int = not isinstance(value, bool) and isinstance(value, Integral)
    if public is True:
        public = _bound_sentence(name, f">= {minimum}", optional) if minimum is not None else None
    public = public or None
    if spell_out:
        if not is_int or (minimum is not None and value < minimum):
            bound = "" if minimum is None else f" >= {minimum}"
            raise ValueError(public_wording(f"`{name}` must be an integer{bound}, got {value!r}", public))
        return
    if not is_int:
        kind = "an integer or None" if optional else "an integer"
        raise ValueError(public_wording(f"`{name}` must be {kind}, got {value!r}", public))
    if minimum is not None and value < minimum:
        message = f"`{name}` must be >= {minimum}{' or None' if optional else ''}, got {value}"
        raise ValueError(public_wording(message, public))


def _bounds(gt: float | None, ge: float | None, le: float | None, lt: float | None) -> str:
    """``in (a, b]`` for two bounds, ``> a`` (and the like) for one, ``""`` for none."""
    has_low, has_high = gt is not None or ge is not None, lt is not None or le is not None
    if has_low and has_high:
        low = f"({gt}" if gt is not None else f"[{ge}"
        high = f"{lt})" if lt is not None else f"{le}]"
        return f"in {low}, {high}"
    for op, bound in ((">", gt), (">=", ge), ("<", lt), ("<=", le)):
        if bound is not None:
            return f"{op} {bound}"
    return ""


def check_float(
    name: str,
    value: Any,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    optional: bool = False,
    spell_out: bool = False,
    public: bool | str = False,
) -> None:
    """A finite real number (not a bool) within the given bounds; ``None`` too with ``optional``.
    ``public``: append the public library's sentence (``True``, for one bound: ``name must be > 0[ or
    null].``; a string: that sentence)."""
    if value is None and optional:
        return
    bounds = dict(gt=gt, ge=ge, le=le, lt=lt)
    if not public:
        _check_float(name, value, **bounds, optional=optional, spell_out=spell_out)
        return
    try:
        _check_float(name, value, **bounds, optional=optional, spell_out=spell_out)
    except ValueError as error:
        if public is True:
            text = _bounds(gt, ge, le, lt)
            public = _bound_sentence(name, text, optional) if text and not text.startswith("in ") else None
        raise ValueError(public_wording(str(error), public)) from None


def _check_float(
    name: str,
    value: Any,
    *,
    gt: float | None,
    ge: float | None,
    le: float | None,
    lt: float | None,
    optional: bool,
    spell_out: bool,
) -> None:
    is_number = not isinstance(value, bool) and isinstance(value, Real) and math.isfinite(value)
    in_bounds = is_number and (
        (gt is None or value > gt)
        and (ge is None or value >= ge)
        and (lt is None or value < lt)
        and (le is None or value <= le)
    )
    if in_bounds:
        return
    bounds = _bounds(gt, ge, le, lt)
    if spell_out:
        raise ValueError(f"`{name}` must be a finite number{' ' + bounds if bounds else ''}, got {value!r}")
    if not is_number:
        kind = "a finite number or None" if optional else "a finite number"
        raise ValueError(f"`{name}` must be {kind}, got {value!r}")
    two_sided = bounds.startswith("in ")
    raise ValueError(f"`{name}` must be {bounds}{' or None' if optional and not two_sided else ''}, got {value}")


def check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False, got {value!r}")


def check_str(name: str, value: Any, *, optional: bool = False, allow_empty: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        kind = "a string" if allow_empty else "a non-empty string"
        raise ValueError(f"`{name}` must be {kind}{' or None' if optional else ''}, got {value!r}")


# --------------------------------------------------------------------------------------------------
# Devices and mappings
# --------------------------------------------------------------------------------------------------


def normalize_devices(name: str, value: Any) -> str | list[str] | None:
    """None / "auto" / one device / a list; a comma-separated string (from a command line) becomes a list."""
    if value is None:
        return None
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")]
        return parts[0] if len(parts) == 1 else parts
    if isinstance(value, (list, tuple)):
        return [v.strip() if isinstance(v, str) else v for v in value]
    raise ValueError(
        f"`{name}` must be None, 'auto', a device string or a list of device strings, got {value!r}"
    )


def check_devices(name: str, value: str | list[str] | None) -> None:
    """Every entry parses as a ``torch.device`` ("auto" only as the whole value)."""
    if value is None:
        return
    entries = [value] if isinstance(value, str) else value
    if not entries:
        public = f"{name} must be a non-empty list or 'auto'."
        raise ValueError(public_wording(f"`{name}` must not be an empty list", public))
    import torch  # only to parse device strings; torch is a core dependency

    for entry in entries:
        if entry == "auto" and isinstance(value, str):
            continue
        try:
            torch.device(entry)
        except (RuntimeError, TypeError, ValueError) as exc:
            raise ValueError(f"`{name}` holds an invalid device {entry!r} ({exc})") from None


def check_device_count(name: str, value: str | list[str] | None, num_models: int) -> None:
    """A device list has one entry (shared) or one per model."""
    if not isinstance(value, list) or len(value) in (1, num_models):
        return
    public = f"{name} length ({len(value)}) must be 1 or {num_models}."
    if num_models == 1:
        message = f"`{name}` must have 1 entry (one actor model), got {len(value)}"
        raise ValueError(public_wording(message, public))
    message = f"`{name}` must have 1 or {num_models} entries (one device, or one per agent), got {len(value)}"
    raise ValueError(public_wording(message, public))


def normalize_mapping(name: str, value: Any) -> dict[str, Any] | None:
    """A dict, None, or a JSON object string (the form a command line can give)."""
    if value is None or isinstance(value, dict):
        return None if value is None else dict(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"`{name}` must be a dict or a JSON object string, got {value!r} ({exc})"
            ) from None
        if isinstance(parsed, dict):
            return parsed
    raise ValueError(f"`{name}` must be a dict or a JSON object string, got {value!r}")


# --------------------------------------------------------------------------------------------------
# Warnings and field declarations
# --------------------------------------------------------------------------------------------------


def warn(message: str) -> None:
    """A UserWarning attributed to the code that built the config: the frames of the config's own methods
    (its generated ``__init__`` included) are skipped, wherever in the class tree they are defined."""
    frame = sys._getframe(1)
    owner, level = frame.f_locals.get("self"), 2
    while frame is not None and (
        frame.f_code.co_filename == "<string>" or (owner is not None and frame.f_locals.get("self") is owner)
    ):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, UserWarning, stacklevel=level)


def help_field(text: str, default: Any = MISSING, **kwargs: Any) -> Any:
    """A dataclass field with ``metadata={"help": text}`` (what HfArgumentParser shows)."""
    return field(default=default, metadata={"help": text}, **kwargs)


def override_field(owner: type, name: str, default: Any, note: str) -> Any:
    """Redeclare ``owner``'s field ``name`` with another default, keeping its help and adding ``note``."""
    base = owner.__dataclass_fields__[name]
    return field(default=default, metadata={"help": f"{base.metadata['help']} {note}"}, repr=base.repr)


# --------------------------------------------------------------------------------------------------
# One strict from_dict
# --------------------------------------------------------------------------------------------------


def closest_name(name: str, known: Iterable[str]) -> str | None:
    """The known name a misspelled ``name`` most likely meant (``difflib``'s closest match), or None."""
    matches = difflib.get_close_matches(name, list(known), n=1)
    return matches[0] if matches else None


class UnknownFieldsError(ValueError):
    """Keys of a mapping that are no fields of the dataclass it was read into (:func:`strict_arguments`):
    ``unknown`` in the mapping's order, ``known`` the fields in declaration order and ``guesses`` the closest
    field of each unknown key that has one. Its message is the class's (see :func:`strict_from_dict`); a
    caller with a wording of its own (a config section) words it from these."""

    def __init__(self, cls: type, unknown: list[str], known: list[str]) -> None:
        self.cls, self.unknown, self.known = cls, unknown, known
        self.guesses = {key: close for key in unknown if (close := closest_name(key, known)) is not None}
        names = sorted(unknown)
        template = getattr(cls, "_unknown_fields_message", StrictFromDict._unknown_fields_message)
        message = template.format(
            cls=cls.__name__,
            unknown=names,
            known=known,
            unknown_names=", ".join(names),
            known_names=", ".join(known),
        )
        # After the message, not inside it: callers match the message's released wording.
        guesses = [f"`{self.guesses[key]}` for `{key}`" for key in names if key in self.guesses]
        super().__init__(message + (f"; did you mean {', '.join(guesses)}?" if guesses else ""))


class MissingFieldsError(TypeError):
    """Required fields (no default) a mapping does not give (:func:`strict_arguments` with ``required=True``)."""

    def __init__(self, cls: type, missing: list[str]) -> None:
        self.cls, self.missing = cls, missing
        super().__init__(f"{cls.__name__} needs field(s) {missing}")


def strict_arguments(
    cls: type, values: Mapping[str, Any], *, required: bool = False, tuples: bool = False
) -> dict[str, Any]:
    """The keyword arguments of ``cls(**...)`` for dataclass ``cls`` read from ``values``: the one strict
    reader of both packages' configs (:func:`strict_from_dict` words its errors as comlrl does,
    ``pettingllms.config.section_to_dataclass`` with a config section's dotted keys).

    A key that is no field of ``cls`` is an :class:`UnknownFieldsError` (a ValueError); with ``required``, a
    field without a default that ``values`` lacks is a :class:`MissingFieldsError` (a TypeError); with
    ``tuples``, a list becomes a tuple where the field's default is one (YAML has no tuples)."""
    if not dataclasses.is_dataclass(cls) or not isinstance(cls, type):
        raise TypeError(f"`cls` must be a dataclass, got {cls!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [key for key in values if key not in fields]
    if unknown:
        raise UnknownFieldsError(cls, unknown, list(fields))
    if required:
        missing = [
            name for name, f in fields.items()
            if name not in values and f.default is MISSING and f.default_factory is MISSING
        ]
        if missing:
            raise MissingFieldsError(cls, missing)
    kwargs = dict(values)
    if tuples:
        for key, value in kwargs.items():
            if isinstance(value, list) and isinstance(fields[key].default, tuple):
                kwargs[key] = tuple(value)
    return kwargs


def strict_from_dict(cls: type, values: Mapping[str, Any] | None = None, **overrides: Any) -> Any:
    """``cls(**values, **overrides)``; a key that is no field of ``cls`` is an error naming the class, the
    unknown keys and the known fields (worded by ``cls._unknown_fields_message`` when it has one), then
    "did you mean" the closest field of each unknown key that has one (:func:`strict_arguments`).

    Use it as ``from_dict = classmethod(strict_from_dict)`` in a dataclass body, or inherit
    :class:`StrictFromDict`."""
    return cls(**strict_arguments(cls, {**dict(values or {}), **overrides}))


class StrictFromDict:
    """Mixin of dataclass configs: ``from_dict(values=None, **overrides)`` (see :func:`strict_from_dict`)."""

    # Format fields: cls, unknown and known (lists), unknown_names and known_names (comma-separated).
    _unknown_fields_message: ClassVar[str] = "unknown {cls} field(s) {unknown}; known fields: {known}"

    from_dict = classmethod(strict_from_dict)
