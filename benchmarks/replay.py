"""Replay-buffer scale benchmark: draw and load a sample from many large stored rounds.

Writes ``--rounds`` rounds of ``--pairs`` small pairs each (about 100 bytes of text and a few token ids
per agent) through :class:`PreferenceReplayBuffer`, then times ``sample()`` in ``all_history`` mode:
the weighted allotment, the within-round draws, reading the drawn records through the sidecar index
and attaching their sampled ids (no tokenization). Peak memory of a draw is measured separately with
``tracemalloc`` (which slows Python down, so it is not timed). For contrast it also times reading every
round file whole (a few rounds timed, scaled to all), which is what a buffer without an index must do.

    python -m benchmarks.replay                      # 100 rounds x 10,000 pairs, sample 10,000
    python -m benchmarks.replay --rounds 10 --pairs 1000 --sample 1000   # a quick look

Prints a table and writes ``benchmarks/results/replay.json``. Target: under 0.5 s per draw + load.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from comlrl.atomic_io import atomic_write_text
from comlrl.trainers.preference import PreferencePair, PreferenceReplayBuffer, read_round

TARGET_SECONDS = 0.5


def make_round(round_index: int, num_pairs: int, rng: random.Random) -> list[PreferencePair]:
    """Small two-agent pairs: ~100 bytes of text, 3-6 ids per sequence."""
    pairs = []
    for i in range(num_pairs):
        tag = f"{round_index}.{i}"
        pairs.append(
            PreferencePair(
                prompts=[f"Plan step {tag} for A", f"Plan step {tag} for B"],
                winner_completions=[f"go left {tag}", "wait"],
                loser_completions=["go right", f"stop {tag}"],
                winner_reward=1.0,
                loser_reward=round(rng.random(), 3),
                candidate_reward_mean=0.5,
                raw_rewards=[1.0, 0.25],
                target_raw_reward=1.0,
                comparator_raw_reward=0.25,
                prompt_token_ids=[[rng.randrange(50_000) for _ in range(6)] for _ in range(2)],
                winner_token_ids=[[rng.randrange(50_000) for _ in range(4)] for _ in range(2)],
                loser_token_ids=[[rng.randrange(50_000) for _ in range(3)] for _ in range(2)],
            )
        )
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--pairs", type=int, default=10_000, help="pairs per round")
    parser.add_argument("--sample", type=int, default=10_000, help="preference_replay_sample_size")
    parser.add_argument("--repeats", type=int, default=5, help="timed draws")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--full-read-rounds", type=int, default=5, help="rounds read whole for the contrast")
    parser.add_argument("--dir", default=None, help="where to write the rounds (default: a temporary folder)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "replay.json"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="replay-bench-", dir=args.dir) as tmp:
        replay_dir = Path(tmp) / "preference_replay"
        buf = PreferenceReplayBuffer(replay_dir, mode="all_history", sample_size=args.sample, seed=args.seed)
        rng = random.Random(args.seed)
        start = time.perf_counter()
        for r in range(args.rounds):
            buf.add_round(make_round(r, args.pairs, rng))
        setup_s = time.perf_counter() - start
        stored_bytes = sum(p.stat().st_size for p in replay_dir.iterdir())

        buf.sample()  # warm the page cache and the open round index once; every draw below is timed
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            batch = buf.sample()
            times.append(time.perf_counter() - start)
        assert len(batch) == args.sample and all(p.has_token_ids for p in batch)

        peaks = {}
        for size in sorted({max(1, args.sample // 10), args.sample}):
            probe = PreferenceReplayBuffer(
                replay_dir, mode="all_history", sample_size=size, seed=1, resume=True
            )
            probe.load_state_dict({**buf.state_dict(), "sample_size": size})
            tracemalloc.start()
            probe.sample()
            peaks[size] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()

        # Reading rounds whole is slow; time a few and scale to all of them.
        probe_rounds = buf.rounds[: max(1, min(args.full_read_rounds, args.rounds))]
        start = time.perf_counter()
        for r in probe_rounds:
            read_round(replay_dir / r.file)
        full_read_s = (time.perf_counter() - start) / len(probe_rounds) * args.rounds

    result = {
        "rounds": args.rounds,
        "pairs_per_round": args.pairs,
        "stored_pairs": args.rounds * args.pairs,
        "stored_mib": round(stored_bytes / 2**20, 1),
        "sample_size": args.sample,
        "setup_s": round(setup_s, 2),
        "draw_load_s_median": round(statistics.median(times), 4),
        "draw_load_s_min": round(min(times), 4),
        "draw_load_s_all": [round(t, 4) for t in times],
        "peak_mib_by_sample_size": {str(k): round(v / 2**20, 2) for k, v in peaks.items()},
        "read_every_round_whole_s_estimated": round(full_read_s, 2),
        "read_whole_rounds_timed": len(probe_rounds),
        "target_s": TARGET_SECONDS,
        "meets_target": statistics.median(times) < TARGET_SECONDS,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    rows = [
        ("stored", f"{args.rounds} rounds x {args.pairs:,} pairs ({result['stored_mib']} MiB)"),
        ("setup (write rounds)", f"{setup_s:.1f} s"),
        (
            f"draw + load {args.sample:,}",
            f"median {result['draw_load_s_median']:.3f} s, min {min(times):.3f} s",
        ),
    ]
    rows += [(f"peak memory, sample {k:,}", f"{v / 2**20:.1f} MiB (tracemalloc)") for k, v in peaks.items()]
    rows += [
        (
            "read every round whole",
            f"~{full_read_s:.1f} s (an unindexed buffer; {len(probe_rounds)} rounds timed)",
        ),
        ("target", f"< {TARGET_SECONDS} s: {'met' if result['meets_target'] else 'MISSED'}"),
    ]
    width = max(len(a) for a, _ in rows)
    print(f"{'measure':<{width}}  value")
    print(f"{'-' * width}  {'-' * 40}")
    for a, b in rows:
        print(f"{a:<{width}}  {b}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
