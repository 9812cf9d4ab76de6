"""Question-answering benchmarks read from local files, or their Hub copies, into one normalised record,
:class:`SearchProblem`.

Loaders read the FlashRAG releases of NQ, HotpotQA, 2WikiMultihopQA, MuSiQue and Bamboogle (JSONL, one question
per line: ``id``, ``question``, ``golden_answers`` (a list), and for the multi-hop sets a ``metadata`` object),
from a JSON/JSONL file (optionally ``.gz``), a parquet file or a ``datasets.save_to_disk`` folder. The same
loaders take Search-R1's processed parquet files (golden answers under ``reward_model.ground_truth.target``) and
the original releases' spelling of the fields (``_id``; ``answer`` as text, ``answer_aliases``), so a local
copy of any of them works. :func:`load_problems` without a path reads FlashRAG's Hub data files instead
(:mod:`pettingllms.envs.sources`, only where Hub access is allowed), through the same converter. A Bamboogle
dump whose only split is named ``train`` is read as ``test`` (:data:`EVAL_ONLY`).

Normalised JSONL layout (one problem per line, UTF-8; the layout of the code and math benchmarks with a list of
golden answers):

    {"problem_id": "hotpotqa/5a8b57f25542995d1e6f1371",  # "<dataset>/<native id>", unique across the splits
     "dataset": "hotpotqa",          # nq | hotpotqa | 2wiki | musique | bamboogle | synthetic
     "split": "dev",                 # train | dev | test | ...
     "question": "...",
     "answers": ["...", "..."],      # the golden answers (any of them is right), at least one
     "metadata": {...}}              # JSON values: the question's type / level, and `supporting_titles`
                                     # (titles of the passages that hold the evidence) where the data says

Normalised files live at ``$PETTINGLLMS_DATA/search/<dataset>/<split>.jsonl`` (default root
``~/.cache/pettingllms/data``): see :func:`normalised_path`.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pettingllms.envs import dataset_io, sources
from pettingllms.envs.records import read_records, record_from_json, write_records

__all__ = [
    "DATASETS",
    "DEFAULT_SPLITS",
    "EVAL_ONLY",
    "SearchDataError",
    "SearchProblem",
    "load_problems",
    "normalised_path",
    "read_jsonl",
    "write_jsonl",
]


class SearchDataError(ValueError):
    """A data file that is missing or does not match its schema (the message is one line)."""


@dataclass(frozen=True)
class SearchProblem:
    """One question in the normalised layout (see the module docstring)."""

    problem_id: str
    dataset: str
    split: str
    question: str
    answers: list = field(default_factory=list)
    metadata: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("problem_id", "dataset", "split", "question"):
            if not isinstance(getattr(self, name), str):
                raise SearchDataError(f"{self.problem_id}: `{name}` must be a string, got {getattr(self, name)!r:.80}")
        if not self.question.strip():
            raise SearchDataError(f"{self.problem_id}: `question` is empty")
        answers = self.answers
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a.strip() for a in answers):
            raise SearchDataError(f"{self.problem_id}: `answers` must be a non-empty list of non-empty strings, got {answers!r:.80}")
        if not isinstance(self.metadata, dict):
            raise SearchDataError(f"{self.problem_id}: `metadata` must be a dict, got {type(self.metadata).__name__}")

    @property
    def supporting_titles(self) -> list[str]:
        """Titles of the passages that hold the evidence (empty where the dataset does not say)."""
        return list(self.metadata.get("supporting_titles") or [])

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SearchProblem:
        return record_from_json(cls, obj, SearchDataError)


def write_jsonl(path: str | os.PathLike, problems: Iterable[SearchProblem]) -> Path:
    """Write problems in the normalised layout, atomically."""
    return write_records(path, problems)


def read_jsonl(path: str | os.PathLike) -> list[SearchProblem]:
    """Problems from a normalised JSONL file; errors name the path and line."""
    return read_records(path, SearchProblem, SearchDataError, "search")


def normalised_path(dataset: str, split: str) -> Path:
    """Where ``pettingllms dataprocess search`` writes a split: ``$PETTINGLLMS_DATA/search/<dataset>/<split>.jsonl``."""
    return dataset_io.normalised_path(dataset, split, env="search")


# ------------------------------------------------------------------------------------------ reading rows


def _text(value: Any, name: str) -> str:
    if isinstance(value, bool) or value is None:
        raise ValueError(f"field '{name}' must be text, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, (int, float)):
        return str(value)
    if not isinstance(value, str):
        raise ValueError(f"field '{name}' must be text, got {type(value).__name__}")
    return value.strip()


def _as_list(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    if hasattr(value, "tolist"):  # a numpy array from parquet
        return list(value.tolist())
    return [value]


def _golden(row: dict) -> list[str]:
    """The golden answers: ``golden_answers``, else Search-R1's ``reward_model.ground_truth.target``, else the
    original ``answer`` (text or list) with its ``answer_aliases``; deduplicated in order."""
    if "golden_answers" in row:
        raw = _as_list(row["golden_answers"])
    elif isinstance(row.get("reward_model"), dict) and isinstance(row["reward_model"].get("ground_truth"), dict):
        raw = _as_list(row["reward_model"]["ground_truth"].get("target"))
    elif "answer" in row or "answers" in row:
        raw = _as_list(row.get("answer", row.get("answers"))) + _as_list(row.get("answer_aliases"))
    else:
        raise KeyError("'golden_answers'")
    answers = [_text(a, "golden_answers") for a in raw if a is not None]
    answers = list(dict.fromkeys(a for a in answers if a))
    if not answers:
        raise ValueError("no non-empty golden answer")
    return answers


def _titles(facts: Any) -> list[str]:
    """Supporting titles from FlashRAG's ``{"title": [...], "sent_id": [...]}`` or the original ``[[title, n], ...]``."""
    if isinstance(facts, dict):
        titles = _as_list(facts.get("title"))
    else:
        titles = [f[0] if isinstance(f, (list, tuple)) and f else f for f in _as_list(facts)]
    return list(dict.fromkeys(str(t).strip() for t in titles if isinstance(t, str) and t.strip()))


