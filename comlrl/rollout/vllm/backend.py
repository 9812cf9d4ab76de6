"""VLLMBackend: the :class:`~comlrl.rollout.hf.HFBackend` interface on vLLM engines (see the package docstring)."""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from comlrl.rollout.hf import PolicyHandle, as_handle, eos_token_ids, pad_token_id, serving, stop_string_cut
from comlrl.rollout.prompts import render_prompt, request_seed
from comlrl.rollout.types import FINISH_LENGTH, FINISH_STOP, Completion, GenerationRequest, SamplingParams
from comlrl.rollout.vllm.engines import EngineGroup, EngineRow, LocalEngine, RawOutput, ServerEngine
from comlrl.rollout.vllm.settings import VLLMSettings, logprobs_source, require_vllm
from comlrl.seeding import derive_seed

__all__ = ["VLLMBackend"]

class VLLMBackend:
    """Batched, seeded generation on vLLM engines; one or more named policies.

    ``policies`` is what :class:`~comlrl.rollout.hf.HFBackend` takes: a ``{name: handle}`` mapping (handles
    with ``.model`` and ``.tokenizer``, optionally ``.adapter`` and ``.version``, or ``(model, tokenizer)``
    tuples) or an object with ``.handles`` (a :class:`~comlrl.policy.MultiAgentPolicy`). The handles stay the
    training side's: their models are read when an engine starts or syncs, and to recompute log-probs.
    ``settings`` are :class:`VLLMSettings` (keywords under TRL's names are accepted too:
    ``VLLMBackend(policy, vllm_mode="colocate")``). ``max_length`` (at most the model's ``max_position_embeddings``; None: the model's) is the engines' context
    window when
    ``vllm_max_model_length`` is not set. Call :meth:`close` (or use it as a context manager) to free the
    engines.
    """

    def __init__(
        self,
        policies: Mapping[str, Any] | Any,
        settings: VLLMSettings | None = None,
        *,
        max_length: int | None = None,
        scratch_dir: str | os.PathLike | None = None,
        **setting_overrides: Any,
    ) -> None:
        require_vllm()
        if not isinstance(policies, Mapping) and hasattr(policies, "handles"):
            policies = policies.handles
        if not policies:
            raise ValueError("`policies` must name at least one policy")
        base = settings or VLLMSettings()
        self.settings = dataclasses.replace(base, **setting_overrides) if setting_overrides else base
        self.policies = {name: as_handle(name, policy) for name, policy in policies.items()}
        groups: dict[int, list[PolicyHandle]] = {}
        for handle in self.policies.values():
            groups.setdefault(id(handle.model), []).append(handle)
        self.groups = [EngineGroup(key, handles) for key, handles in groups.items()]
        self._group_of = {name: group for group in self.groups for name in group.handles}
        self._scratch = Path(tempfile.mkdtemp(prefix="comlrl-vllm-", dir=scratch_dir))
        self.generate_calls = 0
        self.recomputed_rows = 0  # rows whose log-probs were scored with the policy's model
        self.weight_syncs = 0
        try:
            for index, group in enumerate(self.groups):
                folder = self._scratch / f"engine-{index}"
                if self.settings.vllm_mode == "colocate":
                    group.engine = LocalEngine(group, folder, self.settings, max_length)
                else:
                    group.engine = ServerEngine(group, folder, self.settings)
                    if not group.lora:
                        group.engine.load_model()  # the server holds the checkpoint it was started on
                if group.lora:
                    for name in group.handles:
                        self._load_adapter(group, name)
                group.synced = {name: int(getattr(h, "version", 0)) for name, h in group.handles.items()}
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> VLLMBackend:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @classmethod
    def from_model(cls, model, tokenizer, name: str = "default", **kwargs: Any) -> VLLMBackend:
        return cls({name: PolicyHandle(name, model, tokenizer)}, **kwargs)

    def policy(self, name: str) -> Any:
        try:
            return self.policies[name]
        except KeyError:
            raise KeyError(f"unknown policy {name!r}; this backend serves {sorted(self.policies)}") from None

    # -- weights -------------------------------------------------------------------------------------
    def sync_weights(self, policy: str) -> None:
        """Push policy ``policy``'s current weights (a LoRA policy: its adapter) to its engine now."""
        self.policy(policy)
        group = self._group_of[policy]
        group.engine.wake()
        if group.lora:
            self._load_adapter(group, policy)
        else:
            group.engine.load_model()
        group.synced[policy] = int(getattr(group.handles[policy], "version", 0))
        self.weight_syncs += 1

    def _load_adapter(self, group: EngineGroup, policy: str) -> None:
        from comlrl.models.lora import save_adapter

        adapter = group.adapter_of(policy)
        folder = save_adapter(group.model, adapter, self._adapter_folder(group, adapter))
        group.engine.load_adapter(adapter, folder)

    def _adapter_folder(self, group: EngineGroup, adapter: str) -> Path:
        engine = group.engine
        root = engine.sync_dir if isinstance(engine, ServerEngine) else self._scratch
        return root / "adapters" / f"{adapter}-{next(_FOLDER_IDS)}"

    def _sync_stale(self, policies: set[str]) -> None:
        for name in sorted(policies):
            group = self._group_of[name]
            if group.synced.get(name) != int(getattr(group.handles[name], "version", 0)):
                self.sync_weights(name)

    def sleep(self) -> None:
        """Free the engines' device memory until the next generate (``vllm_enable_sleep_mode``; else nothing)."""
        for group in self.groups:
            group.engine.sleep()

    # -- generation ----------------------------------------------------------------------------------
    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        """``n`` completions per request, in request order and candidate order."""
        params = params or SamplingParams()
        by_group: dict[int, list[EngineRow]] = {}
        for index, request in enumerate(requests):
            row_params = request.params or params
            handle = self.policy(request.policy)
            vocab = getattr(getattr(handle.model, "config", None), "vocab_size", None)
            prompt_ids = render_prompt(request.prompt, handle.tokenizer, vocab_size=vocab)
            seed = request_seed(request, row_params.seed, prompt_ids)
            group = self._group_of[request.policy]
            for candidate in range(row_params.n):
                by_group.setdefault(group.key, []).append(
                    EngineRow(index, candidate, request.policy, prompt_ids, derive_seed(seed, candidate), row_params)
                )
        self._sync_stale({request.policy for request in requests})
        results: list[list[Completion | None]] = [[None] * (r.params or params).n for r in requests]
        for group in self.groups:
            rows = by_group.get(group.key)
            if not rows:
                continue
            group.engine.wake()
            eos = eos_token_ids(group.base_model(), group.tokenizer)
            raws = group.engine.generate(rows, [group.adapter_of(row.policy) for row in rows], eos)
            self.generate_calls += 1
            completions = [self._completion(group, row, raw, eos) for row, raw in zip(rows, raws)]
            self._recompute_logprobs(group, rows, completions)
            for row, completion in zip(rows, completions):
                results[row.request][row.candidate] = completion
        return results  # type: ignore[return-value]

    def _completion(self, group: EngineGroup, row: EngineRow, raw: RawOutput, eos: Sequence[int]) -> Completion:
        ids, logprobs = raw.token_ids, raw.logprobs
        ended = raw.finish_reason == "stop"
        first_eos = next((i for i, t in enumerate(ids) if t in eos), None)
        if first_eos is not None:
            ids, ended = ids[: first_eos + 1], True
        cut = stop_string_cut(ids, group.tokenizer, row.params.stop)
        if cut is not None:
            ids, ended = ids[:cut], True
        if logprobs is not None:
            logprobs = logprobs[: len(ids)]
        if logprobs_source(row.params, self.settings) == "recompute":
            logprobs = None
        handle = group.handles[row.policy]
        return Completion(
            prompt_token_ids=list(row.prompt_ids),
            token_ids=list(ids),
            logprobs=list(logprobs) if logprobs is not None else [],
            text=group.tokenizer.decode(ids, skip_special_tokens=True),
            finish_reason=FINISH_STOP if ended or len(ids) < row.params.max_new_tokens else FINISH_LENGTH,
            policy=row.policy,
            policy_version=group.synced.get(row.policy, int(getattr(handle, "version", 0))),
            seed=row.seed,
        )

    def _recompute_logprobs(self, group: EngineGroup, rows: Sequence[EngineRow], completions: Sequence[Completion]) -> None:
        """Score the rows whose log-probs must come from the policy's model (see the module docstring)."""
        from comlrl.scoring import completion_logprobs

        todo: dict[tuple[str, float], list[int]] = {}
        for index, (row, completion) in enumerate(zip(rows, completions)):
            if completion.token_ids and not completion.logprobs:
                temperature = row.params.temperature if row.params.temperature > 0 else 1.0
                todo.setdefault((row.policy, temperature), []).append(index)
        for (policy, temperature), indices in todo.items():
            handle = group.handles[policy]
            pad = pad_token_id(group.tokenizer, eos_token_ids(group.base_model(), group.tokenizer))
            with serving(handle.model, getattr(handle, "adapter", None)), torch.inference_mode():
                values, mask = completion_logprobs(
                    handle.model,
                    [completions[i].prompt_token_ids for i in indices],
                    [completions[i].token_ids for i in indices],
                    pad_token_id=pad,
                    temperature=temperature,
                )
            for row_index, i in enumerate(indices):
                completions[i].logprobs = values[row_index][mask[row_index]].float().cpu().tolist()
            self.recomputed_rows += len(indices)

    def close(self) -> None:
        """Stop the engines and remove the scratch folder."""
        for group in getattr(self, "groups", []):
            if group.engine is not None:
                group.engine.close()
                group.engine = None
        scratch = getattr(self, "_scratch", None)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
            self._scratch = None
        import gc

        gc.collect()

    def describe(self) -> str:
        """One line: mode, engines and the policies each serves, and the log-prob rule."""
        engines = "; ".join(f"{'LoRA ' if g.lora else ''}engine for {sorted(g.handles)}" for g in self.groups)
        return f"vLLM {self.settings.vllm_mode}: {engines}; log-probs {self.settings.vllm_logprobs}"


_FOLDER_IDS = itertools.count(1)  # adapter folders: a new folder per sync (vLLM caches adapters by path and id)
