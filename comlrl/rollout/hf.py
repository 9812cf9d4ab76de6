"""The default generation backend: batched ``model.generate`` on in-process HF models (CPU or GPU).

:class:`HFBackend` serves many requests per call. Rows (request x candidate) are grouped by policy and
by the parameters one ``generate`` call must share (``max_new_tokens`` and stop strings; temperature,
top-k and top-p are per row), sorted by prompt length, cut into micro-batches whose padded size
``rows * (longest prompt + max_new_tokens)`` stays within ``token_budget``, left-padded, and decoded with
one ``generate`` call each; rows that share a prompt (the ``n`` candidates of a request) prefill it once
(``share_prompts``). Sampling happens in :class:`~comlrl.rollout.sampling.SeededSampler`, so a
completion depends only on its prompt, its row seed and the policy weights, never on its batch.

Stop strings: HF's ``stop_strings`` criterion ends a row early; the completion is then cut after the
first token whose decoded prefix contains a stop string. ``token_ids`` are always a prefix of what the
sampler drew (EOS kept, padding and anything after the stop removed), ``logprobs`` stay aligned with
them, and ``text`` is ``tokenizer.decode(token_ids, skip_special_tokens=True)``, so it includes the stop
string (and whatever else the completing token decodes to).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import GenerationConfig, LogitsProcessorList

from comlrl.rollout.prompts import render_prompt, request_seed
from comlrl.rollout.sampling import SeededSampler
from comlrl.rollout.types import FINISH_LENGTH, FINISH_STOP, Completion, GenerationRequest, SamplingParams
from comlrl.scoring import cache_keyword, encode_shared_prompts
from comlrl.seeding import derive_seed

# Default padded-token budget of one generate call (rows * (longest prompt + max_new_tokens)).
DEFAULT_TOKEN_BUDGET = 65_536


@dataclass
class PolicyHandle:
    """What the backend needs to serve one policy. ``adapter`` names the peft adapter to activate before
    generating (None: the model as is); ``version`` is read at generate time and stamped on completions;
    the policy layer owns and bumps it."""

    name: str
    model: Any
    tokenizer: Any
    adapter: str | None = None
    version: int = 0


@dataclass
class _Row:
    request: int
    candidate: int
    prompt_ids: list[int]
    seed: int
    params: SamplingParams


def _as_handle(name: str, policy: Any) -> Any:
    if isinstance(policy, tuple):
        if len(policy) != 2:
            raise TypeError(f"policy {name!r}: a tuple must be (model, tokenizer), got {len(policy)} items")
        return PolicyHandle(name, policy[0], policy[1])
    for attribute in ("model", "tokenizer"):
        if not hasattr(policy, attribute):
            raise TypeError(f"policy {name!r} has no `{attribute}` (need .model and .tokenizer, or a tuple)")
    return policy


def model_device(model) -> torch.device:
    return next(model.parameters()).device


def eos_token_ids(model, tokenizer) -> list[int]:
    """EOS ids from the tokenizer and the model's generation config, tokenizer's first."""
    ids: list[int] = []
    candidates = [tokenizer.eos_token_id, getattr(getattr(model, "generation_config", None), "eos_token_id", None)]
    for value in candidates:
        for token in value if isinstance(value, (list, tuple)) else [value]:
            if token is not None and int(token) not in ids:
                ids.append(int(token))
    return ids


def pad_token_id(tokenizer, eos_ids: Sequence[int]) -> int:
    if tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    if not eos_ids:
        raise ValueError("tokenizer has neither a pad token nor an EOS token; set `tokenizer.pad_token`")
    return int(eos_ids[0])


def micro_batches(lengths: Sequence[int], max_new_tokens: int, token_budget: int, max_batch_size: int | None):
    """Cut rows sorted by prompt length into consecutive batches with ``rows * (longest + new) <= budget``.

    ``lengths`` must be ascending. Yields ``(start, stop)`` index ranges; a row too long for the budget on
    its own still gets a batch of one.
    """
    start = 0
    while start < len(lengths):
        stop = start + 1
        while stop < len(lengths):
            rows = stop + 1 - start
            if max_batch_size is not None and rows > max_batch_size:
                break
            if rows * (lengths[stop] + max_new_tokens) > token_budget:
                break
            stop += 1
        yield start, stop
        start = stop


def stop_string_cut(token_ids: Sequence[int], tokenizer, stops: Sequence[str]) -> int | None:
    """Length of the shortest prefix of ``token_ids`` whose decoded text contains a stop string, or None.

    Binary search over prefix lengths (decoding is prefix-monotone for containment), so O(log n) decodes.
    Special tokens are decoded too, so a stop string may name one.
    """
    if not stops or not token_ids:
        return None

    def hit(length: int) -> bool:
        text = tokenizer.decode(list(token_ids[:length]), skip_special_tokens=False)
        return any(stop in text for stop in stops)

    if not hit(len(token_ids)):
        return None
    low, high = 1, len(token_ids)
    while low < high:
        middle = (low + high) // 2
        if hit(middle):
            high = middle
        else:
            low = middle + 1
    return low


@contextlib.contextmanager
def _serving(model, adapter: str | None) -> Iterator[None]:
    """Eval mode, the policy's adapter active, and a neutral model generation config; all restored after.

    Swapping the model's own ``generation_config`` keeps its defaults (repetition penalty, suppressed
    tokens, forced ids, ...) from adding logits processors in front of the sampler; peft's ``set_adapter``
    also changes ``requires_grad`` flags, which are put back.
    """
    was_training = model.training
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    saved_config = getattr(base, "generation_config", None)
    grads = None
    previous_adapter = None
    try:
        model.eval()
        if saved_config is not None:
            base.generation_config = GenerationConfig(
                bos_token_id=saved_config.bos_token_id,
                eos_token_id=saved_config.eos_token_id,
                pad_token_id=saved_config.pad_token_id,
            )
        if adapter is not None:
            if not hasattr(model, "set_adapter"):
                raise ValueError(f"policy adapter {adapter!r} given but the model has no peft adapters")
            previous_adapter = model.active_adapter
            grads = [(p, p.requires_grad) for p in model.parameters()]
            model.set_adapter(adapter)
        yield
    finally:
        if previous_adapter is not None and previous_adapter != adapter:
            model.set_adapter(previous_adapter)
        if grads is not None:
            for parameter, flag in grads:
                parameter.requires_grad_(flag)
        if saved_config is not None:
            base.generation_config = saved_config
        if was_training:
            model.train()


class HFBackend:
    """Batched, seeded generation on in-process HF causal LMs; one or more named policies.

    ``policies`` maps a policy name to an object with ``.model`` and ``.tokenizer`` (and optionally
    ``.adapter``, ``.version``), such as :class:`PolicyHandle`, or to a ``(model, tokenizer)`` tuple; an
    object with a ``.handles`` mapping (the multi-agent policy) is taken as that mapping. Each policy runs
    on its model's device and dtype. ``share_prompts`` prefills a prompt that several rows of one
    ``generate`` call share once and gives each row a copy of its cache (same tokens up to float
    rounding; off: HF prefills every row).
    """

    def __init__(
        self,
        policies: Mapping[str, Any],
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        max_batch_size: int | None = None,
        share_prompts: bool = True,
    ) -> None:
        if not isinstance(policies, Mapping) and hasattr(policies, "handles"):
            policies = policies.handles
        if not policies:
            raise ValueError("`policies` must name at least one policy")
        if token_budget < 1:
            raise ValueError(f"`token_budget` must be >= 1, got {token_budget}")
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"`max_batch_size` must be >= 1 or None, got {max_batch_size}")
        self.policies = {name: _as_handle(name, policy) for name, policy in policies.items()}
        self.token_budget = token_budget
        self.max_batch_size = max_batch_size
        self.share_prompts = share_prompts
        self.generate_calls = 0  # number of model.generate calls so far (for tests and benchmarks)

    @classmethod
    def from_model(cls, model, tokenizer, name: str = "default", **kwargs: Any) -> HFBackend:
        return cls({name: PolicyHandle(name, model, tokenizer)}, **kwargs)

    def policy(self, name: str) -> Any:
        try:
            return self.policies[name]
        except KeyError:
            raise KeyError(f"unknown policy {name!r}; this backend serves {sorted(self.policies)}") from None

    def sync_weights(self, policy: str) -> None:
        """No-op: in-process models share their tensors with the trainer. Checks the name only."""
        self.policy(policy)

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        """``n`` completions per request, in request order and candidate order."""
        params = params or SamplingParams()
        groups: dict[tuple, list[_Row]] = {}
        for index, request in enumerate(requests):
            row_params = request.params or params
            handle = self.policy(request.policy)
            vocab = getattr(getattr(handle.model, "config", None), "vocab_size", None)
            prompt_ids = render_prompt(request.prompt, handle.tokenizer, vocab_size=vocab)
            seed = request_seed(request, row_params.seed, prompt_ids)
            key = (request.policy, row_params.max_new_tokens, row_params.stop)
            for candidate in range(row_params.n):
                row = _Row(index, candidate, prompt_ids, derive_seed(seed, candidate), row_params)
                groups.setdefault(key, []).append(row)

        results: list[list[Completion | None]] = [
            [None] * (request.params or params).n for request in requests
        ]
        for (policy, max_new_tokens, stops), rows in groups.items():
            handle = self.policy(policy)
            version = int(getattr(handle, "version", 0))
            rows.sort(key=lambda row: len(row.prompt_ids))
            lengths = [len(row.prompt_ids) for row in rows]
            with _serving(handle.model, getattr(handle, "adapter", None)), torch.inference_mode():
                for start, stop in micro_batches(lengths, max_new_tokens, self.token_budget, self.max_batch_size):
                    batch = rows[start:stop]
                    for row, completion in zip(batch, self._generate_batch(handle, batch, max_new_tokens, stops)):
                        completion.policy = policy
                        completion.policy_version = version
                        results[row.request][row.candidate] = completion
        return results  # type: ignore[return-value]

    def _generate_batch(
        self, handle, rows: list[_Row], max_new_tokens: int, stops: tuple[str, ...]
    ) -> list[Completion]:
        model, tokenizer = handle.model, handle.tokenizer
        device = model_device(model)
        eos_ids = eos_token_ids(model, tokenizer)
        pad_id = pad_token_id(tokenizer, eos_ids)
        width = max(len(row.prompt_ids) for row in rows)
        input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, width - len(row.prompt_ids) :] = torch.tensor(row.prompt_ids)
            attention_mask[i, width - len(row.prompt_ids) :] = 1
        sampler = SeededSampler(
            seeds=torch.tensor([row.seed for row in rows], dtype=torch.long, device=device),
            temperature=torch.tensor([row.params.temperature for row in rows], dtype=torch.float32, device=device),
            top_k=torch.tensor([row.params.top_k for row in rows], dtype=torch.long, device=device),
            top_p=torch.tensor([row.params.top_p for row in rows], dtype=torch.float32, device=device),
            prompt_width=width,
        )
        config = GenerationConfig(
            do_sample=False,
            num_beams=1,
            max_new_tokens=max_new_tokens,
            pad_token_id=pad_id,
            eos_token_id=eos_ids,
            stop_strings=list(stops) or None,
        )
        extra = {"tokenizer": tokenizer} if stops else {}
        if self.share_prompts and width > 1 and len({tuple(row.prompt_ids) for row in rows}) < len(rows):
            # Candidates of one request share their prompt: prefill each distinct prompt once (all but
            # its last token, which generate feeds itself) and let every row continue from that cache.
            _, cache = encode_shared_prompts(
                model, input_ids[:, :-1].to(device), attention_mask[:, :-1].to(device)
            )
            extra[cache_keyword(model)] = cache
        output = model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            generation_config=config,
            logits_processor=LogitsProcessorList([sampler]),
            **extra,
        )
        self.generate_calls += 1
        generated = output[:, width:].cpu()
        drawn, logprobs = (t.cpu() for t in sampler.history(generated.shape[1]))
        return self._completions(rows, generated, drawn, logprobs, tokenizer, eos_ids, pad_id, stops, max_new_tokens)

    @staticmethod
    def _completions(rows, generated, drawn, logprobs, tokenizer, eos_ids, pad_id, stops, max_new_tokens):
        steps = generated.shape[1]
        # Where HF's output departs from what the sampler drew, HF had finished the row and wrote padding.
        departed = generated != drawn
        if bool((departed & (generated != pad_id)).any()):
            raise RuntimeError("generate emitted tokens the sampler did not draw: another logits processor ran")
        is_eos = torch.isin(drawn, torch.tensor(eos_ids, dtype=torch.long))
        token_lists, logprob_lists, stopped = [], [], []
        for i in range(len(rows)):
            length = steps
            ended = False
            first_departure = departed[i].nonzero()
            if len(first_departure):
                length, ended = int(first_departure[0]), True
            first_eos = is_eos[i, :length].nonzero()
            if len(first_eos):
                length, ended = int(first_eos[0]) + 1, True
            ids = drawn[i, :length].tolist()
            cut = stop_string_cut(ids, tokenizer, stops)
            if cut is not None:
                ids, length, ended = ids[:cut], cut, True
            token_lists.append(ids)
            logprob_lists.append(logprobs[i, :length].tolist())
            stopped.append(ended or length < max_new_tokens)
        texts = tokenizer.batch_decode(token_lists, skip_special_tokens=True)
        return [
            Completion(
                prompt_token_ids=list(row.prompt_ids),
                token_ids=ids,
                logprobs=lps,
                text=text,
                finish_reason=FINISH_STOP if ended else FINISH_LENGTH,
                seed=row.seed,
            )
            for row, ids, lps, text, ended in zip(rows, token_lists, logprob_lists, texts, stopped)
        ]
