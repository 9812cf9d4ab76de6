"""Function-style tests judged outside the candidate: the call protocol between the candidate's process and
the trusted evaluator, both ends of it and the plain-data encoding it sends.

Why. A test like ``assert f(2) == 4`` used to run in the candidate program's own namespace and pass when
the process exited with status 0. A program could then exit early (``sys.exit(0)``), return an object
whose ``__eq__`` is always true, shadow ``isinstance``, patch what ran after it, or read and rewrite the
pending assertion through its frames. Here the test never enters the candidate's process:

* the **candidate process** runs the program (as ``python solution.py`` would), then only answers calls
  (:func:`serve_calls`): "call your ``f`` with these arguments", "make a ``Solution()``", "call method
  ``m`` of instance 3". Arguments arrive, and results leave, as plain data in the encoding below;
* the **trusted evaluator** (a separate process forked from one that never ran candidate code) runs the
  test code (:func:`evaluate`): the dataset's ``setup`` (e.g. HumanEval's prompt with ``poly``), then the
  assertion, in a fresh namespace where the entry point and ``Solution`` are remote handles
  (:class:`RemoteFunction`, :class:`RemoteClass`). ``==``, ``isinstance`` and ``assert`` are the trusted
  interpreter's own, applied to values of exact builtin types. An assertion is compiled with
  ``optimize=0``: it is checked even under ``-O``.

What fails a test, whatever the test code catches: the candidate's process ended (an exit, a crash, a
kill), a broken or unexpected message, a result that is not plain data, a missing entry point, and any use
of a handle other than calling it (``==``, ``bool``, ``hash``, iteration). A candidate *exception* is
re-raised on the trusted side as the same builtin class (else ``RuntimeError``), so a test's ``try`` /
``except ValueError`` behaves as in one process. Mutated arguments are copied back in place after each
call, so a test that reads a list after passing it sees what one process would. A trusted error before
any call was answered is the test's own fault (``test_error``); a test passing something that is not
plain data (a lambda, an object) is ``unsupported``; neither is charged to the candidate.

The encoding (:func:`encode` / :func:`decode`) never executes anything: JSON values with tags. ``None``,
``bool`` and ``str`` are themselves; an ``int`` is a JSON integer (``["I", hex]`` past 2**63); a ``float`` is
``["f", 16 hex digits of its IEEE-754 bits]`` (NaN, infinities and -0.0 exact); ``["c", re, im]`` a
complex; ``["b", hex]`` bytes; ``["L", ...]``, ``["T", ...]``, ``["S", ...]``, ``["F", ...]`` a list,
tuple, set, frozenset; ``["D", k1, v1, k2, v2, ...]`` a dict (keys of any plain hashable type); ``["R",
n]`` the n-th list, dict or set of the same value met again (aliasing survives; a cycle does not
encode). Exact types only: a subclass (``bool`` aside), a numpy scalar, a namedtuple, a ``defaultdict``, a
generator, a callable or any other object does not cross. Depth is capped at :data:`MAX_DEPTH` and a
message at :data:`MESSAGE_LIMIT_BYTES`.

Standard library only: this file also runs inside the sandbox, where the judge harness loads it from
its source text (it is never imported by name there).
"""

import builtins
import json
import os
import struct
import sys

MAX_DEPTH = 1000
MESSAGE_LIMIT_BYTES = 16 << 20
# Ints within this bound travel as JSON integers; larger ones as hex (no decimal-conversion limit).
_JSON_INT_BOUND = 1 << 63
# Candidate exceptions re-raised by name only when they are ordinary builtin exceptions.
_NOT_RERAISED = ("StopIteration", "StopAsyncIteration")
_SHORT_REPR_CHARS = 200
# Set on an exception the trusted side re-raised for the candidate (so its ending is the candidate's).
_CANDIDATE_MARK = "_raised_by_candidate"
# Standard-library names never imported for a test (side effects: printing, opening a browser).
_NEVER_IMPORTED = ("this", "antigravity")


