"""A restricted unpickler for LiveCodeBench's private test cases.

LiveCodeBench (``code_generation_lite``) stores ``private_test_cases`` as base64 -> zlib -> pickle of a JSON
string. A plain ``pickle.loads`` on downloaded data runs whatever callables the payload names, so this module
admits only what pickle builds from its own opcodes (str, bytes, numbers, bools, None, list, tuple, dict) and
refuses every global lookup: ``find_class`` raises an error naming the module and class asked for.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
import zlib

__all__ = ["RestrictedUnpickler", "UnsafePickleError", "decode_private_tests", "restricted_loads"]

_PLAIN = (str, bytes, int, float, bool, type(None))
# The largest inflated private-test payload accepted (LiveCodeBench's biggest rows are ~100 MB inflated).
MAX_INFLATED_BYTES = 512 * 1024 * 1024


class UnsafePickleError(pickle.UnpicklingError):
    """A pickle that names a global (a class or function) or builds something other than plain data."""


class RestrictedUnpickler(pickle.Unpickler):
    """Loads only plain containers, strings and numbers: every class or function lookup is refused."""

    def find_class(self, module: str, name: str):  # noqa: D102 - see the class docstring
        raise UnsafePickleError(
            f"refused to unpickle {module}.{name}: only plain containers and strings are allowed"
        )


def _check_plain(value: object) -> None:
    """Walk the loaded value: pickle can build sets etc. without globals in newer protocols; refuse them."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _PLAIN):
            continue
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        else:
            raise UnsafePickleError(f"refused unpickled value of type {type(item).__name__}: not plain data")


def restricted_loads(data: bytes) -> object:
    """``pickle.loads`` restricted to plain data (see :class:`RestrictedUnpickler`)."""
    value = RestrictedUnpickler(io.BytesIO(data)).load()
    _check_plain(value)
    return value


def _unpack(text: str) -> object:
    """base64 -> zlib -> restricted pickle of a JSON string -> the JSON value."""
    try:
        inflater = zlib.decompressobj()
        # Capped: a crafted row could otherwise inflate to any size (real rows reach tens of MB).
        raw = inflater.decompress(base64.b64decode(text.encode("utf-8"), validate=True), MAX_INFLATED_BYTES + 1)
    except (binascii.Error, zlib.error) as error:
        raise ValueError(f"private_test_cases is neither JSON nor base64/zlib data ({error})") from error
    if len(raw) > MAX_INFLATED_BYTES or inflater.unconsumed_tail:
        raise ValueError(f"private_test_cases inflates past {MAX_INFLATED_BYTES} bytes; refused")
    decoded = restricted_loads(raw)
    if not isinstance(decoded, str):
        raise ValueError(f"private_test_cases unpickled to {type(decoded).__name__}, expected a JSON string")
    return json.loads(decoded)


def decode_private_tests(text: str) -> list:
    """LiveCodeBench's ``private_test_cases`` as a list of ``{"input", "output", "testtype"}`` dicts.

    Like LiveCodeBench's own reader, plain JSON is tried first; otherwise base64 -> zlib -> restricted
    pickle, which must yield a JSON string."""
    if not text:
        return []
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = _unpack(text)
    if not isinstance(value, list):
        raise ValueError(f"private_test_cases is a JSON {type(value).__name__}, expected a list")
    return value
