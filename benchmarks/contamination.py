"""Contamination-check benchmark: the cost of :func:`pettingllms.envs.contamination.find_overlaps` and whether
it finds planted copies.

Fixtures. The test fixtures of each dataset family read through their loaders, the training side against
the evaluation sets a run of that family would check: code (CodeContests train vs APPS, HumanEval,
LiveCodeBench, MBPP), math (DAPO, Polaris, MATH vs AIME 2024 and 2025, MATH-500, OlympiadBench) and search
(HotpotQA and NQ train vs HotpotQA dev, NQ test, Bamboogle, 2Wiki, MuSiQue). The fixtures hold a dozen
problems each, so these rows time the fixed costs; what they find is printed, not asserted.

Synthetic. ``--train`` training and ``--eval`` evaluation statements (10,000 each by default) of
``--min-words`` to ``--max-words`` words (uniform; 40-400 is APPS-like, longer than most math and search
sets), words drawn with their frequency from the fixtures' statements. Planted in the evaluation set,
``--planted`` of each kind, each from a different training statement:

* ``exact``: a copy with its case changed and its punctuation and spacing rewritten (must be found exact);
* ``reworded``: ``--kept-words`` (20) consecutive words of a training statement inside fresh words that
  occur nowhere else (must be found as a 13-gram near-duplicate);
* ``twelve``: 12 consecutive words inside fresh words (must not be found: one word short of an n-gram).

Every other evaluation problem is random and counts as a false overlap if flagged. ``find_overlaps`` is
timed ``--repeats`` times (median; the index build and the scan are also timed apart); seconds per 10,000
problems divides the median by (train + eval) / 10,000. Peak and retained memory of one index of
``--memory-train`` (50,000) statements are measured with tracemalloc (numpy's arrays included), untimed.

    python -m benchmarks.contamination                   # ~1 minute on 2 cores
    python -m benchmarks.contamination --train 2000 --eval 2000 --memory-train 0    # a quick look

Prints a table and writes ``benchmarks/results/contamination.json``. Target: a few seconds per 10,000
problems; every planted exact copy and rewording found, no twelve-word plant and no random problem flagged.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from comlrl.atomic_io import atomic_write_json
from pettingllms.envs.code import data as code_data
from pettingllms.envs.contamination import DEFAULT_N, TrainingIndex, find_overlaps, normalise_statement
from pettingllms.envs.math import data as math_data
from pettingllms.envs.search import data as search_data

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
TARGET_SECONDS_PER_10K = 5.0

# (training sources, evaluation sources) per family; a source is (dataset, path under tests/fixtures).
FAMILIES = {
    "code": (
        [("codecontests", "code/codecontests/train.jsonl")],
        [("apps", "code/apps/test.jsonl"), ("humaneval", "code/humaneval/test.jsonl"),
         ("livecodebench", "code/livecodebench/test.jsonl"), ("mbpp", "code/mbpp/test.jsonl")],
    ),
    "math": (
        [("dapo", "math/dapo/dapo-math-17k.jsonl"), ("polaris", "math/polaris/polaris-data-53K.jsonl"),
         ("math", "math/math/test-00000-of-00001.jsonl")],
        [("aime24", "math/aime24/aime_2024_problems.jsonl"), ("aime25", "math/aime25/aime2025-I.jsonl"),
         ("aime25", "math/aime25/aime2025-II.jsonl"), ("math500", "math/math500/test.jsonl"),
         ("olympiadbench", "math/olympiadbench/OE_TO_maths_en_COMP/train-00000-of-00001.jsonl")],
    ),
    "search": (
        [("hotpotqa", "search/hotpotqa/train.jsonl"), ("nq", "search/nq/train.jsonl")],
        [("hotpotqa", "search/hotpotqa/dev.jsonl"), ("nq", "search/nq/test.jsonl"),
         ("bamboogle", "search/bamboogle/test.jsonl"), ("2wiki", "search/2wikimultihopqa/dev.jsonl"),
         ("musique", "search/musique/dev.jsonl")],
    ),
}
LOADERS: dict[str, Callable[[str, Path], dict[str, str]]] = {
    "code": lambda d, p: {x.problem_id: x.prompt for x in code_data.load_problems(d, p, drop=False)},
    "math": lambda d, p: {x.problem_id: x.question for x in math_data.load_problems(d, p)},
    "search": lambda d, p: {x.problem_id: x.question for x in search_data.load_problems(d, p)},
}


def fixture_sets(family: str) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    train_sources, eval_sources = FAMILIES[family]
    load = LOADERS[family]
    train = {k: v for dataset, path in train_sources for k, v in load(dataset, FIXTURES / path).items()}
    evals: dict[str, dict[str, str]] = {}
    for dataset, path in eval_sources:
        evals.setdefault(dataset, {}).update(load(dataset, FIXTURES / path))
    return train, evals


def timed(repeats: int, fn: Callable[..., Any], *args: Any) -> tuple[list[float], Any]:
    """Seconds of each of ``repeats`` calls ``fn(*args)`` and the last call's result."""
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn(*args)
        times.append(time.perf_counter() - start)
    return times, out


