"""Seeded, batch-independent sampling: counter-based noise, Gumbel-max, and the HF logits processor.

A row's sample at decoding step ``t`` is a pure function of its own logits, its row seed and ``t``:

* the noise for vocabulary entry ``v`` is ``splitmix64(key(seed, t) + v * GOLDEN)``, computed in torch
  int64 arithmetic (wrapping multiplication, logical shifts by masking), so it is bit-identical on CPU
  and CUDA and does not depend on which other rows share the batch;
* the token is ``argmax(logp + gumbel)`` over the tokens kept by top-k / top-p (Gumbel-max trick), which
  samples from the truncated, renormalised ``softmax(logits / temperature)``;
* the recorded log-prob is ``log_softmax(logits / temperature)`` of that token, before truncation (TRL's
  convention); greedy rows (temperature 0) take the argmax and report the log-prob at temperature 1.

:class:`SeededSampler` runs this inside ``model.generate(do_sample=False)``: it returns scores that are
``-inf`` everywhere but the chosen token, so HF's greedy step picks exactly what the sampler drew.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor

_MASK64 = (1 << 64) - 1


def _signed(value: int) -> int:
    """A uint64 constant as the int64 with the same bits."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


GOLDEN = _signed(0x9E3779B97F4A7C15)
MIX1 = _signed(0xBF58476D1CE4E5B9)
MIX2 = _signed(0x94D049BB133111EB)
# ``(x >> k) & _LOW[k]`` is the logical (unsigned) right shift of an int64 tensor.
_LOW = {k: (1 << (64 - k)) - 1 for k in (27, 30, 31, 40)}
_UNIFORM_BITS = 23  # (top + 0.5) stays exact in float32 only below 2**23


def splitmix64(x: torch.Tensor) -> torch.Tensor:
    """The splitmix64 finaliser on int64 tensors, read as uint64 bits (wrapping arithmetic)."""
    x = x ^ ((x >> 30) & _LOW[30])
    x = x * MIX1
    x = x ^ ((x >> 27) & _LOW[27])
    x = x * MIX2
    return x ^ ((x >> 31) & _LOW[31])


def step_keys(seeds: torch.Tensor, step: int) -> torch.Tensor:
    """Per-row key of decoding step ``step``: element ``step + 1`` of the splitmix64 stream at ``seed``."""
    return splitmix64(seeds + _signed((step + 1) * GOLDEN))


