"""The per-device memory estimate of a run config before launch (``pettingllms plan``).

Sizes, read once from the config and the model's ``config.json`` (``transformers.AutoConfig`` on the local
preset or checkpoint folder; nothing is loaded):

- ``N`` parameters (:func:`count_parameters`: the decoder's tensors from its architecture config; an
  architecture it does not know is instantiated on the ``meta`` device and counted), ``b`` bytes per
  weight (``model.dtype``; ``auto`` is bf16 on CUDA, float32 on CPU), ``h`` hidden size, ``i`` MLP width,
  ``L`` layers, ``kv`` = key/value heads x head dim, ``V`` vocabulary;
- trainable parameters ``T``: the whole model (L0, L1, L3) or the LoRA adapters (L2,
  :func:`lora_parameters`);
- ``P`` prompt tokens: the longest prompt seen while playing a few episodes of the environment with its
  declared ``random`` scripted policy (the generic one with half of the answers junk, so both feedback paths
  show up; an environment's own as it is), rendered with the model's tokenizer, plus ``C`` tokens of headroom for a model response quoted in a later prompt; environments
  that need a sandbox or have no random policy: the first prompt of every role plus ``C`` per role. The
  ``prompt_tokens`` argument replaces it. ``C`` = ``rollout.max_completion_length``;
- rollout rows ``R`` = ``problems_per_step x num_generations`` per decision point (split over the policy's
  rollout devices), at most ``65536 / (P + C)`` per ``generate`` call (the HF backend's token budget);
- update micro-batch ``B`` = ``per_device_train_batch_size`` (from the first of ``at_grpo`` / ``grpo`` in
  ``pipeline``), or the rows a step samples for the policy when fewer (``problems_per_step x K x max_turns
  x`` the policy's roles, split over its update devices).

Terms (bytes):

- ``weights`` = ``N b`` (L2: plus the adapters, ``T b``);
- ``kv_cache`` = ``R (P + C) L 2 kv b``;
- ``gradients`` = ``T b``; ``optimizer`` = ``8 T`` (AdamW's two states counted in fp32: torch keeps them in
  the parameter dtype, so with bf16 weights this errs by 2x on the safe side);
- ``activations`` = ``tokens L (10 h + 4 i + 4 kv) b``: what autograd keeps per token and decoder layer
  (about ten tensors of width ``h``: norm inputs and outputs, queries and their rotary copies, attention
  output, projections, residuals; four of width ``i``: gate, up, SiLU, product; four of width ``kv``: keys,
  values and their copies), measured within 8% over (never under) on three Qwen2 / Llama shapes.
  ``tokens`` = ``B (P + C)``; with ``share_prompts`` each distinct prompt is encoded once,
  ``ceil(B / K) P + B C``, plus its keys and values gathered to every row and expanded to every attention
  head (``q`` = heads x head dim), ``B P L 2 (kv + q) b``;
- ``logits`` = update: ``4 B (C + 1) V 4`` (fp32 logits of the completion positions, their log-softmax,
  gradient and one temporary); rollout: ``2 R V 4`` (the last position's logits and scores);
- ``reference`` = ``N b`` when ``beta > 0`` (none at L2: the reference is the base with adapters off).

Per device: a rollout device holds ``weights + kv_cache + logits``; an update device ``weights +
reference + gradients + optimizer + activations + logits``; a colocated device both (two processes, each
keeping its own peak). The ``local`` backend holds every policy's weights, reference and optimizer states
on ``model.device`` and runs rollout and update in turn, so its total is those plus the larger phase.

FSDP over ``S`` ranks (``fsdp_shards``, ``pettingllms plan --fsdp S``: one rank of an ``accelerate launch``
/ ``torchrun`` job with FSDP, :mod:`pettingllms.trainer.fsdp`): a rank keeps each policy's whole weights for its
rollouts plus its shard of them, ``N b (1 + 1/S)`` (inside the update the whole copy is released and the
gathered layers take its place), and ``1/S`` of the reference, gradients and optimizer states; it rolls out
and updates ``1/S`` of a step's problems, so ``R`` and the update rows are split over the ``S`` ranks.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pettingllms.config.errors import ConfigError
from pettingllms.workers.placement import (
    Placement,
    available_resources,
    check_fits,
    placement_from_config,
    policy_names,
)

__all__ = [
    "DeviceRow",
    "ModelShape",
    "RunPlan",
    "count_parameters",
    "device_capacity",
    "format_bytes",
    "lora_parameters",
    "measure_prompt_tokens",
    "plan_run",
]

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
TERMS: tuple[str, ...] = ("weights", "reference", "kv_cache", "gradients", "optimizer", "activations", "logits")
ADAM_BYTES = 8  # two fp32 states per trainable parameter
HF_TOKEN_BUDGET = 65_536  # comlrl.rollout.hf.DEFAULT_TOKEN_BUDGET: tokens per generate micro-batch
PROMPT_EPISODES = 8
LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
GIB = 2**30


def format_bytes(n: float) -> str:
    for unit, size in (("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


# ---- the model -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder the estimate needs, from its Hugging Face config."""

    num_parameters: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    kv_dim: int  # key/value heads x head dim
    q_dim: int  # attention heads x head dim
    vocab_size: int

    @classmethod
    def from_config(cls, config: Any) -> ModelShape:
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(
            num_parameters=count_parameters(config),
            hidden_size=config.hidden_size,
            intermediate_size=getattr(config, "intermediate_size", None) or 4 * config.hidden_size,
            num_layers=config.num_hidden_layers,
            kv_dim=(getattr(config, "num_key_value_heads", None) or heads) * head_dim,
            q_dim=heads * head_dim,
            vocab_size=config.vocab_size,
        )


