"""Shared-prompt encoding against one forward per row, in the AT-GRPO update and in generation.

A GRPO group's K candidates share one prompt, and on Plan-Path the prompt (~350 tokens) is ten times
longer than an answer. This times, side by side in one process and alternating the two variants:

- ``update``: forward + backward of :func:`pettingllms.trainer.at_grpo.per_token_logps` over a
  micro-batch of ``prompts x K`` rows, plain (one padded forward per row) vs ``share_prompts=True``
  (each distinct prompt encoded once);
- ``generate``: :class:`comlrl.rollout.HFBackend` with ``n = K`` candidates per prompt, per-row prefill
  (``share_prompts=False``) vs shared prefill.

It prints medians, the ratio plain / shared, and the largest difference between the two variants'
log-probs (update) or whether the sampled tokens are identical (generate). torch runs on ``--threads``.

    python -m benchmarks.shared_prompts                      # small preset, 9 prompts x K=4, 5 repeats
    python -m benchmarks.shared_prompts --k 8 --repeats 7

Results go to ``benchmarks/results/shared_prompts.json``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from comlrl.atomic_io import atomic_write_json  # noqa: E402
from comlrl.rollout import GenerationRequest, HFBackend, SamplingParams  # noqa: E402
from comlrl.seeding import derive_seed  # noqa: E402
from pettingllms.trainer.at_grpo import per_token_logps  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "shared_prompts.json"


def corpus_prompts(tokenizer, count: int, shortest: int, longest: int) -> list[list[int]]:
    """``count`` prompts cut from the tokenizer corpus, lengths spread evenly over [shortest, longest]."""
    from comlrl.models.builder import CORPUS_PATH

    ids = tokenizer(CORPUS_PATH.read_text(encoding="utf-8"))["input_ids"]
    lengths = [shortest + (longest - shortest) * i // max(1, count - 1) for i in range(count)]
    stride = max(1, (len(ids) - longest) // count)
    return [ids[i * stride : i * stride + length] for i, length in enumerate(lengths)]


def update_rows(prompts: list[list[int]], k: int, completion_length: int, pad_id: int, seed: int) -> dict:
    """TRL's layout for ``len(prompts) * k`` rows (each prompt k times), completions of 1..length tokens."""
    generator = torch.Generator().manual_seed(seed)
    rows, width = len(prompts) * k, max(len(p) for p in prompts)
    out = {
        "prompt_ids": torch.full((rows, width), pad_id, dtype=torch.long),
        "prompt_mask": torch.zeros((rows, width), dtype=torch.long),
        "completion_ids": torch.randint(4, 500, (rows, completion_length), generator=generator),
        "completion_mask": torch.zeros((rows, completion_length), dtype=torch.long),
    }
    lengths = torch.randint(1, completion_length + 1, (rows,), generator=generator)
    for row in range(rows):
        prompt = prompts[row // k]
        out["prompt_ids"][row, width - len(prompt) :] = torch.tensor(prompt)
        out["prompt_mask"][row, width - len(prompt) :] = 1
        out["completion_mask"][row, : int(lengths[row])] = 1
    return out


def alternate(run, repeats: int) -> tuple[dict[bool, float], dict[bool, object]]:
    """Median seconds of ``run(share)`` for share False / True, alternating which goes first, after one
    uncounted warm-up round; also each variant's last output."""
    times: dict[bool, list[float]] = {False: [], True: []}
    outputs: dict[bool, object] = {}
    for repeat in range(repeats + 1):
        for share in (False, True) if repeat % 2 == 0 else (True, False):
            seconds, outputs[share] = run(share)
            if repeat:
                times[share].append(seconds)
    return {share: statistics.median(t) for share, t in times.items()}, outputs


def time_update(model, rows: dict, share: bool) -> tuple[float, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    logps, _ = per_token_logps(model, rows, 1.0, share_prompts=share)
    logps.sum().backward()
    return time.perf_counter() - start, logps.detach()


def case_update(model, tokenizer, args) -> dict:
    prompts = corpus_prompts(tokenizer, args.prompts, args.prompt_min, args.prompt_max)
    rows = update_rows(prompts, args.k, args.completion_length, tokenizer.pad_token_id, seed=0)
    medians, outputs = alternate(lambda share: time_update(model, rows, share), args.repeats)
    plain, shared = medians[False], medians[True]
    return {
        "case": "update", "rows": len(rows["prompt_ids"]), "distinct_prompts": len(prompts),
        "plain_s": plain, "shared_s": shared, "ratio_plain_over_shared": plain / shared,
        "max_abs_logp_diff": float((outputs[True] - outputs[False]).abs().max()),
    }


def case_generate(model, tokenizer, args) -> dict:
    prompts = corpus_prompts(tokenizer, args.prompts, args.prompt_min, args.prompt_max)
    requests = [GenerationRequest(p, seed=derive_seed(0, "shared_prompts", i)) for i, p in enumerate(prompts)]
    params = SamplingParams(n=args.k, max_new_tokens=args.max_new_tokens, temperature=1.0)
    backends = {share: HFBackend.from_model(model, tokenizer, share_prompts=share) for share in (False, True)}
    def run(share: bool) -> tuple[float, list]:
        start = time.perf_counter()
        out = backends[share].generate(requests, params)
        return time.perf_counter() - start, [c.token_ids for group in out for c in group]

    medians, tokens = alternate(run, args.repeats)
    plain, shared = medians[False], medians[True]
    return {
        "case": "generate", "rows": len(prompts) * args.k, "distinct_prompts": len(prompts),
        "plain_s": plain, "shared_s": shared, "ratio_plain_over_shared": plain / shared,
        "identical_tokens": tokens[False] == tokens[True],
        "new_tokens": sum(len(t) for t in tokens[True]),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--prompts", type=int, default=9, help="distinct prompts (groups)")
    parser.add_argument("--k", type=int, default=4, help="candidates per prompt (num_generations)")
    parser.add_argument("--prompt-min", type=int, default=300)
    parser.add_argument("--prompt-max", type=int, default=420)
    parser.add_argument("--completion-length", type=int, default=36, help="update: longest completion")
    parser.add_argument("--max-new-tokens", type=int, default=36, help="generate: new tokens per candidate")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    from comlrl.models import load_model, load_tokenizer

    model, tokenizer = load_model(args.preset), load_tokenizer(args.preset)
    model.eval()
    rows = [case_update(model, tokenizer, args), case_generate(model, tokenizer, args)]
    print(f"{'case':<10} {'rows':>5} {'prompts':>8} {'plain s':>9} {'shared s':>9} {'plain/shared':>13}  check")
    for row in rows:
        check = (f"max |dlogp| {row['max_abs_logp_diff']:.1e}" if row["case"] == "update"
                 else f"identical tokens: {row['identical_tokens']}")
        print(f"{row['case']:<10} {row['rows']:>5} {row['distinct_prompts']:>8} {row['plain_s']:>9.3f} "
              f"{row['shared_s']:>9.3f} {row['ratio_plain_over_shared']:>13.2f}  {check}")
    atomic_write_json(args.output, {
        "benchmark": "shared_prompts", "preset": args.preset, "threads": args.threads,
        "settings": {k: v for k, v in vars(args).items() if k != "output"}, "rows": rows,
        "python": sys.version.split()[0], "torch": torch.__version__, "machine": platform.machine(),
    })
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
