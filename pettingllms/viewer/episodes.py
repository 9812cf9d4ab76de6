"""Episodes out of transcript records, and where a run keeps its transcripts.

A transcript file (``rollouts.jsonl``, :mod:`pettingllms.execution.transcripts`) holds one record per
sampled completion. :func:`group_episodes` puts them back together:

* tree sampling (AT-GRPO): an episode is one problem at one training step; at each decision point
  ``(turn, agent)`` the candidate marked ``selected`` is the branch that continued, the others are its
  siblings (shown with their rewards, since the group's advantage compares them);
* independent sampling (GRPO, evaluation): an episode is one trajectory (``candidate``) of one problem.

Episodes are numbered in the order they first appear in the file. :func:`find_transcripts` lists the
transcript files of a run folder by stage: the folder's own ``rollouts.jsonl`` and those of its stage
folders (``at_grpo/``, ``eval/``, ``eval_before/``, ``pettingllms eval``'s ``eval_results/``), in run order
where the run's pipeline state says it, and one level further down: an eval stage's benchmarks
(``eval/humaneval/``) and the evaluations inside a training stage (``at_grpo/eval-40/``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pettingllms.viewer.content import number_text

__all__ = [
    "REQUIRED_KEYS",
    "Decision",
    "Episode",
    "find_transcripts",
    "group_episodes",
    "read_records",
]

# The names of pettingllms.execution.transcripts.TRANSCRIPT_FILE and pettingllms.pipeline.PIPELINE_STATE_FILE
# (importing those modules would load torch for a command that reads JSON; a test keeps them equal).
TRANSCRIPT_FILE = "rollouts.jsonl"
PIPELINE_STATE_FILE = "pipeline_state.json"
#: Keys without which a record cannot be placed in an episode.
REQUIRED_KEYS = ("step", "problem_id", "turn", "agent_index")


@dataclass
class Decision:
    """One decision point of an episode: the record that continued (``record``) and, in tree sampling,
    the other candidates drawn from the same state (``siblings``, by candidate)."""

    turn: int
    agent_index: int
    record: dict[str, Any]
    siblings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def role(self) -> str:
        return str(self.record.get("role", f"agent {self.agent_index}"))


@dataclass
class Episode:
    """One episode, its decisions in order. ``trajectory`` is the independent trajectory (None: a tree)."""

    index: int
    step: int
    problem_id: int
    mode: str
    trajectory: int | None
    decisions: list[Decision]
    stage: str = ""
    source: str = ""

    @property
    def last(self) -> dict[str, Any]:
        return self.decisions[-1].record

    @property
    def success(self) -> bool:
        return bool(self.last.get("success"))

    @property
    def done(self) -> bool:
        return bool(self.last.get("done"))

    @property
    def turns(self) -> int:
        return len({d.turn for d in self.decisions})

    @property
    def env(self) -> str | None:
        """The environment's name, as the state snapshots record it (None: no snapshot)."""
        for decision in self.decisions:
            state = decision.record.get("state")
            if isinstance(state, Mapping) and state.get("env"):
                return str(state["env"])
        return None

    def label(self) -> str:
        """``step 3, problem 17`` (and ``, trajectory 1`` for independent sampling)."""
        where = f"step {self.step}, problem {self.problem_id}"
        return where if self.trajectory is None else f"{where}, trajectory {self.trajectory}"

    def outcome(self) -> str:
        """``success`` / ``failure`` / ``unfinished`` and the decisions and turns it took."""
        status = "success" if self.success else ("failure" if self.done else "unfinished (the transcript ends early)")
        n = len(self.decisions)
        return f"{status} after {self.turns} turn{'s' * (self.turns != 1)} ({n} decision{'s' * (n != 1)})"

    def summary(self) -> str:
        """One line for listings: index, label, outcome, final global reward."""
        reward = self.last.get("global_reward")
        final = "" if reward is None else f", final global reward {number_text(reward)}"
        return f"{self.index:>4}  {self.label()}: {self.outcome()}{final}"


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of a transcript file; a torn last line (a kill mid-write) is dropped with a warning.
    A record that is not an object or lacks :data:`REQUIRED_KEYS` is a ValueError naming file and line."""
    from comlrl.reporting import read_jsonl

    records = []
    for line, record in read_jsonl(Path(path)):
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{line}: a transcript record must be a JSON object, got {type(record).__name__}")
        missing = [key for key in REQUIRED_KEYS if key not in record]
        if missing:
            raise ValueError(f"{path}:{line}: not a transcript record (no {', '.join(repr(k) for k in missing)})")
        records.append(record)
    return records


def group_episodes(records: Iterable[Mapping[str, Any]], stage: str = "", source: str = "") -> list[Episode]:
    """The episodes of ``records`` (see the module docstring), numbered from 0 in order of appearance."""
    keys: dict[tuple, list[dict[str, Any]]] = {}
    for record in records:
        record = dict(record)
        tree = record.get("mode") == "tree"
        key = (int(record["step"]), int(record["problem_id"]), None if tree else int(record.get("candidate", 0)))
        keys.setdefault(key, []).append(record)
    episodes = []
    for index, ((step, problem_id, trajectory), rows) in enumerate(keys.items()):
        points: dict[tuple[int, int], list[dict[str, Any]]] = {}
        for row in rows:
            points.setdefault((int(row["turn"]), int(row["agent_index"])), []).append(row)
        decisions = []
        for (turn, agent_index), candidates in sorted(points.items()):
            candidates.sort(key=lambda r: int(r.get("candidate", 0)))
            chosen = next((r for r in candidates if r.get("selected")), candidates[0])
            siblings = [r for r in candidates if r is not chosen]
            decisions.append(Decision(turn, agent_index, chosen, siblings))
        mode = str(rows[0].get("mode", "independent"))
        episodes.append(Episode(index, step, problem_id, mode, trajectory, decisions, stage, source))
    return episodes


def _run_order(run_dir: Path) -> list[str]:
    """Stage folders in the order the run's pipeline plan runs them ([] when there is no readable plan)."""
    state = run_dir / PIPELINE_STATE_FILE
    try:
        plan = json.loads(state.read_text(encoding="utf-8")).get("plan", [])
        return [str(entry[1]) for entry in plan if isinstance(entry, (list, tuple)) and len(entry) == 2]
    except (OSError, ValueError, AttributeError):
        return []