def count_parameters(config: Any) -> int:
    """Parameters of a Llama / Qwen2 / Qwen3 / Mistral decoder from its config: embeddings, per layer the
    q/k/v/o projections (with their biases where the family has them), the gated MLP and two norms, the
    final norm and an untied output head. Other architectures are built on the ``meta`` device (no memory)
    and counted."""
    kind = getattr(config, "model_type", "")
    if kind not in ("llama", "qwen2", "qwen3", "mistral"):
        import torch
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        return sum(p.numel() for p in model.parameters())
    h, i, vocab = config.hidden_size, config.intermediate_size, config.vocab_size
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or h // heads
    q, kv = heads * head_dim, (config.num_key_value_heads or heads) * head_dim
    attention_bias = kind == "qwen2" or bool(getattr(config, "attention_bias", False))
    layer = h * q + 2 * h * kv + q * h + (q + 2 * kv if attention_bias else 0)
    if kind in ("llama",) and getattr(config, "attention_bias", False):
        layer += h  # Llama's attention_bias also gives o_proj a bias
    layer += 3 * h * i + (2 * i + h if getattr(config, "mlp_bias", False) else 0)
    layer += 2 * h + (2 * head_dim if kind == "qwen3" else 0)  # RMSNorms (Qwen3: q_norm, k_norm too)
    head = 0 if getattr(config, "tie_word_embeddings", False) else vocab * h
    return vocab * h + config.num_hidden_layers * layer + h + head


def lora_parameters(shape: ModelShape, r: int, target_modules: Sequence[str] | str) -> int:
    """Parameters of one LoRA adapter: ``r (in + out)`` per targeted linear layer of every decoder layer
    (``"all-linear"``: every projection but the output head)."""
    h, i, q, kv = shape.hidden_size, shape.intermediate_size, shape.q_dim, shape.kv_dim
    sizes = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
             "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}
    targets = LINEAR_MODULES if target_modules == "all-linear" else tuple(target_modules)
    unknown = [t for t in targets if t not in sizes]
    if unknown:
        raise ConfigError(f"`policy.lora.target_modules`: the estimate knows {list(sizes)}, got {unknown}")
    return shape.num_layers * sum(r * sum(sizes[t]) for t in targets)


