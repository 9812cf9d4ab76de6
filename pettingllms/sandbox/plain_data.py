"""Plain data across a process boundary: the encoding the judge's call protocol sends (``function_calls.py``),
and the newline-framed messages that carry it.

The encoding (:func:`encode` / :func:`decode`) never executes anything: JSON values with tags. ``None``,
``bool`` and ``str`` are themselves; an ``int`` is a JSON integer (``["I", hex]`` past 2**63); a ``float`` is
``["f", 16 hex digits of its IEEE-754 bits]`` (NaN, infinities and -0.0 exact); ``["c", re, im]`` a
complex; ``["b", hex]`` bytes; ``["L", ...]``, ``["T", ...]``, ``["S", ...]``, ``["F", ...]`` a list,
tuple, set, frozenset; ``["D", k1, v1, k2, v2, ...]`` a dict (keys of any plain hashable type); ``["R",
n]`` the n-th list, dict or set of the same value met again (aliasing survives; a cycle does not
encode). Exact types only: a subclass (``bool`` aside), a numpy scalar, a namedtuple, a ``defaultdict``, a
generator, a callable or any other object does not cross. Depth is capped at :data:`MAX_DEPTH` and a
message at :data:`MESSAGE_LIMIT_BYTES`.

Standard library only: this file also runs inside the sandbox, bundled into the judge's harness program
(``judge.harness_source``), where it is never imported by name.
"""

import json
import os
import struct
import sys

MAX_DEPTH = 1000
MESSAGE_LIMIT_BYTES = 16 << 20
# Ints within this bound travel as JSON integers; larger ones as hex (no decimal-conversion limit).
_JSON_INT_BOUND = 1 << 63
_SHORT_REPR_CHARS = 200


class NotPlainData(ValueError):
    """A value that cannot cross the process boundary (its type, a cycle, its depth)."""


class ProtocolError(Exception):
    """A message that breaks the protocol (not JSON, an unknown tag, a wrong call id, too long)."""


# --------------------------------------------------------------------------- the plain-data encoding
_CONTAINER_TAGS = {list: "L", tuple: "T", set: "S", frozenset: "F"}
_SHARED_TYPES = (list, dict, set)  # mutable: identity matters, so a repeat is sent as a reference


def _deep_enough():
    # Two frames per level of nesting, plus what the caller already uses.
    if sys.getrecursionlimit() < 3 * MAX_DEPTH + 500:
        sys.setrecursionlimit(3 * MAX_DEPTH + 500)


def encode(value):
    """``value`` as JSON-able data (see the module docstring); :class:`NotPlainData` when it cannot cross."""
    _deep_enough()
    return _Encoder().encode(value, 0)


class _Encoder:
    def __init__(self):
        self.numbers = {}  # id of a list / dict / set -> its index in order of first encoding
        self.open = set()  # ids of the containers being encoded (a cycle leads back to one)
        self.alive = []  # keeps every numbered object alive, so no id is reused while encoding

    def encode(self, value, depth):
        kind = type(value)
        if value is None or kind is bool or kind is str:
            return value
        if kind is int:
            return value if -_JSON_INT_BOUND < value < _JSON_INT_BOUND else ["I", format(value, "x")]
        if kind is float:
            return ["f", _float_bits(value)]
        if kind is complex:
            return ["c", _float_bits(value.real), _float_bits(value.imag)]
        if kind is bytes:
            return ["b", value.hex()]
        if kind is dict or kind in _CONTAINER_TAGS:
            return self._container(value, kind, depth + 1)
        raise NotPlainData(f"a value of type {type_name(value)} is not plain data (plain: None, bool, int, "
                           f"float, complex, str, bytes, list, tuple, dict, set, frozenset)")

    def _container(self, value, kind, depth):
        if depth > MAX_DEPTH:
            raise NotPlainData(f"the value is nested deeper than {MAX_DEPTH} levels")
        key = id(value)
        if key in self.open:
            raise NotPlainData("the value contains itself (a cycle)")
        if kind in _SHARED_TYPES:
            if key in self.numbers:
                return ["R", self.numbers[key]]
            self.numbers[key] = len(self.numbers)
            self.alive.append(value)
        self.open.add(key)
        try:
            if kind is dict:
                out = ["D"]
                for k, v in value.items():
                    out.append(self.encode(k, depth))
                    out.append(self.encode(v, depth))
                return out
            out = [_CONTAINER_TAGS[kind]]
            for item in value:
                out.append(self.encode(item, depth))
            return out
        finally:
            self.open.discard(key)


def decode(data):
    """The value :func:`encode` made ``data`` from; :class:`ProtocolError` on anything else."""
    _deep_enough()
    return _Decoder().decode(data, 0)


