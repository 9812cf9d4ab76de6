"""Failure kinds and the infrastructure-failure budget.

Two kinds of failure, treated differently (ARCHITECTURE.md principle 7):

* **model failures**: the model caused them (a malformed response, code that errors, times out or hits
  a limit). The step completes, the agent gets the environment's documented failure reward, and the
  :class:`~pettingllms.envs.base.StepResult` names the failure in ``failure``
  (one of :data:`MODEL_FAILURES`) so the engine can count it.
* **infrastructure failures**: the machinery caused them (a crashed worker, a sandbox that could not
  start, a step that overran its timeout). They raise :class:`InfrastructureError`; the engine drops the
  sample, counts it with :class:`FailureBudget`, and stops once the rate passes a configured limit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: Failure labels a step can report (all caused by the model, all rewarded, none raised).
MODEL_FAILURES: tuple[str, ...] = ("parse_error", "tool_error", "tool_timeout", "tool_killed", "no_proposal",
                                   "verify_timeout")


class ParseError(ValueError):
    """A model response that does not follow the agent's format (raised inside parsers only)."""


class InfrastructureError(RuntimeError):
    """The machinery, not the model, failed; the sample must be dropped and counted, not rewarded."""


class StepTimeoutError(InfrastructureError):
    """An agent's step overran the environment's ``step_timeout``."""


class ToolConfigurationError(RuntimeError):
    """An agent was configured with a tool it cannot use (e.g. the python tool without an env worker)."""


class NotCopyableError(RuntimeError):
    """The environment holds an outside resource and cannot be snapshotted or cloned."""


class InfrastructureFailureRateExceeded(RuntimeError):
    """Too many samples were dropped for infrastructure failures; the run stops."""


def failure_rate(failed: int, total: int) -> float:
    """Fraction ``failed / total`` (0.0 when nothing was attempted)."""
    if failed < 0 or total < 0 or failed > total:
        raise ValueError(f"need 0 <= failed <= total, got failed={failed}, total={total}")
    return failed / total if total else 0.0


@dataclass
class FailureBudget:
    """Counts attempted samples and the infrastructure failures among them.

    ``record(infra_failed)`` raises :class:`InfrastructureFailureRateExceeded` once at least
    ``min_samples`` samples were attempted and the failed fraction exceeds ``max_rate``. Model failures
    are counted per label for logging only; they never stop a run.
    """

    max_rate: float = 0.05
    min_samples: int = 20
    attempted: int = 0
    infra_failed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_rate <= 1.0:
            raise ValueError(f"`max_rate` must be in [0, 1], got {self.max_rate}")
        if self.min_samples < 1:
            raise ValueError(f"`min_samples` must be >= 1, got {self.min_samples}")
        self.model_failures: dict[str, int] = {}

    def record(self, infra_failed: bool = False, model_failure: str | None = None) -> None:
        self.attempted += 1
        if model_failure is not None:
            if model_failure not in MODEL_FAILURES:
                raise ValueError(f"`model_failure` must be one of {list(MODEL_FAILURES)}, got {model_failure!r}")
            self.model_failures[model_failure] = self.model_failures.get(model_failure, 0) + 1
        if infra_failed:
            self.infra_failed += 1
        rate = failure_rate(self.infra_failed, self.attempted)
        if self.attempted >= self.min_samples and rate > self.max_rate:
            raise InfrastructureFailureRateExceeded(
                f"{self.infra_failed} of {self.attempted} samples dropped for infrastructure failures "
                f"(rate {rate:.3f} > max_rate {self.max_rate})"
            )

    @property
    def rate(self) -> float:
        return failure_rate(self.infra_failed, self.attempted)


def failure_counts(samples: Iterable[Any], prefix: str = "") -> dict[str, float]:
    """``<prefix>failures/<label>``: how many samples (anything with a ``failure`` label or None) reported
    each model failure (a parse error, a tool that timed out, an answer whose verification timed out, ...);
    labels that did not occur are left out."""
    counts: dict[str, float] = {}
    for sample in samples:
        if sample.failure is not None:
            key = f"{prefix}failures/{sample.failure}"
            counts[key] = counts.get(key, 0.0) + 1.0
    return dict(sorted(counts.items()))
