"""``scripts/trace_knob.py``: the counting on hand-made file sequences, the profile hook and the path's
classification on a toy call chain, and one traced pipeline run of ``at_grpo.learning_rate`` that reaches the optimizer."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def load_tracer():
    spec = importlib.util.spec_from_file_location("trace_knob_under_test", REPO / "scripts" / "trace_knob.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


tk = load_tracer()


# ---- the counts (pure) --------------------------------------------------------------------------------
def test_consecutive_duplicates_collapse_into_one_visit():
    assert tk.collapse([]) == []
    assert tk.collapse(["a", "a", "b", "b", "b", "a", "c", "c"]) == ["a", "b", "a", "c"]


@pytest.mark.parametrize(
    ("files", "distinct", "reentries"),
    [
        ([], 0, 0),
        (["a"], 1, 0),
        (["a", "a", "a"], 1, 0),  # staying in a file is not a re-entry
        (["a", "b", "c"], 3, 0),
        (["a", "b", "a"], 2, 1),
        (["a", "b", "a", "c", "b"], 3, 2),
        (["a", "a", "b", "b", "a", "a", "b"], 2, 2),
        (["a", "b", "a", "b", "a"], 2, 3),  # every return counts
    ],
)
def test_reentries_count_returns_to_a_file_after_another(files, distinct, reentries):
    assert len(tk.distinct(files)) == distinct
    assert tk.count_reentries(files) == reentries


def test_visits_keep_each_files_functions_in_order():
    hops = [tk.Hop(f, fn, 1, "x") for f, fn in [("a", "f"), ("a", "g"), ("a", "f"), ("b", "h"), ("a", "k")]]
    visits = tk.visits_of(hops)
    assert [(v.step, v.file, v.functions) for v in visits] == [(1, "a", ["f", "g"]), (2, "b", ["h"]), (3, "a", ["k"])]


# ---- the hook on a toy chain -----------------------------------------------------------------------------
@dataclass
class Section:
    rate: float
    other: int = 3


def holder(section):  # the value one level down
    return takes_value(section.rate)


def takes_value(rate):  # the value itself
    return unrelated(7) + rate


def unrelated(x):
    return x


def test_the_hook_records_the_calls_holding_the_value_and_how():
    tracer = tk.KnobTracer(0.123, key="rate", root=REPO)
    tracer.project = (str(Path(__file__).resolve()),)  # this file plays the project
    assert tracer.run(lambda: holder(Section(0.123))) is False  # no target: runs to the end
    assert [(h.function, h.via) for h in tracer.hops] == [("holder", "section.rate"), ("takes_value", "rate")]
    assert tracer.matches("key=0.123") and not tracer.matches(True) and not tracer.matches(0.1230001)

    strict = tk.KnobTracer(0.123, key="nowhere", mode="named", root=REPO)
    strict.project = tracer.project
    strict.run(lambda: holder(Section(0.123)))
    assert [h.function for h in strict.hops] == ["takes_value"]  # holder never names `nowhere`


# ---- path mode: the hand-offs that lead to the target, side branches apart ---------------------------------
def toy_parse(text):  # returns the value to its caller, which passes it on: on the path
    return float(text.split("=")[1])


def toy_clip(rate):  # returns the value to a validator, which keeps it: a side branch
    return min(rate, 1.0)


def toy_check(rate):  # a validator: checks the value and returns None: a side branch
    if toy_clip(rate) <= 0:
        raise ValueError(rate)


def toy_save(text):  # the writer's helper: returns without the value
    return len(text)


def toy_write(section):  # writes a copy of the config: a side branch
    toy_save(f"rate={section.rate}")


def toy_consume(rate):  # the target
    return rate


def toy_use(section):  # passes the value down to the target: on the path
    return toy_consume(section.rate)


def toy_run(text):
    rate = toy_parse(text)
    section = Section(rate)
    toy_check(section.rate)
    toy_write(section)
    return toy_use(section)


def test_path_mode_keeps_the_hand_offs_to_the_target_and_lists_side_branches_apart():
    tracer = tk.KnobTracer(0.123, key="rate", mode="path", root=REPO)
    tracer.project = (str(Path(__file__).resolve()),)
    tracer.targets, tracer.target_argument = {toy_consume.__code__: "toy_consume"}, "rate"
    assert tracer.run(lambda: toy_run("rate=0.123")) is True
    assert tracer.reached.function == "toy_consume"
    marks = tk.on_path(tracer.events, tracer.target_chain)
    path = [(e.hop.function, e.kind) for e, m in zip(tracer.events, marks) if m and e.named]
    assert path == [("toy_run", "call"), ("toy_parse", "call"), ("toy_parse", "return"), ("toy_use", "call")]
    side = {(b.function, b.why) for b in tk.side_branches(tracer.events, marks)}
    assert side == {
        ("toy_check", "returns without the value"),
        ("toy_clip", "returns the value to toy_check, which does not hand it on"),
        ("toy_write", "returns without the value"),
        ("toy_save", "returns without the value"),
    }

    trace = tk.Trace("toy.rate", "toy", [], 0.123, "path", 2, True, None, [], [], tracer.calls, 0.0)
    tk.path_trace(trace, tracer.events, tracer.target_chain)
    assert [h.function for h in trace.hops] == ["toy_run", "toy_parse", "toy_parse", "toy_use"]
    table = trace.table()
    assert "side branches (not on the path):" in table and "toy_write" in table.split("side branches")[1]
    assert {b["function"] for b in trace.to_json()["side_branches"]} == {"toy_check", "toy_clip", "toy_write", "toy_save"}


def test_on_path_walks_back_from_the_target_through_returns_and_calls():
    def event(kind, frame, chain, name, named=True):
        return tk.Event(kind, frame, chain, tk.Hop("f.py", name, 1, "x", kind), named)

    events = [
        event("call", 1, (0,), "load"),
        event("return", 1, (0,), "load", named=False),  # back up to 0, the frame around the target: carried
        event("call", 2, (0,), "validate"),  # returns nothing
        event("call", 3, (0, 4), "write"),  # frame 4 never reaches the target
        event("return", 3, (0, 4), "write"),
        event("call", 5, (0, 6), "use"),  # the target is inside
    ]
    assert tk.on_path(events, (0, 6, 5)) == [True, True, False, False, False, True]
    assert tk.on_path(events, None) == [True] * len(events)  # no target: nothing to separate


# ---- end to end ----------------------------------------------------------------------------------------
def test_at_grpo_learning_rate_reaches_the_optimizer(tiny_model_path, tmp_path):
    trace = tk.trace_knob("at_grpo.learning_rate", model=tiny_model_path)
    assert trace.reached_target, trace.table()
    assert trace.target["function"] == "AdamW.__init__" and trace.target["file"].endswith("torch/optim/adamw.py")
    files = trace.files
    assert files[0] == "pettingllms/config/loader.py"  # the override is where the value enters
    assert all(f.startswith(("comlrl/", "pettingllms/")) for f in files)
    assert trace.reentries == tk.count_reentries([h.file for h in trace.hops])
    # The control path to the optimizer: the pipeline, the stage, the AT-GRPO trainer's policy updater.
    stack = [h.file for h in trace.stack]
    assert stack[0] == "pettingllms/pipeline.py" and "pettingllms/trainer/policy_update.py" in stack
    report = trace.to_json()
    assert report["num_files"] == len(files) and report["reached_target"]
    json.dumps(report)
    assert f"{len(files)} files, {trace.reentries} re-entries" in trace.table()
    # The default mode is the path: the copy of the config written to the run folder is a side branch.
    assert trace.mode == "path" and "comlrl/atomic_io.py" not in files
    assert "comlrl/atomic_io.py" in {b["file"] for b in report["side_branches"]}
    assert files[-1] == "comlrl/trainers/core/optimization.py"
