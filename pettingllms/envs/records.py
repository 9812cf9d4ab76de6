"""What every dataset environment shares (code, math, and search next): its problems as one frozen dataclass per
line of a normalised JSONL file, and which split the seeds index.

- :func:`record_from_json`: a record from its JSON object, every field present and no other (the error names
  the problem and the fields).
- :func:`write_records` / :func:`read_records`: the JSONL file, written atomically, read with errors that name
  the path and the line (a missing file names the ``pettingllms dataprocess`` command that makes it).
- :func:`played_split`: ``train_split`` when a training stage built the environment (``purpose``), else
  ``split``.
- :func:`problem_key`: what makes two records the same problem whatever split they were filed under, for the
  check that training never plays an evaluation problem (:mod:`pettingllms.config.instances`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from comlrl.atomic_io import atomic_write_text

__all__ = ["ProblemKey", "QuestionInstances", "native_id", "played_split", "problem_key", "read_records", "record_from_json", "write_records"]

RecordT = TypeVar("RecordT")


def record_from_json(cls: type[RecordT], obj: Any, error: type[Exception]) -> RecordT:
    """``cls(**obj)`` when ``obj`` is a JSON object with exactly ``cls``'s fields, else ``error`` naming them."""
    if not isinstance(obj, dict):
        raise error(f"a problem must be a JSON object, got {type(obj).__name__}")
    names = [f.name for f in dataclasses.fields(cls)]
    missing = [n for n in names if n not in obj]
    unknown = sorted(set(obj) - set(names))
    if missing or unknown:
        raise error(f"problem {obj.get('problem_id')!r}: missing fields {missing}, unknown {unknown}")
    return cls(**obj)


def write_records(path: str | os.PathLike, records: Iterable[Any]) -> Path:
    """Write records (each with ``to_json()``) one per line, atomically (readers see the old file or the
    whole new one)."""
    lines = [json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in records]
    return atomic_write_text(path, "".join(lines))


def read_records(path: str | os.PathLike, cls: type[RecordT], error: type[Exception], env: str) -> list[RecordT]:
    """Records of ``cls`` (with a ``from_json`` classmethod) from a normalised JSONL file of environment
    ``env``; errors (``error``) name the path and line."""
    path = Path(path)
    if not path.is_file():
        raise error(
            f"no normalised data at {path}: make it with `pettingllms dataprocess {env} --source SOURCE "
            f"--dataset DATASET --split SPLIT --output {path.parent}`"
        )
    out = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                out.append(cls.from_json(json.loads(line)))
            except (json.JSONDecodeError, error, TypeError) as exc:
                raise error(f"{path} line {number}: {exc}") from exc
    return out


def played_split(config: Any) -> str:
    """The split a dataset environment's seeds index: ``config.train_split`` for training (``purpose``
    ``train``; the config refuses training without one), ``config.split`` for evaluation."""
    if config.purpose == "train":
        assert config.train_split is not None
        return config.train_split
    return config.split


def native_id(problem_id: str, split: str) -> str:
    """``problem_id`` without the split it carries: APPS, GSM8K and POLARIS number each split from 0, so their
    ids hold it (``apps/train/4000`` -> ``apps/4000``); other ids are the dataset's own and come back as they are."""
    return problem_id.replace(f"/{split}/", "/", 1)


class ProblemKey(NamedTuple):
    """A problem whatever split it was filed under: its native id and a digest of its statement."""

    native_id: str
    statement: str


def problem_key(problem_id: str, split: str, statement: str) -> ProblemKey:
    """The :class:`ProblemKey` of a record. Two records are the same problem when both parts agree: one file
    normalised twice under two split labels gives the same key, while APPS's ``train/4000`` and ``test/4000``
    (different problems under the same number) differ in their statements. The statement is compared with
    its whitespace collapsed."""
    text = " ".join(statement.split())
    return ProblemKey(native_id(problem_id, split), hashlib.sha256(text.encode("utf-8")).hexdigest()[:16])


class QuestionInstances:
    """What names an instance of a dataset environment whose problems are questions (math, search): its id,
    its :class:`ProblemKey` and its statement, from ``self.problem(seed)`` (a record with ``problem_id``,
    ``split`` and ``question``); a generated task (``self.config.generated``) is named by its seed alone."""

    def instance_id(self, seed: int) -> Any:
        return seed if self.config.generated else self.problem(seed).problem_id  # type: ignore[attr-defined]

    def instance_statement(self, seed: int) -> str | None:
        """The problem's statement as the dataset gives it (the contamination check compares these across
        datasets, :mod:`pettingllms.stages.contamination`); None when generated."""
        return None if self.config.generated else self.problem(seed).question  # type: ignore[attr-defined]

    def instance_key(self, seed: int) -> ProblemKey | None:
        """The problem whatever split holds it (:func:`problem_key`); None when generated."""
        if self.config.generated:  # type: ignore[attr-defined]
            return None
        problem = self.problem(seed)  # type: ignore[attr-defined]
        return problem_key(problem.problem_id, problem.split, problem.question)
