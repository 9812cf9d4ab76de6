"""``scripts/trace_knob.py``: the counting on hand-made file sequences, the profile hook on a toy call chain,
and one traced pipeline run of ``at_grpo.learning_rate`` that reaches the optimizer."""

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
