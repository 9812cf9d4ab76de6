"""Search: a web-search agent retrieves passages, a reasoner answers (multi-hop) questions from them.

The environment (:class:`SearchEnv`) and its agents (:class:`WebSearchAgent`, :class:`SearchReasoningAgent`, the
L0 :class:`SearchSingleAgent`), its scripted policies, the query / answer parsers and the SQuAD answer metrics,
the rewards, the retrievers (a memory-mapped BM25 index built with ``bm25s``, a Search-R1 HTTP retrieval server,
and the batching both go through), the generated ``synthetic`` task, and the loaders of NQ, HotpotQA,
2WikiMultihopQA, MuSiQue and Bamboogle from local files into the normalised :class:`SearchProblem` layout.
"""

from pettingllms.envs.search.agents import SearchReasoningAgent, SearchSingleAgent, WebSearchAgent
from pettingllms.envs.search.answers import (
    exact_match,
    f1_score,
    normalize_answer,
    parse_answer,
    parse_query,
    parse_reasoner,
    parse_single,
)
from pettingllms.envs.search.bm25 import BM25Index, build_index
from pettingllms.envs.search.corpus import CorpusError, Passage, iter_corpus
from pettingllms.envs.search.data import (
    DATASETS,
    SearchDataError,
    SearchProblem,
    load_problems,
    read_jsonl,
    write_jsonl,
)
from pettingllms.envs.search.env import Retrieval, SearchConfig, SearchEnv, SearchState
from pettingllms.envs.search.retrieval import BatchingRetriever, HTTPRetriever, RetrievalError
from pettingllms.envs.search.scripted import RandomSearchPolicy, SearchOraclePolicy, WrongSearchPolicy
from pettingllms.envs.search.synthetic import SyntheticTask, generate

__all__ = [
    "DATASETS",
    "BM25Index",
    "BatchingRetriever",
    "CorpusError",
    "HTTPRetriever",
    "Passage",
    "RandomSearchPolicy",
    "Retrieval",
    "RetrievalError",
    "SearchConfig",
    "SearchDataError",
    "SearchEnv",
    "SearchOraclePolicy",
    "SearchProblem",
    "SearchReasoningAgent",
    "SearchSingleAgent",
    "SearchState",
    "SyntheticTask",
    "WebSearchAgent",
    "WrongSearchPolicy",
    "build_index",
    "exact_match",
    "f1_score",
    "generate",
    "iter_corpus",
    "load_problems",
    "normalize_answer",
    "parse_answer",
    "parse_query",
    "parse_reasoner",
    "parse_single",
    "read_jsonl",
    "write_jsonl",
]
