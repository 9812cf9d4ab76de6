"""Does an evaluation set share problems with the training problems? The statements are compared, because
problem ids (``<dataset>/<native id>``) never match across datasets.

Normalisation (:func:`normalise_statement`, version :data:`NORMALISATION_VERSION`), in this order:

1. Unicode NFKC (full-width letters and digits, ligatures, non-breaking spaces become their plain forms).
2. LaTeX spacing and delimiters become a space: the spacing commands ``\\,`` ``\\;`` ``\\:`` ``\\!`` ``\\>``
   and ``\\`` followed by a space, ``\\quad`` and ``\\qquad``, the sizing commands ``\\left`` and ``\\right``
   (whole command names only: ``\\leftarrow`` stays), ``~`` and ``$``. Other commands keep their name as a
   word once step 4 drops the backslash (``\\frac{1}{2}`` reads ``frac 1 2``).
3. Lower case (``str.lower``).
4. Every punctuation and symbol character (Unicode categories P* and S*: ``.,;:!?'"()[]{}\\/_-+*=<>^|``
   and the like) becomes a space, and so does every separator and control character (Z*, C*) except the
   invisible format characters (Cf: zero-width spaces and joiners, soft hyphens), which are deleted. Only
   letters, digits and combining marks (L*, N*, M*) remain, so ``x+y``, ``x - y`` and ``$x\\,+\\,y$`` all
   read ``x y``: two statements that differ only in an operator read the same.
5. Whitespace collapsed to single spaces, none at either end.

The words of a statement are the space-separated tokens of its normalised text. A statement that
normalises to nothing (empty, or punctuation only) is skipped on both sides: it matches nothing.

What counts as an overlap. Each evaluation problem is counted once, as one of:

- **exact**: its normalised statement equals a training problem's;
- **near-duplicate** (the usual decontamination rule of GPT-3 and Llama 2's reports, n = 13 by default):
  not exact, and at least one of its word n-grams (n consecutive words) occurs in some training
  statement. A statement shorter than n words has no n-gram; it is compared by its whole normalised token
  sequence, which is the exact rule, so it overlaps only a training statement equal to it after
  normalisation (and a short training statement only catches an equal evaluation statement).

Each set also reports ``max_shared_fraction``: over its near-duplicates, the largest fraction of one
problem's distinct n-grams that occur in the training statements (near 1 for a long statement copied with
one word changed, 1/k for a rewording that kept one n-gram of its k). Examples are ``(training id,
evaluation id)`` pairs, exact ones in evaluation order, near ones most shared first, each with the training
problem holding the most of its shared n-grams (an n-gram is credited to the first training problem that
has it).

How. The training statements are indexed once (:class:`TrainingIndex`): a dict from the hash of each
normalised statement to the first training problem with it (a hit is confirmed on the text), and every
n-gram hashed to a 64-bit int (Python's ``hash`` of the tuple of words, salted per process: an index lives
only in the process that built it) in one sorted numpy array with the first training problem that has it.
That keeps 12 bytes per distinct n-gram and peaks at ~4 times that while building: 50,000 statements of
40-400 words (10.4 million n-grams) keep 125 MiB and peak at 540 MiB (``benchmarks/contamination.py``).
Each evaluation set is then scanned with one ``searchsorted``. N-gram hashes are not confirmed: with 15
million training and 3 million evaluation n-grams the chance of any false match is ~2e-6.

:func:`find_overlaps` runs both and returns a :class:`ContaminationReport` (JSON through ``to_json`` /
``from_json``; ``summary_line`` is the one-line account).
"""

from __future__ import annotations

import re
import unicodedata
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_N",
    "NORMALISATION_VERSION",
    "ContaminationReport",
    "SetOverlap",
    "TrainingIndex",
    "find_overlaps",
    "normalise_statement",
]

#: Words per n-gram: the usual 13-gram decontamination rule.
DEFAULT_N = 13
#: Bumped whenever :func:`normalise_statement` changes what it returns.
NORMALISATION_VERSION = 1

_LATEX_SPACING = re.compile(r"\\(?:qquad|quad|left|right)(?![A-Za-z])|\\[,;:!> ]|[~$]")


