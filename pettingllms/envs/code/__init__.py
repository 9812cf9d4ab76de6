"""Code: write a program (or a function) that passes a benchmark problem's tests.

The environment (:class:`CodeEnv`) and its agents (the coder :class:`CodeGenerationAgent`, the tester
:class:`UnitTestGenerationAgent`, the L0 coder :class:`CodeSingleAgent`), the evidence behind the tester's
reward (:mod:`~pettingllms.envs.code.evidence`), its scripted policies, and the
data side: the normalised :class:`CodeProblem` record and its JSONL layout, the loaders of APPS,
CodeContests, LiveCodeBench, HumanEval and MBPP from local files, and the restricted unpickler
LiveCodeBench's private tests need.
"""

from pettingllms.envs.code.agents import CodeGenerationAgent, CodeSingleAgent, UnitTestGenerationAgent
from pettingllms.envs.code.data import (
    DATASETS,
    CodeDataError,
    CodeProblem,
    humaneval_data_path,
    load_apps,
    load_codecontests,
    load_humaneval,
    load_livecodebench,
    load_mbpp,
    load_problems,
    normalised_path,
    read_jsonl,
    read_rows,
    write_jsonl,
)
from pettingllms.envs.code.env import CodeConfig, CodeEnv, CodeState, Judged
from pettingllms.envs.code.scripted import CodeOraclePolicy, WrongCodePolicy
from pettingllms.envs.code.unpickle import (
    RestrictedUnpickler,
    UnsafePickleError,
    decode_private_tests,
    restricted_loads,
)

__all__ = [
    "DATASETS",
    "CodeConfig",
    "CodeDataError",
    "CodeEnv",
    "CodeGenerationAgent",
    "CodeOraclePolicy",
    "CodeProblem",
    "CodeSingleAgent",
    "CodeState",
    "Judged",
    "RestrictedUnpickler",
    "UnitTestGenerationAgent",
    "UnsafePickleError",
    "WrongCodePolicy",
    "decode_private_tests",
    "humaneval_data_path",
    "load_apps",
    "load_codecontests",
    "load_humaneval",
    "load_livecodebench",
    "load_mbpp",
    "load_problems",
    "normalised_path",
    "read_jsonl",
    "read_rows",
    "restricted_loads",
    "write_jsonl",
]
