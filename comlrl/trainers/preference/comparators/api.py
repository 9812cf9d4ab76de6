"""The ``api`` comparator source: a remote model through the rollout engine's :class:`APIBackend`.

The ``comparator_api_*`` fields configure the backend (format, URL, model, timeout, retries, headers,
extra body, response field, completions per request). The key is ``comparator_api_key`` or the environment
variable named by ``comparator_api_key_env``, sent as ``<comparator_api_key_header>:
<comparator_api_key_prefix> <key>``; with the Anthropic format an ``Authorization`` header becomes
``x-api-key`` with the bare key, as Anthropic expects.

Every request carries ``{"agent_idx": slot, "batch_item": item}`` as metadata, which the generic format
sends in its body next to the prompt, the number of candidates and the sampling settings (the public
CoMLRL payload). An item whose request still fails after the retries comes back as
``ComparatorItemOutput(error=...)``; the trainer drops and counts it. Completions are text only
(``same_tokenizer=False``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from comlrl.rollout.api import APIBackend
from comlrl.rollout.types import GenerationRequest, SamplingParams
from comlrl.seeding import derive_seed
from comlrl.trainers.preference.comparators.base import ComparatorContext
from comlrl.trainers.preference.comparators.current import BackendComparator

__all__ = ["API_POLICY", "APIComparator", "api_key_headers", "build_api_backend"]

API_POLICY = "comparator_api"


def api_key_headers(args: Any, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The request headers for the key and ``comparator_api_headers`` (which win on a clash)."""
    environ = os.environ if environ is None else environ
    key = args.comparator_api_key
    if key is None and args.comparator_api_key_env is not None:
        key = environ.get(args.comparator_api_key_env, "").strip()
        if not key:
            raise ValueError(
                f"`comparator_api_key_env` names the environment variable {args.comparator_api_key_env!r}, "
                "which is unset or empty"
            )
    headers: dict[str, str] = {}
    if key:
        header, prefix = args.comparator_api_key_header, args.comparator_api_key_prefix
        if args.comparator_api_format == "anthropic" and header.lower() == "authorization":
            headers["x-api-key"] = key
        else:
            headers[header] = f"{prefix} {key}" if prefix else key
    for name, value in (args.comparator_api_headers or {}).items():
        for existing in [h for h in headers if h.lower() == name.lower()]:
            del headers[existing]
        headers[name] = value
    return headers


def build_api_backend(
    args: Any, seed: int, environ: Mapping[str, str] | None = None, **options: Any
) -> APIBackend:
    """The :class:`APIBackend` the ``comparator_api_*`` fields describe; ``options`` are further
    :class:`APIBackend` arguments (``backoff_base``, ``backoff_max``, ``max_concurrency``, ...)."""
    return APIBackend(
        args.comparator_api_format,
        args.comparator_api_url,
        args.comparator_api_model,
        api_key_env=None,  # the key travels in the headers built here (custom header and prefix)
        timeout=args.comparator_api_timeout,
        max_retries=args.comparator_api_max_retries,
        response_field=args.comparator_api_response_field,
        headers=api_key_headers(args, environ),
        seed=derive_seed(seed, "comparator_api_backoff"),
        extra_body=args.comparator_api_extra_body,
        max_n_per_request=args.comparator_api_max_n_per_request,
        **options,
    )


class APIComparator(BackendComparator):
    """``comparator_policy="api"`` (see the module docstring). ``backend_options`` go to
    :class:`APIBackend` (e.g. ``backoff_base``, ``max_concurrency``)."""

    name = "api"

    def __init__(
        self, context: ComparatorContext, *, backend_options: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(context)
        self.backend = build_api_backend(self.args, self.seed, **dict(backend_options or {}))

    def policy_for(self, slot: int) -> str:
        return API_POLICY

    def same_tokenizer_for(self, slot: int) -> bool:
        return False

    def request_metadata(self, item: Any, slot: int) -> dict:
        return {"agent_idx": slot, "batch_item": item}

    def _generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Any]:
        return self.backend.generate_or_errors(requests, params)

    @property
    def stats(self) -> dict[str, int]:
        """The backend's request counters (requests, retries, rate_limited, failed_requests, ...)."""
        return dict(self.backend.stats)

    def close(self) -> None:
        self.backend = None
