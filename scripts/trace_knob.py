"""Follow one config value from a pipeline config to where it is used, at run time, and count the source
files it passes through.

    .venv/bin/python scripts/trace_knob.py at_grpo.learning_rate
    .venv/bin/python scripts/trace_knob.py madpo.beta --json /tmp/dpo_beta.json

Method:

1. the knob is set to a distinctive sentinel value through the normal override mechanism
   (``pettingllms.config.loader.load_config(config, ["section.key=SENTINEL", ...])``), together with tiny
   budgets on the offline ``test-tiny`` model (one AT-GRPO step / one MADPO round after a short warm start,
   a few problems, ``eval.num_instances=1``, the run folder under a temporary directory);
2. the config is loaded and the pipeline run in this process under a :func:`sys.setprofile` hook (main
   thread). On every ``call`` event of a function defined in a project file (under ``comlrl/`` or
   ``pettingllms/``) the hook looks at the function's *arguments* (not its other locals; the items of
   ``*args`` and ``**kwargs`` count as arguments themselves). In ``--mode carried`` an argument
   that is the sentinel (equal to it for numbers, containing its text for strings: the override, the
   resolved YAML) or holds it one level down (a dataclass field, a dict value, an object's ``__dict__``
   value, a list / tuple item; ``self`` included) makes the call a *hop*, recorded with its file and
   function. ``--mode named`` is stricter: a call that holds the value inside an argument (by default up to
   two levels down: ``self.args.dpo_beta``) counts only when its own code names the key (reads or forwards
   it by name), so the methods that are merely handed the config object drop out. ``--depth`` changes how
   far into an argument the hook looks (objects are followed, callables are not).
   The default mode, ``path``, records the hops of ``named`` (and, on ``return`` events, a function that
   returns the value: the value itself, or holding it within ``depth`` when its code names the key; or
   that put it into an argument that did not hold it at the call) and keeps only the *path*: the chain
   of hand-offs that lead to the target (see "The path" below);
3. the run stops at the knob's target: the call that consumes the value (``at_grpo.learning_rate``:
   ``torch.optim.AdamW.__init__`` receiving ``lr`` equal to the sentinel; ``madpo.beta``: a MADPO loss
   of :mod:`comlrl.trainers.preference.losses` receiving ``beta`` equal to it). A knob without a target runs
   to the end of the pipeline. The project frames on the call stack under the target are reported too (the
   control path to the use, next to the data path above).

The path (``--mode path``): every hop is recorded with its frame and the chain of project frames around
it; so are the calls and returns that carry the value without naming the key (``load_config`` returning the
resolved dict: *carried*, used to connect the path, never counted). After the run the hops are walked
backwards from the target: a hop is on the path when the target or a later on-path hop happened inside
its call (it passed the value down), or when it returned the value to a frame that is on the path or
that later made an on-path call (it passed the value back up). Every other hop is a *side branch* (a
validator that checks the value and returns None, the copy of the config written to the run folder):
listed separately, with why, and not counted. The counts below are the path's (a run that does not reach
a target has nothing to walk back from: every hop counts, as in ``named``).

Consecutive hops in one file collapse into one *visit*; the report lists the visits in order (step, file,
functions), the number of distinct files, and the *re-entries*: visits to a file that was already visited
before another file came in between (``a b a c b``: 3 files, 2 re-entries). The numbers describe the tree
they run on: a change anywhere on the path (the config classes included) moves them.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType, FunctionType, MethodType, ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PROJECT_DIRS = ("comlrl", "pettingllms")
CO_VARARGS, CO_VARKEYWORDS = 0x04, 0x08
# What makes a call a hop. ``named``: an argument is the value itself, or holds it (within ``depth``) and the
# function's code names the knob's key (reads or forwards it by name). ``carried``: any argument holding it
# within ``depth`` (every function handed the config object counts, whether it uses the knob or not).
# ``path``: the hops of ``named`` (and the returns of the value) that hand it on toward the target; the
# rest are side branches (see the module docstring).
MODES = ("path", "named", "carried")
DEFAULT_DEPTH = {"path": 2, "named": 2, "carried": 1}
MAX_ITEMS = 64  # list / tuple items looked at per argument (every field, key and attribute is)

# The tiny budgets every traced run starts from (before the knob's own plan and the user's --set).
TINY = (
    "env.max_turns=1",
    "rollout.num_generations=2",
    "rollout.max_completion_length=16",
    "rollout.transcripts_rate=0.0",
    "eval.num_instances=1",
    "eval.before_training=false",
    "run.progress=false",
)


@dataclass(frozen=True)
class Target:
    """Where a knob's value is consumed: a call of one of ``functions`` (``"module:qualname"``) whose argument
    ``argument`` equals the sentinel."""

    functions: tuple[str, ...]
    argument: str

    def code_objects(self) -> dict[CodeType, str]:
        import importlib
        import inspect

        out = {}
        for spec in self.functions:
            module_name, qualname = spec.split(":")
            obj: Any = importlib.import_module(module_name)
            for part in qualname.split("."):
                obj = getattr(obj, part)
            out[inspect.unwrap(obj).__code__] = spec
        return out


@dataclass(frozen=True)
class KnobPlan:
    """How to trace one knob: the default config, the overrides of a tiny run that reaches the target, the
    sentinel and the target."""

    config: str
    overrides: tuple[str, ...]
    sentinel: Any
    target: Target | None = None


# The DPO temperature's loss: whichever of the MADPO losses the trainer calls.
DPO_LOSSES = Target(
    ("comlrl.trainers.preference.losses:madpo_agent_losses", "comlrl.trainers.preference.losses:madpo_loss"),
    "beta",
)
WARM_START = ("sft.num_problems=12", "sft.num_train_epochs=6", "sft.learning_rate=1e-2")  # gives candidates that differ
AT_GRPO_TINY = ("at_grpo.max_steps=1", "at_grpo.problems_per_step=1", "at_grpo.per_device_train_batch_size=2")


def preference_tiny(section: str) -> tuple[str, ...]:
    """One round of a preference stage over a few problems, after the warm start."""
    return (
        f"pipeline=[sft, {section}]", *WARM_START, f"{section}.num_rounds=1", f"{section}.num_problems=4",
        f"{section}.preference_num_candidates=2", f"{section}.per_device_train_batch_size=2",
    )


PLANS: dict[str, KnobPlan] = {
    "at_grpo.learning_rate": KnobPlan(
        "plan_path/quickstart",
        ("pipeline=[at_grpo]", *AT_GRPO_TINY),
        3.14159e-4,
        Target(("torch.optim:AdamW.__init__",), "lr"),
    ),
    "madpo.beta": KnobPlan("plan_path/L1", preference_tiny("madpo"), 0.314159, DPO_LOSSES),
}


def default_plan(knob: str, value: Any = None) -> KnobPlan:
    """The plan of a knob not in :data:`PLANS` (no target: the run goes to its end): ``plan_path/L1`` with
    its section's stage on tiny budgets (one round of a preference stage after the warm start; the sft
    stage alone; otherwise one AT-GRPO step), and a sentinel of the knob's type unless ``value`` is given."""
    from pettingllms.config import load_config

    section, _, key = knob.partition(".")
    if value is None:
        current = load_config("plan_path/L1").get(section, {}).get(key)
        if isinstance(current, bool) or not isinstance(current, (int, float, str)):
            raise SystemExit(f"{knob}: no built-in sentinel for a value of type {type(current).__name__}; give --value")
        value = {float: 0.271828, int: 7919, str: "sentinel-7919"}[type(current)]
    if section in ("madpo", "marlhf"):
        overrides = preference_tiny(section)
    elif section == "madpo_from_trees":
        overrides = ("pipeline=[sft, at_grpo, madpo_from_trees]", *WARM_START, *AT_GRPO_TINY)
    elif section == "sft":
        overrides = ("pipeline=[sft]", "sft.num_problems=4", "sft.num_train_epochs=1")
    else:
        overrides = ("pipeline=[at_grpo]", *AT_GRPO_TINY)
    return KnobPlan("plan_path/L1", overrides, value)


