"""Public maths benchmarks read from local files, or their Hub copies, into one normalised record, :class:`MathProblem`.

Loaders read GSM8K, MATH, MATH-500, AIME 2024, AIME 2025, AIME 1983-2024, OlympiadBench (open-ended maths),
POLARIS and DAPO-Math-17k in their public schemas from a JSON/JSONL file (optionally ``.gz``), a parquet file,
a CSV file (the AIME 1983-2024 dump is one) or a folder written by ``datasets.save_to_disk``.
:func:`load_problems` without a path reads the benchmark's Hub data files instead (:mod:`pettingllms.envs.sources`,
only where Hub access is allowed), through the same converters. A dump of an evaluation-only benchmark
(:data:`EVAL_ONLY`) whose only split is named ``train`` is read as ``test``.

OlympiadBench keeps its English text-only problems by default: rows whose ``language`` is not ``English`` or
whose ``modality`` is not ``Text-only`` are left out (:func:`select_olympiadbench`; ``language=None`` /
``modality=None`` keep them all, a row without the field is kept).

Normalised JSONL layout (one problem per line, UTF-8; the same file layout as the code benchmarks,
:mod:`pettingllms.envs.code.data`, with a final answer instead of tests):

    {"problem_id": "gsm8k/test/3",   # stable, "<dataset>/<native id>"; unique across the dataset's splits
     "dataset": "gsm8k",             # gsm8k | math | math500 | aime24 | aime25 | aime_past | olympiadbench | ...
     "split": "test",                # train | test | ...
     "question": "...",              # the problem statement (instruction wrappers such as DAPO's removed)
     "answer": "72",                 # the reference final answer as text (LaTeX allowed, no surrounding $)
     "solution": "...",              # a worked solution, "" when the dataset has none
     "level": "5",                   # the dataset's difficulty label ("Level 5" -> "5"), or null
     "subject": "Algebra",           # the dataset's subject / type / subfield, or null
     "metadata": {...}}              # dataset-specific extras (JSON values only)

Normalised files live at ``$PETTINGLLMS_DATA/math/<dataset>/<split>.jsonl`` (default root
``~/.cache/pettingllms/data``): see :func:`normalised_path`.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pettingllms.envs import dataset_io, sources
from pettingllms.envs.records import read_records, record_from_json, write_records

__all__ = [
    "DATASETS",
    "EVAL_ONLY",
    "MathDataError",
    "MathProblem",
    "OLYMPIADBENCH_DEFAULT",
    "load_aime24",
    "load_aime25",
    "load_aime_past",
    "load_dapo",
    "load_gsm8k",
    "load_math",
    "load_math500",
    "load_olympiadbench",
    "load_polaris",
    "load_problems",
    "normalised_path",
    "read_jsonl",
    "read_rows",
    "select_olympiadbench",
    "write_jsonl",
]

#: Benchmarks that only evaluate here: a dump whose only split is named ``train`` holds their test problems.
EVAL_ONLY = frozenset({"math500", "aime24", "aime25", "aime_past", "olympiadbench"})

logger = logging.getLogger(__name__)


class MathDataError(ValueError):
    """A data file that is missing or does not match its schema (the message is one line)."""


# ----------------------------------------------------------------------------------------------- the record


@dataclass(frozen=True)
class MathProblem:
    """One problem in the normalised layout (see the module docstring)."""

    problem_id: str
    dataset: str
    split: str
    question: str
    answer: str
    solution: str = ""
    level: str | None = None
    subject: str | None = None
    metadata: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("problem_id", "dataset", "split", "question", "answer", "solution"):
            if not isinstance(getattr(self, name), str):
                raise MathDataError(f"{self.problem_id}: `{name}` must be a string, got {getattr(self, name)!r:.80}")
        for name in ("level", "subject"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise MathDataError(f"{self.problem_id}: `{name}` must be a string or null, got {getattr(self, name)!r:.80}")
        if not self.question.strip():
            raise MathDataError(f"{self.problem_id}: `question` is empty")
        if not self.answer.strip():
            raise MathDataError(f"{self.problem_id}: `answer` is empty")
        if not isinstance(self.metadata, dict):
            raise MathDataError(f"{self.problem_id}: `metadata` must be a dict, got {type(self.metadata).__name__}")

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the layout, keys in layout order."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> MathProblem:
        return record_from_json(cls, obj, MathDataError)


def write_jsonl(path: str | os.PathLike, problems: Iterable[MathProblem]) -> Path:
    """Write problems in the normalised layout, atomically (readers see the old file or the whole new one)."""
    return write_records(path, problems)


def read_jsonl(path: str | os.PathLike) -> list[MathProblem]:
    """Problems from a normalised JSONL file; errors name the path and line."""
    return read_records(path, MathProblem, MathDataError, "math")


def normalised_path(dataset: str, split: str) -> Path:
    """Where ``pettingllms dataprocess math`` writes a split: ``$PETTINGLLMS_DATA/math/<dataset>/<split>.jsonl``."""
    return dataset_io.normalised_path(dataset, split, env="math")


# ------------------------------------------------------------------------------------------ reading rows


def read_rows(path: str | os.PathLike, split: str | None = None) -> tuple[list[dict], str | None]:
    """The raw rows of a local file or ``save_to_disk`` folder and the split they belong to (as
    :func:`pettingllms.envs.sources.read_rows`), plus CSV files (header row; every value a string)."""
    path = Path(path).expanduser()
    if path.is_file() and path.name.lower().endswith(".csv"):
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            if not reader.fieldnames:
                raise MathDataError(f"{path}: a CSV file needs a header row")
            return [dict(row) for row in reader], split or sources.split_from_name(path)
    try:
        return sources.read_rows(path, split)
    except sources.SourceError as error:
        raise MathDataError(str(error)) from error


def _field(row: dict, *names: str) -> Any:
    """The first of ``names`` present in ``row`` (mirrors of one benchmark spell a column differently)."""
    for name in names:
        if name in row:
            return row[name]
    raise KeyError(" or ".join(repr(n) for n in names))


def _optional(row: dict, *names: str) -> Any:
    for name in names:
        if row.get(name) not in (None, ""):
            return row[name]
    return None


def _text(value: Any, name: str) -> str:
    """A text field; numbers (AIME answers are integers in some mirrors) become their decimal text."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"field '{name}' must be text or a number, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, (int, float)):
        return str(value)
    if not isinstance(value, str):
        raise ValueError(f"field '{name}' must be text or a number, got {type(value).__name__}")
    return value.strip()


