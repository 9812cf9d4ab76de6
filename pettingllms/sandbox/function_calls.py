"""Function-style tests judged outside the candidate: the call protocol between the candidate's process and
the trusted evaluator, both ends of it.

Why. A test like ``assert f(2) == 4`` used to run in the candidate program's own namespace and pass when
the process exited with status 0. A program could then exit early (``sys.exit(0)``), return an object
whose ``__eq__`` is always true, shadow ``isinstance``, patch what ran after it, or read and rewrite the
pending assertion through its frames. Here the test never enters the candidate's process:

* the **candidate process** runs the program (as ``python solution.py`` would), then only answers calls
  (:func:`serve_calls`): "call your ``f`` with these arguments", "make a ``Solution()``", "call method
  ``m`` of instance 3". Arguments arrive, and results leave, as plain data (``plain_data.py``);
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

Standard library only: this file also runs inside the sandbox, bundled into the judge's harness program
(``judge.harness_source``), where it is never imported by name.
"""

import builtins
import sys

if "plain_data" not in globals():  # inside the sandbox the harness bundle provides it
    from pettingllms.sandbox import plain_data

# Candidate exceptions re-raised by name only when they are ordinary builtin exceptions.
_NOT_RERAISED = ("StopIteration", "StopAsyncIteration")
# Set on an exception the trusted side re-raised for the candidate (so its ending is the candidate's).
_CANDIDATE_MARK = "_raised_by_candidate"
# Standard-library names never imported for a test (side effects: printing, opening a browser).
_NEVER_IMPORTED = ("this", "antigravity")


# --------------------------------------------------------------------------- the candidate's end
def serve_calls(fd, namespace):
    """In the candidate's process, after its program ran: answer calls on ``fd`` until the stream ends.

    Requests: ``{"id": n, "target": ["function", name] | ["class", name] | ["method", k, name], "args":
    encoded (args, kwargs)}``. Replies: ``{"id": n, "value": encoded}`` (``["class", ...]`` answers
    ``{"id": n, "instance": k}``), ``{"id": n, "raised": class name, "message": str}``, or ``{"id": n,
    "failed": why}``; ``"after"`` carries the arguments' post-call value when the call changed them.
    """
    reader = plain_data.LineReader(fd)
    instances = []
    _flush()
    plain_data.write_all(fd, plain_data.pack({"ready": True}))
    while True:
        request = reader.read()
        if request is None:
            return
        reply = plain_data.pack(_answer(request, namespace, instances))
        _flush()  # what the call printed is in the pipes before the evaluator's verdict can end the test
        plain_data.write_all(fd, reply)


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - the program's own (replaced or closed) streams
            pass


def _answer(request, namespace, instances):
    ident = request.get("id")
    target = request.get("target")
    try:
        sent = request["args"]
        args, kwargs = plain_data.decode(sent)
        function = _target(target, namespace, instances)
    except (plain_data.ProtocolError, KeyError, TypeError, ValueError) as exc:
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
                reply = {"id": ident, "value": plain_data.encode(result)}
            except (plain_data.NotPlainData, RecursionError) as exc:
                return {"id": ident, "failed": f"returned something that is not plain data: {exc}"}
    try:
        after = plain_data.encode((args, kwargs))
    except (plain_data.NotPlainData, RecursionError) as exc:
        return {"id": ident, "failed": f"made an argument something that is not plain data: {exc}"}
    if after != sent:
        reply["after"] = after
    return reply


def _target(target, namespace, instances):
    """The callable a request names, or a string saying why there is none."""
    if type(target) is not list or not target:
        raise plain_data.ProtocolError(f"bad target {plain_data.short_repr(target)}")
    if target[0] in ("function", "class") and len(target) == 2 and type(target[1]) is str:
        found = namespace.get(target[1])
        if found is None or not callable(found):
            return f"the program defines no {'class' if target[0] == 'class' else 'function'} `{target[1]}`"
        return found
    if target[0] == "method" and len(target) == 3 and type(target[1]) is int and type(target[2]) is str:
        if not 0 <= target[1] < len(instances):
            raise plain_data.ProtocolError(f"no instance {target[1]}")
        method = getattr(instances[target[1]], target[2], None)
        if method is None or not callable(method):
            return f"the instance has no method `{target[2]}`"
        return method
    raise plain_data.ProtocolError(f"bad target {plain_data.short_repr(target)}")


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
        self.reader = plain_data.LineReader(fd)
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
        except plain_data.ProtocolError as exc:
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
            self.fail("runtime_error", f"the program broke the call protocol: {plain_data.short_repr(message)}")
        self.ready = True

    def call(self, target, args, kwargs):
        if self.failure is not None or self.unsupported is not None:
            raise CallFailed("an earlier call failed")
        if not self.ready:
            self.wait_ready()
        try:
            sent = plain_data.encode((args, kwargs))
        except (plain_data.NotPlainData, RecursionError) as exc:
            self.unsupported = f"the test passes something that is not plain data: {exc}"
            raise Unsupported(self.unsupported) from None
        ident = self.next_id
        self.next_id += 1
        data = plain_data.pack({"id": ident, "target": target, "args": sent})
        if len(data) > plain_data.MESSAGE_LIMIT_BYTES:
            self.unsupported = f"the call's arguments take more than {plain_data.MESSAGE_LIMIT_BYTES} bytes"
            raise Unsupported(self.unsupported)
        try:
            plain_data.write_all(self.fd, data)
        except OSError:
            self.fail("runtime_error", "the program ended before it answered the call (an exit, a crash or a "
                                       "kill)")
        reply = self._receive()
        if reply.get("id") != ident:
            self.fail("runtime_error", f"the program broke the call protocol: a reply to call "
                                       f"{plain_data.short_repr(reply.get('id'))} instead of {ident}")
        if "failed" in reply:
            self.fail("runtime_error", f"the call failed: {str(reply['failed'])[:500]}")
        try:
            if "after" in reply:
                plain_data.assign_in_place((args, kwargs), plain_data.decode(reply["after"]))
            if "raised" in reply:
                result = self._exception(reply.get("raised"), reply.get("message"))
            elif target[0] == "class":
                if type(reply.get("instance")) is not int:
                    raise plain_data.ProtocolError("no instance number")
                result = RemoteInstance(self, reply["instance"])
            elif "value" in reply:
                result = plain_data.decode(reply["value"])
            else:
                raise plain_data.ProtocolError(f"a reply without a value: {plain_data.short_repr(reply)}")
        except (plain_data.ProtocolError, RecursionError, MemoryError) as exc:
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
        args, expected = plain_data.decode(test["args"]), plain_data.decode(test["expected"])
    except plain_data.ProtocolError as exc:
        return "test_error", f"a call test that does not decode: {exc}"
    if test.get("solution_class"):
        function = RemoteClass(session, "Solution")().__getattr__(entry)
    else:
        function = RemoteFunction(session, entry)
    value = function(*args)
    if _equal(value, expected):
        return "passed", ""
    return "wrong_answer", f"returned {plain_data.short_repr(value)}, expected {plain_data.short_repr(expected)}"


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