# ---------------------------------------------------------------------------------------------- the counts
@dataclass
class Hop:
    """One call that received the value: its file (relative to the repository), function and where the value
    sat among the arguments."""

    file: str
    function: str
    line: int
    via: str
    event: str = "call"  # ``return``: it returned the value (path mode)


@dataclass
class Visit:
    """Consecutive hops in one file."""

    step: int
    file: str
    functions: list[str] = field(default_factory=list)


def collapse(files: Sequence[str]) -> list[str]:
    """``files`` with consecutive duplicates merged: ``a a b a`` -> ``a b a``."""
    out: list[str] = []
    for f in files:
        if not out or out[-1] != f:
            out.append(f)
    return out


def count_reentries(files: Sequence[str]) -> int:
    """How many times the path comes back to a file it left: visits (after :func:`collapse`) to a file an
    earlier visit was in."""
    seen: set[str] = set()
    reentries = 0
    for f in collapse(files):
        reentries += f in seen
        seen.add(f)
    return reentries


def visits_of(hops: Sequence[Hop]) -> list[Visit]:
    visits: list[Visit] = []
    for hop in hops:
        if not visits or visits[-1].file != hop.file:
            visits.append(Visit(len(visits) + 1, hop.file))
        if hop.function not in visits[-1].functions:
            visits[-1].functions.append(hop.function)
    return visits