def _load_model_config(name: str, seed: int):
    from transformers import AutoConfig

    from comlrl.models import resolve_model_path

    path = resolve_model_path(name, seed=seed)
    return path, AutoConfig.from_pretrained(path)


def _dtype_bytes(dtype: str, device: str) -> int:
    if dtype == "auto":
        return 2 if str(device).startswith("cuda") else 4
    return DTYPE_BYTES[dtype]


# ---- prompt length -------------------------------------------------------------------------------------

def measure_prompt_tokens(config: Mapping[str, Any], tokenizer, episodes: int = PROMPT_EPISODES) -> int:
    """The prompt bound ``P`` of the module docstring: the longest prompt seen while playing ``episodes``
    training instances with the scripted random policy (half junk answers), plus
    ``rollout.max_completion_length``; without a random policy or with a sandbox to run, the first prompt
    of every role plus that many tokens per role."""
    from comlrl.rollout.prompts import render_prompt
    from pettingllms.config.env_section import workflow_env
    from pettingllms.registry import get_env_class, make_agents, make_env

    completion = config["rollout"]["max_completion_length"]
    name, fields, options = workflow_env(config, purpose="train")
    try:
        env = make_env(name, fields)
        agents = make_agents(name, list(env.config.turn_order), options)
        cls = get_env_class(name)
        sandbox = bool(getattr(cls, "sandbox_needed", lambda c: False)(env.config))
        playable = "random" in getattr(env, "scripted_policies", {}) and not sandbox
        lengths: list[int] = []
        start = _first_train_seed(config)

        async def play(seed: int, policy: Any) -> None:
            await env.reset(seed)
            for agent in agents:
                agent.reset()
            while not env.done:
                agent = agents[env.state.position]
                lengths.append(len(render_prompt(agent.update_from_env(env.state.turn, env), tokenizer)))
                if not playable:
                    return
                agent.update_from_model(policy.respond(agent, env))
                await env.step_agent(agent, None)

        if playable:
            for number in range(episodes):
                asyncio.run(play(start + number, _random_policy(env, number)))
            return max(lengths) + completion
        for number in range(episodes):
            asyncio.run(env.reset(start + number))
            lengths += [len(render_prompt(a.update_from_env(0, env), tokenizer)) for a in agents]
        return max(lengths) + completion * len(agents)
    except (OSError, ValueError, LookupError) as error:  # a missing dataset split, a bad option
        raise ConfigError(f"section `env`: cannot build prompts to measure their length: {error}") from error


def _random_policy(env: Any, number: int) -> Any:
    """The environment's declared ``random`` policy: the generic one with half junk answers (seeded by
    ``number``), or the environment's own as its factory builds it."""
    from pettingllms.config.contract import RANDOM_POLICY
    from pettingllms.scripted import RandomPolicy, make_scripted_policy

    if env.scripted_policies["random"] == RANDOM_POLICY:
        return RandomPolicy(seed=number, malformed_prob=0.5)
    return make_scripted_policy(env, "random")


def _rl_stage(config: Mapping[str, Any]) -> str:
    return next((s for s in config["pipeline"] if s in ("at_grpo", "grpo")), "at_grpo")


def _first_train_seed(config: Mapping[str, Any]) -> int:
    return int(config[_rl_stage(config)]["train_seed_range"][0])


# ---- capacity ------------------------------------------------------------------------------------------

def device_capacity(kind: str, device: str | None = None) -> int | None:
    """Bytes of one device: a GPU's memory (``torch.cuda.get_device_properties``; None without CUDA) or,
    for ``cpu``, the host's available memory (``/proc/meminfo`` MemAvailable, else total RAM)."""
    if kind == "gpu":
        import torch

        if not torch.cuda.is_available():
            return None
        index = int(device.split(":")[1]) if device and ":" in device else 0
        return int(torch.cuda.get_device_properties(index).total_memory)
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


