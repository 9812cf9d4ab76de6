"""The training system past one process, on Ray (``run.backend: ray``; see docs/scaling.md).

- EnvWorkers: Ray actors that own environment instances, their sandbox and the tree-sampling copies, and
  run the decision-point loop for their shard of a step's problems, on fractional CPUs.
- RolloutWorkers: one actor (group) per policy holding its generation backend on its devices, refreshed
  with new weights after every update; each completion carries the weights version it was sampled with.
- UpdateWorkers: one actor group per policy doing its AT-GRPO / GRPO / SFT update data-parallel across its
  devices and pushing the new weights (or LoRA adapters) to its RolloutWorkers.
- placement (:mod:`pettingllms.workers.placement`): which devices each policy's workers take, as Ray
  placement-group bundles, and the check that the cluster holds them, before anything starts.
- plan (:mod:`pettingllms.workers.memory`): the per-device memory estimate behind ``pettingllms plan``.
- the system (:mod:`pettingllms.workers.system`): :class:`RaySystem` starts the workers of one RL stage and
  gives the trainer its :class:`WorkerEngine` (rollouts sharded over the EnvWorkers, merged into the
  one-process batch) and one :class:`RemoteUpdater` per policy; :func:`stage_workers` is what a stage calls.

Nothing here imports Ray at module level.
"""

from pettingllms.workers.engine import WorkerEngine, WorkerFailure, merge_worker_batches, shard_problem_ids
from pettingllms.workers.env_worker import EnvWorker, WorkerBatch
from pettingllms.workers.memory import (
    DeviceRow,
    ModelShape,
    RunPlan,
    count_parameters,
    device_capacity,
    lora_parameters,
    measure_prompt_tokens,
    plan_run,
)
from pettingllms.workers.placement import (
    Placement,
    PlacementError,
    PolicyPlacement,
    available_resources,
    check_backend_config,
    check_fits,
    placement_from_config,
    policy_names,
)
from pettingllms.workers.rollout_worker import RemoteBackend, RolloutWorker, install_weights, trainable_state
from pettingllms.workers.stage import RAY_STAGES, WorkerSync, attach, stage_workers
from pettingllms.workers.system import RaySystem, require_ray
from pettingllms.workers.update_worker import RemoteState, RemoteUpdater, UpdateWorker, shard_rows

__all__ = [
    "DeviceRow",
    "EnvWorker",
    "ModelShape",
    "Placement",
    "PlacementError",
    "PolicyPlacement",
    "RAY_STAGES",
    "RaySystem",
    "RemoteBackend",
    "RemoteState",
    "RemoteUpdater",
    "RolloutWorker",
    "RunPlan",
    "UpdateWorker",
    "WorkerBatch",
    "WorkerEngine",
    "WorkerFailure",
    "WorkerSync",
    "attach",
    "available_resources",
    "check_backend_config",
    "check_fits",
    "count_parameters",
    "device_capacity",
    "install_weights",
    "lora_parameters",
    "measure_prompt_tokens",
    "merge_worker_batches",
    "placement_from_config",
    "plan_run",
    "policy_names",
    "require_ray",
    "shard_problem_ids",
    "shard_rows",
    "stage_workers",
    "trainable_state",
]