class _Decoder:
    def __init__(self):
        self.shared = []

    def decode(self, data, depth):
        kind = type(data)
        if data is None or kind is bool or kind is str:
            return data
        if kind is int:
            return data
        if kind is not list or not data or type(data[0]) is not str:
            raise ProtocolError(f"not an encoded value: {short_repr(data)}")
        tag = data[0]
        if tag == "I" and len(data) == 2 and type(data[1]) is str:
            return _hex_int(data[1])
        if tag == "f" and len(data) == 2:
            return _bits_float(data[1])
        if tag == "c" and len(data) == 3:
            return complex(_bits_float(data[1]), _bits_float(data[2]))
        if tag == "b" and len(data) == 2 and type(data[1]) is str:
            try:
                return bytes.fromhex(data[1])
            except ValueError:
                raise ProtocolError("bad bytes") from None
        if tag == "R" and len(data) == 2 and type(data[1]) is int:
            if not 0 <= data[1] < len(self.shared):
                raise ProtocolError(f"reference {data[1]} to a container not sent before")
            return self.shared[data[1]]
        depth += 1
        if depth > MAX_DEPTH:
            raise ProtocolError(f"a value nested deeper than {MAX_DEPTH} levels")
        items = data[1:]
        try:
            if tag == "L":
                out = []
                self.shared.append(out)
                for item in items:
                    out.append(self.decode(item, depth))
                return out
            if tag == "D":
                if len(items) % 2:
                    raise ProtocolError("a dict with a key but no value")
                out = {}
                self.shared.append(out)
                for i in range(0, len(items), 2):
                    out[self.decode(items[i], depth)] = self.decode(items[i + 1], depth)
                return out
            if tag == "S":
                out = set()
                self.shared.append(out)
                for item in items:
                    out.add(self.decode(item, depth))
                return out
            if tag in ("T", "F"):
                values = []
                for item in items:
                    values.append(self.decode(item, depth))
                return tuple(values) if tag == "T" else frozenset(values)
        except TypeError as exc:  # an unhashable key or set element
            raise ProtocolError(f"bad container: {exc}") from None
        raise ProtocolError(f"unknown tag {tag!r}")


def _float_bits(value):
    return struct.pack(">d", value).hex()


def _bits_float(text):
    if type(text) is not str or len(text) != 16:
        raise ProtocolError(f"bad float bits {short_repr(text)}")
    try:
        return struct.unpack(">d", bytes.fromhex(text))[0]
    except ValueError:
        raise ProtocolError(f"bad float bits {short_repr(text)}") from None


def _hex_int(text):
    try:
        return int(text, 16)
    except ValueError:
        raise ProtocolError(f"bad int {short_repr(text)}") from None


def type_name(value):
    kind = type(value)
    module = getattr(kind, "__module__", "")
    return kind.__qualname__ if module in ("builtins", "", None) else f"{module}.{kind.__qualname__}"


def short_repr(value):
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a trusted-side repr of plain data does not fail; be safe anyway
        text = f"<{type(value).__name__}>"
    return text if len(text) <= _SHORT_REPR_CHARS else text[:_SHORT_REPR_CHARS - 3] + "..."


def assign_in_place(old, new):
    """Make ``old`` equal ``new`` without replacing it (nor, where types agree, what it contains): how a
    mutated argument is copied back into the test's object after a call."""
    kind = type(old)
    if kind is not type(new):
        return
    if kind is list:
        for i in range(min(len(old), len(new))):
            if type(old[i]) is type(new[i]) and type(old[i]) in (list, dict, set):
                assign_in_place(old[i], new[i])
            else:
                old[i] = new[i]
        del old[len(new):]
        old.extend(new[len(old):])
    elif kind is dict:
        for key in [k for k in old if k not in new]:
            del old[key]
        for key, value in new.items():
            if key in old and type(old[key]) is type(value) and type(value) in (list, dict, set):
                assign_in_place(old[key], value)
            else:
                old[key] = value
    elif kind is set:
        old.clear()
        old.update(new)
    elif kind is tuple and len(old) == len(new):
        for a, b in zip(old, new):
            assign_in_place(a, b)


# --------------------------------------------------------------------------- messages
def pack(message):
    """One message as a line of JSON (ASCII: a newline inside a string is escaped, so lines frame)."""
    return (json.dumps(message, separators=(",", ":"), allow_nan=False) + "\n").encode("ascii")


class LineReader:
    """Reads newline-framed messages from a file descriptor, each at most :data:`MESSAGE_LIMIT_BYTES`."""

    def __init__(self, fd):
        self.fd = fd
        self.buffer = bytearray()
        self.scanned = 0  # bytes of the buffer known to hold no newline

    def read(self):
        """The next message (a JSON object), or None at the end of the stream."""
        while True:
            end = self.buffer.find(b"\n", self.scanned)
            if end < 0:
                self.scanned = len(self.buffer)
            else:
                line = bytes(self.buffer[:end])
                del self.buffer[:end + 1]
                self.scanned = 0
                try:
                    message = json.loads(line)
                except (ValueError, RecursionError):
                    raise ProtocolError(f"a message that is not JSON: {line[:120]!r}") from None
                if type(message) is not dict:
                    raise ProtocolError(f"a message that is not an object: {line[:120]!r}")
                return message
            if len(self.buffer) > MESSAGE_LIMIT_BYTES:
                raise ProtocolError(f"a message longer than {MESSAGE_LIMIT_BYTES} bytes")
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                if self.buffer:
                    raise ProtocolError("the stream ended inside a message")
                return None
            self.buffer += chunk


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
