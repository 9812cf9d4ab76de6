"""The router: agent (role) -> policy name -> rollout backend, one ``generate`` call per policy.

The engine hands the router every request of a decision point; the router groups them by
``request.policy`` and sends each group to that policy's backend in one call, counting calls per policy
(the engine's "one call per policy per decision point" is checked against these counters).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from comlrl.rollout.types import Completion, GenerationRequest, RolloutBackend, SamplingParams

__all__ = ["Router"]


class Router:
    """Routes roles to policies and policies to backends.

    ``agent_to_policy`` maps each role to a policy name. ``backends`` is one backend serving every policy
    or ``{policy: backend}``. Several policies may share one backend; each still gets its own call.
    """

    def __init__(
        self, agent_to_policy: Mapping[str, str], backends: RolloutBackend | Mapping[str, RolloutBackend]
    ) -> None:
        if not isinstance(agent_to_policy, Mapping) or not agent_to_policy:
            raise ValueError("`agent_to_policy` must be a non-empty mapping of role -> policy name")
        for role, policy in agent_to_policy.items():
            if not isinstance(role, str) or not role or not isinstance(policy, str) or not policy:
                raise ValueError(
                    f"`agent_to_policy` must map role names to policy names, got {role!r}: {policy!r}"
                )
        self.agent_to_policy = dict(agent_to_policy)
        policies = sorted(set(self.agent_to_policy.values()))
        if isinstance(backends, Mapping):
            missing = [p for p in policies if p not in backends]
            if missing:
                raise ValueError(
                    f"`backends` has no backend for policy(ies) {missing}; it serves {sorted(backends)}"
                )
            self.backends = {p: backends[p] for p in policies}
        else:
            if not hasattr(backends, "generate"):
                raise TypeError(
                    f"`backends` must be a RolloutBackend or a mapping of them, got {type(backends).__name__}"
                )
            self.backends = {p: backends for p in policies}
        self.calls: Counter[str] = Counter()

    @classmethod
    def from_policy(cls, policy: Any, backend: RolloutBackend | None = None, **backend_kwargs: Any) -> Router:
        """Router over a :class:`comlrl.policy.MultiAgentPolicy`; by default one ``HFBackend`` on its live
        handles (so bumped weight versions are stamped on completions)."""
        if backend is None:
            from comlrl.rollout.hf import HFBackend

            backend = HFBackend(policy.handles, **backend_kwargs)
        mapping = {agent: policy.policy_name(agent) for agent in policy.agents}
        return cls(mapping, backend)

    @property
    def roles(self) -> list[str]:
        return list(self.agent_to_policy)

    @property
    def policies(self) -> list[str]:
        return list(self.backends)

    def policy_for(self, role: str) -> str:
        try:
            return self.agent_to_policy[role]
        except KeyError:
            raise KeyError(f"no policy for role {role!r}; the router maps roles {self.roles}") from None

    def backend_for(self, policy: str) -> RolloutBackend:
        try:
            return self.backends[policy]
        except KeyError:
            raise KeyError(f"unknown policy {policy!r}; the router serves {self.policies}") from None

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams | None = None
    ) -> tuple[list[list[Completion]], dict[str, int]]:
        """Completions per request (request order) and the number of backend calls made per policy."""
        by_policy: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            self.backend_for(request.policy)
            by_policy.setdefault(request.policy, []).append(index)
        results: list[list[Completion] | None] = [None] * len(requests)
        made: dict[str, int] = {}
        for policy, indices in by_policy.items():
            out = self.backend_for(policy).generate([requests[i] for i in indices], params)
            self.calls[policy] += 1
            made[policy] = made.get(policy, 0) + 1
            if len(out) != len(indices):
                raise RuntimeError(
                    f"backend of policy {policy!r} returned {len(out)} results for {len(indices)} requests"
                )
            for i, completions in zip(indices, out):
                want = (requests[i].params or params or SamplingParams()).n
                if len(completions) != want:
                    raise RuntimeError(
                        f"backend of policy {policy!r} returned {len(completions)} completions, "
                        f"expected n={want}"
                    )
                results[i] = completions
        return results, made  # type: ignore[return-value]
