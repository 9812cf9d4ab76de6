"""Per-token log-probs of given completion token ids under a model: DPO margins, PPO ratios, reference KL.

:func:`completion_logprobs` scores a batch of (prompt, completion) pairs with one padded forward pass per
chunk. Results are completion-aligned whatever the padding: column ``j`` holds the log-prob of each
completion's ``j``-th token, ``log_softmax(logits / temperature)`` taken in float32, and the mask marks
real tokens. Which tokens are real comes from the sequence lengths, never from comparing ids with the pad
token, so ``pad_token_id == eos_token_id`` is fine.

:func:`per_token_logps` scores a batch already padded in TRL's layout (``prompt_ids`` left-,
``completion_ids`` right-padded), as the AT-GRPO update holds it, optionally encoding each distinct prompt
once (:func:`shared_prompt_completion_logits`). Both run their padded forward through
:func:`last_position_logits`.
"""

from __future__ import annotations

import inspect
from collections.abc import Hashable, Mapping, Sequence

import torch

from comlrl.rl import masked_entropy

PADDING_SIDES = ("split", "left", "right")


def selective_log_softmax(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)`` at ``index`` as ``logit - logsumexp``: one reduction, no full log-softmax.

    (TRL has a function of the same name; importing it costs about 0.6 s of TRL start-up on the first
    scoring call and it is no faster in float32 on CPU, so this one is used.)
    """
    return logits.gather(-1, index.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def gather_token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``log_softmax(logits / temperature)[..., token_ids]`` in float32."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    return selective_log_softmax(logits, token_ids)


def layout(prompt_lengths: Sequence[int], completion_lengths: Sequence[int], padding_side: str):
    """Where each row's prompt and completion go in the padded batch.

    Returns ``(width, prompt_starts, completion_starts)``. ``"left"`` right-aligns whole sequences,
    ``"right"`` left-aligns them, ``"split"`` left-pads prompts and right-pads completions (TRL's layout:
    every completion starts in the same column, so the fewest logits are computed).
    """
    if padding_side not in PADDING_SIDES:
        raise ValueError(f"`padding_side` must be one of {PADDING_SIDES}, got {padding_side!r}")
    totals = [p + c for p, c in zip(prompt_lengths, completion_lengths)]
    if padding_side == "split":
        prompt_width = max(prompt_lengths)
        width = prompt_width + max(completion_lengths)
        prompt_starts = [prompt_width - p for p in prompt_lengths]
        completion_starts = [prompt_width] * len(prompt_lengths)
    elif padding_side == "left":
        width = max(totals)
        prompt_starts = [width - t for t in totals]
        completion_starts = [width - c for c in completion_lengths]
    else:
        width = max(totals)
        prompt_starts = [0] * len(totals)
        completion_starts = list(prompt_lengths)
    return width, prompt_starts, completion_starts


def score_chunks(lengths: Sequence[int], token_budget: int | None) -> list[list[int]]:
    """Row indices grouped longest first so each chunk's ``rows * longest <= token_budget`` (a row longer
    than the budget gets a chunk of its own); one chunk when there is no budget."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    if token_budget is None:
        return [order] if order else []
    chunks: list[list[int]] = []
    for index in order:
        if chunks and (len(chunks[-1]) + 1) * lengths[chunks[-1][0]] <= token_budget:
            chunks[-1].append(index)
        else:
            chunks.append([index])
    return chunks


def last_position_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep: int) -> torch.Tensor:
    """The logits of a padded batch's last ``keep`` positions, ``[B, keep, V]``: one forward without a KV
    cache, positions counted over each row's real tokens; only those logits are built where the model
    takes ``logits_to_keep``."""
    inputs = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(dim=1) - 1).clamp(min=0),
        "use_cache": False,
    }
    try:
        return model(**inputs, logits_to_keep=keep).logits
    except TypeError:  # a model without ``logits_to_keep``: compute all logits and slice
        return model(**inputs).logits[:, -keep:]


