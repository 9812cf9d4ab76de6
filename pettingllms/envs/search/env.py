"""The search environment: a web-search agent retrieves passages, a reasoner answers (multi-hop) questions.

Episode. ``dataset: synthetic`` (the default) generates the question and the corpus of each seed
(:mod:`pettingllms.envs.search.synthetic`, ``synthetic_hops``); any other dataset's seeds index one split of its
normalised file, as the code and math workflows' do (``split`` for evaluation, ``train_split`` for training,
``purpose``), read from ``data_dir/<split>.jsonl`` (default: ``$PETTINGLLMS_DATA/search/<dataset>/``).

Each turn the agents of ``turn_order`` act in order: the search agent (``web_search_agent``) writes a query; the
environment retrieves its top ``topk`` passages and adds them to the shared state; the reasoner
(``search_reasoning_agent``) reads every passage found so far and answers, or asks for another search (its
request shows in the search agent's next prompt). The first answer ends the episode, as does the turn budget.
L0 plays the ``single`` role: one agent that searches or answers in each response.

Retrieval (:mod:`pettingllms.envs.search.retrieval`): the synthetic task searches its own corpus (an in-memory BM25
index per seed). A dataset searches the BM25 index in ``index_dir`` (``pettingllms dataprocess search --corpus
PATH``; default ``$PETTINGLLMS_DATA/search/index``), memory-mapped, or, with ``retriever: http`` or ``auto`` and
a URL (``retriever_url``, else the ``SEARCH_API_URL`` environment variable), a Search-R1 retrieval server.

Shared state (:class:`SearchState`): the question, every retrieval (query, passages, outcome), the reasoner's
requests, and the answer with its exact match and F1. Rewards (:mod:`pettingllms.envs.search.rewards`): global =
the answer's exact match (success); search local = +1 a passage holds a golden answer, +0.5 a new supporting
passage, 0 nothing new, -1 no query; reasoner local = the answer's token F1, 0 for a request (-0.5 on the last
turn), -1 nothing parsed.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pettingllms.envs.base import BaseEnv, EnvConfig, EnvState
from pettingllms.envs.records import QuestionInstances, played_split
from pettingllms.envs.search import rewards
from pettingllms.envs.search.bm25 import INDEX_FILE, BM25Index, index_exists
from pettingllms.envs.search.corpus import CorpusError, Passage
from pettingllms.envs.search.data import DATASETS, SearchDataError, SearchProblem, normalised_path, read_jsonl
from pettingllms.envs.search.retrieval import (
    SEARCH_API_URL,
    BatchingRetriever,
    check_url,
    http_retriever,
    open_index,
)
from pettingllms.envs.search.synthetic import HOPS, generate

__all__ = [
    "RETRIEVERS",
    "SYNTHETIC",
    "Retrieval",
    "SearchConfig",
    "SearchEnv",
    "SearchState",
    "default_index_dir",
    "load_split",
    "split_path",
]

#: The generated task's dataset name.
SYNTHETIC = "synthetic"
RETRIEVERS: tuple[str, ...] = ("auto", "bm25", "http")
SEARCH_ROLE, REASONER_ROLE, SINGLE_ROLE = "web_search_agent", "search_reasoning_agent", "single"


def default_index_dir() -> Path:
    """Where ``pettingllms dataprocess search --corpus`` writes its index by default: ``$PETTINGLLMS_DATA/search/index``."""
    return normalised_path("index", "_").parent  # <root>/search/index/_.jsonl -> <root>/search/index


@dataclass(frozen=True)
class SearchConfig(EnvConfig):
    """Search settings (see :class:`~pettingllms.envs.base.EnvConfig` for the shared ones).

    > Questions

    - ``dataset``: ``synthetic`` (generated, :mod:`~pettingllms.envs.search.synthetic`) or one of ``nq``,
      ``hotpotqa``, ``2wiki``, ``musique``, ``bamboogle`` (``pettingllms dataprocess search --dataset``).
    - ``synthetic_hops``: retrievals a generated question needs (1, 2 or 3).
    - ``split`` / ``train_split``: the splits evaluation / training play (``train_split: null``: none to train on).
    - ``data_dir``: the folder holding ``<split>.jsonl``; ``null``: ``$PETTINGLLMS_DATA/search/<dataset>``.

    > Retrieval

    - ``retriever``: ``auto`` (HTTP when a URL is set, else BM25), ``bm25`` or ``http``.
    - ``index_dir``: the BM25 index folder (``pettingllms dataprocess search --corpus``); ``null``:
      ``$PETTINGLLMS_DATA/search/index``.
    - ``retriever_url``: the retrieval server (Search-R1 protocol); ``null``: ``$SEARCH_API_URL``.
    - ``retriever_timeout_s`` / ``retriever_max_retries``: per POST, and retries after the first.
    - ``topk``: passages per search.

    > Prompts

    - ``max_passages_shown``: the latest this many distinct passages are shown; ``max_passage_chars``: each cut to this.
    """

    eval_fields: ClassVar[tuple[str, ...]] = ("step_timeout", "dataset", "synthetic_hops", "split", "train_split", "data_dir", "retriever_timeout_s", "retriever_max_retries")
    dataset_fields: ClassVar[tuple[str, ...]] = ("split", "data_dir", "train_split")

    turn_order: tuple[str, ...] = (SEARCH_ROLE, REASONER_ROLE)
    max_turns: int = 3
    dataset: str = SYNTHETIC
    synthetic_hops: int = 2
    split: str = "test"
    train_split: str | None = "train"
    data_dir: str | None = None
    retriever: str = "auto"
    index_dir: str | None = None
    retriever_url: str | None = None
    retriever_timeout_s: float = 10.0
    retriever_max_retries: int = 2
    topk: int = 3
    max_passages_shown: int = 6
    max_passage_chars: int = 300

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dataset != SYNTHETIC and self.dataset not in DATASETS:
            raise ValueError(f"`dataset` must be one of {[SYNTHETIC, *DATASETS]}, got {self.dataset!r}")
        if isinstance(self.synthetic_hops, bool) or self.synthetic_hops not in HOPS:
            raise ValueError(f"`synthetic_hops` must be one of {list(HOPS)}, got {self.synthetic_hops!r}")
        if not isinstance(self.split, str) or not self.split:
            raise ValueError(f"`split` must be a non-empty split name, got {self.split!r}")
        for name in ("train_split", "data_dir", "index_dir", "retriever_url"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"`{name}` must be a non-empty string or null, got {value!r}")
        if self.purpose == "train" and self.dataset != SYNTHETIC and self.train_split is None:
            raise ValueError(f"`train_split` is null: {self.dataset} has no split to train on here; give one "
                             f"(`env.train_split=train`, made by `pettingllms dataprocess search --split train`) or "
                             f"run evaluation only")
        if self.retriever not in RETRIEVERS:
            raise ValueError(f"`retriever` must be one of {list(RETRIEVERS)}, got {self.retriever!r}")
        if self.retriever_url is not None:
            try:
                check_url(self.retriever_url)
            except ValueError as exc:
                raise ValueError(f"`retriever_url`: {exc}") from None
        if self.dataset == SYNTHETIC and self.retriever == "http":
            raise ValueError("`retriever: http` needs a dataset: the synthetic task searches its own generated corpus")
        for name in ("topk", "max_passages_shown", "max_passage_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}")
        value = self.retriever_max_retries
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"`retriever_max_retries` must be an integer >= 0, got {value!r}")
        value = self.retriever_timeout_s
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
            raise ValueError(f"`retriever_timeout_s` must be a finite number of seconds > 0, got {value!r}")

    @property
    def generated(self) -> bool:
        return self.dataset == SYNTHETIC

    def url(self) -> str | None:
        """The retrieval server a dataset task uses (``retriever_url``, else ``$SEARCH_API_URL``), None for BM25."""
        if self.generated or self.retriever == "bm25":
            return None
        url = self.retriever_url or os.environ.get(SEARCH_API_URL) or None
        if url is None and self.retriever == "http":
            raise ValueError(f"`retriever: http` needs a server: set `env.retriever_url` or ${SEARCH_API_URL}")
        if url is not None:
            try:
                check_url(url)
            except ValueError as exc:
                raise ValueError(f"${SEARCH_API_URL}: {exc}") from None
        return url

    def index_path(self) -> Path:
        return Path(self.index_dir).expanduser() if self.index_dir is not None else default_index_dir()


@dataclass
class Retrieval:
    """One search: who asked, the query, the passages retrieved (best first) and the outcome
    (one of :data:`~pettingllms.envs.search.rewards.SEARCH_OUTCOMES`)."""

    role: str
    query: str
    passages: list[Passage]
    outcome: str


@dataclass(kw_only=True)
class SearchState(EnvState):
    """The blackboard of one search episode.

    - ``problem``: the question (with its golden answers, never shown to the agents).
    - ``retrievals``: every search, oldest first.
    - ``requests``: what the reasoner asked to look up, oldest first; ``request``: the latest one while no search
      has followed it (the search agent's next prompt shows it).
    - ``answer`` / ``exact_match`` / ``f1``: the final answer (None before it) and its scores.
    - ``last_report``: what the latest step did, one line.
    """

    problem: SearchProblem
    retrievals: list[Retrieval] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    request: str | None = None
    answer: str | None = None
    exact_match: bool = False
    f1: float = 0.0
    last_report: str = ""

    @property
    def passages(self) -> list[Passage]:
        """Every distinct passage retrieved so far, in the order first found."""
        seen: dict[str, Passage] = {}
        for retrieval in self.retrievals:
            for passage in retrieval.passages:
                seen.setdefault(passage.id or passage.contents, passage)
        return list(seen.values())

    @property
    def queries(self) -> list[str]:
        return [r.query for r in self.retrievals]


# ---- questions ---------------------------------------------------------------------------------------------


def split_path(config: SearchConfig) -> Path:
    """The normalised file of the played split: ``data_dir/<split>.jsonl`` (default ``$PETTINGLLMS_DATA/search/<dataset>``)."""
    split = played_split(config)
    if config.data_dir is not None:
        return Path(config.data_dir).expanduser() / f"{split}.jsonl"
    return normalised_path(config.dataset, split)


@functools.lru_cache(maxsize=8)
def _read_split(dataset: str, split: str, path: str, stamp: int) -> tuple[SearchProblem, ...]:
    return tuple(p for p in read_jsonl(path) if p.split == split and p.dataset == dataset)


def load_split(config: SearchConfig) -> tuple[SearchProblem, ...]:
    """The questions the seeds of a dataset ``config`` index, read once per file version."""
    split, path = played_split(config), split_path(config)
    if not path.is_file():
        from pettingllms.envs.sources import missing_split_message

        raise SearchDataError(missing_split_message("search", config.dataset, split, path))
    problems = _read_split(config.dataset, split, str(path), os.stat(path).st_mtime_ns)
    if not problems:
        raise SearchDataError(f"{path} holds no {config.dataset} question of split {split!r}")
    return problems


@functools.lru_cache(maxsize=512)
def _synthetic_retriever(seed: int) -> BatchingRetriever:
    # The corpus of a seed's world does not depend on the hop count.
    return BatchingRetriever(BM25Index.from_passages(generate(seed, 1).passages), threaded=False)


@functools.lru_cache(maxsize=8)
def _batching(kind: str, where: str, timeout_s: float, retries: int, stamp: int = 0) -> BatchingRetriever:
    # ``stamp`` (the index's mtime) is part of the cache key only: a rebuilt index is opened again.
    backend = http_retriever(where, timeout_s, retries) if kind == "http" else open_index(where)
    return BatchingRetriever(backend, threaded=True)


# ---- the environment -------------------------------------------------------------------------------------


class SearchEnv(QuestionInstances, BaseEnv[SearchState]):
    """Search with a web-search agent and a reasoner (see the module docstring)."""

    name: ClassVar[str] = "search"
    config_class: ClassVar[type[EnvConfig]] = SearchConfig
    roles: ClassVar[tuple[str, ...]] = (SEARCH_ROLE, REASONER_ROLE, SINGLE_ROLE)
    scripted_policies = {
        "oracle": "pettingllms.envs.search.scripted:SearchOraclePolicy",
        "random": "pettingllms.envs.search.scripted:RandomSearchPolicy",
        "wrong": "pettingllms.envs.search.scripted:WrongSearchPolicy",
    }
    config: SearchConfig

    def problems(self) -> tuple[SearchProblem, ...]:
        """The questions a dataset's seeds index (see :func:`load_split`); an error for ``synthetic``."""
        if self.config.generated:
            raise ValueError("synthetic questions are generated from their seed; they are not a list")
        return load_split(self.config)

    def num_instances(self) -> int | None:
        """None for the synthetic task; else the split's size, once the split and the retriever are checked
        (``validate_config`` calls this before a run starts, so a missing index is an error then)."""
        if self.config.generated:
            return None
        count = len(self.problems())
        self.check_retriever()
        return count

    def problem(self, seed: int) -> SearchProblem:
        """The question of ``seed``: generated for ``synthetic``, else the split's ``seed``-th."""
        if self.config.generated:
            return generate(seed, self.config.synthetic_hops).problem
        problems = self.problems()
        if seed >= len(problems):
            raise ValueError(f"`seed` {seed} is past the {len(problems)} questions of {self.config.dataset} split "
                             f"{played_split(self.config)!r}: seeds index the split, 0 .. {len(problems) - 1}")
        return problems[seed]

    def check_retriever(self) -> None:
        """A dataset's retriever is usable: a server URL is set, or the BM25 index exists (else an error naming
        the command that builds it)."""
        if self.config.generated or self.config.url() is not None:
            return
        folder = self.config.index_path()
        if not index_exists(folder):
            raise CorpusError(
                f"no BM25 index at {folder}: build it once with `pettingllms dataprocess search --corpus CORPUS.jsonl "
                f"--output {folder}` (or set `env.retriever_url` / ${SEARCH_API_URL} for a retrieval server)")

    def retriever(self) -> BatchingRetriever:
        """The retriever of the current instance (shared per process; never part of a copy of the state)."""
        config = self.config
        if config.generated:
            return _synthetic_retriever(self.state.seed)
        url = config.url()
        if url is not None:
            return _batching("http", url, float(config.retriever_timeout_s), int(config.retriever_max_retries))
        self.check_retriever()
        folder = config.index_path().resolve()
        return _batching("bm25", str(folder), 0.0, 0, (folder / INDEX_FILE).stat().st_mtime_ns)

    async def search(self, query: str) -> list[Passage]:
        """The top ``topk`` passages of ``query`` (batched with the concurrent searches of the decision point)."""
        return await self.retriever().search(query, self.config.topk)

    def random_answer(self, state: SearchState, rng: Any) -> Any:
        """A well-formed random action of the role due, from words of the question and titles found (what the
        generic :class:`~pettingllms.scripted.RandomPolicy` plays, e.g. to measure prompt lengths)."""
        words = state.problem.question.split() + [p.title for p in state.passages if p.title]
        text = " ".join(rng.sample(words, min(len(words), rng.randint(1, 3)))) or "x"
        role = self.config.turn_order[state.position]
        if role == REASONER_ROLE:
            return (rng.choice(("answer", "search")), text)
        if role == SINGLE_ROLE:
            return (text, None) if rng.random() < 0.5 else (None, text)
        return text

    def initial_state(self, seed: int) -> SearchState:
        return SearchState(seed=seed, problem=self.problem(seed))

    def task_reward_of(self, state: SearchState) -> float:
        return rewards.global_reward(state.exact_match)

    def is_success(self, state: SearchState) -> bool:
        return state.exact_match

    @property
    def done(self) -> bool:
        state = self.state
        return state.out_of_turns or state.answer is not None
