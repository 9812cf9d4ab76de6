"""The contamination check of a run: no evaluation problem may be a training problem under another name.

The disjointness check (:mod:`pettingllms.config.instances`) compares instance ids and, within one dataset,
native ids and statements. Across datasets the ids never match (``apps/train/3`` and
``humaneval/HumanEval/0``), yet the same task is often published twice, reworded: APPS, CodeContests and
LiveCodeBench share Codeforces and AtCoder problems, the maths sets share competition problems. So before
anything trains, the pipeline compares the statement of every problem its training stages play with the
statement of every problem each evaluation benchmark plays (:func:`pettingllms.envs.contamination.find_overlaps`:
exact matches after the documented normalisation, and near-duplicates that share a word 13-gram).

An overlap stops the run before it starts, with one line naming the sets and a few ids, unless
``eval.allow_contamination`` is true. The counts are written to ``contamination.json`` in the run folder
either way. Environments whose instances are generated from their seed (``math/arith``, the puzzles,
synthetic search) have no statements to compare: the file then says the check did not apply and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pettingllms.config.errors import ConfigError

__all__ = ["CONTAMINATION_FILE", "check_contamination", "contamination_report"]

CONTAMINATION_FILE = "contamination.json"


def _statements(env: Any, seeds: range) -> dict[str, str] | None:
    """``{instance id: statement}`` of ``seeds`` (None: the environment has no statements to compare)."""
    statement_of = getattr(env, "instance_statement", None)
    if statement_of is None or not seeds or statement_of(seeds[0]) is None:
        return None
    return {str(env.instance_id(seed)): statement_of(seed) for seed in seeds}


def contamination_report(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The comparison of the pipeline's training problems with every evaluation benchmark's, JSON-ready
    (:meth:`~pettingllms.envs.contamination.ContaminationReport.to_json` plus ``checked``); a report with
    ``checked: false`` and the ``reason`` when there is nothing to compare; None when the pipeline trains
    nothing or evaluates nothing."""
    from pettingllms.config.instances import SEEDED_TRAINING_STAGES, check_held_out_instances, stage_env
    from pettingllms.envs.contamination import find_overlaps
    from pettingllms.stages.eval import eval_plan

    pipeline = list(dict.fromkeys(config["pipeline"]))
    stages = [stage for stage in pipeline if stage in SEEDED_TRAINING_STAGES]
    if not stages or "eval" not in pipeline:
        return None
    seeds = check_held_out_instances(config, stages)
    train_env = stage_env(config, "train")
    train: dict[str, str] = {}
    for stage in stages:
        found = _statements(train_env, seeds[stage])
        if found is None:
            return {"checked": False, "reason": f"the {config['env']['name']} training instances are generated from "
                                                "their seeds: no statements to compare"}
        train.update(found)
    eval_sets: dict[str, dict[str, str]] = {}
    skipped: list[str] = []
    for planned in eval_plan("eval", config, progress=False):
        name = planned.name or "eval"
        found = _statements(stage_env(planned.config, "eval"), planned.settings.seeds)
        if found is None:
            skipped.append(name)
        else:
            eval_sets[name] = found
    report = find_overlaps(train, eval_sets).to_json()
    report["checked"] = True
    report["not_compared"] = skipped  # generated benchmarks: nothing to compare
    return report


def check_contamination(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """:func:`contamination_report`, and a ConfigError when a training problem's statement is an
    evaluation problem's (exact or near) and ``eval.allow_contamination`` is false."""
    from pettingllms.envs.contamination import ContaminationReport

    report = contamination_report(config)
    if report is None or not report.get("checked") or not report["total_overlapping"]:
        return report
    if not config["eval"].get("allow_contamination", False):
        line = ContaminationReport.from_json(report).summary_line()
        raise ConfigError(
            f"`eval.allow_contamination` is false, but {line}: evaluate on problems training never sees, or set "
            "eval.allow_contamination=true to train anyway (the counts go to contamination.json)"
        )
    return report
