"""The multi-agent rollout engine: decision points, the router, tree and independent sampling, transcripts.

>>> from pettingllms.execution import (
...     EngineConfig, PolicyConfig, RolloutEngine, build_policy, build_router, tensorize)
>>> policy = build_policy(PolicyConfig(policy_level="L1", model="test-tiny"), ["tool", "plan"])
>>> engine = RolloutEngine.from_registry(
...     "plan_path", {"rows": 4, "cols": 4, "turn_order": ["tool", "plan"], "max_turns": 2},
...     build_router(policy), EngineConfig(num_generations=2, max_completion_length=16))
>>> batch = engine.rollout(problem_ids=[0, 1], step=0)
>>> groups = batch.groups()            # {GroupKey(problem, turn, agent_index): [K samples]}
>>> tensors = tensorize(batch.samples, pad_token_id=policy.handle("shared").tokenizer.pad_token_id)
"""

from pettingllms.execution.continuation import credit_return, global_increments
from pettingllms.execution.engine import SAMPLING_MODES, EngineConfig, RolloutEngine
from pettingllms.execution.independent import EvalResult, assign_returns, summarize_eval
from pettingllms.execution.policies import (
    POLICY_LEVELS,
    EnvContext,
    MixturePolicy,
    PolicyConfig,
    ScriptedBackend,
    agent_policy_map,
    build_policy,
    build_router,
    level_turn_order,
    reseed_scripted,
)
from pettingllms.execution.router import Router
from pettingllms.execution.samples import (
    TRAJECTORY_RETURNS,
    GroupKey,
    PolicyTensors,
    ProblemOutcome,
    RolloutBatch,
    Sample,
    group_samples,
    member_rewards,
    samples_by_policy,
    tensorize,
    trajectory_return,
)
from pettingllms.execution.transcripts import (
    TRANSCRIPT_FILE,
    TranscriptWriter,
    episode_sampled,
    transcript_record,
)
from pettingllms.execution.tree import fresh_copies, select_branch, selection_rng

__all__ = [
    "POLICY_LEVELS",
    "SAMPLING_MODES",
    "TRAJECTORY_RETURNS",
    "TRANSCRIPT_FILE",
    "EngineConfig",
    "EnvContext",
    "EvalResult",
    "GroupKey",
    "MixturePolicy",
    "PolicyConfig",
    "PolicyTensors",
    "ProblemOutcome",
    "RolloutBatch",
    "RolloutEngine",
    "Router",
    "Sample",
    "ScriptedBackend",
    "TranscriptWriter",
    "agent_policy_map",
    "assign_returns",
    "build_policy",
    "build_router",
    "credit_return",
    "episode_sampled",
    "fresh_copies",
    "global_increments",
    "group_samples",
    "level_turn_order",
    "member_rewards",
    "reseed_scripted",
    "samples_by_policy",
    "select_branch",
    "selection_rng",
    "summarize_eval",
    "tensorize",
    "trajectory_return",
    "transcript_record",
]
