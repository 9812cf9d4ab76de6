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

Nothing here imports Ray at module level.
"""

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

__all__ = [
    "DeviceRow",
    "ModelShape",
    "Placement",
    "PlacementError",
    "PolicyPlacement",
    "RunPlan",
    "available_resources",
    "check_backend_config",
    "check_fits",
    "count_parameters",
    "device_capacity",
    "lora_parameters",
    "measure_prompt_tokens",
    "placement_from_config",
    "plan_run",
    "policy_names",
]
