"""The built-in retriever: a BM25 index (``bm25s``) over a corpus in the common JSONL form.

:func:`build_index` (``pettingllms dataprocess search --corpus PATH``) reads the corpus once, line by line,
and writes a folder:

- the ``bm25s`` index (``params.index.json``, ``vocab.index.json`` and the score matrix as ``.npy`` arrays);
- ``docs.jsonl``: every passage as ``{"id", "contents"}``, in index order, and ``docs.offsets.npy``: where each
  line starts (so one passage is read without reading the others);
- ``index.json``: what was indexed (the corpus path, the passage count, the tokenizer, the BM25 settings).

:meth:`BM25Index.load` memory-maps all of it (``bm25s``'s ``load(..., mmap=True)``, ``numpy``'s ``mmap_mode``
and :mod:`mmap` for the passages), so a Wikipedia-size index opens at once and its pages are shared by every
process that reads it. Tokens are lower-cased runs of two or more word characters less English stop words
(``bm25s``' own default), for the corpus and the queries alike; BM25 uses Pyserini's ``k1 = 0.9, b = 0.4``, the
setting of the Search-R1 and FlashRAG baselines. A query with no indexed token retrieves nothing, and passages
that share no token with the query (score 0) are never returned. :meth:`BM25Index.from_passages` builds the
same index in memory (the synthetic task's per-instance corpora).
"""

from __future__ import annotations

import json
import mmap as mmap_module
import os
import re
import shutil
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pettingllms.envs.search.corpus import CorpusError, Passage, iter_corpus, passage_from_document

__all__ = ["INDEX_FILE", "BM25Index", "build_index", "index_exists", "tokenize"]

#: The file that marks a folder as a finished index (written last).
INDEX_FILE = "index.json"
_DOCS, _OFFSETS = "docs.jsonl", "docs.offsets.npy"
_FORMAT = "pettingllms-bm25/1"
_TOKEN = re.compile(r"(?u)\b\w\w+\b")
K1, B = 0.9, 0.4


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


_STOP: frozenset[str] | None = None


def tokenize(text: str) -> list[str]:
    """The index's tokens of ``text``: lower-cased runs of 2+ word characters, English stop words dropped."""
    global _STOP
    if _STOP is None:
        _STOP = _stopwords()
    return [t for t in _TOKEN.findall(text.lower()) if t not in _STOP]