# ---- the plan ------------------------------------------------------------------------------------------

@dataclass
class DeviceRow:
    """One device of the plan: its label, what it holds, bytes per term, its total and its capacity."""

    device: str
    holds: str
    terms: dict[str, int]
    total: int
    capacity: int | None = None

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else self.total <= self.capacity


@dataclass
class RunPlan:
    """The estimate of a run: per-device rows, the placement (Ray backend) and the sizes used."""

    backend: str
    device_kind: str
    rows: list[DeviceRow]
    sizes: dict[str, Any]
    placement: Placement | None = None
    shortfalls: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return not self.shortfalls

    def to_json(self) -> str:
        return json.dumps(
            {
                "backend": self.backend,
                "device_kind": self.device_kind,
                "fits": self.fits,
                "shortfalls": self.shortfalls,
                "sizes": self.sizes,
                "placement": None if self.placement is None else self.placement.to_dict(),
                "devices": [
                    {"device": r.device, "holds": r.holds, "terms": r.terms, "total": r.total,
                     "capacity": r.capacity, "fits": r.fits}
                    for r in self.rows
                ],
            },
            indent=2,
        )

    def render_table(self) -> str:
        """The per-device table (MiB per term), one line per device."""
        header = ["device", *TERMS, "total", "capacity", "fits", "holds"]
        lines = [[
            r.device, *(f"{r.terms.get(t, 0) / 2**20:.1f}" for t in TERMS), f"{r.total / 2**20:.1f}",
            "?" if r.capacity is None else f"{r.capacity / 2**20:.0f}",
            {True: "yes", False: "NO", None: "?"}[r.fits], r.holds,
        ] for r in self.rows]
        widths = [max(len(str(x)) for x in column) for column in zip(header, *lines)]
        out = ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip() for row in [header, *lines]]
        return "memory per device (MiB):\n" + "\n".join("  " + line for line in out)


def _policy_sizes(config, shape: ModelShape, b: int) -> dict[str, Any]:
    """Per-policy bytes of the model-side terms and the shared update/rollout sizes."""
    level, lora = config["policy"]["level"], config["policy"]["lora"]
    adapter = lora_parameters(shape, lora["r"], lora["target_modules"]) if level == "L2" else 0
    trainable = adapter if level == "L2" else shape.num_parameters
    beta = float(config[_rl_stage(config)]["beta"])
    return {
        "weights": shape.num_parameters * b + adapter * b,
        "reference": shape.num_parameters * b if beta > 0 and level != "L2" else 0,
        "gradients": trainable * b,
        "optimizer": trainable * ADAM_BYTES,
        "trainable": trainable,
    }


def _check_shards(config, shards: int) -> int:
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ConfigError(f"`fsdp_shards` must be an int >= 1, got {shards!r}")
    if shards > 1 and config["run"]["backend"] != "local":
        raise ConfigError(f"`--fsdp {shards}` plans an accelerate launch / torchrun job, which runs with run.backend=local, "
                          f"got run.backend={config['run']['backend']}")
    if shards > 1 and config["policy"]["level"] == "L2":
        raise ConfigError(f"`--fsdp {shards}`: FSDP does not shard LoRA policies (`policy.level` is L2)")
    return shards


def _sharded(sizes: dict[str, Any], whole: int, shards: int) -> dict[str, Any]:
    """FSDP over ``shards`` ranks: the whole weights stay (rollouts) plus this rank's shard of them; the
    reference, gradients and optimizer states are split."""
    if shards == 1:
        return sizes
    split = {t: math.ceil(sizes[t] / shards) for t in ("reference", "gradients", "optimizer")}
    return {**sizes, **split, "weights": sizes["weights"] + math.ceil(whole / shards)}