def _strip_dollars(answer: str) -> str:
    """``$\\frac{1}{2}$`` -> ``\\frac{1}{2}``: the answer itself, without its math-mode delimiters."""
    answer = answer.strip()
    if len(answer) >= 2 and answer.startswith("$") and answer.endswith("$") and "$" not in answer[1:-1]:
        return answer[1:-1].strip()
    return answer


def _native(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value).strip()


Converter = Callable[[dict, str, int, Path], "MathProblem | None"]  # (row, split label, row number, file)


def _convert(dataset: str, parts: Iterable[tuple[Any, list[dict]]], label: str, convert: Converter) -> list[MathProblem]:
    """Each part's rows (``(where, rows)``: a file, or a Hub data file pattern; row numbers count within a
    part, as for a local file) as problems of split ``label``; an id seen twice is an error."""
    out: list[MathProblem] = []
    seen: dict[str, tuple[Any, int]] = {}
    for where, rows in parts:
        for index, row in enumerate(rows):
            try:
                problem = convert(row, label, index, Path(where))
            except KeyError as error:
                raise MathDataError(f"{where} row {index}: missing field {error.args[0]} in the {dataset} schema") from error
            except (ValueError, TypeError) as error:
                raise MathDataError(f"{where} row {index}: {error}") from error
            if problem is None:
                continue
            if problem.problem_id in seen:
                first, row_number = seen[problem.problem_id]
                at = f"row {row_number}" + ("" if first == where else f" of {first}")
                raise MathDataError(f"{where} row {index}: duplicate id {problem.problem_id!r} (first at {at})")
            seen[problem.problem_id] = (where, index)
            out.append(problem)
    return out


