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
   ``*args`` and ``**kwargs`` count as arguments themselves). In the default mode, ``carried``, an argument
   that is the sentinel (equal to it for numbers, containing its text for strings: the override, the
   resolved YAML) or holds it one level down (a dataclass field, a dict value, an object's ``__dict__``
   value, a list / tuple item; ``self`` included) makes the call a *hop*, recorded with its file and
   function. ``--mode named`` is stricter: a call that holds the value inside an argument (by default up to
   two levels down: ``self.args.dpo_beta``) counts only when its own code names the key (reads or forwards
   it by name), so the methods that are merely handed the config object drop out. ``--depth`` changes how
   far into an argument the hook looks (objects are followed, callables are not);
3. the run stops at the knob's target: the call that consumes the value (``at_grpo.learning_rate``:
   ``torch.optim.AdamW.__init__`` receiving ``lr`` equal to the sentinel; ``madpo.beta``: a MADPO loss
   of :mod:`comlrl.trainers.preference.losses` receiving ``beta`` equal to it). A knob without a target runs
   to the end of the pipeline. The project frames on the call stack under the target are reported too (the
   control path to the use, next to the data path above).

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
MODES = ("named", "carried")
DEFAULT_DEPTH = {"named": 2, "carried": 1}
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
        mode: ``named`` or ``carried`` (see :data:`MODES`).
        depth: how far into an argument to look (1: the argument and its fields / items / values; default
            :data:`DEFAULT_DEPTH` of the mode).
        root: the repository (project files are under its ``comlrl/`` and ``pettingllms/``).
    """

    def __init__(
        self,
        sentinel: Any,
        target: Target | None = None,
        *,
        key: str = "",
        mode: str = "carried",
        depth: int | None = None,
        root: Path = ROOT,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.sentinel = sentinel
        self.text = repr(sentinel) if not isinstance(sentinel, str) else sentinel
        self.key = key
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

    def _names_key(self, code: CodeType) -> bool:
        """Whether the function's own code reads or forwards the key by name (``x.key``, ``x["key"]``,
        ``key=...`` in a call, a local of that name)."""
        named = self._named.get(code)
        if named is None:
            key = self.key
            named = bool(key) and (
                key in code.co_names
                or key in code.co_varnames
                or any(c == key or (isinstance(c, tuple) and key in c) for c in code.co_consts if isinstance(c, (str, tuple)))
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
        sys.setprofile(self)
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
    target's call."""

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
        lines.append(
            f"{len(self.files)} files, {self.reentries} re-entries ({len(self.visits)} visits, {len(self.hops)} "
            f"calls holding the value, {self.seconds:.1f} s)"
        )
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


def trace_knob(
    knob: str,
    *,
    config: str | None = None,
    model: str = "test-tiny",
    sets: Sequence[str] = (),
    value: Any = None,
    mode: str = "carried",
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
    tracer = KnobTracer(sentinel, plan.target, key=knob.rsplit(".", 1)[-1], mode=mode, depth=depth)
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
    return Trace(
        knob, config or plan.config, overrides, sentinel, mode, tracer.depth, reached, target, tracer.hops,
        tracer.stack, tracer.calls, seconds,
    )


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
    parser.add_argument("--mode", choices=MODES, default="carried", help="what makes a call a hop (default carried)")
    parser.add_argument("--depth", type=int, help="levels looked into an argument (default: named 2, carried 1)")
    parser.add_argument("--json", dest="json_path", metavar="PATH", help="also write the report as JSON")
    parser.add_argument("--calls", action="store_true", help="also list every call holding the value")
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
        for i, hop in enumerate(trace.hops, start=1):
            print(f"{i:>4}  {hop.file}:{hop.line}  {hop.function}  ({hop.via})")
        print()
    print(trace.table())
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(trace.to_json(), indent=2) + "\n", encoding="utf-8")
    return 0 if trace.reached_target or trace.target is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
