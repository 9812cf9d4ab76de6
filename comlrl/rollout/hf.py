"""The default generation backend: batched ``model.generate`` on in-process HF models (CPU or GPU).

:class:`HFBackend` serves many requests per call. Rows (request x candidate) are grouped by the model
object they run on and its tokenizer, and by the parameters one ``generate`` call must share
(``max_new_tokens`` and stop strings; temperature, top-k and top-p are per row), not by policy: the
policies of a LoRA arrangement (one peft model, one adapter per policy) run on one set of weights, so
their rows can share ``generate`` calls. Each group is sorted by prompt length, cut into micro-batches
whose padded size ``rows * (longest prompt + max_new_tokens)`` stays within ``token_budget``,
left-padded, and decoded with one ``generate`` call each; rows that share a prompt (the ``n`` candidates
of a request) prefill it once (``share_prompts``). Sampling happens in
:class:`~comlrl.rollout.sampling.SeededSampler`, so a completion depends only on its prompt, its row
seed and the policy weights, never on its batch.

Adapters: a group whose rows all use one adapter (or a plain model) activates it with ``set_adapter``
for the whole group, exactly as a per-policy call would. A group mixing several adapters of one peft
LoRA model runs them in the same micro-batches with peft's mixed-batch inference (``adapter_names``, one
name per row), so the agents of an L2 policy cost one ``generate`` call per micro-batch, not one per
agent; a row of a handle with ``adapter=None`` runs through the model's active adapter, as it would on
its own. The shared-prompt prefill then shares a prompt only between rows of the same adapter (the KV
cache differs per adapter). Where peft cannot mix the adapters (not a peft LoRA model, merged or
disabled adapters, LoRA variants such as DoRA, several active adapters, layer types without mixed-batch
support; see :func:`mixed_adapter_problem`), ``mixed_adapters="auto"`` (the default) falls back to one
pass per adapter, as before; ``"require"`` raises instead, naming the problem; ``"off"`` never mixes.
Completions are stamped per row with their request's policy name and that handle's ``version``.

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
# How a group of rows on one peft model that use several adapters is served (see the module docstring).
MIXED_ADAPTER_MODES = ("auto", "require", "off")


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
    policy: str = "default"
    adapter: str | None = None  # the handle's adapter (None: the model as is)


def as_handle(name: str, policy: Any) -> Any:
    """``policy`` as a handle: a ``(model, tokenizer)`` tuple becomes a :class:`PolicyHandle`; an object with
    ``.model`` and ``.tokenizer`` is taken as it is (the backends' shared rule)."""
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


def mixed_adapter_problem(model, adapters: Sequence[str | None]) -> str | None:
    """Why rows of ``adapters`` cannot share one ``model.generate`` call through peft's mixed-batch
    inference (``adapter_names``), or None when they can. ``None`` in ``adapters`` stands for the model's
    active adapter (a handle that runs the model as is).

    peft mixes adapters per row only for LoRA (a ``PeftModel`` over a ``LoraModel``), with no adapter
    merged into the weights, adapters enabled, one active adapter (what ``adapter=None`` rows run), plain
    LoRA adapters (no variants such as DoRA) and layer types that implement mixed batches.
    """
    try:
        from peft import PeftModel
        from peft.tuners.lora import LoraLayer, LoraModel
        from peft.tuners.lora import layer as lora_layers
    except ImportError:  # pragma: no cover - peft is a dependency
        return "peft is not installed"
    if not isinstance(model, PeftModel):
        return f"the model is a {type(model).__name__}, not a peft PeftModel"
    if not isinstance(model.base_model, LoraModel):
        tuner = type(model.base_model).__name__
        return f"its peft tuner is {tuner}; peft mixes adapters in one batch for LoRA only"
    if getattr(model, "_adapters_disabled", False):
        return "its adapters are disabled (inside peft's `disable_adapter()`)"
    active = model.active_adapter
    if not isinstance(active, str):
        return f"several adapters are active at once ({list(active)}): one batch row runs one adapter"
    names = {active if name is None else name for name in adapters}
    known = set(getattr(model, "peft_config", {}))
    unknown = sorted(names - known)
    if unknown:
        return f"it has no adapter(s) {unknown} (adapters: {sorted(known)})"
    mixable = tuple(
        cls for cls in (getattr(lora_layers, n, None) for n in ("Linear", "Embedding", "_ConvNd")) if cls
    )
    for module_name, module in model.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        if module.merged:
            return (
                f"adapter(s) {list(module.merged_adapters)} are merged into its weights "
                f"(layer {module_name}); call `unmerge_adapter()` first"
            )
        if module.disable_adapters:
            return f"its adapters are disabled (layer {module_name})"
        # Every LoRA layer gets the per-row names, whether it holds those adapters or not.
        if not isinstance(module, mixable) and "_mixed_batch_forward" not in vars(type(module)):
            kind = type(module).__name__
            return f"its LoRA layer {module_name} ({kind}) does not support mixed adapter batches"
        held = names & (set(module.lora_A) | set(getattr(module, "lora_embedding_A", {})))
        variants = sorted(held & set(getattr(module, "lora_variant", {})))
        if variants:
            kinds = sorted({type(module.lora_variant[n]).__name__ for n in variants})
            return (
                f"adapter(s) {variants} are LoRA variants ({', '.join(kinds)}, e.g. DoRA): "
                "peft mixes plain LoRA adapters only"
            )
    return None


@contextlib.contextmanager
def serving(model, adapter: str | None) -> Iterator[None]:
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
    ``generate`` call share (same tokens, same adapter) once and gives each row a copy of its cache (same
    tokens up to float rounding; off: HF prefills every row). ``mixed_adapters`` says how rows of several
    adapters of one peft model are served: ``"auto"`` in shared ``generate`` calls through peft's
    ``adapter_names`` where the model allows it (:func:`mixed_adapter_problem`) and one pass per adapter
    otherwise, ``"require"`` raises a ``ValueError`` naming the problem instead of falling back, ``"off"``
    always makes one pass per adapter.
    """

    def __init__(
        self,
        policies: Mapping[str, Any],
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        max_batch_size: int | None = None,
        share_prompts: bool = True,
        mixed_adapters: str = "auto",
    ) -> None:
        if not isinstance(policies, Mapping) and hasattr(policies, "handles"):
            policies = policies.handles
        if not policies:
            raise ValueError("`policies` must name at least one policy")
        if token_budget < 1:
            raise ValueError(f"`token_budget` must be >= 1, got {token_budget}")
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"`max_batch_size` must be >= 1 or None, got {max_batch_size}")
        if mixed_adapters not in MIXED_ADAPTER_MODES:
            raise ValueError(
                f"`mixed_adapters` must be one of {MIXED_ADAPTER_MODES}, got {mixed_adapters!r}"
            )
        self.policies = {name: as_handle(name, policy) for name, policy in policies.items()}
        self.token_budget = token_budget
        self.max_batch_size = max_batch_size
        self.share_prompts = share_prompts
        self.mixed_adapters = mixed_adapters
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
        served: dict[tuple, tuple[Any, Any]] = {}
        for index, request in enumerate(requests):
            row_params = request.params or params
            handle = self.policy(request.policy)
            vocab = getattr(getattr(handle.model, "config", None), "vocab_size", None)
            prompt_ids = render_prompt(request.prompt, handle.tokenizer, vocab_size=vocab)
            seed = request_seed(request, row_params.seed, prompt_ids)
            key = (id(handle.model), id(handle.tokenizer), row_params.max_new_tokens, row_params.stop)
            served[key] = (handle.model, handle.tokenizer)
            adapter = getattr(handle, "adapter", None)
            for candidate in range(row_params.n):
                row_seed = derive_seed(seed, candidate)
                row = _Row(index, candidate, prompt_ids, row_seed, row_params, request.policy, adapter)
                groups.setdefault(key, []).append(row)

        results: list[list[Completion | None]] = [
            [None] * (request.params or params).n for request in requests
        ]
        for key, rows in groups.items():
            model, tokenizer = served[key]
            _, _, max_new_tokens, stops = key
            # Read now, at generate time: the policy layer bumps versions between calls.
            versions = {r.policy: int(getattr(self.policy(r.policy), "version", 0)) for r in rows}
            for adapter, part, names in self._passes(model, rows):
                # Sorted by prompt length (stably, so a one-adapter group keeps the per-policy order).
                order = sorted(range(len(part)), key=lambda i: len(part[i].prompt_ids))
                part = [part[i] for i in order]
                names = None if names is None else [names[i] for i in order]
                lengths = [len(row.prompt_ids) for row in part]
                with serving(model, adapter), torch.inference_mode():
                    cuts = micro_batches(lengths, max_new_tokens, self.token_budget, self.max_batch_size)
                    for start, stop in cuts:
                        batch = part[start:stop]
                        batch_names = None if names is None else names[start:stop]
                        completions = self._generate_batch(
                            model, tokenizer, batch, max_new_tokens, stops, adapter_names=batch_names
                        )
                        for row, completion in zip(batch, completions):
                            completion.policy = row.policy
                            completion.policy_version = versions[row.policy]
                            results[row.request][row.candidate] = completion
        return results  # type: ignore[return-value]

    def _passes(self, model, rows: list[_Row]) -> list[tuple[str | None, list[_Row], list[str] | None]]:
        """How one group's rows are served: ``(adapter to activate, rows, per-row adapter_names or None)``.

        One adapter (or a plain model): one pass with that adapter active, as a per-policy call made it.
        Several adapters: one pass with ``adapter_names`` where peft can mix them, else (``"auto"``,
        ``"off"``) one pass per adapter in order of first appearance; ``"require"`` raises.
        """
        adapters = list(dict.fromkeys(row.adapter for row in rows))
        if len(adapters) == 1:
            return [(adapters[0], rows, None)]
        if self.mixed_adapters != "off":
            problem = mixed_adapter_problem(model, adapters)
            if problem is None:
                active = model.active_adapter
                names = [active if row.adapter is None else row.adapter for row in rows]
                if len(set(names)) == 1:  # e.g. adapter=None next to the active adapter's own name
                    return [(names[0], rows, None)]
                return [(None, rows, names)]
            if self.mixed_adapters == "require":
                policies = sorted({row.policy for row in rows})
                raise ValueError(
                    f"policies {policies} run adapters {adapters} of one model, which cannot serve them in "
                    f"one generate call: {problem}. Pass mixed_adapters='auto' to make one pass per adapter"
                )
        return [(adapter, [row for row in rows if row.adapter == adapter], None) for adapter in adapters]

    def _generate_batch(
        self,
        model,
        tokenizer,
        rows: list[_Row],
        max_new_tokens: int,
        stops: tuple[str, ...],
        adapter_names: list[str] | None = None,
    ) -> list[Completion]:
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
        extra: dict[str, Any] = {"tokenizer": tokenizer} if stops else {}
        if adapter_names is not None:
            extra["adapter_names"] = list(adapter_names)
        # Rows share a prefill only with the same prompt through the same adapter.
        prompts = [tuple(row.prompt_ids) for row in rows]
        keys = prompts if adapter_names is None else list(zip(prompts, adapter_names))
        if self.share_prompts and width > 1 and len(set(keys)) < len(rows):
            # Candidates of one request share their prompt: prefill each distinct prompt once (all but
            # its last token, which generate feeds itself) and let every row continue from that cache.
            _, cache = encode_shared_prompts(
                model,
                input_ids[:, :-1].to(device),
                attention_mask[:, :-1].to(device),
                adapter_names=adapter_names,
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
