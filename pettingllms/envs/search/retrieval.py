"""Retrievers: the built-in BM25 index, an HTTP retrieval server, and the batching every search goes through.

* :class:`HTTPRetriever`: a retrieval server speaking the Search-R1 protocol. One POST per batch::

      POST {url}   {"queries": ["q1", "q2"], "topk": 3, "return_scores": true}
      200          {"result": [[{"document": {"id": "17", "contents": "\\"Title\\"\\ntext"}, "score": 12.3}, ...],
                               [...]]}

  (one list per query, best first; a server that leaves the scores out and answers bare documents is read too).
  Each POST has a timeout; a timeout, a refused connection, 408, 429 and 5xx are retried with exponential
  backoff, other answers (4xx, a body that is not that JSON) fail at once. What is left after the retries is a
  :class:`RetrievalError` (an :class:`~pettingllms.agents.failures.InfrastructureError`: the engine drops the
  sample and counts it, never rewards it) naming the URL, the attempts and the last error. Loopback addresses
  bypass any HTTP proxy of the environment.
* :class:`~pettingllms.envs.search.bm25.BM25Index` (:func:`open_index` memory-maps a saved one, once per process).
* :class:`BatchingRetriever`: what the environment calls. The rollout engine steps every copy of every problem
  of a decision point concurrently (``asyncio.gather`` over ``env.step_agent``), and each search agent awaits
  :meth:`BatchingRetriever.search` first thing in its step, so the searches of one decision point reach the
  retriever within the same few event-loop iterations; the batcher collects them until an iteration adds none
  and sends them as **one** backend call (one POST, one BM25 ``retrieve``), identical queries once. Results are
  cached per (query, k) for the process, so the K copies of a tree-sampled decision and repeated questions cost
  nothing. Backend calls run in a worker thread (``threaded``), so the event loop is never blocked.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from pettingllms.agents.failures import InfrastructureError
from pettingllms.envs.search.corpus import CorpusError, Passage, passage_from_document

__all__ = [
    "SEARCH_API_URL",
    "BatchingRetriever",
    "HTTPRetriever",
    "RetrievalError",
    "Retriever",
    "check_url",
    "http_retriever",
    "open_index",
]

#: The environment variable naming a retrieval server (the env config's ``retriever_url`` wins).
SEARCH_API_URL = "SEARCH_API_URL"
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


class RetrievalError(InfrastructureError):
    """A retrieval that failed for reasons of the machinery (server down or malformed, index unreadable)."""


class Retriever(Protocol):
    """What :class:`BatchingRetriever` wraps: the top-``k`` passages of each query, in one call."""

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]: ...


def check_url(url: str) -> str:
    """``url`` when it is an ``http(s)://host...`` address, else ValueError naming it."""
    parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"a retriever URL must be http(s)://host[:port]/path, got {url!r}")
    return url