def _load(dataset: str, path: str | os.PathLike, split: str | None, default_split: str | None,
          convert: Converter) -> list[MathProblem]:
    rows, found = read_rows(path, split)
    label = sources.split_label(dataset, split, found, default_split, EVAL_ONLY)
    if label is None:
        raise MathDataError(f"{path}: cannot tell which split this file holds; pass split=")
    return _convert(dataset, [(path, rows)], label, convert)


# ------------------------------------------------------------------------------------------------ GSM8K

_GSM8K_CALCULATOR = re.compile(r"<<[^<>]*>>")
_DIGIT_COMMAS = re.compile(r"(?<=\d),(?=\d{3}\b)")


def _gsm8k_problem(row: dict, split: str, index: int, path: Path) -> MathProblem:
    # Fields mapped: question, answer (a worked solution whose last line is "#### <number>"). GSM8K has no
    # ids: the row number within the split is the native id. The solution drops the "<<48/2=24>>"
    # calculator annotations (an artefact of how the data was written, not reasoning).
    text = _text(_field(row, "answer"), "answer")
    if "####" not in text:
        raise ValueError("field 'answer' has no '#### <final answer>' line")
    worked, final = text.rsplit("####", 1)
    final = _DIGIT_COMMAS.sub("", final.strip().splitlines()[0].strip() if final.strip() else "")
    if not final:
        raise ValueError("field 'answer' has nothing after '####'")
    return MathProblem(
        problem_id=f"gsm8k/{split}/{index}", dataset="gsm8k", split=split,
        question=_text(_field(row, "question"), "question"), answer=final,
        solution=_GSM8K_CALCULATOR.sub("", worked).strip(),
    )


def load_gsm8k(path: str | os.PathLike, split: str | None = None) -> list[MathProblem]:
    """GSM8K rows (``main`` config: question, answer ending in ``#### N``)."""
    return _load("gsm8k", path, split, None, _gsm8k_problem)


# ------------------------------------------------------------------------------------------------- MATH


def _level(value: Any) -> str | None:
    """``"Level 5"``, ``5`` -> ``"5"``; MATH's unlabelled ``"Level ?"`` -> ``"?"``."""
    if value in (None, ""):
        return None
    text = _native(value)
    return re.sub(r"(?i)^level\s*", "", text) or None


def _math_problem(row: dict, split: str, index: int, path: Path) -> MathProblem:
    # Fields mapped: problem, solution, level ("Level 5"), type (the subject). The answer is the last
    # \boxed{...} of the solution, as MATH's own grader takes it. No ids: the row number is the native id
    # unless the row carries a `unique_id` (some mirrors do).
    from pettingllms.envs.math.answers import last_boxed

    solution = _text(_field(row, "solution"), "solution")
    answer = last_boxed(solution)
    if answer is None or not answer.strip():
        raise ValueError("field 'solution' has no \\boxed{...} final answer")
    native = _optional(row, "unique_id")
    native = _native(native).removesuffix(".json") if native is not None else f"{split}/{index}"
    return MathProblem(
        problem_id=f"math/{native}", dataset="math", split=split,
        question=_text(_field(row, "problem"), "problem"), answer=answer.strip(), solution=solution,
        level=_level(_optional(row, "level")), subject=_optional(row, "type", "subject"),
    )


def load_math(path: str | os.PathLike, split: str | None = None) -> list[MathProblem]:
    """MATH (Hendrycks) rows: problem, solution, level, type."""
    return _load("math", path, split, None, _math_problem)


def _math500_problem(row: dict, split: str, index: int, path: Path) -> MathProblem:
    # Fields mapped: problem, solution, answer, subject, level (1-5), unique_id ("test/algebra/1.json").
    return MathProblem(
        problem_id=f"math500/{_native(_field(row, 'unique_id')).removesuffix('.json')}", dataset="math500",
        split=split, question=_text(_field(row, "problem"), "problem"),
        answer=_strip_dollars(_text(_field(row, "answer"), "answer")),
        solution=_text(row.get("solution") or "", "solution"),
        level=_level(row.get("level")), subject=row.get("subject") or None,
    )