def distinct(files: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(files))


# ---------------------------------------------------------------------------------------------- the path
@dataclass
class Event:
    """A path-mode record: a project frame received the value (``call``) or handed it back (``return``: the
    returned value holds it, or an argument that did not hold it at the call does).

    ``frame`` is the frame's serial number, ``chain`` the serials of the project frames around it, outermost
    first, starting with 0 (everything outside the project); ``parent`` is ``chain[-1]`` (whom a return goes
    to) and ``caller`` its function. ``named``: a hop of named mode (the raw value, or the code names the
    key); otherwise the event only *carries* the value (connects the path, never counted)."""

    kind: str
    frame: int
    chain: tuple[int, ...]
    hop: Hop
    named: bool = True
    caller: str = ""

    @property
    def parent(self) -> int:
        return self.chain[-1] if self.chain else 0


def on_path(events: Sequence[Event], target_chain: Sequence[int] | None) -> list[bool]:
    """Which events lead to the target, walking backwards from it (``target_chain``: the project frames
    around the target's call, from 0; None: no target reached, everything counts). A ``call`` is on the path
    when its frame is a *path frame*, a ``return`` when the frame it returns to is one; the path frames are
    the target's chain and, for every on-path event, its own frame and its chain (they later made an
    on-path call)."""
    if target_chain is None:
        return [True] * len(events)
    frames = {0, *target_chain}
    out = [False] * len(events)
    for i in range(len(events) - 1, -1, -1):
        event = events[i]
        if (event.frame if event.kind == "call" else event.parent) in frames:
            out[i] = True
            frames.add(event.frame)
            frames.update(event.chain)
    return out


@dataclass
class SideBranch:
    """Hops (named) in frames with no event on the path, grouped by file, function and why."""

    file: str
    function: str
    why: str
    calls: int = 1


