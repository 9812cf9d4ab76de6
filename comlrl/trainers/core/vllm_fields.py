"""The ``use_vllm`` / ``vllm_*`` fields of every comlrl trainer config (TRL's ``GRPOConfig`` names and meanings),
checked by :class:`~comlrl.rollout.VLLMSettings` (one rule set with pettingllms' ``rollout`` section), and the
generation backend they select (:func:`generation_backend`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from comlrl.validation import help_field

__all__ = ["VLLMFields", "generation_backend"]


@dataclass
class VLLMFields:
    r"""
    The vLLM fields of every comlrl trainer config (docs/vllm.md): a mixin placed right before [`TrainerConfig`]
    in each family's class tree ([`MADPOConfig`], the online RL configs), so its fields follow the shared ones.

    Parameters:
        > Parameters that control generation acceleration powered by vLLM


        use_vllm (`bool`, *optional*, defaults to `False`):
            Generate the agents' responses with [`~comlrl.rollout.VLLMBackend`] instead of HF `generate`
            (needs the `vllm` extra). The engine's weights are synced after every optimizer step; the
            comparators' own copies (`current_copy`, `history`, `model`) keep generating with HF.
        vllm_mode (`str`, *optional*, defaults to `"colocate"`):
            `"colocate"` (an in-process engine sharing the device) or `"server"` (a vLLM server by URL).
        vllm_gpu_memory_utilization (`float`, *optional*, defaults to `0.3`):
            Share of the GPU's memory a colocated engine takes (weights, activations, KV cache).
        vllm_tensor_parallel_size (`int`, *optional*, defaults to `1`):
            Tensor-parallel ranks of a colocated engine.
        vllm_max_model_length (`int`, *optional*):
            Context window of the engine; `None` takes the model config's.
        vllm_enable_sleep_mode (`bool`, *optional*, defaults to `False`):
            Free the engine's GPU memory for the optimizer steps (CUDA only); the next generate wakes it.
        vllm_model_impl (`str`, *optional*, defaults to `"vllm"`):
            vLLM's own model code (`"vllm"`) or its transformers backend (`"transformers"`).
        vllm_logprobs (`str`, *optional*, defaults to `"auto"`):
            `"auto"`: vLLM's log-probs where they are the convention (no top-p / top-k truncation), else
            recomputed with the agent's model; `"recompute"`: always recomputed.
        vllm_enforce_eager (`bool`, *optional*, defaults to `False`):
            No CUDA graphs in a colocated engine (faster start, slower decoding).
        vllm_kv_cache_gib (`float`, *optional*):
            KV-cache size of a CPU engine in GiB; `None`: `VLLM_CPU_KVCACHE_SPACE` when set, else 1 GiB.
        vllm_server_base_url (`str`, *optional*):
            URL of the vLLM server in server mode; else `vllm_server_host` and `vllm_server_port`.
        vllm_server_host (`str`, *optional*, defaults to `"0.0.0.0"`):
            Server host when no URL is given.
        vllm_server_port (`int`, *optional*, defaults to `8000`):
            Server port when no URL is given.
        vllm_server_timeout (`float`, *optional*, defaults to `240.0`):
            Seconds to wait for the server to come up.
        vllm_group_port (`int`, *optional*, defaults to `51216`):
            Port of TRL's NCCL weight-transfer group (server mode, `vllm_weight_sync="nccl"`).
        vllm_weight_sync (`str`, *optional*, defaults to `"auto"`):
            How a server takes new weights: `"nccl"` (TRL's weight-transfer engine, CUDA), `"file"`
            (safetensors in `vllm_sync_dir`) or `"auto"` (nccl with CUDA, else file).
        vllm_sync_dir (`str`, *optional*):
            Folder that `"file"` sync writes to, readable by the server; `None`: a temporary folder (a
            server on this machine).
    """

    # Parameters that control generation acceleration powered by vLLM (comlrl.rollout.VLLMSettings checks them)
    use_vllm: bool = help_field("Generate with vLLM (the `vllm` extra) instead of HF generate.", False)
    vllm_mode: str = help_field("vLLM mode: 'colocate' (in-process engine) or 'server'.", "colocate")
    vllm_gpu_memory_utilization: float = help_field("Share of the GPU memory a colocated engine takes.", 0.3)
    vllm_tensor_parallel_size: int = help_field("Tensor-parallel ranks of a colocated engine.", 1)
    vllm_max_model_length: int | None = help_field("Engine context window; None: the model config's.", None)
    vllm_enable_sleep_mode: bool = help_field("Free the engine's GPU memory during updates (CUDA).", False)
    vllm_model_impl: str = help_field("'vllm' or 'transformers' model code in vLLM.", "vllm")
    vllm_logprobs: str = help_field("'auto' (vLLM's where exact, else recomputed) or 'recompute'.", "auto")
    vllm_enforce_eager: bool = help_field("Disable CUDA graphs in a colocated engine.", False)
    vllm_kv_cache_gib: float | None = help_field("KV-cache GiB of a CPU engine; None: 1 GiB.", None)
    vllm_server_base_url: str | None = help_field("URL of the vLLM server (server mode).", None)
    vllm_server_host: str = help_field("vLLM server host when no URL is given.", "0.0.0.0")
    vllm_server_port: int = help_field("vLLM server port when no URL is given.", 8000)
    vllm_server_timeout: float = help_field("Seconds to wait for the vLLM server.", 240.0)
    vllm_group_port: int = help_field("Port of TRL's NCCL weight-transfer group (server mode).", 51216)
    vllm_weight_sync: str = help_field("Server weight sync: 'auto', 'nccl' (CUDA) or 'file'.", "auto")
    vllm_sync_dir: str | None = help_field("Folder the server reads file syncs from; None: a temp folder.", None)

    def _validate_agents_and_sampling(self) -> None:
        super()._validate_agents_and_sampling()
        self._validate_vllm()

    def _validate_vllm(self) -> None:
        """``use_vllm`` and the ``vllm_*`` fields, through :class:`~comlrl.rollout.VLLMSettings` (one rule
        for every trainer and pettingllms' ``rollout`` section); vLLM itself is not imported."""
        self._check_fields("use_vllm")
        from comlrl.rollout.vllm.settings import VLLMSettings

        VLLMSettings.from_object(self)


def generation_backend(policy: Any, config: Any) -> Any:
    """The backend that samples the agents' responses: :class:`~comlrl.rollout.VLLMBackend` with
    ``config.use_vllm`` (its ``vllm_*`` fields), else :class:`~comlrl.rollout.HFBackend` on the policy's live
    handles."""
    if not getattr(config, "use_vllm", False):
        from comlrl.rollout.hf import HFBackend

        return HFBackend(policy.handles)
    from comlrl.rollout.vllm.backend import VLLMBackend
    from comlrl.rollout.vllm.settings import VLLMSettings

    return VLLMBackend(policy, VLLMSettings.from_object(config))