def find_transcripts(path: str | Path) -> dict[str, Path]:
    """``{stage: transcript file}`` of ``path``: a transcript file itself, or a folder: its own
    ``rollouts.jsonl`` and those one folder down, in run order (then by name). A stage is named after the
    folder that holds its file (``.`` for the folder's own file if a subfolder has its name)."""
    path = Path(path)
    if path.is_file():
        return {path.resolve().parent.name or ".": path}
    children = [child for child in path.iterdir() if child.is_dir()]
    folders = {child.name: child / TRANSCRIPT_FILE for child in children if (child / TRANSCRIPT_FILE).is_file()}
    # One level further: a stage's benchmarks (eval/<name>/) and its evaluations during training (at_grpo/eval-<step>/).
    nested = {child.name: _nested_transcripts(child) for child in children}
    found: dict[str, Path] = {}
    if (path / TRANSCRIPT_FILE).is_file():
        own = path.resolve().name
        found[own if own and own not in folders else "."] = path / TRANSCRIPT_FILE
    order = _run_order(path)
    for name in sorted(set(folders) | {n for n, files in nested.items() if files},
                       key=lambda n: (order.index(n) if n in order else len(order), n)):
        if name in folders:
            found[name] = folders[name]
        found.update(nested[name])
    return found


def _nested_transcripts(folder: Path) -> dict[str, Path]:
    """``{"<folder>/<sub>": file}`` of the transcript files one level under ``folder``, in natural order
    (``eval-2`` before ``eval-10``)."""
    subs = [sub for sub in folder.iterdir() if sub.is_dir() and (sub / TRANSCRIPT_FILE).is_file()]
    key = lambda sub: [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", sub.name)]  # noqa: E731
    return {f"{folder.name}/{sub.name}": sub / TRANSCRIPT_FILE for sub in sorted(subs, key=key)}