def side_branches(events: Sequence[Event], marks: Sequence[bool]) -> list[SideBranch]:
    """The frames with a named hop and no event on the path, with why they end: ``returns without the
    value``, or the value goes back up (``returns``) to frames that do not hand it on."""
    path_frames = {e.frame for e, m in zip(events, marks) if m}
    returns = {e.frame: e for e in events if e.kind == "return"}  # the last return of each frame
    out: dict[tuple[str, str, str], SideBranch] = {}
    seen: set[int] = set()
    for event in events:
        if not event.named or event.frame in path_frames or event.frame in seen:
            continue
        seen.add(event.frame)
        back = returns.get(event.frame)
        if back is None:
            why = "returns without the value"
        else:
            end = back
            while end.parent in returns and end.parent not in path_frames and end.parent != end.frame:
                end = returns[end.parent]
            receiver = end.caller or "code outside the project"
            why = (f"returns the value to {receiver}, which does not hand it on" if end is back
                   else f"hands the value back up to {receiver}, which does not hand it on")
        key = (event.hop.file, event.hop.function, why)
        if key in out:
            out[key].calls += 1
        else:
            out[key] = SideBranch(*key)
    return list(out.values())


# ---------------------------------------------------------------------------------------------- the hook
class TargetReached(BaseException):
    """Raised out of the profile hook to end the run at the target (a BaseException: nothing catches it)."""