def _update_rows(config, roles: int, ranks: int) -> int:
    """Rows in one update micro-batch of one rank: ``per_device_train_batch_size``, or fewer when a step
    samples fewer for the policy (``problems_per_step x K x max_turns x`` its roles, over its ranks)."""
    stage = config[_rl_stage(config)]
    sampled = stage["problems_per_step"] * config["rollout"]["num_generations"] * config["env"]["max_turns"] * roles
    return max(1, min(stage["per_device_train_batch_size"], math.ceil(sampled / ranks)))


def _update_terms(config, shape: ModelShape, b: int, prompt: int, rows: int) -> dict[str, int]:
    stage = config[_rl_stage(config)]
    completion, k = config["rollout"]["max_completion_length"], config["rollout"]["num_generations"]
    per_token = shape.num_layers * (10 * shape.hidden_size + 4 * shape.intermediate_size + 4 * shape.kv_dim) * b
    if stage["share_prompts"]:
        tokens = math.ceil(rows / k) * prompt + rows * completion
        gathered = rows * prompt * shape.num_layers * 2 * (shape.kv_dim + shape.q_dim) * b
    else:
        tokens, gathered = rows * (prompt + completion), 0
    return {"activations": tokens * per_token + gathered, "logits": 4 * rows * (completion + 1) * shape.vocab_size * 4}


def _roles_per_policy(config) -> dict[str, int]:
    from pettingllms.execution.policies import PolicyConfig, agent_policy_map, level_turn_order

    level = config["policy"]["level"]
    roles = level_turn_order(level, config["env"]["turn_order"])
    mapping = agent_policy_map(PolicyConfig(policy_level=level, agent_policies=dict(config["policy"]["agents"]) or None), roles)
    return {name: list(mapping.values()).count(name) for name in dict.fromkeys(mapping.values())}