class HTTPRetriever:
    """A Search-R1 retrieval server at ``url`` (see the module docstring)."""

    def __init__(self, url: str, timeout_s: float = 10.0, max_retries: int = 2, backoff_s: float = 0.5,
                 batch_size: int = 512) -> None:
        self.url = check_url(url)
        if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise ValueError(f"`timeout_s` must be > 0, got {timeout_s!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"`max_retries` must be an integer >= 0, got {max_retries!r}")
        self.timeout_s, self.max_retries, self.backoff_s, self.batch_size = float(timeout_s), max_retries, backoff_s, batch_size
        host = urllib.parse.urlsplit(url).hostname or ""
        handlers = [urllib.request.ProxyHandler({})] if host in _LOOPBACK else []
        self._opener = urllib.request.build_opener(*handlers)
        self.posts = 0  # POSTs sent, retries included

    def __deepcopy__(self, memo: dict) -> HTTPRetriever:
        return self

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        out: list[list[Passage]] = []
        for start in range(0, len(queries), self.batch_size):
            out += self._post(list(queries[start:start + self.batch_size]), k)
        return out

    def _post(self, queries: list[str], k: int) -> list[list[Passage]]:
        body = json.dumps({"queries": queries, "topk": k, "return_scores": True}).encode("utf-8")
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(min(self.backoff_s * 2 ** (attempt - 1), 8.0) * (0.5 + random.random() / 2))
            request = urllib.request.Request(self.url, data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            self.posts += 1
            try:
                with self._opener.open(request, timeout=self.timeout_s) as response:
                    raw = response.read()
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:200].decode("utf-8", "replace").strip()
                last = f"HTTP {exc.code}" + (f": {detail}" if detail else "")
                if exc.code in _RETRY_STATUS:
                    continue
                raise RetrievalError(f"retrieval server {self.url} refused the request: {last}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                last = f"{type(reason).__name__}: {reason}" if not isinstance(reason, str) else reason
                continue
            return self._read(raw, len(queries))
        raise RetrievalError(f"retrieval server {self.url} failed {self.max_retries + 1} time(s) "
                             f"(timeout {self.timeout_s:g} s each); last: {last}")

    def _read(self, raw: bytes, count: int) -> list[list[Passage]]:
        try:
            result = json.loads(raw)["result"]
        except (ValueError, KeyError, TypeError):
            raise RetrievalError(f"retrieval server {self.url} answered without a JSON `result`: {raw[:120]!r}") from None
        if not isinstance(result, list) or len(result) != count:
            got = len(result) if isinstance(result, list) else type(result).__name__
            raise RetrievalError(f"retrieval server {self.url} answered {got} result list(s) for {count} queries")
        try:
            return [[self._passage(hit) for hit in hits] for hits in result]
        except (CorpusError, TypeError) as exc:
            raise RetrievalError(f"retrieval server {self.url}: malformed result: {exc}") from None

    def _passage(self, hit: Any) -> Passage:
        if isinstance(hit, dict) and isinstance(hit.get("document"), dict):
            return passage_from_document(hit["document"], hit.get("score", 0.0), where=f"{self.url} result")
        return passage_from_document(hit, where=f"{self.url} result")


@functools.lru_cache(maxsize=8)
def http_retriever(url: str, timeout_s: float, max_retries: int) -> HTTPRetriever:
    """One :class:`HTTPRetriever` per (url, timeout, retries) in this process."""
    return HTTPRetriever(url, timeout_s, max_retries)


@functools.lru_cache(maxsize=4)
def _open_index(folder: str, stamp: int) -> Any:
    from pettingllms.envs.search.bm25 import BM25Index

    return BM25Index.load(folder, mmap=True)


def open_index(folder: str | os.PathLike) -> Any:
    """The :class:`~pettingllms.envs.search.bm25.BM25Index` saved in ``folder``, memory-mapped, opened once per
    process and index version (a rebuilt index is opened again)."""
    from pettingllms.envs.search.bm25 import INDEX_FILE

    path = Path(folder).expanduser().resolve()
    marker = path / INDEX_FILE
    stamp = marker.stat().st_mtime_ns if marker.is_file() else 0
    try:
        return _open_index(str(path), stamp)
    except CorpusError:
        raise
    except (OSError, ValueError) as exc:
        raise RetrievalError(f"the BM25 index at {path} could not be read: {exc}") from exc


class BatchingRetriever:
    """Coalesces the concurrent searches of one event loop into one backend call (see the module docstring)."""

    def __init__(self, backend: Retriever, threaded: bool = True, cache_size: int = 4096) -> None:
        self.backend = backend
        self.threaded = threaded
        self.cache_size = cache_size
        self.calls = 0  # backend calls made
        self._cache: OrderedDict[tuple[str, int], tuple[Passage, ...]] = OrderedDict()
        self._pending: dict[Any, list[tuple[str, int, asyncio.Future]]] = {}
        self._tasks: set[asyncio.Task] = set()
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict) -> BatchingRetriever:  # a shared resource: copies share it
        return self

    def _cached(self, key: tuple[str, int]) -> tuple[Passage, ...] | None:
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
            return hit

    def _store(self, key: tuple[str, int], passages: Sequence[Passage]) -> None:
        with self._lock:
            self._cache[key] = tuple(passages)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def search_now(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """The same results without an event loop (one backend call for the queries not cached)."""
        missing = list(dict.fromkeys(q for q in queries if self._cached((q, k)) is None))
        if missing:
            self.calls += 1
            for query, found in zip(missing, self.backend.search_batch(missing, k)):
                self._store((query, k), found)
        return [list(self._cached((q, k)) or ()) for q in queries]

    async def search(self, query: str, k: int) -> list[Passage]:
        """The top-``k`` passages of ``query``, batched with the other searches awaited at the same time."""
        hit = self._cached((query, k))
        if hit is not None:
            return list(hit)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        queue = self._pending.get(loop)
        if queue is None:
            queue = self._pending[loop] = []
            task = loop.create_task(self._flush(loop, queue))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        queue.append((query, k, future))
        return list(await future)

    async def _flush(self, loop: Any, queue: list[tuple[str, int, asyncio.Future]]) -> None:
        seen = -1
        while len(queue) != seen:  # wait until one event-loop iteration adds no search
            seen = len(queue)
            await asyncio.sleep(0)
        del self._pending[loop]
        by_k: dict[int, dict[str, None]] = {}
        for query, k, _ in queue:
            by_k.setdefault(k, {})[query] = None  # each distinct query once, in order
        results: dict[tuple[str, int], tuple[Passage, ...]] = {}
        try:
            for k, distinct in by_k.items():
                queries = list(distinct)
                self.calls += 1
                if self.threaded:
                    found = await asyncio.to_thread(self.backend.search_batch, queries, k)
                else:
                    found = self.backend.search_batch(queries, k)
                for query, passages in zip(queries, found):
                    results[(query, k)] = tuple(passages)
                    self._store((query, k), passages)
        except asyncio.CancelledError:
            for *_, future in queue:
                future.cancel()
            raise
        except Exception as exc:  # every waiting search fails with it; a bug stays the exception it is
            error = RetrievalError(f"retrieval failed: {exc}") if isinstance(exc, (OSError, CorpusError)) else exc
            for *_, future in queue:
                if not future.done():
                    future.set_exception(error)
            return
        for query, k, future in queue:
            if not future.done():
                future.set_result(results[(query, k)])