def load_math500(path: str | os.PathLike, split: str | None = None) -> list[MathProblem]:
    """MATH-500 rows (a test-only benchmark: the default split is ``test``)."""
    return _load("math500", path, split, "test", _math500_problem)


# ------------------------------------------------------------------------------------------------- AIME


def _aime(dataset: str) -> Callable[[dict, str, int, Path], MathProblem]:
    def convert(row: dict, split: str, index: int, path: Path) -> MathProblem:
        # Fields mapped (mirrors differ in case and naming): id / ID, problem / Problem / question / Question,
        # answer / Answer, solution / Solution (optional), url and year into metadata. A mirror without ids
        # (one file per contest, e.g. aime2025-I.jsonl) gets "<file stem>-<row number from 1>".
        native = _optional(row, "id", "ID")
        native = _native(native) if native is not None else f"{path.name.split('.')[0]}-{index + 1}"
        metadata = {k.lower(): row[k] for k in ("url", "year", "Year") if row.get(k) not in (None, "")}
        return MathProblem(
            problem_id=f"{dataset}/{native}", dataset=dataset, split=split,
            question=_text(_field(row, "problem", "Problem", "question", "Question"), "problem"),
            answer=_strip_dollars(_text(_field(row, "answer", "Answer"), "answer")),
            solution=_text(_optional(row, "solution", "Solution") or "", "solution"), metadata=metadata,
        )

    return convert


def load_aime24(path: str | os.PathLike, split: str | None = None) -> list[MathProblem]:
    """AIME 2024 rows (id, problem, answer[, solution, url, year]; any capitalisation). Default split ``test``."""
    return _load("aime24", path, split, "test", _aime("aime24"))


def load_aime25(path: str | os.PathLike, split: str | None = None) -> list[MathProblem]:
    """AIME 2025 rows (question or problem, answer[, id]). Default split ``test``."""
    return _load("aime25", path, split, "test", _aime("aime25"))


def _aime_past_problem(row: dict, split: str, index: int, path: Path) -> MathProblem:
    # Fields mapped: ID ("1983-1", "2000-II-4"), Year, Problem Number (Problem_Number in some mirrors),
    # Question, Answer, Part (I / II, optional).
    metadata = {
        "year": int(_native(_field(row, "Year"))),
        "problem_number": int(_native(_field(row, "Problem Number", "Problem_Number"))),
    }
    if row.get("Part") not in (None, ""):
        metadata["part"] = _native(row["Part"])
    return MathProblem(
        problem_id=f"aime_past/{_native(_field(row, 'ID'))}", dataset="aime_past", split=split,
        question=_text(_field(row, "Question"), "Question"), answer=_text(_field(row, "Answer"), "Answer"),
        metadata=metadata,
    )


def load_aime_past(path: str | os.PathLike, split: str | None = None) -> list[MathProblem]:
    """AIME 1983-2024 rows (ID, Year, Problem Number, Question, Answer, Part). Default split ``test``."""
    return _load("aime_past", path, split, "test", _aime_past_problem)


# ---------------------------------------------------------------------------------------- OlympiadBench


def _listed(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        # Some exports keep the list as its JSON text.
        try:
            value = json.loads(value) if value.lstrip().startswith("[") else [value]
        except json.JSONDecodeError as error:
            raise ValueError(f"field '{name}' is not a JSON list ({error.msg})") from error
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"field '{name}' must be a list of strings, got {value!r:.80}")
    return value


def _olympiadbench_problem(row: dict, split: str, index: int, path: Path) -> MathProblem:
    # Fields mapped: id, question, context (prepended when present), final_answer (a list: several parts
    # of one answer are joined with ", "), solution (a list; the first is kept), subfield (the subject),
    # and answer_type, unit, is_multiple_answer, difficulty, language, modality into metadata.
    answers = [_strip_dollars(a) for a in _listed(_field(row, "final_answer"), "final_answer")]
    if not answers or not all(answers):
        raise ValueError("field 'final_answer' is empty")
    solutions = _listed(row.get("solution") or [], "solution")
    question = _text(_field(row, "question"), "question")
    if row.get("context"):
        question = f"{_text(row['context'], 'context')}\n\n{question}"
    keys = ("answer_type", "unit", "is_multiple_answer", "difficulty", "error", "language", "modality")
    return MathProblem(
        problem_id=f"olympiadbench/{_native(_field(row, 'id'))}", dataset="olympiadbench", split=split,
        question=question, answer=", ".join(answers), solution=solutions[0] if solutions else "",
        subject=row.get("subfield") or None, metadata={k: row[k] for k in keys if row.get(k) is not None},
    )