class NotPlainData(ValueError):
    """A value that cannot cross the process boundary (its type, a cycle, its depth)."""


class ProtocolError(Exception):
    """A message that breaks the protocol (not JSON, an unknown tag, a wrong call id, too long)."""


# --------------------------------------------------------------------------- the plain-data encoding
_CONTAINER_TAGS = {list: "L", tuple: "T", set: "S", frozenset: "F"}
_SHARED_TYPES = (list, dict, set)  # mutable: identity matters, so a repeat is sent as a reference


def encode(value):
    """``value`` as JSON-able data (see the module docstring); :class:`NotPlainData` when it cannot cross."""
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
        raise NotPlainData(f"a value of type {_type_name(value)} is not plain data (plain: None, bool, int, "
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
            return [_CONTAINER_TAGS[kind], *(self.encode(item, depth) for item in value)]
        finally:
            self.open.discard(key)


def decode(data):
    """The value :func:`encode` made ``data`` from; :class:`ProtocolError` on anything else."""
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
            raise ProtocolError(f"not an encoded value: {_short_repr(data)}")
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
                out.extend(self.decode(item, depth) for item in items)
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
                out.update(self.decode(item, depth) for item in items)
                return out
            if tag == "T":
                return tuple(self.decode(item, depth) for item in items)
            if tag == "F":
                return frozenset(self.decode(item, depth) for item in items)
        except TypeError as exc:  # an unhashable key or set element
            raise ProtocolError(f"bad container: {exc}") from None
        raise ProtocolError(f"unknown tag {tag!r}")


def _float_bits(value):
    return struct.pack(">d", value).hex()


def _bits_float(text):
    if type(text) is not str or len(text) != 16:
        raise ProtocolError(f"bad float bits {_short_repr(text)}")
    try:
        return struct.unpack(">d", bytes.fromhex(text))[0]
    except ValueError:
        raise ProtocolError(f"bad float bits {_short_repr(text)}") from None


def _hex_int(text):
    try:
        return int(text, 16)
    except ValueError:
        raise ProtocolError(f"bad int {_short_repr(text)}") from None


def _type_name(value):
    kind = type(value)
    module = getattr(kind, "__module__", "")
    return kind.__qualname__ if module in ("builtins", "", None) else f"{module}.{kind.__qualname__}"


def _short_repr(value):
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


# --------------------------------------------------------------------------- the candidate's end
def serve_calls(fd, namespace):
    """In the candidate's process, after its program ran: answer calls on ``fd`` until the stream ends.

    Requests: ``{"id": n, "target": ["function", name] | ["class", name] | ["method", k, name], "args":
    encoded (args, kwargs)}``. Replies: ``{"id": n, "value": encoded}`` (``["class", ...]`` answers
    ``{"id": n, "instance": k}``), ``{"id": n, "raised": class name, "message": str}``, or ``{"id": n,
    "failed": why}``; ``"after"`` carries the arguments' post-call value when the call changed them.
    """
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * MAX_DEPTH))
    reader = LineReader(fd)
    instances = []
    write_all(fd, pack({"ready": True}))
    while True:
        request = reader.read()
        if request is None:
            return
        write_all(fd, pack(_answer(request, namespace, instances)))


