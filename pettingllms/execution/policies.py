"""Policies for the engine: the L0-L3 specialisation levels from a small config, and scripted backends.

Levels (built through :class:`comlrl.policy.MultiAgentPolicy`):

* ``L0``: the environment's ``single`` role alone, one model (the single-agent baseline);
* ``L1``: every role shares one model (roles differ by prompt), policy ``"shared"``;
* ``L2``: one base model, one LoRA adapter per policy;
* ``L3``: one model per policy.

By default each role is its own policy (L2, L3). ``agent_policies`` maps roles to policy names for any
other grouping, e.g. ``{tool: coder, plan: coder, critic: judge}`` under L3 gives two models for three
roles. :func:`build_router` puts the result behind a :class:`~pettingllms.execution.router.Router`.

:class:`ScriptedBackend` lets scripted policies (oracle, random, mixtures) drive the same engine through
the ``RolloutBackend`` protocol; it needs the agent and environment a request is for, which the engine
passes as ``request.metadata["env_context"]`` to backends that set ``wants_env_context``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from comlrl.rollout.types import FINISH_STOP, Completion, GenerationRequest, SamplingParams
from comlrl.seeding import derive_seed
from comlrl.validation import strict_from_dict
from pettingllms.config.levels import POLICY_LEVELS, level_policy_map, level_turn_order
from pettingllms.execution.router import Router

__all__ = [
    "POLICY_LEVELS",
    "EnvContext",
    "MixturePolicy",
    "PolicyConfig",
    "ScriptedBackend",
    "build_policy",
    "build_router",
    "level_turn_order",
]



@dataclass
class PolicyConfig:
    """Which models act for which roles.

    > Level and mapping

    - ``policy_level``: ``L0`` (single agent), ``L1`` (shared model), ``L2`` (LoRA per policy), ``L3``
      (model per policy).
    - ``agent_policies``: optional ``{role: policy name}``; default: L1 maps every role to ``"shared"``,
      L0/L2/L3 name each policy after its role.

    > Models

    - ``model``: preset name, local folder or hub id of the (base) model.
    - ``models``: optional ``{policy: model}`` for L3 (policies not named use ``model``).
    - ``device`` / ``dtype``: where and in what precision to load (dtype ``None``: bf16 where supported).
    - ``seed``: seed for building presets.

    > LoRA (L2), TRL's ``ModelConfig`` names

    - ``lora_r``, ``lora_alpha``, ``lora_dropout``, ``lora_target_modules``.
    """

    policy_level: str = field(default="L1", metadata={"help": "L0 | L1 | L2 | L3"})
    agent_policies: dict[str, str] | None = field(default=None, metadata={"help": "role -> policy name"})
    model: str = field(default="small", metadata={"help": "preset, local folder or hub id"})
    models: dict[str, str] | None = field(default=None, metadata={"help": "L3: policy -> model"})
    device: str = field(default="cpu", metadata={"help": "device of every model"})
    dtype: str | None = field(default=None, metadata={"help": "float32 | bfloat16 | float16 | None (auto)"})
    seed: int = field(default=0, metadata={"help": "seed for building model presets"})
    lora_r: int = field(default=8, metadata={"help": "LoRA rank (L2)"})
    lora_alpha: int = field(default=16, metadata={"help": "LoRA alpha (L2)"})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout (L2)"})
    lora_target_modules: list[str] | str = field(
        default="all-linear", metadata={"help": "LoRA target modules (L2), a list or 'all-linear'"}
    )

    def __post_init__(self) -> None:
        if self.policy_level not in POLICY_LEVELS:
            raise ValueError(
                f"`policy_level` must be one of {list(POLICY_LEVELS)}, got {self.policy_level!r}"
            )
        if self.agent_policies is not None and (
            not isinstance(self.agent_policies, Mapping) or not self.agent_policies
        ):
            raise ValueError(
                f"`agent_policies` must be a non-empty mapping role -> policy, got {self.agent_policies!r}"
            )
        if self.models is not None and self.policy_level != "L3":
            raise ValueError(
                f"`models` applies to policy_level L3 only, got policy_level {self.policy_level!r}"
            )
        if self.lora_r < 1:
            raise ValueError(f"`lora_r` must be >= 1, got {self.lora_r}")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"`lora_dropout` must be in [0, 1), got {self.lora_dropout}")
        if self.dtype is not None and self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"`dtype` must be float32, bfloat16, float16 or None, got {self.dtype!r}")

    # From a mapping (a YAML section); an unknown key is an error naming it.
    from_dict = classmethod(strict_from_dict)

    def lora_config(self):
        from peft import LoraConfig

        return LoraConfig(
            r=self.lora_r,
            lora_alpha=self.lora_alpha,
            lora_dropout=self.lora_dropout,
            target_modules=self.lora_target_modules,
            task_type="CAUSAL_LM",
        )


def agent_policy_map(config: PolicyConfig, roles: Sequence[str]) -> dict[str, str]:
    """``{role: policy}`` for ``roles`` (distinct, in first-appearance order) under ``config``
    (:func:`pettingllms.config.levels.level_policy_map`)."""
    return level_policy_map(config.policy_level, config.agent_policies, roles)


def build_policy(config: PolicyConfig, turn_order: Sequence[str]):
    """The :class:`comlrl.policy.MultiAgentPolicy` of ``config`` for the roles of ``turn_order``.

    ``turn_order`` is the workflow's order before the level applies (L0 replaces it with ``single``).
    """
    import torch

    from comlrl.policy import MultiAgentPolicy

    roles = level_turn_order(config.policy_level, turn_order)
    mapping = agent_policy_map(config, roles)
    policy_names = list(dict.fromkeys(mapping.values()))
    dtype = getattr(torch, config.dtype) if config.dtype else None
    common = {"device": config.device, "dtype": dtype, "seed": config.seed}
    level = config.policy_level
    if level == "L2":
        return MultiAgentPolicy.from_mapping(
            mapping, base_model=config.model, lora_config=config.lora_config(), arrangement="lora", **common
        )
    if level == "L3":
        models = dict(config.models or {})
        stray = sorted(set(models) - set(policy_names))
        if stray:
            raise ValueError(f"`models` names policies {stray} that serve no role; policies: {policy_names}")
        spec = {p: models.get(p, config.model) for p in policy_names}
        arrangement = "per_agent" if len(policy_names) == len(mapping) else "mapping"
        return MultiAgentPolicy.from_mapping(mapping, spec, arrangement=arrangement, **common)
    arrangement = "single" if level == "L0" or len(mapping) == 1 else "shared"
    return MultiAgentPolicy.from_mapping(
        mapping, {policy_names[0]: config.model}, arrangement=arrangement, **common
    )


def build_router(policy, backend=None, **backend_kwargs: Any) -> Router:
    """A router over ``policy`` (an ``HFBackend`` on its live handles unless ``backend`` is given)."""
    return Router.from_policy(policy, backend, **backend_kwargs)


# ---- scripted policies behind the backend protocol ---------------------------------------------


class EnvContext(NamedTuple):
    """The agent (after ``update_from_env``) and environment copy a request is for (scripted backends)."""

    agent: Any
    env: Any


class MixturePolicy:
    """Answers with ``policies[i]`` drawn with probability ``weights[i]`` from a generator it owns.

    ``MixturePolicy([OraclePolicy(), RandomPolicy()], [0.3, 0.7])`` is an agent that is deliberately worse
    than the oracle, with candidates that differ from each other.
    """

    def __init__(self, policies: Sequence[Any], weights: Sequence[float], seed: int = 0) -> None:
        if not policies or len(policies) != len(weights):
            raise ValueError(
                "`policies` and `weights` must be non-empty and equally long, "
                f"got {len(policies)} and {len(weights)}"
            )
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"`weights` must be >= 0 with a positive sum, got {list(weights)}")
        self.policies = list(policies)
        self.weights = [float(w) for w in weights]
        self.rng = random.Random(seed)

    def respond(self, agent: Any, env: Any) -> str:
        (policy,) = self.rng.choices(self.policies, weights=self.weights)
        return policy.respond(agent, env)


def reseed_scripted(policy: Any, seed: int) -> None:
    """Reseed a scripted policy's own generator(s) (``rng``, and those of sub-policies) from ``seed``."""
    rng = getattr(policy, "rng", None)
    if isinstance(rng, random.Random):
        rng.seed(derive_seed(seed, "rng"))
    subs = getattr(policy, "policies", None)
    items = subs.items() if isinstance(subs, Mapping) else enumerate(subs or ())
    for key, sub in items:
        reseed_scripted(sub, derive_seed(seed, str(key)))
    default = getattr(policy, "default", None)
    if default is not None:
        reseed_scripted(default, derive_seed(seed, "default"))


