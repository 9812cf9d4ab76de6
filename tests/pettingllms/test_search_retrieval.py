"""Retrieval: the BM25 index (built from a corpus file, saved, memory-mapped, searched), and the HTTP retriever
against a real Search-R1-style retrieval server on 127.0.0.1 (this file's :class:`RetrievalServer`): the protocol,
retries, timeouts and clear errors, one POST per decision point for all its queries, and the oracle team scoring
1.000 through the server."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pettingllms.envs.search.bm25 import BM25Index, build_index, tokenize
from pettingllms.envs.search.corpus import CorpusError, Passage, iter_corpus, split_contents
from pettingllms.envs.search.retrieval import BatchingRetriever, HTTPRetriever, RetrievalError
from pettingllms.registry import make_agents, make_env
from tests.helpers.search_data import CORPUS, write_search_root


class RetrievalServer:
    """A retrieval server speaking the Search-R1 protocol on 127.0.0.1, answering from a BM25 index.

    ``POST /retrieve {"queries": [...], "topk": k, "return_scores": bool}`` answers ``{"result": [[{"document":
    {"id", "contents"}, "score"}, ...], ...]}`` (bare documents without ``return_scores``). ``faults`` holds actions
    for the next requests, one each: ``("status", code)``, ``("delay", seconds)`` (then the normal answer),
    ``("body", bytes)`` (a 200 with that body). Every request body is recorded in ``bodies``."""

    def __init__(self, index: BM25Index) -> None:
        self.index = index
        self.bodies: list = []
        self.faults: list[tuple[str, object]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                owner._handle(self)

            def log_message(self, format, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/retrieve"

    def __enter__(self) -> RetrievalServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        body = json.loads(raw)
        with self._lock:
            self.bodies.append(body)
            fault = self.faults.pop(0) if self.faults else None
        status, data = 200, None
        if fault is not None and fault[0] == "status":
            status, data = int(fault[1]), b'{"error": "scripted"}'
        elif fault is not None and fault[0] == "body":
            data = fault[1]
        elif fault is not None and fault[0] == "delay" and self._stop.wait(float(fault[1])):
            return
        if data is None:
            found = self.index.search_batch(body["queries"], int(body["topk"]))
            docs = [[{"document": {"id": p.id, "contents": p.contents}, "score": p.score} if body.get("return_scores")
                     else {"id": p.id, "contents": p.contents} for p in hits] for hits in found]
            data = json.dumps({"result": docs}).encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> BM25Index:
    folder, count = build_index(CORPUS, tmp_path_factory.mktemp("index") / "wiki")
    assert count == 19
    return BM25Index.load(folder, mmap=True)


@pytest.fixture
def server(index):
    with RetrievalServer(index) as running:
        yield running


# ---- the corpus and the BM25 index -------------------------------------------------------------------------


def test_corpus_lines_and_their_errors(tmp_path):
    passages = list(iter_corpus(CORPUS))
    assert len(passages) == 19 and passages[4].title == "Lumen Bridge" and passages[4].id == "4"
    assert passages[4].contents.startswith('"Lumen Bridge"\nThe Lumen Bridge is')
    assert split_contents("no title here") == ("", "no title here")
    other = tmp_path / "c.jsonl"
    other.write_text(json.dumps({"title": "T", "text": "body"}) + "\n\n" + "{oops\n")
    with pytest.raises(CorpusError, match=r"c.jsonl line 3: not JSON"):
        list(iter_corpus(other))
    assert next(iter_corpus(other)) == Passage(id="0", title="T", text="body")
    other.write_text(json.dumps({"id": 1, "body": "x"}) + "\n")
    with pytest.raises(CorpusError, match=r"line 1: no `contents`"):
        list(iter_corpus(other))
    other.write_text("")
    with pytest.raises(CorpusError, match="holds no passage"):
        build_index(other, tmp_path / "idx")
    assert not (tmp_path / "idx").exists()


def test_bm25_index_is_memory_mapped_and_ranks_by_bm25(index, tmp_path):
    import numpy as np

    assert isinstance(index.docs.offsets, np.memmap) and index.info["num_docs"] == 19
    assert isinstance(index.model.scores["data"], np.memmap)
    (hits,) = index.search_batch(["Lumen Bridge opened"], 3)
    assert hits[0].title == "Lumen Bridge" and [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert index.search_batch(["the of and", "zzzz qqqq", ""], 3) == [[], [], []]  # stop words, unknown, empty
    assert len(index.search_batch(["Oradell"], 100)[0]) <= 19  # k past the corpus: what shares a token
    assert tokenize("The Lumen-Bridge, 1931!") == ["lumen", "bridge", "1931"]
    # the same passages indexed in memory rank the same
    memory = BM25Index.from_passages(iter_corpus(CORPUS))
    queries = ["who founded the marrow street theatre", "Osric Vane novel", "capital of Skellan"]
    assert [[p.id for p in h] for h in memory.search_batch(queries, 3)] == \
        [[p.id for p in h] for h in index.search_batch(queries, 3)]


def test_rebuilding_swaps_the_index_and_a_foreign_folder_is_refused(tmp_path):
    folder = tmp_path / "idx"
    build_index(CORPUS, folder)
    first = (folder / "index.json").read_text()
    build_index(CORPUS, folder)
    assert (folder / "index.json").read_text() == first and not list(tmp_path.glob(".idx*"))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(CorpusError, match="is not an index"):
        build_index(CORPUS, tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    with pytest.raises(CorpusError, match="no BM25 index at"):
        BM25Index.load(tmp_path / "mine")


# ---- the HTTP retriever --------------------------------------------------------------------------------------


def test_http_retriever_speaks_the_search_r1_protocol(server, index):
    retriever = HTTPRetriever(server.url)
    queries = ["Lumen Bridge", "Osric Vane", "the"]
    assert retriever.search_batch(queries, 2) == index.search_batch(queries, 2)
    assert server.bodies == [{"queries": queries, "topk": 2, "return_scores": True}]
    # a server that answers bare documents (no scores) is read too
    server.faults.append(("body", json.dumps({"result": [[{"id": "9", "contents": '"T"\nx'}]]}).encode()))
    assert retriever.search_batch(["q"], 1) == [[Passage("9", "T", "x", 0.0)]]


def test_http_retries_transient_failures_then_fails_clearly(server):
    retriever = HTTPRetriever(server.url, timeout_s=0.3, max_retries=2, backoff_s=0.01)
    server.faults += [("status", 503), ("status", 502)]
    assert retriever.search_batch(["Corvale"], 1)[0][0].title == "Corvale" and len(server.bodies) == 3
    server.faults += [("status", 503)] * 3
    with pytest.raises(RetrievalError, match=r"failed 3 time\(s\).*HTTP 503") as caught:
        retriever.search_batch(["Corvale"], 1)
    assert server.url in str(caught.value)
    server.faults += [("delay", 2.0), ("delay", 2.0), ("delay", 2.0)]
    start = time.perf_counter()
    with pytest.raises(RetrievalError, match=r"timeout 0.3 s each"):
        retriever.search_batch(["Corvale"], 1)
    assert time.perf_counter() - start < 3.0


@pytest.mark.parametrize(("fault", "message"), [
    (("status", 400), "refused the request: HTTP 400"),
    (("body", b"<html>"), "without a JSON `result`"),
    (("body", b'{"result": []}'), "answered 0 result list"),
    (("body", b'{"result": [[{"document": {"id": 1}}]]}'), "malformed result"),
])
def test_http_answers_that_cannot_be_read_fail_at_once(server, fault, message):
    server.faults.append(fault)
    with pytest.raises(RetrievalError, match=message):
        HTTPRetriever(server.url, max_retries=3, backoff_s=0.01).search_batch(["q"], 1)
    assert len(server.bodies) == 1  # not retried


def test_a_refused_connection_is_a_retrieval_error():
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as closed:
        url = f"http://127.0.0.1:{closed.server_address[1]}/retrieve"
    with pytest.raises(RetrievalError, match="failed 2 time"):
        HTTPRetriever(url, timeout_s=0.5, max_retries=1, backoff_s=0.01).search_batch(["q"], 1)


# ---- batching ------------------------------------------------------------------------------------------------


def test_concurrent_steps_of_a_decision_point_share_one_post(server, tmp_path, monkeypatch):
    """K copies of two problems step at once (as the engine does): one POST holds every distinct query."""
    monkeypatch.setenv("PETTINGLLMS_DATA", str(write_search_root(tmp_path)))
    env = make_env("search", {"dataset": "nq", "retriever_url": server.url})
    envs, agents = [], []
    for seed in (0, 1):
        asyncio.run(env.reset(seed))
        for k in range(3):
            copy = env.clone()
            agent = make_agents("search", copy.config.turn_order)[0]
            agent.update_from_env(0, copy)
            agent.update_from_model(f"<search>{copy.state.problem.question}{' again' if k == 2 else ''}</search>")
            envs.append(copy)
            agents.append(agent)

    async def decide():
        return await asyncio.gather(*(e.step_agent(a) for e, a in zip(envs, agents)))

    results = asyncio.run(decide())
    assert len(server.bodies) == 1 and len(server.bodies[0]["queries"]) == 4  # 2 problems x 2 distinct queries
    assert [r.local_reward for r in results] == [1.0] * 6  # each retrieved the passage holding its answer
    for e in envs:
        assert e.state.retrievals[0].passages and e.state.passages[0].score > 0


def test_batching_retriever_caches_and_fails_every_waiter():
    class Backend:
        calls: list = []

        def search_batch(self, queries, k):
            self.calls.append(list(queries))
            if "boom" in queries:
                raise OSError("disk gone")
            return [[Passage(q, q, q, 1.0)] for q in queries]

    backend = Backend()
    retriever = BatchingRetriever(backend, threaded=True)

    async def many(queries):
        return await asyncio.gather(*(retriever.search(q, 2) for q in queries), return_exceptions=True)

    assert [r[0].id for r in asyncio.run(many(["a", "b", "a"]))] == ["a", "b", "a"]
    assert backend.calls == [["a", "b"]]
    assert retriever.search_now(["a", "c"], 2)[1][0].id == "c" and backend.calls[-1] == ["c"]  # "a" was cached
    errors = asyncio.run(many(["boom", "d"]))
    assert all(isinstance(e, RetrievalError) and "disk gone" in str(e) for e in errors)


def test_eval_through_the_retrieval_server_posts_once_per_decision_point(server, tmp_path, monkeypatch, capsys):
    """`pettingllms eval` with $SEARCH_API_URL: the oracle scores 1.000 on the HotpotQA fixture, and each search
    decision point is one POST (turn 1: the 3 problems' queries; turn 2: the 2 problems that need a second hop)."""
    from pettingllms.cli import main

    monkeypatch.setenv("PETTINGLLMS_DATA", str(write_search_root(tmp_path / "data")))
    monkeypatch.setenv("SEARCH_API_URL", server.url)
    assert main(["eval", "search/hotpotqa", "--policy", "oracle", f"env.index_dir={tmp_path / 'none'}",
                 f"run.output_dir={tmp_path / 'run'}", "run.progress=false"]) == 0
    assert "success 1.000 on 3 held-out instances" in capsys.readouterr().out
    assert [len(body["queries"]) for body in server.bodies] == [3, 2]