def load_olympiadbench(path: str | os.PathLike, split: str | None = None) -> list[MathProblem]:
    """OlympiadBench rows (the open-ended maths configs, e.g. ``OE_TO_maths_en_COMP``), every language and
    modality (:func:`select_olympiadbench` keeps some)."""
    return _load("olympiadbench", path, split, "test", _olympiadbench_problem)


OLYMPIADBENCH_DEFAULT = ("English", "Text-only")  # the (language, modality) kept unless asked otherwise


def _folded(label: str) -> str:
    return re.sub(r"[^a-z]", "", label.lower())  # "Text-only", "text only", "TEXT_ONLY" are one label


def select_olympiadbench(
    problems: Iterable[MathProblem], language: str | None = OLYMPIADBENCH_DEFAULT[0],
    modality: str | None = OLYMPIADBENCH_DEFAULT[1],
) -> tuple[list[MathProblem], dict[str, int]]:
    """The problems whose ``language`` and ``modality`` (OlympiadBench's fields, kept in metadata) are the ones
    asked for (any case or punctuation; None or ``"all"``: any), and the count left out per
    ``"<language> <modality>"``. A problem without the field is kept."""
    wanted = {name: None if value is None or _folded(value) == "all" else _folded(value)
              for name, value in (("language", language), ("modality", modality))}
    kept, left_out = [], Counter()
    for problem in problems:
        values = {name: problem.metadata.get(name) for name in wanted}
        if all(want is None or not isinstance(values[name], str) or _folded(values[name]) == want
               for name, want in wanted.items()):
            kept.append(problem)
        else:
            left_out[f"{values['language']} {values['modality']}"] += 1
    return kept, dict(left_out)


# ------------------------------------------------------------------------------------- POLARIS and DAPO


def _polaris_problem(row: dict, split: str, index: int, path: Path) -> MathProblem:
    # Fields mapped: problem, answer, difficulty (a pass rate such as "7/8", kept in metadata). No ids.
    metadata = {"difficulty": _native(row["difficulty"])} if row.get("difficulty") not in (None, "") else {}
    return MathProblem(
        problem_id=f"polaris/{split}/{index}", dataset="polaris", split=split,
        question=_text(_field(row, "problem"), "problem"),
        answer=_strip_dollars(_text(_field(row, "answer"), "answer")), metadata=metadata,
    )


def load_polaris(path: str | os.PathLike, split: str | None = None) -> list[MathProblem]:
    """POLARIS rows (problem, answer, difficulty). Default split ``train``."""
    return _load("polaris", path, split, "train", _polaris_problem)


# DAPO's prompt wraps each problem in an instruction for its own answer format; our prompts add their own.
_DAPO_PREFIX = re.compile(r"^Solve the following math problem step by step\..*?where \$Answer is the answer to the problem\.\s*", re.S)
_DAPO_SUFFIX = re.compile(r"\s*Remember to put your answer on its own line after \"Answer:\"\.?\s*$")


def _dapo_problem(row: dict, split: str, index: int, path: Path, seen: set[str]) -> MathProblem | None:
    # Fields mapped: prompt (chat messages; the user message is the problem), reward_model.ground_truth,
    # extra_info.index (the native id), data_source and ability into metadata. The public file repeats
    # each problem many times: later copies of an index are skipped.
    messages = _field(row, "prompt")
    if isinstance(messages, str):
        messages = json.loads(messages)
    if not isinstance(messages, list) or not messages:
        raise ValueError("field 'prompt' must be a non-empty list of chat messages")
    users = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if not users or not isinstance(users[-1], str):
        raise ValueError("field 'prompt' has no user message")
    question = _DAPO_SUFFIX.sub("", _DAPO_PREFIX.sub("", users[-1])).strip()
    reward = _field(row, "reward_model")
    if not isinstance(reward, dict) or "ground_truth" not in reward:
        raise KeyError("reward_model.ground_truth")
    info = row.get("extra_info") or {}
    native = _native(info["index"]) if isinstance(info, dict) and info.get("index") not in (None, "") else f"{split}/{index}"
    if native in seen:
        return None
    seen.add(native)
    return MathProblem(
        problem_id=f"dapo/{native}", dataset="dapo", split=split, question=question,
        answer=_strip_dollars(_text(reward["ground_truth"], "reward_model.ground_truth")),
        metadata={k: row[k] for k in ("data_source", "ability") if row.get(k) not in (None, "")},
    )