def _metadata(dataset: str, row: dict) -> dict:
    # The fields kept per dataset (JSON values only; passages and contexts are left out, retrieval finds them).
    meta = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
    source = {**row, **meta}
    out: dict[str, Any] = {}
    for name in ("type", "level"):
        if isinstance(source.get(name), str) and source[name]:
            out[name] = source[name]
    if dataset in ("hotpotqa", "2wiki") and source.get("supporting_facts") is not None:
        out["supporting_titles"] = _titles(source["supporting_facts"])
    if dataset == "musique":
        paragraphs = [p for p in _as_list(source.get("paragraphs")) if isinstance(p, dict)]
        titles = [str(p.get("title", "")).strip() for p in paragraphs if p.get("is_supporting")]
        if titles:
            out["supporting_titles"] = list(dict.fromkeys(t for t in titles if t))
        if isinstance(source.get("answerable"), bool):
            out["answerable"] = source["answerable"]
        hops = re.match(r"(\d)hop", str(row.get("id", "")))
        if hops:
            out["hops"] = int(hops.group(1))
    return out


def _problem(dataset: str) -> Callable[[dict, str, int], SearchProblem]:
    def convert(row: dict, split: str, index: int) -> SearchProblem:
        native = next((row[k] for k in ("id", "_id", "qid") if row.get(k) not in (None, "")), None)
        native = f"{split}/{index}" if native is None else _text(native, "id")
        if "question" not in row:
            raise KeyError("'question'")
        return SearchProblem(problem_id=f"{dataset}/{native}", dataset=dataset, split=split,
                             question=_text(row["question"], "question"), answers=_golden(row),
                             metadata=_metadata(dataset, row))

    return convert


#: The datasets with a loader, and the split a file is taken to hold when neither its name nor ``split`` says.
DEFAULT_SPLITS: dict[str, str | None] = {"nq": None, "hotpotqa": None, "2wiki": None, "musique": None,
                                         "bamboogle": "test"}
DATASETS: dict[str, Callable[[dict, str, int], SearchProblem]] = {name: _problem(name) for name in DEFAULT_SPLITS}
#: Benchmarks that only evaluate here: a dump whose only split is named ``train`` holds their test questions.
EVAL_ONLY = frozenset({"bamboogle"})


def _rows(dataset: str, path: str | os.PathLike | None, split: str | None, mirror: str | os.PathLike | None,
          revision: str | None) -> tuple[str, list[tuple[Any, list[dict]]]]:
    """The split label and the rows of each part (``(where, rows)``) of a local source, or of the Hub's files."""
    try:
        if path is None:
            return sources.fetch_parts("search", dataset, split, mirror, revision)
        path = Path(path).expanduser()
        rows, found = sources.read_rows(path, split)
    except sources.SourceError as error:
        raise SearchDataError(str(error)) from error
    label = sources.split_label(dataset, split, found, DEFAULT_SPLITS[dataset], EVAL_ONLY)
    if label is None:
        raise SearchDataError(f"{path}: cannot tell which split this file holds; pass --split")
    return label, [(path, rows)]


def load_problems(
    dataset: str, path: str | os.PathLike | None, split: str | None = None, mirror: str | os.PathLike | None = None,
    revision: str | None = None,
) -> list[SearchProblem]:
    """One dataset's questions from a local file or folder, normalised (see the module docstring). ``path``
    None: FlashRAG's Hub data files (:func:`pettingllms.envs.sources.fetch_parts`, with ``mirror`` and
    ``revision``; refused in one line unless Hub access is allowed)."""
    if dataset not in DATASETS:
        raise SearchDataError(f"unknown search dataset {dataset!r} (known: {', '.join(DATASETS)}); source {path}")
    label, parts = _rows(dataset, path, split, mirror, revision)
    out: list[SearchProblem] = []
    seen: dict[str, str] = {}
    for where, rows in parts:
        for index, row in enumerate(rows):
            try:
                problem = DATASETS[dataset](row, label, index)
            except KeyError as error:
                raise SearchDataError(f"{where} row {index}: missing field {error.args[0]} in the {dataset} schema") from error
            except (ValueError, TypeError) as error:
                raise SearchDataError(f"{where} row {index}: {error}") from error
            if problem.problem_id in seen:
                raise SearchDataError(f"{where} row {index}: duplicate id {problem.problem_id!r} (first at {seen[problem.problem_id]})")
            seen[problem.problem_id] = f"row {index}"
            out.append(problem)
    return out