class ScriptedBackend:
    """A ``RolloutBackend`` whose policies are scripted (``respond(agent, env) -> text``).

    ``policies`` maps policy names to scripted policies. Candidate ``j`` of a request reseeds the policy's
    own generator(s) from ``derive_seed(request.seed, j)`` before answering, so, as with a model backend, a
    completion depends only on its request. Completions carry text only (no token ids or log-probs).
    ``generate_calls`` counts calls.
    """

    wants_env_context = True

    def __init__(self, policies: Mapping[str, Any]) -> None:
        if not policies:
            raise ValueError("`policies` must name at least one scripted policy")
        for name, policy in policies.items():
            if not hasattr(policy, "respond"):
                raise TypeError(f"scripted policy {name!r} has no `respond(agent, env)`")
        self.policies = dict(policies)
        self.generate_calls = 0
        self.requests_seen: list[int] = []  # requests per call, for tests and benchmarks

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        self.generate_calls += 1
        self.requests_seen.append(len(requests))
        out = []
        for request in requests:
            if request.policy not in self.policies:
                raise KeyError(
                    f"unknown policy {request.policy!r}; this backend serves {sorted(self.policies)}"
                )
            context = request.metadata.get("env_context")
            if not isinstance(context, EnvContext):
                raise ValueError(
                    "ScriptedBackend needs `request.metadata['env_context']` (an EnvContext); the rollout "
                    "engine sets it for backends with `wants_env_context`"
                )
            policy = self.policies[request.policy]
            n = (request.params or params or SamplingParams()).n
            base = request.seed if request.seed is not None else 0
            completions = []
            for j in range(n):
                seed = derive_seed(base, j)
                reseed_scripted(policy, seed)
                text = policy.respond(context.agent, context.env)
                completions.append(Completion([], [], [], text, FINISH_STOP, request.policy, 0, seed))
            out.append(completions)
        return out