def index_exists(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds a finished index (:data:`INDEX_FILE` is written last)."""
    return (Path(folder) / INDEX_FILE).is_file()


def _model(token_ids: list, vocab: dict[str, int]) -> Any:
    import bm25s

    model = bm25s.BM25(k1=K1, b=B)
    model.index((token_ids, vocab), show_progress=False)
    return model


class _MappedDocs:
    """The passages of a saved index, read from the memory-mapped ``docs.jsonl`` one line at a time."""

    def __init__(self, folder: Path) -> None:
        import numpy as np

        self.offsets = np.load(folder / _OFFSETS, mmap_mode="r")
        self.path = folder / _DOCS
        with open(self.path, "rb") as handle:
            self.data = mmap_module.mmap(handle.fileno(), 0, access=mmap_module.ACCESS_READ) if os.path.getsize(self.path) else b""

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> Passage:
        start, stop = int(self.offsets[index]), int(self.offsets[index + 1])
        return passage_from_document(json.loads(self.data[start:stop]), where=f"{self.path} passage {index}")

    def __deepcopy__(self, memo: dict) -> _MappedDocs:  # a read-only view: copies share it
        return self


class BM25Index:
    """A BM25 index and its passages: :meth:`search_batch` gives the top-k passages of each query."""

    def __init__(self, model: Any, docs: Sequence[Passage], info: dict | None = None) -> None:
        self.model = model
        self.docs = docs
        self.info = dict(info or {})

    def __len__(self) -> int:
        return len(self.docs)

    def __deepcopy__(self, memo: dict) -> BM25Index:  # read-only once built: copies share it
        return self

    @classmethod
    def from_passages(cls, passages: Iterable[Passage]) -> BM25Index:
        """An in-memory index of ``passages`` (each passage's title and text are indexed)."""
        docs = list(passages)
        if not docs:
            raise CorpusError("cannot index an empty corpus")
        vocab: dict[str, int] = {}
        ids = [[vocab.setdefault(t, len(vocab)) for t in tokenize(p.contents)] for p in docs]
        return cls(_model(ids, vocab or {"": 0}), docs, {"num_docs": len(docs)})

    @classmethod
    def load(cls, folder: str | os.PathLike, mmap: bool = True) -> BM25Index:
        """The index :func:`build_index` wrote to ``folder``, memory-mapped (``mmap``) or read into memory."""
        import bm25s

        folder = Path(folder).expanduser()
        if not index_exists(folder):
            raise CorpusError(
                f"no BM25 index at {folder}: build it once with `pettingllms dataprocess search --corpus CORPUS.jsonl "
                f"--output {folder}`"
            )
        info = json.loads((folder / INDEX_FILE).read_text(encoding="utf-8"))
        if info.get("format") != _FORMAT:
            raise CorpusError(f"{folder}: not an index of this version ({info.get('format')!r}, expected {_FORMAT!r}); rebuild it")
        model = bm25s.BM25.load(str(folder), mmap=mmap, load_corpus=False, show_progress=False)
        docs = _MappedDocs(folder)
        if not mmap:
            docs = [docs[i] for i in range(len(docs))]
        return cls(model, docs, info)

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """The top-``k`` passages of each query, best first (fewer when fewer share a token with it)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"`k` must be an integer >= 1, got {k!r}")
        vocab = self.model.vocab_dict
        token_ids = [[vocab[t] for t in tokenize(q) if t in vocab] for q in queries]
        live = [i for i, ids in enumerate(token_ids) if ids]
        out: list[list[Passage]] = [[] for _ in queries]
        if not live:
            return out
        found, scores = self.model.retrieve([token_ids[i] for i in live], k=min(k, len(self.docs)),
                                            show_progress=False, n_threads=0)
        for row, i in enumerate(live):
            for doc, score in zip(found[row], scores[row]):
                if float(score) > 0.0:
                    passage = self.docs[int(doc)]
                    out[i].append(Passage(passage.id, passage.title, passage.text, round(float(score), 6)))
        return out


def _swap_into_place(built: Path, target: Path) -> None:
    """Replace ``target`` (if any) with the folder ``built``; readers see the old index or the new one."""
    old = target.parent / f".{target.name}.old-{os.getpid()}"
    if target.exists():
        if not index_exists(target) and any(target.iterdir()):
            raise CorpusError(f"{target} exists and is not an index; give another --output (nothing was replaced)")
        os.replace(target, old)
    os.replace(built, target)
    shutil.rmtree(old, ignore_errors=True)


def build_index(corpus: str | os.PathLike, output: str | os.PathLike, progress: bool = False) -> tuple[Path, int]:
    """Index the corpus file ``corpus`` into the folder ``output`` (see the module docstring); returns
    (folder, passage count). The folder is built next to ``output`` and swapped in when complete."""
    import bm25s
    import numpy as np

    corpus, target = Path(corpus).expanduser(), Path(output).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    work = target.parent / f".{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        vocab: dict[str, int] = {}
        ids: list[array] = []  # 4 bytes a token: the only part of the corpus held in memory while building
        offsets = array("q", [0])
        with open(work / _DOCS, "wb") as out:
            for passage in iter_corpus(corpus):
                line = (json.dumps({"id": passage.id, "contents": passage.contents}, ensure_ascii=False) + "\n").encode()
                out.write(line)
                offsets.append(offsets[-1] + len(line))
                ids.append(array("I", [vocab.setdefault(t, len(vocab)) for t in tokenize(passage.contents)]))
                if progress and len(ids) % 1_000_000 == 0:
                    print(f"read {len(ids):,} passages", flush=True)
        if not ids:
            raise CorpusError(f"{corpus}: the corpus holds no passage")
        model = _model(ids, vocab or {"": 0})
        del ids
        model.save(str(work), show_progress=False)
        np.save(work / _OFFSETS, np.asarray(offsets, dtype=np.int64))
        info = {"format": _FORMAT, "num_docs": len(offsets) - 1, "corpus": str(corpus.resolve()),
                "tokenizer": {"pattern": _TOKEN.pattern, "lower": True, "stopwords": "bm25s en"},
                "bm25": {"k1": K1, "b": B, "method": model.method}, "bm25s": bm25s.__version__}
        (work / INDEX_FILE).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
        _swap_into_place(work, target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return target, info["num_docs"]
