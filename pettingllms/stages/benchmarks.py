"""Several evaluation benchmarks in one run: the ``eval.benchmarks`` mapping. Declared with the config
(:mod:`pettingllms.config.benchmarks`, which the config check uses); this module keeps the stages' import path."""

from pettingllms.config.benchmarks import (
    EVAL_KEYS,
    GENERATION_KEYS,
    Benchmark,
    benchmark_configs,
    env_eval_fields,
    may_differ_text,
    team_differences,
)

__all__ = [
    "EVAL_KEYS",
    "GENERATION_KEYS",
    "Benchmark",
    "benchmark_configs",
    "env_eval_fields",
    "may_differ_text",
    "team_differences",
]