class KnobTracer:
    """The profile hook: records the project calls whose arguments hold ``sentinel`` and stops at ``target``.

    Args:
        sentinel: the knob's value in the traced run.
        target: where the value is consumed (None: no stop).
        key: the knob's key (``dpo_beta``): in ``named`` mode a call that holds the value inside an argument
            counts only when its code names the key.
        mode: ``path``, ``named`` or ``carried`` (see :data:`MODES`; ``path`` records :attr:`events`, the
            others :attr:`hops`).
        depth: how far into an argument to look (1: the argument and its fields / items / values; default
            :data:`DEFAULT_DEPTH` of the mode).
        root: the repository (project files are under its ``comlrl/`` and ``pettingllms/``).
    """

    def __init__(
        self,
        sentinel: Any,
        target: Target | None = None,
        *,
        key: str | Sequence[str] = "",
        mode: str = "carried",
        depth: int | None = None,
        root: Path = ROOT,
    ) -> None:  # the class keeps ``carried`` as its default; the script's default is ``path``
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.sentinel = sentinel
        self.text = repr(sentinel) if not isinstance(sentinel, str) else sentinel
        self.keys = tuple(k for k in ((key,) if isinstance(key, str) else key) if k)
        self.mode = mode
        self.depth = depth if depth is not None else DEFAULT_DEPTH[mode]
        self.root = str(root) + os.sep
        self.project = tuple(str(root / d) + os.sep for d in PROJECT_DIRS)
        self.targets = target.code_objects() if target is not None else {}
        self.target_argument = target.argument if target is not None else ""
        self.hops: list[Hop] = []
        self.stack: list[Hop] = []  # the project frames under the target's call, outermost first
        self.calls = 0
        self.reached: Hop | None = None
        self._kinds: dict[CodeType, int] = {}
        self._named: dict[CodeType, bool] = {}
        # path mode: the events, the project frames now active ([frame, serial, names of the arguments that
        # held the value at the call or None, function]) and the chain around the target (None: not reached)
        self.events: list[Event] = []
        self.target_chain: tuple[int, ...] | None = None
        self._frames: list[list[Any]] = []
        self._serial = 0

    # -- what counts
    def matches(self, value: Any) -> bool:
        sentinel = self.sentinel
        if isinstance(sentinel, str):
            return isinstance(value, str) and sentinel in value
        if isinstance(value, str):
            return self.text in value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return value == sentinel

    def find(self, value: Any, depth: int, path: str) -> str | None:
        """The dotted place of the sentinel inside ``value`` (``path`` itself when it is the sentinel)."""
        if self.matches(value):
            return path
        if depth <= 0 or isinstance(value, (type, ModuleType, FunctionType, MethodType, str, bytes)):
            return None
        for key, item in _children(value):
            found = self.find(item, depth - 1, f"{path}{key}")
            if found is not None:
                return found
        return None

    def arguments(self, frame: FrameType) -> list[tuple[str, Any]]:
        code = frame.f_code
        count = code.co_argcount + code.co_kwonlyargcount
        names = list(code.co_varnames[:count])
        extra = code.co_varnames[count : count + bool(code.co_flags & CO_VARARGS) + bool(code.co_flags & CO_VARKEYWORDS)]
        local = frame.f_locals
        out = [(n, local[n]) for n in names if n in local]
        for name in extra:  # *args / **kwargs: their items are the arguments
            value = local.get(name)
            if isinstance(value, tuple):
                out += [(f"{name}[{i}]", v) for i, v in enumerate(value)]
            elif isinstance(value, dict):
                out += [(str(k), v) for k, v in value.items()]
        return out

    # -- the hook
    def _kind(self, code: CodeType) -> int:
        kind = self._kinds.get(code)
        if kind is None:
            if code in self.targets:
                kind = 2
            elif code.co_filename.startswith(self.project):
                kind = 1
            else:
                kind = 0
            self._kinds[code] = kind
        return kind

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        kind = self._kind(code)
        if not kind:
            return
        self.calls += 1
        if kind == 2:
            value = frame.f_locals.get(self.target_argument)
            if self.matches(value) and not isinstance(value, str):
                self.reached = Hop(self._relative(code.co_filename), code.co_qualname, code.co_firstlineno,
                                   self.target_argument)
                self.stack = self._project_stack(frame.f_back)
                sys.setprofile(None)
                raise TargetReached()
            return
        for name, value in self.arguments(frame):
            try:
                where = self.find(value, self.depth, name)
            except Exception:  # an argument whose comparison or fields raise: not followed
                continue
            if where is None:
                continue
            if self.mode == "named" and where != name and not self._names_key(code):
                continue
            self.hops.append(Hop(self._relative(code.co_filename), code.co_qualname, code.co_firstlineno, where))
            return

    def _path_hook(self, frame: FrameType, event: str, arg: Any) -> None:
        """The profile hook of path mode: ``call`` and ``return`` events, with the frames around them."""
        if event == "call":
            code = frame.f_code
            kind = self._kind(code)
            if not kind:
                return
            if kind == 2:
                self.target_chain = (0, *(entry[1] for entry in self._frames))
                self(frame, event, arg)  # the target's check and stop
                self.target_chain = None
                return
            self.calls += 1
            self._serial += 1
            chain = (0, *(entry[1] for entry in self._frames))
            caller = self._frames[-1][3] if self._frames else ""
            held: list[str] = []
            first = raw = None
            for name, value in self.arguments(frame):
                try:
                    where = self.find(value, self.depth, name)
                except Exception:
                    continue
                if where is not None:
                    held.append(name)
                    first = first or where
                    raw = raw or (where if where == name else None)
            self._frames.append([frame, self._serial, held or None, code.co_qualname])
            if held:
                named = raw is not None or self._names_key(code)
                hop = Hop(self._relative(code.co_filename), code.co_qualname, code.co_firstlineno, raw or first)
                self.events.append(Event("call", self._serial, chain, hop, named, caller))
            return
        if event != "return" or self._kinds.get(frame.f_code) != 1:
            return
        frames = self._frames
        for i in range(len(frames) - 1, -1, -1):
            if frames[i][0] is frame:
                break
        else:
            return
        entry = frames[i]
        del frames[i:]
        code = frame.f_code
        try:
            where = self.find(arg, self.depth, "return")
        except Exception:
            where = None
        via = where
        if where is None and entry[2] is not None:  # put into an argument that did not hold it at the call
            for name, value in self.arguments(frame):
                if name in entry[2]:
                    continue
                try:
                    where = self.find(value, self.depth, name)
                except Exception:
                    continue
                if where is not None:
                    via = f"{where} (set in the call)"
                    break
        if where is None:
            return
        chain = (0, *(e[1] for e in frames))
        named = where == "return" or self._names_key(code)
        hop = Hop(self._relative(code.co_filename), code.co_qualname, code.co_firstlineno, via, "return")
        self.events.append(Event("return", entry[1], chain, hop, named, frames[-1][3] if frames else ""))

    def _names_key(self, code: CodeType) -> bool:
        """Whether the function's own code reads or forwards the key by name (``x.key``, ``x["key"]``,
        ``key=...`` in a call, a local of that name)."""
        named = self._named.get(code)
        if named is None:
            named = any(
                key in code.co_names
                or key in code.co_varnames
                or any(c == key or (isinstance(c, tuple) and key in c) for c in code.co_consts if isinstance(c, (str, tuple)))
                for key in self.keys
            )
            self._named[code] = named
        return named

    def _project_stack(self, frame: FrameType | None) -> list[Hop]:
        stack = []
        while frame is not None:
            code = frame.f_code
            if code.co_filename.startswith(self.project):
                stack.append(Hop(self._relative(code.co_filename), code.co_qualname, frame.f_lineno, "stack"))
            frame = frame.f_back
        return stack[::-1]

    def _relative(self, filename: str) -> str:
        return filename[len(self.root) :] if filename.startswith(self.root) else filename

    def run(self, job: Callable[[], Any]) -> bool:
        """Run ``job`` under the hook; True when it stopped at the target."""
        sys.setprofile(self._path_hook if self.mode == "path" else self)
        try:
            job()
        except TargetReached:
            return True
        finally:
            sys.setprofile(None)
        return False


