"""Passages and retrieval corpora in the common JSONL form (FlashRAG / Search-R1).

A corpus is a JSONL file (optionally ``.gz``), one passage per line::

    {"id": "0", "contents": "\\"Aaron\\"\\nAaron is a prophet, high priest, ..."}

``contents`` is the title in double quotes, a newline, then the text (:func:`split_contents`); a line that
gives ``title`` and ``text`` instead of ``contents`` is read as that passage. ``id`` may be a string or an
integer (kept as text); a line without one takes its line number. The same form is what a Search-R1 retrieval
server returns as a ``document``.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CorpusError", "Passage", "iter_corpus", "join_contents", "passage_from_document", "split_contents"]


class CorpusError(ValueError):
    """A corpus file (or a retrieved document) that is missing or does not match the form (one line)."""


@dataclass(frozen=True)
class Passage:
    """One retrieved passage: its corpus id, title, text, and the retriever's score (higher is better)."""

    id: str
    title: str
    text: str
    score: float = 0.0

    @property
    def contents(self) -> str:
        """The passage in the corpus form (``"title"\\ntext``)."""
        return join_contents(self.title, self.text)


def split_contents(contents: str) -> tuple[str, str]:
    """``'"Title"\\ntext'`` -> ``("Title", "text")``; without a newline the whole is the text (no title)."""
    head, newline, rest = contents.partition("\n")
    if not newline:
        return "", contents.strip()
    title = head.strip()
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1].strip()
    return title, rest.strip()


def join_contents(title: str, text: str) -> str:
    """The corpus form of a passage: the title in double quotes, a newline, the text."""
    return f'"{title}"\n{text}' if title else text


def passage_from_document(document: Any, score: float = 0.0, where: str = "document") -> Passage:
    """A :class:`Passage` from a corpus line or a retrieval server's ``document`` object."""
    if not isinstance(document, dict):
        raise CorpusError(f"{where}: expected a JSON object with `contents`, got {type(document).__name__}")
    native = document.get("id", document.get("_id"))
    if "contents" in document:
        if not isinstance(document["contents"], str):
            raise CorpusError(f"{where}: `contents` must be text, got {type(document['contents']).__name__}")
        title, text = split_contents(document["contents"])
    elif isinstance(document.get("text"), str):
        title, text = str(document.get("title") or "").strip(), document["text"].strip()
    else:
        raise CorpusError(f"{where}: no `contents` (or `title` and `text`) field; has {sorted(document)[:8]}")
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        raise CorpusError(f"{where}: `score` must be a number, got {score!r}")
    return Passage(id="" if native is None else str(native), title=title, text=text, score=float(score))


def iter_corpus(path: str | os.PathLike) -> Iterator[Passage]:
    """The passages of a corpus file, in order; errors name the path and line."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise CorpusError(f"no corpus file at {path} (a JSONL file of {{\"id\", \"contents\"}} lines)")
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                document = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusError(f"{path} line {number}: not JSON ({exc.msg})") from exc
            passage = passage_from_document(document, where=f"{path} line {number}")
            yield passage if passage.id else Passage(str(number - 1), passage.title, passage.text)
