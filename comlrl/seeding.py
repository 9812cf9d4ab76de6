"""Seed derivation: one run seed drives every random stream.

A request's sampling seed is a hash of (run seed, stream, step, item, agent, candidate), so the same
request gets the same seed whatever batch it lands in and however the batches are cut. Only the functions of
the global streams import torch, so deriving a seed (a config, an environment) does not.
"""

from __future__ import annotations

import hashlib
import random
from numbers import Integral

import numpy as np

_SEED_BITS = 63


def derive_seed(*parts: int | str) -> int:
    """Deterministic non-negative 63-bit seed from any mix of ints and strings.

    ``derive_seed(run_seed, "candidates", step, item, agent)`` names a request; candidate ``j`` of that
    request samples with ``derive_seed(request_seed, j)``.
    """
    if not parts:
        raise ValueError("derive_seed needs at least one part")
    text = "\x1f".join(f"{type(p).__name__}:{p}" for p in parts)
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> (64 - _SEED_BITS)


def seed_everything(seed: int) -> None:
    """Seed the global streams: Python's ``random``, numpy's legacy ``np.random`` and torch (CPU and every
    CUDA device).

    Our code draws only from named, derived generators; this is for code we do not control (a user's
    reward function, a library's init). Runs call it at their start (``run.seed`` for each pipeline stage,
    a trainer's seed on a fresh ``train()``), so the same seed gives the same draws in every process, and a
    checkpoint restores the streams as they were when it was written.
    """
    if isinstance(seed, bool) or not isinstance(seed, Integral):
        raise ValueError(f"`seed` must be an integer, got {seed!r}")
    seed = int(seed)  # trainer configs accept any integer (numpy's too, negative ones too)
    random.seed(seed)
    np.random.seed(seed % 2**32)  # numpy's legacy seeding takes 32 bits, torch's 64
    import torch

    torch.manual_seed(seed % 2**64)


def rng_state() -> dict:
    """Every global random stream, for checkpoints."""
    import torch

    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["torch_cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what :func:`rng_state` returned."""
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "torch_cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["torch_cuda"])