def _answer(request, namespace, instances):
    ident = request.get("id")
    target = request.get("target")
    try:
        sent = request["args"]
        args, kwargs = decode(sent)
        function = _target(target, namespace, instances)
    except (ProtocolError, KeyError, TypeError, ValueError) as exc:
        return {"id": ident, "failed": f"a bad call request: {exc}"}
    if isinstance(function, str):
        return {"id": ident, "failed": function}
    try:
        result = function(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the test decides what a candidate exception means
        reply = {"id": ident, "raised": type(exc).__name__, "message": _message(exc)}
    else:
        if target[0] == "class":
            instances.append(result)
            reply = {"id": ident, "instance": len(instances) - 1}
        else:
            try:
                reply = {"id": ident, "value": encode(result)}
            except (NotPlainData, RecursionError) as exc:
                return {"id": ident, "failed": f"returned something that is not plain data: {exc}"}
    try:
        after = encode((args, kwargs))
    except (NotPlainData, RecursionError) as exc:
        return {"id": ident, "failed": f"made an argument something that is not plain data: {exc}"}
    if after != sent:
        reply["after"] = after
    return reply


def _target(target, namespace, instances):
    """The callable a request names, or a string saying why there is none."""
    if type(target) is not list or not target:
        raise ProtocolError(f"bad target {_short_repr(target)}")
    if target[0] in ("function", "class") and len(target) == 2 and type(target[1]) is str:
        found = namespace.get(target[1])
        if found is None or not callable(found):
            return f"the program defines no {'class' if target[0] == 'class' else 'function'} `{target[1]}`"
        return found
    if target[0] == "method" and len(target) == 3 and type(target[1]) is int and type(target[2]) is str:
        if not 0 <= target[1] < len(instances):
            raise ProtocolError(f"no instance {target[1]}")
        method = getattr(instances[target[1]], target[2], None)
        if method is None or not callable(method):
            return f"the instance has no method `{target[2]}`"
        return method
    raise ProtocolError(f"bad target {_short_repr(target)}")


def _message(exc):
    try:
        return str(exc)[:2000]
    except Exception:  # noqa: BLE001 - a candidate's __str__ may raise
        return ""


# --------------------------------------------------------------------------- the trusted end
class CallFailed(BaseException):
    """Unwinds the test after a failure no test code may excuse (a BaseException: ``except Exception``
    does not catch it; the session's sticky ``failure`` fails the test even if a bare ``except`` does)."""


class Unsupported(BaseException):
    """Unwinds a test that passed something that is not plain data: the test's fault, not the candidate's."""


class Session:
    """The trusted evaluator's side of one test: sends calls, checks replies, remembers what failed."""

    def __init__(self, fd):
        self.fd = fd
        self.reader = LineReader(fd)
        self.next_id = 0
        self.answered = 0  # calls that returned a value or raised a candidate exception
        self.failure = None  # (status, message): sticky
        self.unsupported = None
        self.ready = False

    def fail(self, status, message):
        if self.failure is None and self.unsupported is None:
            self.failure = (status, message)
        raise CallFailed(message)

    def _receive(self):
        try:
            message = self.reader.read()
        except ProtocolError as exc:
            self.fail("runtime_error", f"the program broke the call protocol: {exc}")
        except OSError as exc:
            self.fail("runtime_error", f"the program's call channel failed: {exc}")
        if message is None:
            self.fail("runtime_error", "the program ended before it answered the call (an exit, a crash or "
                                       "a kill)" if self.ready else "the program ended before it was ready "
                                       "for calls (it exited, raised or was killed while running)")
        return message

    def wait_ready(self):
        message = self._receive()
        if message != {"ready": True}:
            self.fail("runtime_error", f"the program broke the call protocol: {_short_repr(message)}")
        self.ready = True

    def call(self, target, args, kwargs):
        if self.failure is not None or self.unsupported is not None:
            raise CallFailed("an earlier call failed")
        if not self.ready:
            self.wait_ready()
        try:
            sent = encode((args, kwargs))
        except (NotPlainData, RecursionError) as exc:
            self.unsupported = f"the test passes something that is not plain data: {exc}"
            raise Unsupported(self.unsupported) from None
        ident = self.next_id
        self.next_id += 1
        data = pack({"id": ident, "target": target, "args": sent})
        if len(data) > MESSAGE_LIMIT_BYTES:
            self.unsupported = f"the call's arguments take more than {MESSAGE_LIMIT_BYTES} bytes"
            raise Unsupported(self.unsupported)
        try:
            write_all(self.fd, data)
        except OSError:
            self.fail("runtime_error", "the program ended before it answered the call (an exit, a crash or a "
                                       "kill)")
        reply = self._receive()
        if reply.get("id") != ident:
            self.fail("runtime_error", f"the program broke the call protocol: a reply to call "
                                       f"{_short_repr(reply.get('id'))} instead of {ident}")
        if "failed" in reply:
            self.fail("runtime_error", f"the call failed: {str(reply['failed'])[:500]}")
        try:
            if "after" in reply:
                assign_in_place((args, kwargs), decode(reply["after"]))
            if "raised" in reply:
                result = self._exception(reply.get("raised"), reply.get("message"))
            elif target[0] == "class":
                if type(reply.get("instance")) is not int:
                    raise ProtocolError("no instance number")
                result = RemoteInstance(self, reply["instance"])
            elif "value" in reply:
                result = decode(reply["value"])
            else:
                raise ProtocolError(f"a reply without a value: {_short_repr(reply)}")
        except (ProtocolError, RecursionError, MemoryError) as exc:
            self.fail("runtime_error", f"the program broke the call protocol: {exc}")
        self.answered += 1
        if "raised" in reply:
            raise result
        return result

    def _exception(self, name, message):
        message = str(message) if type(message) is str else ""
        kind = getattr(builtins, name, None) if type(name) is str and name not in _NOT_RERAISED else None
        if not (isinstance(kind, type) and issubclass(kind, Exception)):
            kind, message = RuntimeError, f"{name}: {message}"
        try:
            exc = kind(message)
        except Exception:  # noqa: BLE001 - a builtin whose constructor wants more (UnicodeDecodeError)
            exc = RuntimeError(f"{name}: {message}")
        exc.__dict__[_CANDIDATE_MARK] = True
        return exc


class _Handle:
    """What a test may do with a remote handle is call it; anything else fails the test."""

    __slots__ = ("_session", "_description")

    def __init__(self, session, description):
        object.__setattr__(self, "_session", session)
        object.__setattr__(self, "_description", description)

    def _misuse(self, what):
        self._session.fail("wrong_answer", f"the test used {self._description} as a value ({what}); a "
                                           f"handle can only be called")

    def __repr__(self):
        return f"<{self._description}>"

    def __eq__(self, other):
        self._misuse("==")

    def __ne__(self, other):
        self._misuse("!=")

    def __hash__(self):
        self._misuse("hash")

    def __bool__(self):
        self._misuse("bool")

    def __iter__(self):
        self._misuse("iteration")

    def __len__(self):
        self._misuse("len")

    def __setattr__(self, name, value):
        self._misuse(f"setting .{name}")

    def __lt__(self, other):
        self._misuse("<")

    __le__ = __gt__ = __ge__ = __lt__


class RemoteFunction(_Handle):
    """The candidate's function ``name``: calling it calls it in the candidate's process."""

    __slots__ = ("_name",)

    def __init__(self, session, name):
        super().__init__(session, f"the candidate's function {name}")
        object.__setattr__(self, "_name", name)

    def __call__(self, *args, **kwargs):
        return self._session.call(["function", self._name], args, kwargs)


class RemoteClass(_Handle):
    """The candidate's class ``name``: calling it makes an instance in the candidate's process."""

    __slots__ = ("_name",)

    def __init__(self, session, name):
        super().__init__(session, f"the candidate's class {name}")
        object.__setattr__(self, "_name", name)

    def __call__(self, *args, **kwargs):
        return self._session.call(["class", self._name], args, kwargs)


class RemoteInstance(_Handle):
    """An instance living in the candidate's process; ``instance.method`` is a callable handle."""

    __slots__ = ("_number",)

    def __init__(self, session, number):
        super().__init__(session, "an instance of the candidate's class")
        object.__setattr__(self, "_number", number)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return RemoteMethod(self._session, self._number, name)


class RemoteMethod(_Handle):
    __slots__ = ("_number", "_name")

    def __init__(self, session, number, name):
        super().__init__(session, f"the candidate's method {name}")
        object.__setattr__(self, "_number", number)
        object.__setattr__(self, "_name", name)

    def __call__(self, *args, **kwargs):
        return self._session.call(["method", self._number, self._name], args, kwargs)


def stdlib_names(source):
    """Standard-library modules a test's code uses as ``module.name`` without binding the name itself:
    imported for it on the trusted side, as the candidate's own imports would have provided them when the
    test ran in one process (MBPP's ``math.isclose`` after a solution that imports math)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    bound, used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            used.add(node.value.id)
    stdlib = getattr(sys, "stdlib_module_names", ())
    return sorted(name for name in used - bound
                  if name in stdlib and name not in _NEVER_IMPORTED and not hasattr(builtins, name))


def evaluate(test, fd):
    """In the trusted evaluator: run one test against the candidate behind ``fd``; returns the verdict
    ``{"status", "message", "calls"}`` (status: passed, wrong_answer, runtime_error, test_error,
    unsupported).

    ``test``: ``{"entry_point": str, "setup": str, "solution_class": bool}`` and either ``"assertion":
    source`` or ``"args"`` / ``"expected"`` (encoded) for a call test.
    """
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * MAX_DEPTH))
    session = Session(fd)
    outcome = None
    try:
        outcome = _run_test(test, session)
    except CallFailed:
        pass
    except Unsupported:
        pass
    except BaseException as exc:  # noqa: BLE001 - every trusted-side ending is classified below
        outcome = _classify_error(exc, session)
    if session.unsupported is not None:
        return {"status": "unsupported", "message": session.unsupported, "calls": session.answered}
    if session.failure is not None:
        status, message = session.failure
        return {"status": status, "message": message, "calls": session.answered}
    if outcome is None:
        outcome = ("passed", "")
    status, message = outcome
    if status == "passed" and session.answered == 0:
        return {"status": "test_error", "message": "the test never called the candidate",
                "calls": 0}
    return {"status": status, "message": message, "calls": session.answered}


def _run_test(test, session):
    entry = test["entry_point"]
    if "assertion" in test:
        namespace = {"__name__": "__main__", "__builtins__": builtins}
        for name in stdlib_names(test["setup"] + "\n" + test["assertion"]):
            try:
                namespace[name] = __import__(name)
            except Exception:  # noqa: BLE001 - a NameError in the test then says what is missing
                pass
        try:
            setup = compile(test["setup"], "<setup>", "exec", dont_inherit=True, optimize=0)
            assertion = compile(test["assertion"], "<test>", "exec", dont_inherit=True, optimize=0)
        except SyntaxError as exc:
            return "test_error", f"the test does not compile: {exc}"
        exec(setup, namespace)
        namespace[entry] = RemoteFunction(session, entry)
        namespace["Solution"] = RemoteClass(session, "Solution")
        exec(assertion, namespace)
        return "passed", ""
    try:
        args, expected = decode(test["args"]), decode(test["expected"])
    except ProtocolError as exc:
        return "test_error", f"a call test that does not decode: {exc}"
    if test.get("solution_class"):
        function = RemoteClass(session, "Solution")().__getattr__(entry)
    else:
        function = RemoteFunction(session, entry)
    value = function(*args)
    if _equal(value, expected):
        return "passed", ""
    return "wrong_answer", f"returned {_short_repr(value)}, expected {_short_repr(expected)}"


def _equal(value, expected):
    try:
        return bool(value == expected)
    except Exception:  # noqa: BLE001 - == of plain data does not raise; be safe anyway
        return False


def _classify_error(exc, session):
    description = f"{type(exc).__name__}: {_message(exc)}".rstrip(": ")
    if getattr(exc, "__dict__", {}).get(_CANDIDATE_MARK):
        return "runtime_error", f"the candidate raised {description}"
    if session.answered == 0:
        return "test_error", f"the test failed before any call was answered: {description}"
    if isinstance(exc, AssertionError):
        return "wrong_answer", f"assertion failed{': ' + _message(exc) if _message(exc) else ''}"
    return "wrong_answer", f"the test failed on the returned values: {description}"