def _dapo_converter() -> Converter:
    seen: set[str] = set()  # one per read: the copies skipped are those of this source
    return lambda row, s, i, p: _dapo_problem(row, s, i, p, seen)


def load_dapo(path: str | os.PathLike, split: str | None = None) -> list[MathProblem]:
    """DAPO-Math-17k rows (prompt messages, reward_model.ground_truth, extra_info.index), one per index.
    Default split ``train``."""
    return _load("dapo", path, split, "train", _dapo_converter())


# -------------------------------------------------------------------------------------------- dispatch

DATASETS: dict[str, Callable[..., list[MathProblem]]] = {
    "gsm8k": load_gsm8k,
    "math": load_math,
    "math500": load_math500,
    "aime24": load_aime24,
    "aime25": load_aime25,
    "aime_past": load_aime_past,
    "olympiadbench": load_olympiadbench,
    "polaris": load_polaris,
    "dapo": load_dapo,
}


def _from_hub(dataset: str, split: str | None, mirror: str | os.PathLike | None, revision: str | None) -> list[MathProblem]:
    try:
        label, parts = sources.fetch_parts("math", dataset, split, mirror, revision)
    except sources.SourceError as error:
        raise MathDataError(str(error)) from error
    convert = _dapo_converter() if dataset == "dapo" else _CONVERTERS[dataset]
    return _convert(dataset, parts, label, convert)


#: Each dataset's row converter, for rows that come from the Hub (DAPO's is made per read).
_CONVERTERS: dict[str, Converter] = {
    "gsm8k": _gsm8k_problem, "math": _math_problem, "math500": _math500_problem, "aime24": _aime("aime24"),
    "aime25": _aime("aime25"), "aime_past": _aime_past_problem, "olympiadbench": _olympiadbench_problem,
    "polaris": _polaris_problem,
}


def load_problems(
    dataset: str, path: str | os.PathLike | None, split: str | None = None, level: str | Iterable[str] | None = None,
    language: str | None = OLYMPIADBENCH_DEFAULT[0], modality: str | None = OLYMPIADBENCH_DEFAULT[1],
    mirror: str | os.PathLike | None = None, revision: str | None = None,
) -> list[MathProblem]:
    """One dataset's problems from a local source, keeping the ``level`` labels asked for (one or several,
    any case; ``"Level 5"`` and ``"5"`` are the same label) and, for OlympiadBench, the ``language`` and
    ``modality`` asked for (:func:`select_olympiadbench`; None: any). ``path`` None: the dataset's Hub data
    files (:func:`pettingllms.envs.sources.fetch_parts`, with ``mirror`` and ``revision``; refused in one line
    unless Hub access is allowed)."""
    if dataset not in DATASETS:
        raise MathDataError(f"unknown math dataset {dataset!r} (known: {', '.join(DATASETS)}); source {path}")
    problems = _from_hub(dataset, split, mirror, revision) if path is None else DATASETS[dataset](path, split)
    if level is not None:
        wanted = {(_level(v) or "").lower() for v in ([level] if isinstance(level, str) else level)}
        problems = [p for p in problems if (p.level or "").lower() in wanted]
    if dataset == "olympiadbench":
        problems, left_out = select_olympiadbench(problems, language, modality)
        if left_out:
            logger.info("olympiadbench %s: left out %d problem(s) not %s %s (%s)", path or "from the Hub",
                        sum(left_out.values()), language or "any language", modality or "any modality", left_out)
    return problems
