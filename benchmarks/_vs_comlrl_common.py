"""What both runners of ``vs_comlrl.py`` share: the job (items, prompts, reward), the MADPO config and
trainer keywords both sides set alike, the timing wrappers and the result line. It must not import ``comlrl``: the same file serves our library and the public CoMLRL,
which both import under that name, each in its own interpreter.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import time
from collections.abc import Callable
from typing import Any

RESULT_PREFIX = "VS_COMLRL_RESULT "
VOWELS = frozenset("aeiouAEIOU")
TOPICS = ("trip", "picnic", "garden", "recipe", "budget", "meeting", "lesson", "repair")


def job_items(count: int) -> list[dict[str, Any]]:
    """The task items, identical on both sides (visited in this order by both libraries)."""
    return [{"prompt": f"Item {i}: plan the {TOPICS[i % len(TOPICS)]} in short steps."} for i in range(count)]


def writer_prompt(item: dict[str, Any]) -> str:
    return "Writer: " + item["prompt"]


def helper_prompt(item: dict[str, Any]) -> str:
    return "Helper: " + item["prompt"]


def _share(text: str, wanted: Callable[[str], bool]) -> float:
    return sum(1 for c in text if wanted(c)) / len(text) if text else 0.0


def joint_reward(writer, helper, batch_items=None):
    """Cooperative joint reward of one joint response (one completion per agent, each in a list): vowel
    share of the writer's text plus digit/space share of the helper's, in [0, 2]. Continuous, so ties
    (dropped as pairs) are rare and both libraries build the same number of pairs."""
    return [_share(writer[0], lambda c: c in VOWELS) + _share(helper[0], lambda c: c.isdigit() or c == " ")]


def parse_runner_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, help="local checkpoint folder shared by both sides")
    parser.add_argument("--job", required=True, help="the job as JSON (see vs_comlrl.py)")
    parser.add_argument("--profile", action="store_true", help="run train() under cProfile")
    args = parser.parse_args()
    args.job = json.loads(args.job)
    return args


def seed_globals(seed: int) -> None:
    """Seed every global stream (the public library samples and shuffles with them)."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def madpo_config_values(job: dict[str, Any]) -> dict[str, Any]:
    """The ``MADPOConfig`` keywords both sides set the same way for ``job``."""
    return dict(
        num_agents=2,
        num_turns=1,
        joint_mode="aligned",
        agent_devices="cpu",
        num_train_epochs=job["epochs"],
        agent_learning_rate=job["lr"],
        dpo_beta=job["beta"],
        max_new_tokens=job["max_new_tokens"],
        temperature=job["temperature"],
        top_p=job["top_p"],
        top_k=job["top_k"],
        preference_num_candidates=job["candidates"],
        preference_pairs_per_sample=job["pairs_per_item"],
        pair_selection="reward_gap",
        train_batch_size=job["train_batch_size"],
        eval_interval=0,
    )


def madpo_trainer_values(model: str, job: dict[str, Any]) -> dict[str, Any]:
    """The ``MADPOTrainer`` keywords (all but ``args``) both sides pass for ``job``."""
    return dict(
        agent_model=model,
        num_agents=2,
        model_config={"torch_dtype": "float32", "attn_implementation": "sdpa"},
        train_dataset=job_items(job["items"]),
        reward_func=joint_reward,
        formatters=[writer_prompt, helper_prompt],
        wandb_config=None,
    )


def meter_agents(trainer, eos_ids: list[int]) -> GenerateMeter:
    """A ``GenerateMeter`` (pad id of the first tokenizer) wrapped around every agent of ``trainer``."""
    meter = GenerateMeter(trainer.tokenizers[0].pad_token_id, eos_ids)
    for model in trainer.agents:
        meter.wrap(model)
    return meter


def phase_times(meter: GenerateMeter, engine: Timer, collect: Timer, learn: Timer, steps: Timer) -> dict:
    """The result line's generation, engine, collection, learning and update timings."""
    return {
        **meter.as_dict(),
        "engine_s": engine.seconds,
        "engine_calls": engine.calls,
        "collect_s": collect.seconds,
        "learn_s": learn.seconds,
        "update_s": steps.seconds,
    }


class GenerateMeter:
    """Wraps ``model.generate`` on model instances: wall time of every call, calls, rows and new tokens.

    A row's new tokens are those after the prompt width up to and including its first EOS, not counting
    pad (what the sampler actually produced). Counting happens after the clock stops.
    """

    def __init__(self, pad_id: int, eos_ids: list[int]) -> None:
        self.pad_id = int(pad_id)
        self.eos_ids = [int(e) for e in eos_ids]
        self.seconds = 0.0
        self.calls = 0
        self.rows = 0
        self.tokens = 0
        self._wrapped: set[int] = set()

    def wrap(self, model) -> None:
        if id(model) in self._wrapped:
            return
        self._wrapped.add(id(model))
        original = model.generate

        def generate(*args, **kwargs):
            input_ids = kwargs.get("input_ids", args[0] if args else None)
            start = time.perf_counter()
            out = original(*args, **kwargs)
            self.seconds += time.perf_counter() - start
            sequences = out if hasattr(out, "shape") else out.sequences
            self.calls += 1
            self._count(sequences[:, input_ids.shape[1] :])
            return out

        model.generate = generate  # instance attribute: both libraries call model.generate(...)

    def _count(self, new) -> None:
        import torch

        new = new.detach().cpu()
        is_eos = torch.isin(new, torch.tensor(self.eos_ids, dtype=new.dtype))
        for row, eos in zip(new, is_eos):
            hits = eos.nonzero()
            length = int(hits[0]) + 1 if len(hits) else row.shape[0]
            self.tokens += int((row[:length] != self.pad_id).sum())
        self.rows += new.shape[0]

    def as_dict(self) -> dict[str, float]:
        return {
            "generate_s": self.seconds,
            "generate_calls": self.calls,
            "generate_rows": self.rows,
            "generated_tokens": self.tokens,
            "generate_tokens_per_s": self.tokens / self.seconds if self.seconds else 0.0,
        }


class Timer:
    """Wraps a bound method on an instance: total wall time, calls and the last result."""

    def __init__(self, obj, name: str) -> None:
        self.seconds = 0.0
        self.calls = 0
        self.last = None
        original = getattr(obj, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                result = original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1
            self.last = result
            return result

        setattr(obj, name, timed)


def timed_train(train: Callable[[], Any], profile: bool) -> tuple[float, list[str] | None]:
    """Wall time of ``train()``; with ``profile`` it runs under cProfile and returns the top lines too."""
    if not profile:
        start = time.perf_counter()
        train()
        return time.perf_counter() - start, None
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.runcall(train)
    seconds = time.perf_counter() - start
    lines = []
    for key in ("cumulative", "tottime"):
        buffer = io.StringIO()
        pstats.Stats(profiler, stream=buffer).strip_dirs().sort_stats(key).print_stats(30)
        lines.append(f"== sorted by {key} ==\n" + _trim_stats(buffer.getvalue()))
    return seconds, lines


def _trim_stats(text: str) -> str:
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("ncalls"):
            return "\n".join(lines[i:])
    return text


def emit(result: dict[str, Any]) -> None:
    """Print the run's result as one JSON line the driver picks out of the output."""
    import torch
    import transformers

    result.setdefault("torch", torch.__version__)
    result.setdefault("transformers", transformers.__version__)
    result["torch_threads"] = torch.get_num_threads()
    result["omp_num_threads"] = os.environ.get("OMP_NUM_THREADS")
    print(RESULT_PREFIX + json.dumps(result), flush=True)
