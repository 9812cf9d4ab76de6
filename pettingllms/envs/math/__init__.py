"""Math: a tool agent computes, a reasoner answers, the environment verifies for the rewards (the seed's math
workflow; the agents never see a verdict).

The environment (:class:`MathEnv`) and its agents (the tool agent :class:`ToolGenerationAgent`, the reasoner
:class:`ReasoningAgent`, the L0 :class:`MathSingleAgent`), its scripted policies, the answer parsers, the safe
calculator, the answer check (``math-verify`` behind :func:`verify_answer`, in a pool of worker processes, each
check with its own deadline), the rewards, the generated ``arith`` task, and the loaders of GSM8K, MATH /
MATH-500, AIME, OlympiadBench, POLARIS and DAPO-Math from local files into the normalised :class:`MathProblem`
layout.
"""

from pettingllms.envs.math.agents import MathSingleAgent, ReasoningAgent, ToolGenerationAgent
from pettingllms.envs.math.answers import extract_answer, last_boxed
from pettingllms.envs.math.arith import ARITH_LEVELS, generate, python_program
from pettingllms.envs.math.calculator import CalculatorError, evaluate, format_number
from pettingllms.envs.math.data import (
    DATASETS,
    MathDataError,
    MathProblem,
    load_problems,
    read_jsonl,
    write_jsonl,
)
from pettingllms.envs.math.env import MathConfig, MathEnv, MathState, ToolRun
from pettingllms.envs.math.scripted import MathOraclePolicy, RandomMathPolicy, WrongMathPolicy
from pettingllms.envs.math.verify import AnswerVerifier, Check, answers_agree, check_answer, verify_answer

__all__ = [
    "ARITH_LEVELS",
    "DATASETS",
    "AnswerVerifier",
    "CalculatorError",
    "Check",
    "MathConfig",
    "MathDataError",
    "MathEnv",
    "MathOraclePolicy",
    "MathProblem",
    "MathSingleAgent",
    "MathState",
    "RandomMathPolicy",
    "ReasoningAgent",
    "ToolGenerationAgent",
    "ToolRun",
    "WrongMathPolicy",
    "answers_agree",
    "check_answer",
    "evaluate",
    "extract_answer",
    "format_number",
    "generate",
    "last_boxed",
    "load_problems",
    "python_program",
    "read_jsonl",
    "verify_answer",
    "write_jsonl",
]
