"""Agent protocol, the code-runner contract for env workers, and failure kinds."""

from pettingllms.agents.base import PROMPT_STYLES, Agent, ChatMessages, Prompt, build_prompt
from pettingllms.agents.code_runner import EXECUTION_STATUSES, CodeRunner, ExecutionResult
from pettingllms.agents.failures import (
    MODEL_FAILURES,
    FailureBudget,
    InfrastructureError,
    InfrastructureFailureRateExceeded,
    NotCopyableError,
    ParseError,
    StepTimeoutError,
    ToolConfigurationError,
    failure_rate,
)

__all__ = [
    "Agent",
    "ChatMessages",
    "CodeRunner",
    "EXECUTION_STATUSES",
    "ExecutionResult",
    "FailureBudget",
    "InfrastructureError",
    "InfrastructureFailureRateExceeded",
    "MODEL_FAILURES",
    "NotCopyableError",
    "PROMPT_STYLES",
    "ParseError",
    "Prompt",
    "StepTimeoutError",
    "ToolConfigurationError",
    "build_prompt",
    "failure_rate",
]