class _CharRule(dict):
    """``str.translate`` table filled on first sight of each code point (step 4 of the module docstring)."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        category = unicodedata.category(char)
        if category[0] in "LNM":
            out = char
        elif category == "Cf":
            out = ""
        else:
            out = " "
        self[code] = out
        return out


_CHAR_RULE = _CharRule()


def normalise_statement(text: str) -> str:
    """``text`` normalised for exact matching (steps 1-5 of the module docstring)."""
    text = unicodedata.normalize("NFKC", text)
    text = _LATEX_SPACING.sub(" ", text).lower().translate(_CHAR_RULE)
    return " ".join(text.split())


def _ngram_hashes(words: list[str], n: int) -> list[int]:
    """The hash of every run of ``n`` consecutive words (none when there are fewer than ``n``)."""
    return list(map(hash, zip(*(words[k:] for k in range(n)))))


def _statement(text: Any, side: str, problem_id: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{side} problem {problem_id!r}: the statement must be a string, got {type(text).__name__}")
    return text


@dataclass(frozen=True)
class SetOverlap:
    """What one evaluation set shares with the training problems (see the module docstring)."""

    name: str
    eval_problems: int
    train_problems: int
    exact: int
    exact_examples: tuple[tuple[str, str], ...]
    near: int
    near_examples: tuple[tuple[str, str], ...]
    max_shared_fraction: float
    n: int
    normalisation_version: int

    @property
    def overlapping(self) -> int:
        """Evaluation problems that overlap, exact or near (each counted once)."""
        return self.exact + self.near

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["exact_examples"] = [list(pair) for pair in self.exact_examples]
        out["near_examples"] = [list(pair) for pair in self.near_examples]
        out["overlapping"] = self.overlapping
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> SetOverlap:
        values = {f.name: obj[f.name] for f in fields(cls)}
        for name in ("exact_examples", "near_examples"):
            values[name] = tuple(tuple(pair) for pair in values[name])
        return cls(**values)


@dataclass(frozen=True)
class ContaminationReport:
    """Every evaluation set's :class:`SetOverlap`, in the order the sets were given."""

    train_problems: int
    n: int
    normalisation_version: int
    sets: tuple[SetOverlap, ...]

    @property
    def total_overlapping(self) -> int:
        """Evaluation problems that overlap the training problems, over every set."""
        return sum(s.overlapping for s in self.sets)

    def summary_line(self, max_ids: int = 3) -> str:
        """One line: the sets with overlap, how many of their problems, and up to ``max_ids`` example pairs
        of each kind, e.g. ``2 of 164 humaneval problems and 1 of 40 livecodebench problems overlap the 5000
        training problems (exact: apps/train/3 = humaneval/0; 13-gram: apps/train/9 ~ livecodebench/x)``."""
        if not self.total_overlapping:
            names = _join([f"{s.eval_problems} {s.name}" for s in self.sets]) or "0 evaluation"
            return (f"none of the {names} problems overlap the {self.train_problems} training problems "
                    f"(exact or {self.n}-gram match, normalisation v{self.normalisation_version})")
        counts = _join([f"{s.overlapping} of {s.eval_problems} {s.name} problems" for s in self.sets if s.overlapping])
        shown = []
        for kind, sign, attr, count in (("exact", "=", "exact_examples", "exact"),
                                        (f"{self.n}-gram", "~", "near_examples", "near")):
            pairs = [pair for s in self.sets for pair in getattr(s, attr)]
            if pairs:
                more = ", ..." if sum(getattr(s, count) for s in self.sets) > min(len(pairs), max_ids) else ""
                shown.append(f"{kind}: " + ", ".join(f"{t} {sign} {e}" for t, e in pairs[:max_ids]) + more)
        return f"{counts} overlap the {self.train_problems} training problems ({'; '.join(shown)})"

    def to_json(self) -> dict[str, Any]:
        return {
            "train_problems": self.train_problems,
            "n": self.n,
            "normalisation_version": self.normalisation_version,
            "total_overlapping": self.total_overlapping,
            "sets": {s.name: s.to_json() for s in self.sets},
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ContaminationReport:
        return cls(
            train_problems=obj["train_problems"],
            n=obj["n"],
            normalisation_version=obj["normalisation_version"],
            sets=tuple(SetOverlap.from_json(s) for s in obj["sets"].values()),
        )


def _join(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    if len(items) < 2:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


class TrainingIndex:
    """The training statements indexed once, for :meth:`check` to scan any number of evaluation sets."""

    def __init__(self, train: Mapping[str, str], n: int = DEFAULT_N):
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"`n` must be an integer >= 1, got {n!r}")
        self.n = n
        self._train = train
        self._ids = list(train)
        self._exact: dict[int, int] = {}  # hash of the normalised statement -> first training index
        hashes, owners = array("q"), array("i")
        for index, problem_id in enumerate(self._ids):
            text = normalise_statement(_statement(train[problem_id], "training", problem_id))
            if not text:
                continue
            self._exact.setdefault(hash(text), index)
            grams = _ngram_hashes(text.split(), n)
            hashes.extend(grams)
            owners.extend([index] * len(grams))
        all_hashes = np.frombuffer(hashes, dtype=np.int64) if hashes else np.zeros(0, np.int64)
        # np.unique sorts stably with return_index, so each n-gram keeps its first training problem.
        self._keys, first = np.unique(all_hashes, return_index=True)
        self._owners = (np.frombuffer(owners, dtype=np.int32) if owners else np.zeros(0, np.int32))[first]

    @property
    def train_problems(self) -> int:
        return len(self._ids)

    @property
    def distinct_ngrams(self) -> int:
        return int(self._keys.size)

    def _exact_match(self, text: str) -> int | None:
        index = self._exact.get(hash(text))
        if index is None or normalise_statement(self._train[self._ids[index]]) != text:
            return None
        return index

    def check(self, name: str, statements: Mapping[str, str], max_examples: int = 5) -> SetOverlap:
        """One evaluation set ``{problem id: statement}`` against the training statements."""
        if not isinstance(max_examples, int) or max_examples < 0:
            raise ValueError(f"`max_examples` must be an integer >= 0, got {max_examples!r}")
        if not isinstance(statements, Mapping):
            raise TypeError(f"evaluation set {name!r} must map problem ids to statements, got {type(statements).__name__}")
        exact, exact_examples = 0, []
        hashes, lengths, scanned = array("q"), [], []
        for problem_id, statement in statements.items():
            text = normalise_statement(_statement(statement, f"evaluation ({name})", problem_id))
            if not text:
                continue
            index = self._exact_match(text)
            if index is not None:
                exact += 1
                if len(exact_examples) < max_examples:
                    exact_examples.append((self._ids[index], problem_id))
                continue
            grams = set(_ngram_hashes(text.split(), self.n))
            if grams:
                hashes.extend(grams)
                lengths.append(len(grams))
                scanned.append(problem_id)
        near_examples, near, max_fraction = [], 0, 0.0
        if scanned and self._keys.size:
            query = np.frombuffer(hashes, dtype=np.int64)
            position = np.minimum(np.searchsorted(self._keys, query), self._keys.size - 1)
            hit = self._keys[position] == query
            sizes = np.asarray(lengths)
            starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
            shared = np.add.reduceat(hit.astype(np.int64), starts)
            fraction = shared / sizes
            found = np.flatnonzero(shared)
            near = int(found.size)
            if near:
                max_fraction = float(fraction[found].max())
            for j in found[np.argsort(-fraction[found], kind="stable")][:max_examples]:
                segment = slice(starts[j], starts[j] + sizes[j])
                owners = self._owners[position[segment][hit[segment]]]
                owner = int(np.bincount(owners).argmax())  # the most shared; ties go to the first
                near_examples.append((self._ids[owner], scanned[j]))
        return SetOverlap(
            name=name,
            eval_problems=len(statements),
            train_problems=self.train_problems,
            exact=exact,
            exact_examples=tuple(exact_examples),
            near=near,
            near_examples=tuple(near_examples),
            max_shared_fraction=max_fraction,
            n=self.n,
            normalisation_version=NORMALISATION_VERSION,
        )


def find_overlaps(
    train: Mapping[str, str],
    eval_sets: Mapping[str, Mapping[str, str]],
    n: int = DEFAULT_N,
    max_examples: int = 5,
) -> ContaminationReport:
    """Every evaluation set of ``eval_sets`` (``{set name: {problem id: statement}}``) against the training
    problems ``train`` (``{problem id: statement}``), by the rules of the module docstring, keeping up to
    ``max_examples`` example pairs of each kind per set."""
    index = TrainingIndex(train, n)
    return ContaminationReport(
        train_problems=index.train_problems,
        n=n,
        normalisation_version=NORMALISATION_VERSION,
        sets=tuple(index.check(name, statements, max_examples) for name, statements in eval_sets.items()),
    )