def noise_bits(keys: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """64 random bits per (row, token): ``splitmix64(key[row] + token_id * GOLDEN)``.

    ``keys`` is ``[B]``, ``token_ids`` is ``[V]`` (shared) or ``[B, K]`` (per row); ids are vocabulary
    indices, so a token's noise is the same whatever subset of the vocabulary is evaluated.
    """
    ids = token_ids if token_ids.dim() == 2 else token_ids.unsqueeze(0)
    return splitmix64(keys.unsqueeze(1) + ids * GOLDEN)


def uniform_from_bits(bits: torch.Tensor) -> torch.Tensor:
    """Top 23 bits -> float32 in the open interval (0, 1); exact, so identical on every device."""
    top = (bits >> (64 - _UNIFORM_BITS)) & ((1 << _UNIFORM_BITS) - 1)
    return (top.to(torch.float32) + 0.5) * (2.0**-_UNIFORM_BITS)


def gumbel_noise(keys: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Standard Gumbel noise ``-log(-log(u))`` for each (row, token id)."""
    u = uniform_from_bits(noise_bits(keys, token_ids))
    return -torch.log(-torch.log(u))


def truncation_keep(
    logp_sorted: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, vocab_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k then top-p on the leading ``W`` entries of each row's descending-sorted log-probs.

    Returns ``(keep [B, W], resolved [B])``. With ``p = softmax(logits / T)`` over the whole vocabulary,
    top-k keeps the ``k`` most likely tokens (``top_k == 0``: all), and top-p then keeps a token when the
    probability mass of the kept tokens ranked strictly above it is below ``top_p`` times the mass of the
    top-k set (``top_p == 1``: all), so the most likely token always stays. A row is ``resolved`` when
    its kept set is known from the prefix alone; otherwise a longer prefix is needed.
    """
    width = logp_sorted.shape[-1]
    k = torch.where(top_k > 0, top_k.clamp(max=vocab_size), torch.full_like(top_k, vocab_size))
    in_top_k = torch.arange(width, device=logp_sorted.device).unsqueeze(0) < k.unsqueeze(1)
    probs = torch.exp(logp_sorted).masked_fill(~in_top_k, 0.0)
    mass_above = torch.cumsum(probs, dim=-1) - probs
    # The top-k mass is exact once the prefix holds all k tokens; without top-k it is 1 by definition.
    top_k_mass = torch.where(k < vocab_size, probs.sum(dim=-1), torch.ones_like(probs[:, 0]))
    keep = in_top_k & (mass_above < (top_p * top_k_mass).unsqueeze(1))
    if width >= vocab_size:
        return keep, torch.ones_like(k, dtype=torch.bool)
    resolved = (k <= width) | ((k == vocab_size) & ~keep[:, -1])
    return keep, resolved


# First prefix width tried for top-k / top-p, widened until every row's kept set is resolved. A full
# sort of the vocabulary costs ~10x a top-64 on CPU, and trained models' distributions rarely need more.
_FIRST_WIDTH = 64


def kept_candidates(
    logp: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(token_ids [B, W], logp [B, W], keep [B, W])``: each row's most likely tokens in descending order,
    wide enough to hold every row's top-k / top-p set (see :func:`truncation_keep`)."""
    vocab = logp.shape[-1]
    width = min(vocab, _FIRST_WIDTH)
    while True:
        if width >= vocab:
            values, ids = torch.sort(logp, dim=-1, descending=True, stable=True)
        else:
            values, ids = torch.topk(logp, width, dim=-1, sorted=True)
        keep, resolved = truncation_keep(values, top_k, top_p, vocab)
        if width >= vocab or bool(resolved.all()):
            used = max(int(keep.sum(dim=-1).max()), 1)
            return ids[:, :used], values[:, :used], keep[:, :used]
        # Every token past the prefix is at most as likely as the prefix's last one, so a row needs at
        # least (top_p - covered) / p_last more tokens: jump there (with margin); past half the vocabulary
        # a full sort is as cheap as a top-k.
        open_rows = ~resolved
        covered = torch.exp(values[open_rows]).sum(dim=-1)
        smallest = torch.exp(values[open_rows, -1]).clamp(min=1e-30)
        more = ((top_p[open_rows] - covered).clamp(min=0) / smallest).max()
        width = max(width * 2, int(1.5 * (width + float(more.clamp(max=vocab)))), int(top_k[open_rows].max()))
        if width > vocab // 2:
            width = vocab


def sample_step(
    logits: torch.Tensor,
    seeds: torch.Tensor,
    step: int,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row; return ``(token_ids [B], logprobs [B])``.

    ``logits`` is ``[B, V]``; ``seeds``, ``temperature``, ``top_k``, ``top_p`` are per-row ``[B]`` tensors
    on the same device. Rows with temperature 0 are greedy.
    """
    logits = logits.float()
    vocab = logits.shape[-1]
    greedy = temperature == 0
    scale = torch.where(greedy, torch.ones_like(temperature), temperature).to(logits.dtype)
    logp = torch.log_softmax(logits / scale.unsqueeze(1), dim=-1)
    tokens = logits.argmax(dim=-1)
    sampled_rows = ~greedy
    if bool(sampled_rows.any()):
        keys = step_keys(seeds, step)
        truncate = sampled_rows & (((top_k > 0) & (top_k < vocab)) | (top_p < 1.0))
        plain = sampled_rows & ~truncate
        if bool(plain.any()):
            vocab_ids = torch.arange(vocab, device=logits.device)
            drawn = (logp + gumbel_noise(keys, vocab_ids)).argmax(dim=-1)
            tokens = torch.where(plain, drawn, tokens)
        if bool(truncate.any()):
            # Noise only for the kept tokens: a token's noise depends on its vocabulary id alone, so
            # evaluating fewer of them changes nothing.
            rows = truncate.nonzero().squeeze(1)
            ids, values, keep = kept_candidates(logp[rows], top_k[rows], top_p[rows])
            scores = values.masked_fill(~keep, float("-inf")) + gumbel_noise(keys[rows], ids)
            drawn = ids.gather(1, scores.argmax(dim=-1, keepdim=True)).squeeze(1)
            tokens = tokens.index_copy(0, rows, drawn)
    return tokens, logp.gather(1, tokens.unsqueeze(1)).squeeze(1)


class SeededSampler(LogitsProcessor):
    """Samples inside ``model.generate(do_sample=False)`` and records each token and its log-prob.

    Built per micro-batch with per-row seeds and sampling parameters. ``prompt_width`` is the padded
    prompt length, so the decoding step is ``input_ids.shape[1] - prompt_width``. It must be the only
    logits processor: any processor before it would change the logits its log-probs describe.
    """

    def __init__(
        self,
        seeds: torch.Tensor,
        temperature: torch.Tensor,
        top_k: torch.Tensor,
        top_p: torch.Tensor,
        prompt_width: int,
    ) -> None:
        self.seeds = seeds
        self.temperature = temperature
        self.top_k = top_k
        self.top_p = top_p
        self.prompt_width = prompt_width
        self.tokens: list[torch.Tensor] = []
        self.logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        step = input_ids.shape[1] - self.prompt_width
        if step != len(self.tokens):
            raise RuntimeError(f"SeededSampler expected decoding step {len(self.tokens)}, got {step}")
        tokens, logprobs = sample_step(
            scores, self.seeds, step, self.temperature, self.top_k, self.top_p
        )
        self.tokens.append(tokens)
        self.logprobs.append(logprobs)
        forced = torch.full_like(scores, float("-inf"))
        return forced.scatter_(1, tokens.unsqueeze(1), 0.0)

    def history(self, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(tokens [B, steps], logprobs [B, steps])`` of the first ``steps`` decoding steps."""
        if steps > len(self.tokens):
            raise RuntimeError(f"generate returned {steps} new tokens but the sampler drew {len(self.tokens)}")
        if steps == 0:
            empty = torch.empty((self.seeds.shape[0], 0), device=self.seeds.device)
            return empty.long(), empty.float()
        return torch.stack(self.tokens[:steps], dim=1), torch.stack(self.logprobs[:steps], dim=1)