def _forward_chunk(model, prompts, completions, pad_token_id, temperature, padding_side, device):
    prompt_lengths = [len(p) for p in prompts]
    completion_lengths = [len(c) for c in completions]
    width, prompt_starts, completion_starts = layout(prompt_lengths, completion_lengths, padding_side)
    rows, longest = len(prompts), max(completion_lengths)
    input_ids = torch.full((rows, width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((rows, width), dtype=torch.long)
    for i, (prompt, completion) in enumerate(zip(prompts, completions)):
        p0, c0 = prompt_starts[i], completion_starts[i]
        input_ids[i, p0 : p0 + len(prompt)] = torch.tensor(prompt, dtype=torch.long)
        input_ids[i, c0 : c0 + len(completion)] = torch.tensor(completion, dtype=torch.long)
        attention_mask[i, p0 : c0 + len(completion)] = 1
    # Token j of row i sits at column completion_starts[i] + j and is predicted by the column before it;
    # only logits from the earliest such column on are computed.
    first = min(completion_starts) - 1
    keep = width - first
    columns = torch.tensor(completion_starts).unsqueeze(1) - 1 - first + torch.arange(longest).unsqueeze(0)
    valid = torch.arange(longest).unsqueeze(0) < torch.tensor(completion_lengths).unsqueeze(1)
    columns = torch.where(valid, columns, torch.zeros_like(columns))
    targets = torch.tensor(
        [list(c) + [pad_token_id] * (longest - len(c)) for c in completions], dtype=torch.long
    )
    logits = last_position_logits(model, input_ids.to(device), attention_mask.to(device), keep)
    if padding_side == "split":
        selected = logits[:, :longest]
    else:
        index = columns.to(device).unsqueeze(-1).expand(-1, -1, logits.shape[-1])
        selected = logits.gather(1, index)
    logprobs = gather_token_logprobs(selected, targets.to(device), temperature)
    return logprobs.masked_fill(~valid.to(device), 0.0)


def completion_logprobs(
    model,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    *,
    pad_token_id: int,
    temperature: float = 1.0,
    padding_side: str = "split",
    token_budget: int | None = None,
    exclude_last_token: bool = False,
    requires_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of each completion token given its prompt and the completion tokens before it.

    Returns ``(logprobs, mask)``, both ``[B, Lc]`` on the model's device (``Lc`` the longest completion):
    float32 log-probs (0 where masked) and a bool mask of real tokens. ``padding_side`` is ``"split"``
    (prompts left-, completions right-padded), ``"left"`` or ``"right"``; the numbers agree across sides
    up to float rounding. ``token_budget`` bounds ``rows * padded length`` per forward (None: one
    forward). ``exclude_last_token`` masks each completion's final token. ``requires_grad`` keeps the
    autograd graph (chunks are concatenated with their gradients); otherwise it runs under ``no_grad``.
    The model's train / eval mode is left as the caller set it.
    """
    if len(prompt_ids) != len(completion_ids):
        raise ValueError(
            f"`prompt_ids` and `completion_ids` must have the same length, got {len(prompt_ids)} "
            f"and {len(completion_ids)}"
        )
    if temperature <= 0:
        raise ValueError(f"`temperature` must be > 0, got {temperature}")
    if token_budget is not None and token_budget < 1:
        raise ValueError(f"`token_budget` must be >= 1 or None, got {token_budget}")
    if padding_side not in PADDING_SIDES:
        raise ValueError(f"`padding_side` must be one of {PADDING_SIDES}, got {padding_side!r}")
    for i, prompt in enumerate(prompt_ids):
        if len(prompt) == 0:
            raise ValueError(f"`prompt_ids[{i}]` is empty: the first completion token needs a prompt")
    device = next(model.parameters()).device
    rows = len(prompt_ids)
    completion_lengths = torch.tensor([len(c) for c in completion_ids], dtype=torch.long)
    longest = int(completion_lengths.max()) if rows else 0
    mask = torch.arange(longest).unsqueeze(0) < completion_lengths.unsqueeze(1)
    if exclude_last_token:
        mask &= torch.arange(longest).unsqueeze(0) < (completion_lengths - 1).unsqueeze(1)
    mask = mask.to(device)
    if longest == 0:
        return torch.zeros((rows, 0), device=device), mask

    totals = [len(p) + len(c) for p, c in zip(prompt_ids, completion_ids)]
    pieces, order = [], []
    with torch.enable_grad() if requires_grad else torch.no_grad():
        for chunk in score_chunks(totals, token_budget):
            scored = [i for i in chunk if len(completion_ids[i]) > 0]
            if scored:
                part = _forward_chunk(
                    model,
                    [list(prompt_ids[i]) for i in scored],
                    [list(completion_ids[i]) for i in scored],
                    pad_token_id,
                    temperature,
                    padding_side,
                    device,
                )
                pieces.append(torch.nn.functional.pad(part, (0, longest - part.shape[1])))
                order.extend(scored)
        # Rows with empty completions get zero rows; then undo the chunk order.
        empty = [i for i in range(rows) if len(completion_ids[i]) == 0]
        if empty:
            pieces.append(torch.zeros((len(empty), longest), device=device))
            order.extend(empty)
        stacked = torch.cat(pieces, dim=0)
        inverse = torch.empty(rows, dtype=torch.long)
        inverse[torch.tensor(order)] = torch.arange(rows)
        logprobs = stacked.index_select(0, inverse.to(device))
    return logprobs.masked_fill(~mask, 0.0), mask


def distinct_rows(
    ids: torch.Tensor, mask: torch.Tensor, row_keys: Sequence[Hashable] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct rows of a padded ``[B, L]`` id tensor (positions with ``mask == 0`` ignored).

    Returns ``(first, inverse)``: the index of each distinct row's first occurrence, in order of first
    occurrence, and for every row the position of its distinct row in ``first``
    (``ids[first][inverse]`` equals ``ids`` on the masked positions). ``row_keys`` (one hashable per row,
    optional) must match too for two rows to be one, e.g. the adapter each row runs through.
    """
    if ids.shape != mask.shape or ids.dim() != 2:
        raise ValueError(f"`ids` and `mask` must be [B, L] of one shape, got {tuple(ids.shape)}, {tuple(mask.shape)}")
    keyed = ids.masked_fill(mask == 0, -1)
    if row_keys is not None:
        if len(row_keys) != len(ids):
            raise ValueError(f"`row_keys` must hold one key per row: {len(row_keys)} keys for {len(ids)} rows")
        codes: dict[Hashable, int] = {}
        column = torch.tensor([codes.setdefault(key, len(codes)) for key in row_keys], dtype=keyed.dtype)
        keyed = torch.cat([column.to(ids.device).unsqueeze(1), keyed], dim=1)
    _, inverse = torch.unique(keyed, dim=0, return_inverse=True)
    rows = torch.arange(len(ids), device=ids.device)
    first = torch.full((int(inverse.max()) + 1 if len(ids) else 0,), len(ids), dtype=torch.long, device=ids.device)
    first = first.scatter_reduce(0, inverse, rows, reduce="amin")
    order = torch.argsort(first)  # number distinct rows by first occurrence
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order), device=ids.device)
    return first[order], rank[inverse]


def cache_keyword(model) -> str:
    """The forward keyword that takes a KV cache: ``cache`` in recent transformers, ``past_key_values``
    before (a PEFT wrapper is looked through)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def encode_shared_prompts(
    model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, adapter_names: Sequence[str] | None = None
):
    """One forward over the distinct rows of a left-padded prompt batch ``[B, P]``, its KV cache gathered
    back to all ``B`` rows.

    Returns ``(last_logits, cache)``: the logits after each row's last prompt token ``[B, 1, V]`` and a
    cache of ``B`` rows to continue from (a forward with ``position_ids`` from each row's prompt length,
    or ``generate`` on the full prompt). The gather is differentiable, so gradients of every row reach
    the shared pass. ``adapter_names`` (peft mixed-batch inference, one adapter name per row) runs each
    row through its own adapter; rows then share a pass only when prompt and adapter both match, since
    the keys and values differ per adapter.
    """
    first, inverse = distinct_rows(prompt_ids, prompt_mask, adapter_names)
    shared_mask = prompt_mask[first]
    extra = {} if adapter_names is None else {"adapter_names": [adapter_names[i] for i in first.tolist()]}
    out = model(
        input_ids=prompt_ids[first],
        attention_mask=shared_mask,
        position_ids=(shared_mask.cumsum(dim=1) - 1).clamp(min=0),
        use_cache=True,
        logits_to_keep=1,
        **extra,
    )
    cache = out.get("cache") if out.get("cache") is not None else out.get("past_key_values")
    cache.batch_select_indices(inverse)
    return out.logits[inverse], cache


def shared_prompt_completion_logits(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
) -> torch.Tensor:
    """Logits predicting each completion token, ``[B, C, V]``, with each distinct prompt encoded once.

    TRL's layout: ``prompt_ids``/``prompt_mask`` ``[B, P]`` left-padded, ``completion_ids`` ``[B, C]``
    right-padded (logits at padding positions are computed and meaningless). Rows that share a prompt,
    such as the K candidates of one GRPO group, share one prompt forward: its keys and values are
    gathered to every row and the completions run on top of them. The gather is differentiable, so each
    row's gradient reaches the shared prompt pass, and the result equals one padded forward over
    ``prompt + completion`` up to float rounding. The model must take a KV cache (:func:`cache_keyword`)
    and ``position_ids``, as every Hugging Face decoder does.
    """
    first_logits, cache = encode_shared_prompts(model, prompt_ids, prompt_mask)
    width = completion_ids.shape[1]
    if width == 1:
        return first_logits  # the last prompt position predicts completion token 0
    prompt_lengths = prompt_mask.sum(dim=1, keepdim=True)
    steps = torch.arange(width - 1, device=prompt_ids.device).unsqueeze(0)
    # Completion tokens 0..C-2 go in (token C-1 predicts nothing). Padding after a completion's end
    # comes after all its real tokens, so causal attention keeps it out of their logits.
    attention_mask = torch.cat([prompt_mask, torch.ones_like(completion_ids[:, :-1])], dim=1)
    rest = model(
        input_ids=completion_ids[:, :-1],
        attention_mask=attention_mask,
        position_ids=prompt_lengths + steps,
        use_cache=True,
        **{cache_keyword(model): cache},
    ).logits
    return torch.cat([first_logits, rest], dim=1)


def per_token_logps(
    model: torch.nn.Module,
    rows: Mapping[str, torch.Tensor],
    temperature: float,
    with_entropy: bool = False,
    share_prompts: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One padded forward over TRL's layout (``prompt_ids`` left-, ``completion_ids`` right-padded).

    Returns ``log_softmax(logits / temperature)`` of each completion token (``[B, C]``, float32, 0 on
    padding), the same quantity the rollout sampler recorded, and optionally the mean entropy of the
    completion positions' distributions (detached). Only the last ``C + 1`` positions' logits are built.
    ``share_prompts`` encodes each distinct prompt once (:func:`shared_prompt_completion_logits`): the same
    numbers up to float rounding, and about K times less prompt work when a batch holds the K candidates of
    a group.
    """
    completion_mask = rows["completion_mask"]
    device = next(model.parameters()).device
    prompt_ids, prompt_mask = rows["prompt_ids"].to(device), rows["prompt_mask"].to(device)
    completion_ids = rows["completion_ids"].to(device)
    width = completion_ids.shape[1]
    if share_prompts:
        logits = shared_prompt_completion_logits(model, prompt_ids, prompt_mask, completion_ids)
    else:
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask.to(device)], dim=1)
        # position P - 1 + j predicts completion token j
        logits = last_position_logits(model, input_ids, attention_mask, width + 1)[:, :-1]
    mask = completion_mask.to(device).bool()
    logps = gather_token_logprobs(logits, completion_ids, temperature).masked_fill(~mask, 0.0)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = masked_entropy(logits.detach().float() / temperature, mask)
    return logps, entropy
