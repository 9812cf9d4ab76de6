"""The search fixtures (tests/fixtures/search) laid out as `pettingllms dataprocess search` writes them."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "search"
CORPUS = FIXTURES / "corpus" / "wiki-fixture.jsonl"
#: Each dataset's fixture files (FlashRAG's names; the split comes from the file name).
SOURCES = {"nq": ["nq/test.jsonl", "nq/train.jsonl"], "hotpotqa": ["hotpotqa/dev.jsonl", "hotpotqa/train.jsonl"],
           "2wiki": ["2wikimultihopqa/dev.jsonl"], "musique": ["musique/dev.jsonl"], "bamboogle": ["bamboogle/test.jsonl"]}


def write_search_root(root: Path) -> Path:
    """A ``$PETTINGLLMS_DATA`` root holding every fixture split normalised and the fixture corpus's BM25 index at
    the default place, as `pettingllms dataprocess search` writes them."""
    from pettingllms.envs.search.bm25 import build_index
    from pettingllms.envs.search.data import load_problems, write_jsonl

    for dataset, files in SOURCES.items():
        for name in files:
            problems = load_problems(dataset, FIXTURES / name)
            write_jsonl(root / "search" / dataset / f"{problems[0].split}.jsonl", problems)
    build_index(CORPUS, root / "search" / "index")
    return root