def _children(value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [(f"[{k!r}]", v) for k, v in list(value.items())]
    if isinstance(value, (list, tuple)):
        return [(f"[{i}]", v) for i, v in enumerate(value[:MAX_ITEMS])]
    if dataclasses.is_dataclass(value) and not hasattr(value, "__dict__"):  # slots
        return [(f".{f.name}", getattr(value, f.name, None)) for f in dataclasses.fields(value)]
    try:
        attributes = vars(value)
    except Exception:  # no __dict__ (slots, builtins), or one that refuses to be read
        return []
    return [(f".{k}", v) for k, v in list(attributes.items())] if isinstance(attributes, dict) else []


# ---------------------------------------------------------------------------------------------- a traced run
@dataclass
class Trace:
    """A traced run: the hops in order, the target (None: the knob has none) and the project frames under the
    target's call. In path mode ``hops`` are the named hops on the path, ``side`` the side branches,
    ``carriers`` the events on the path that carry the value without naming the key (not counted) and
    ``events`` every event with its class (``path``, ``side``, ``carried``, ``carried, side``)."""

    knob: str
    config: str
    overrides: list[str]
    sentinel: Any
    mode: str
    depth: int
    reached_target: bool
    target: dict[str, Any] | None
    hops: list[Hop]
    stack: list[Hop]
    calls_seen: int
    seconds: float
    side: list[SideBranch] = field(default_factory=list)
    carriers: list[Hop] = field(default_factory=list)
    events: list[tuple[str, Hop]] = field(default_factory=list)

    @property
    def visits(self) -> list[Visit]:
        return visits_of(self.hops)

    @property
    def files(self) -> list[str]:
        return distinct([h.file for h in self.hops])

    @property
    def reentries(self) -> int:
        return count_reentries([h.file for h in self.hops])

    def to_json(self) -> dict[str, Any]:
        stack_files = [h.file for h in self.stack]
        return {
            "knob": self.knob,
            "config": self.config,
            "overrides": self.overrides,
            "sentinel": self.sentinel,
            "mode": self.mode,
            "depth": self.depth,
            "reached_target": self.reached_target,
            "target": self.target,
            "num_files": len(self.files),
            "reentries": self.reentries,
            "files": self.files,
            "visits": [dataclasses.asdict(v) for v in self.visits],
            "hops": [dataclasses.asdict(h) for h in self.hops],
            "stack_at_target": {
                "num_files": len(distinct(stack_files)),
                "reentries": count_reentries(stack_files),
                "visits": [dataclasses.asdict(v) for v in visits_of(self.stack)],
            },
            **({"side_branches": [dataclasses.asdict(b) for b in self.side],
                "carried_without_naming": [dataclasses.asdict(h) for h in self.carriers],
                "events": [{**dataclasses.asdict(h), "class": c} for c, h in self.events]}
               if self.mode == "path" else {}),
            "project_calls_seen": self.calls_seen,
            "seconds": round(self.seconds, 2),
        }

    def table(self) -> str:
        lines = [f"{self.knob}={self.sentinel!r} ({self.config}; mode {self.mode}, depth {self.depth})"]
        lines += _visit_table(self.visits)
        if self.target is not None:
            status = "reached" if self.reached_target else "NOT reached"
            place = f"{self.target['file']}  {self.target['function']}" if self.reached_target else ""
            lines.append(f"{'->':>4}  target {status}  {place}".rstrip())
        held = "hand-offs on the path" if self.mode == "path" else "calls holding the value"
        lines.append(
            f"{len(self.files)} files, {self.reentries} re-entries ({len(self.visits)} visits, {len(self.hops)} "
            f"{held}, {self.seconds:.1f} s)"
        )
        if self.mode == "path":
            counted = {(h.file, h.function) for h in self.hops}
            names = distinct([f"{Path(h.file).stem}.{h.function}" for h in self.carriers
                              if (h.file, h.function) not in counted])
            if names:
                shown = ", ".join(names[:6]) + (f", ... (+{len(names) - 6})" if len(names) > 6 else "")
                lines.append(f"carried on the path without naming the key (not counted): {shown}")
            lines += ["", "side branches (not on the path):"]
            if self.side:
                fw = max(len(b.file) for b in self.side)
                nw = max(len(b.function) for b in self.side)
                lines.append(f"{'calls':>5}  {'file':<{fw}}  {'function':<{nw}}  why")
                lines += [f"{b.calls:>5}  {b.file:<{fw}}  {b.function:<{nw}}  {b.why}" for b in self.side]
                side_files = distinct([b.file for b in self.side])
                lines.append(f"{sum(b.calls for b in self.side)} calls in {len(side_files)} files")
            else:
                lines.append("(none)")
        if self.stack:
            files = [h.file for h in self.stack]
            lines += ["", "call stack under the target (project frames, outermost first):"]
            lines += _visit_table(visits_of(self.stack))
            lines.append(f"{len(distinct(files))} files, {count_reentries(files)} re-entries")
        return "\n".join(lines)


def _visit_table(visits: Sequence[Visit]) -> list[str]:
    width = max([len(v.file) for v in visits] + [4])
    lines = [f"{'step':>4}  {'file':<{width}}  function(s)"]
    for v in visits:
        shown = ", ".join(v.functions[:4]) + (f", ... (+{len(v.functions) - 4})" if len(v.functions) > 4 else "")
        lines.append(f"{v.step:>4}  {v.file:<{width}}  {shown}")
    return lines


def knob_names(knob: str) -> tuple[str, ...]:
    """The names code may read a knob by: its section key and, for a preference stage, the public CoMLRL field
    it sets (``madpo.beta`` -> ``beta``, ``dpo_beta``; pettingllms.config.key_names)."""
    from pettingllms.config.key_names import PUBLIC_NAMES

    section, _, key = knob.rpartition(".")
    public = PUBLIC_NAMES.get(key, {}).get(section)
    return (key, public) if public else (key,)


def trace_knob(
    knob: str,
    *,
    config: str | None = None,
    model: str = "test-tiny",
    sets: Sequence[str] = (),
    value: Any = None,
    mode: str = "path",
    depth: int | None = None,
) -> Trace:
    """Trace ``knob`` (``section.key``) in a tiny in-process pipeline run (see the module docstring);
    ``sets`` are more overrides, applied after the plan's and before the sentinel."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from pettingllms.config import load_config
    from pettingllms.pipeline import Pipeline

    plan = PLANS.get(knob) or default_plan(knob, value)
    sentinel = plan.sentinel if value is None else value
    tracer = KnobTracer(sentinel, plan.target, key=knob_names(knob), mode=mode, depth=depth)
    with tempfile.TemporaryDirectory(prefix="trace_knob_") as tmp:
        overrides = [
            f"model.name={model}", f"run.output_dir={Path(tmp) / 'run'}", *TINY, *plan.overrides, *sets,
            f"{knob}={sentinel}",
        ]
        out = io.StringIO()

        def job() -> None:
            resolved = load_config(config or plan.config, overrides)
            Pipeline(resolved, out=out, plots=False).run()

        start = time.perf_counter()
        reached = tracer.run(job)
        seconds = time.perf_counter() - start
    target = dataclasses.asdict(tracer.reached) if tracer.reached is not None else None
    if target is None and plan.target is not None:
        target = {"file": "", "function": " | ".join(plan.target.functions), "line": 0, "via": plan.target.argument}
    trace = Trace(
        knob, config or plan.config, overrides, sentinel, mode, tracer.depth, reached, target, tracer.hops,
        tracer.stack, tracer.calls, seconds,
    )
    if mode == "path":
        path_trace(trace, tracer.events, tracer.target_chain if reached else None)
    return trace


def path_trace(trace: Trace, events: Sequence[Event], target_chain: Sequence[int] | None) -> Trace:
    """Fill ``trace``'s path fields from path-mode ``events`` (see :func:`on_path`)."""
    marks = on_path(events, target_chain)
    trace.hops = [e.hop for e, m in zip(events, marks) if m and e.named]
    trace.carriers = [e.hop for e, m in zip(events, marks) if m and not e.named]
    trace.side = side_branches(events, marks)
    trace.events = [
        (("path" if m else "side") if e.named else ("carried" if m else "carried, side"), e.hop)
        for e, m in zip(events, marks)
    ]
    return trace


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("knob", help="section.key, e.g. at_grpo.learning_rate or madpo.beta")
    parser.add_argument("--config", help="the pipeline config (default: one with the knob's stage)")
    parser.add_argument("--model", default="test-tiny", help="model.name of the run (default test-tiny)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="one more override (repeatable)")
    parser.add_argument("--value", help="the sentinel (YAML; default: the knob's built-in one)")
    parser.add_argument(
        "--mode", choices=MODES, default="path",
        help="path (default): the hand-offs that lead to the target, side branches listed apart; named: every call "
             "holding the value whose code names the key; carried: every call holding the value",
    )
    parser.add_argument("--depth", type=int, help="levels looked into an argument (default: path 2, named 2, carried 1)")
    parser.add_argument("--json", dest="json_path", metavar="PATH", help="also write the report as JSON")
    parser.add_argument("--calls", action="store_true",
                        help="also list every call holding the value (path mode: every event, with its class)")
    args = parser.parse_args(argv)
    value = None
    if args.value is not None:
        from pettingllms.config.loader import parse_value

        value = parse_value(args.value)
    trace = trace_knob(
        args.knob, config=args.config, model=args.model, sets=args.sets, value=value, mode=args.mode,
        depth=args.depth,
    )
    if args.calls:
        listed = trace.events if trace.mode == "path" else [("", h) for h in trace.hops]
        for i, (kind, hop) in enumerate(listed, start=1):
            mark = f"  [{hop.event}: {kind}]" if kind else ""
            print(f"{i:>4}  {hop.file}:{hop.line}  {hop.function}  ({hop.via}){mark}")
        print()
    print(trace.table())
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(trace.to_json(), indent=2) + "\n", encoding="utf-8")
    return 0 if trace.reached_target or trace.target is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