def _rollout_terms(config, shape: ModelShape, b: int, prompt: int, replicas: int) -> dict[str, int]:
    seq = prompt + config["rollout"]["max_completion_length"]
    rows = math.ceil(config[_rl_stage(config)]["problems_per_step"] * config["rollout"]["num_generations"] / replicas)
    rows = min(rows, max(1, HF_TOKEN_BUDGET // seq))
    return {"kv_cache": rows * seq * shape.num_layers * 2 * shape.kv_dim * b, "logits": 2 * rows * shape.vocab_size * 4}


def _row(device: str, holds: str, parts: Sequence[Mapping[str, int]], capacity: int | None) -> DeviceRow:
    terms = {t: sum(p.get(t, 0) for p in parts) for t in TERMS}
    return DeviceRow(device, holds, terms, sum(terms.values()), capacity)


def plan_run(
    config: Mapping[str, Any],
    *,
    capacity: Mapping[str, int] | None = None,
    resources: Mapping[str, float] | None = None,
    prompt_tokens: int | None = None,
    fsdp_shards: int = 1,
) -> RunPlan:
    """The memory estimate of a resolved run config (see the module docstring).

    ``capacity`` (``{"gpu": bytes, "cpu": bytes}``) replaces :func:`device_capacity`; ``resources`` (``{"CPU":
    n, "GPU": m}``) replaces :func:`~pettingllms.workers.placement.available_resources` for the Ray placement
    check; ``prompt_tokens`` replaces :func:`measure_prompt_tokens`; ``fsdp_shards`` > 1 plans one rank of an
    FSDP launch over that many ranks (``run.backend: local``, not L2). A placement the resources cannot hold
    raises :class:`~pettingllms.workers.placement.PlacementError`; devices whose estimate exceeds their
    capacity are listed in :attr:`RunPlan.shortfalls`.
    """
    model, run = config["model"], config["run"]
    shards = _check_shards(config, fsdp_shards)
    path, hf_config = _load_model_config(model["name"], run["seed"])
    shape = ModelShape.from_config(hf_config)
    b = _dtype_bytes(model["dtype"], model["device"])
    if prompt_tokens is None:
        from comlrl.models import load_tokenizer

        prompt_tokens = measure_prompt_tokens(config, load_tokenizer(path))
    per_policy = _sharded(_policy_sizes(config, shape, b), shape.num_parameters * b, shards)
    names, roles = policy_names(config), _roles_per_policy(config)
    kind = "gpu" if str(model["device"]).startswith("cuda") else "cpu"
    cap = (capacity or {}).get(kind) if capacity is not None else device_capacity(kind, model["device"])
    sizes = {
        "model": str(model["name"]), "parameters": shape.num_parameters, "trainable_per_policy": per_policy["trainable"],
        "dtype_bytes": b, "prompt_tokens": prompt_tokens, "completion_tokens": config["rollout"]["max_completion_length"],
        "policies": names, "stage": _rl_stage(config), "fsdp_shards": shards,
    }
    resident = {t: per_policy[t] for t in ("weights", "reference", "optimizer")}
    if run["backend"] == "local":
        n = len(names) if config["policy"]["level"] == "L3" else 1
        model_terms = {t: v * n for t, v in resident.items()}
        if config["policy"]["level"] == "L2":  # one base, one adapter per policy
            model_terms["weights"] = shape.num_parameters * b + len(names) * (per_policy["weights"] - shape.num_parameters * b)
            model_terms["optimizer"] = per_policy["optimizer"] * len(names)
        rollout = _rollout_terms(config, shape, b, prompt_tokens, shards)
        # Policies update one after another: the one with the most rows per micro-batch sets the peak.
        update = _update_terms(config, shape, b, prompt_tokens, max(_update_rows(config, roles[n], shards) for n in names))
        training = {"gradients": per_policy["gradients"], **update}
        # Rollout and update take turns in one process: the resident terms plus the larger phase.
        total = sum(model_terms.values()) + max(sum(rollout.values()), sum(training.values()))
        terms = {**model_terms, **rollout, **training, "logits": max(rollout["logits"], update["logits"])}
        row = DeviceRow(str(model["device"]), f"policies {', '.join(names)}: rollout, then update",
                        {t: terms.get(t, 0) for t in TERMS}, total, cap)
        rows, placement = [row], None
    else:
        placement = placement_from_config(config)
        available = available_resources(run["ray_address"]) if resources is None else resources
        if available is not None:
            check_fits(placement, available)
        held: dict[int, tuple[list[str], list[Mapping[str, int]]]] = {}
        for name, p in placement.policies.items():
            where = placement.worker_bundles(name)
            rollout = _rollout_terms(config, shape, b, prompt_tokens, p.rollout_devices)
            update = _update_terms(config, shape, b, prompt_tokens, _update_rows(config, roles[name], p.update_devices))
            for rank, index in enumerate(where["rollout"]):
                entry = held.setdefault(index, ([], []))
                entry[0].append(f"{name} rollout {rank + 1}/{p.rollout_devices}")
                entry[1].append({"weights": per_policy["weights"], **rollout})
            for rank, index in enumerate(where["update"]):
                entry = held.setdefault(index, ([], []))
                entry[0].append(f"{name} update {rank + 1}/{p.update_devices}")
                entry[1].append({**{t: per_policy[t] for t in ("weights", "reference", "gradients", "optimizer")}, **update})
        rows = [_row(f"{kind}:{i}", " + ".join(held[i][0]), held[i][1], cap) for i in sorted(held)]
    shortfalls = [
        f"device {r.device} ({r.holds}) needs {format_bytes(r.total)}, has {format_bytes(r.capacity)}: "
        f"{format_bytes(r.total - r.capacity)} short"
        for r in rows if r.fits is False
    ]
    if kind == "cpu" and len(rows) > 1 and cap is not None and sum(r.total for r in rows) > cap and not shortfalls:
        total = sum(r.total for r in rows)
        shortfalls.append(f"host memory (all {len(rows)} CPU devices share it) needs {format_bytes(total)}, has "
                          f"{format_bytes(cap)}: {format_bytes(total - cap)} short")
    return RunPlan(run["backend"], kind, rows, sizes, placement, shortfalls)