def synthetic(args: argparse.Namespace, words: list[str], weights: list[int]):
    """(train, eval, planted ids by kind) as described in the module docstring."""
    rng = random.Random(args.seed)

    def statement(k: int) -> list[str]:
        return rng.choices(words, weights, k=k)

    train_words = [statement(rng.randint(args.min_words, args.max_words)) for _ in range(args.train)]
    train = {f"synthetic/train/{i}": " ".join(w) for i, w in enumerate(train_words)}
    evals = {f"synthetic/eval/{i}": " ".join(statement(rng.randint(args.min_words, args.max_words)))
             for i in range(args.eval - 3 * args.planted)}
    fresh = (f"zq{i}x" for i in range(10**9))  # words no fixture statement holds
    sources = rng.sample(range(args.train), 3 * args.planted)
    planted: dict[str, dict[str, str]] = {"exact": {}, "reworded": {}, "twelve": {}}
    for j, source in enumerate(sources):
        kind = ("exact", "reworded", "twelve")[j % 3]
        src = train_words[source]
        if kind == "exact":
            text = "  ".join(w.upper() if i % 2 else w + "," for i, w in enumerate(src)) + "?"
        else:
            keep = args.kept_words if kind == "reworded" else DEFAULT_N - 1
            start = rng.randrange(len(src) - keep + 1)
            text = " ".join([next(fresh) for _ in range(30)] + src[start:start + keep]
                            + [next(fresh) for _ in range(30)])
        eval_id = f"synthetic/planted-{kind}/{j}"
        evals[eval_id] = text
        planted[kind][eval_id] = f"synthetic/train/{source}"
    return train, evals, planted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=int, default=10_000)
    parser.add_argument("--eval", type=int, default=10_000)
    parser.add_argument("--min-words", type=int, default=40)
    parser.add_argument("--max-words", type=int, default=400)
    parser.add_argument("--planted", type=int, default=20, help="planted evaluation problems of each kind")
    parser.add_argument("--kept-words", type=int, default=20, help="words a rewording keeps from its source")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory-train", type=int, default=50_000, help="0: skip the memory measurement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "contamination.json"))
    args = parser.parse_args()
    started = time.perf_counter()

    fixtures, vocabulary = {}, Counter()
    for family in FAMILIES:
        train, evals = fixture_sets(family)
        for text in [*train.values(), *(s for e in evals.values() for s in e.values())]:
            vocabulary.update(normalise_statement(text).split())
        times, report = timed(max(args.repeats, 5), find_overlaps, train, evals)
        fixtures[family] = {
            "train_problems": len(train),
            "eval_problems": {name: len(e) for name, e in evals.items()},
            "find_overlaps_s_median": round(statistics.median(times), 5),
            "summary_line": report.summary_line(),
            "report": report.to_json(),
        }

    words, weights = zip(*vocabulary.items())
    train, evals, planted = synthetic(args, list(words), list(weights))
    times, report = timed(args.repeats, find_overlaps, train, {"synthetic": evals})
    index_times, index = timed(args.repeats, TrainingIndex, train)
    scan_times, _ = timed(args.repeats, index.check, "synthetic", evals)
    (overlap,) = report.sets
    # Examples are capped; ask again with room for every flagged problem to see each one.
    (full,) = find_overlaps(train, {"synthetic": evals}, max_examples=len(evals)).sets
    flagged = {e: ("exact", t) for t, e in full.exact_examples} | {e: ("near", t) for t, e in full.near_examples}
    found = {
        "exact": sum(flagged.get(e) == ("exact", t) for e, t in planted["exact"].items()),
        "reworded": sum(flagged.get(e) == ("near", t) for e, t in planted["reworded"].items()),
        "twelve_flagged": sum(e in flagged for e in planted["twelve"]),
        "random_flagged": sum(1 for e in flagged if "/planted-" not in e),
    }
    median = statistics.median(times)
    per_10k = median / ((args.train + args.eval) / 10_000)

    memory = None
    if args.memory_train:
        rng = random.Random(args.seed + 1)
        big = {f"m/{i}": " ".join(rng.choices(words, weights, k=rng.randint(args.min_words, args.max_words)))
               for i in range(args.memory_train)}
        tracemalloc.start()
        big_index = TrainingIndex(big)
        retained, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        memory = {"train_problems": args.memory_train, "distinct_ngrams": big_index.distinct_ngrams,
                  "peak_mib": round(peak / 2**20, 1), "retained_mib": round(retained / 2**20, 1)}
        del big, big_index

    result = {
        "n": DEFAULT_N,
        "fixtures": fixtures,
        "synthetic": {
            "train_problems": args.train,
            "eval_problems": len(evals),
            "words_per_statement": [args.min_words, args.max_words],
            "vocabulary_words": len(words),
            "distinct_train_ngrams": index.distinct_ngrams,
            "find_overlaps_s_median": round(median, 3),
            "find_overlaps_s_all": [round(t, 3) for t in times],
            "index_s_median": round(statistics.median(index_times), 3),
            "scan_s_median": round(statistics.median(scan_times), 3),
            "s_per_10k_problems": round(per_10k, 3),
            "planted_per_kind": args.planted,
            "kept_words": args.kept_words,
            "found": found,
            "exact": overlap.exact,
            "near": overlap.near,
            "summary_line": report.summary_line(),
        },
        "memory": memory,
        "target_s_per_10k": TARGET_SECONDS_PER_10K,
        "meets_target": per_10k < TARGET_SECONDS_PER_10K and found["exact"] == found["reworded"] == args.planted
        and found["twelve_flagged"] == found["random_flagged"] == 0,
        "seed": args.seed,
        "repeats": args.repeats,
        "seconds": round(time.perf_counter() - started, 1),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }

    rows = [(f"fixtures {family}", f"{f['train_problems']} train vs {sum(f['eval_problems'].values())} eval: "
             f"{f['find_overlaps_s_median'] * 1000:.1f} ms; {f['summary_line']}") for family, f in fixtures.items()]
    s = result["synthetic"]
    rows += [
        ("synthetic", f"{args.train:,} train x {len(evals):,} eval, {args.min_words}-{args.max_words} words, "
                      f"{index.distinct_ngrams:,} train {DEFAULT_N}-grams"),
        ("find_overlaps", f"median {s['find_overlaps_s_median']:.2f} s (index {s['index_s_median']:.2f} s, "
                          f"scan {s['scan_s_median']:.2f} s); {per_10k:.2f} s per 10,000 problems"),
        ("planted found", f"exact {found['exact']}/{args.planted}, reworded ({args.kept_words} words) "
                          f"{found['reworded']}/{args.planted}; flagged: twelve-word {found['twelve_flagged']}/"
                          f"{args.planted}, random {found['random_flagged']}"),
    ]
    if memory:
        rows.append(("index memory", f"{memory['train_problems']:,} train ({memory['distinct_ngrams']:,} n-grams): "
                                     f"peak {memory['peak_mib']} MiB, retained {memory['retained_mib']} MiB"))
    rows.append(("target", f"< {TARGET_SECONDS_PER_10K} s per 10,000 problems, every plant right: "
                           f"{'met' if result['meets_target'] else 'MISSED'}"))
    width = max(len(a) for a, _ in rows)
    print(f"{'measure':<{width}}  value")
    print(f"{'-' * width}  {'-' * 60}")
    for a, b in rows:
        print(f"{a:<{width}}  {b}")
    out = Path(args.out)
    atomic_write_json(out, result)
    print(f"wrote {out} ({result['seconds']} s)")


if __name__ == "__main__":
    main()
