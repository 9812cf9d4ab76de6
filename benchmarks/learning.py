"""Proof that training learns: Plan-Path success before and after RL, single agent vs multi-agent.

On a small Plan-Path (4x4, 20 % walls, 3 turns) with the built-in ``small`` model, per seed:

1. **Warm start** (cached): the ``small`` preset (initialised with the seed) fine-tuned on oracle
   demonstrations of *every* role (``single`` from the L0 workflow, ``tool`` and ``plan`` from the
   multi-agent one) with :func:`pettingllms.trainer.sft.sft_warm_start`, so that all methods start from the
   same weights: L0 and L1 use that model, L3 gives each role a copy, L2 puts one LoRA adapter per role
   on it. Its held-out success is the "start", measured for both workflows.
2. **RL cells** (method x seed), each from the warm start, each with the same budget of sampled
   completions (every completion the RL rollouts draw is counted; evaluation is not):
   ``grpo_l0`` single-agent GRPO (L0, independent sampling), ``at_grpo_l1`` AT-GRPO with one shared
   model (tree sampling), ``at_grpo_l3`` AT-GRPO with one model per role, ``at_grpo_l2`` one LoRA
   adapter per role. A cell runs training steps until its completion count reaches the budget, so
   the counts agree within one step's worth.
3. **Evaluation**: success over ``eval_instances`` held-out instances whose seeds ``[10**6, 10**6 + N)``
   are disjoint from every training seed (asserted): the mean over ``eval_samples`` trajectories per
   instance at ``eval_temperature``, with greedy success (one trajectory at temperature 0) next to it.
   Each cell saves its final policy to ``<results>/cache/<cell>/final`` for ``learning_failures.py``.

Every cell writes ``<results>/<cell>.json`` atomically when done; a rerun skips cells whose settings
match, so the table can be completed across sessions. Model folders go under ``<results>/cache/``
(large, not for git). ``--smollm`` adds one tiny run on the ``smollm2-135m-instruct`` preset (AT-GRPO
L1, no warm start, 2 steps x 2 problems, K = 2) showing the pipeline runs on a real pretrained model.

    .venv/bin/python -m benchmarks.learning                       # everything, 3 seeds
    .venv/bin/python -m benchmarks.learning --seeds 0 --methods at_grpo_l1 --budget-minutes 3
    .venv/bin/python -m benchmarks.learning --rl learning_rate=2e-4 --rl at_grpo_l1.num_generations=8
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_RESULTS = ROOT / "benchmarks" / "results" / "learning"
SUMMARY_PATH = ROOT / "benchmarks" / "results" / "learning.json"
WORKFLOW = ("tool", "plan")  # the multi-agent workflow (L1-L3); L0 plays the env's `single` role alone
TOOLS = {"tool": ["simulate"], "plan": [], "single": []}  # tools each role may call
TARGET_GAIN = 0.30  # AT-GRPO success minus the multi-agent start
TARGET_MARGIN = 0.10  # AT-GRPO success minus single-agent GRPO's, at equal samples


@dataclass(frozen=True)
class Method:
    """One row of the table: a policy level, a sampling mode and the roles that act."""

    name: str
    label: str
    policy_level: str
    sampling_mode: str
    roles: tuple[str, ...]


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("grpo_l0", "single-agent GRPO (L0)", "L0", "independent", ("single",)),
        Method("at_grpo_l1", "AT-GRPO, shared policy (L1)", "L1", "tree", WORKFLOW),
        Method("at_grpo_l3", "AT-GRPO, model per role (L3)", "L3", "tree", WORKFLOW),
        Method("at_grpo_l2", "AT-GRPO, LoRA per role (L2)", "L2", "tree", WORKFLOW),
    )
}
DEFAULT_METHODS = ("grpo_l0", "at_grpo_l1", "at_grpo_l3")


@dataclass(frozen=True)
class TaskSettings:
    """The task, the model, the warm start and the held-out set (shared by every cell of a seed)."""

    model: str = "small"
    rows: int = 4
    cols: int = 4
    wall_density: float = 0.2
    max_turns: int = 3
    invalid_action_penalty: float = 0.1  # the environment's default: per blocked move of an action
    # Warm start (defaults.yaml's measured budget: ~25 % (L0) / ~27 % (L1) greedy start on 4x4).
    demo_problems: int = 200
    demo_seed_start: int = 0
    sft_epochs: int = 3
    sft_learning_rate: float = 2e-3
    sft_batch_size: int = 8
    sft_max_length: int = 1024
    # Fraction of demonstration episodes whose first 1..max_turns-1 turns are played by a random policy
    # (not recorded) before the oracle takes over, so the warm start also sees later-turn prompts (tool
    # reports, failed moves); 0: the pipeline's plain oracle demonstrations, which all end in turn 0.
    demo_late_turn_fraction: float = 0.5
    # Most simulate calls in a tool-agent demonstration: the oracle's path among random ones, so the warm
    # start tries several candidates (the env keeps the best as the proposal); 1: the oracle's path alone.
    demo_tool_candidates: int = 3
    # Plan-agent demonstrations answer `#### proposal` (play the tool's proposal) when the proposal solves.
    demo_accept_proposals: bool = True
    # Training and held-out instances.
    train_seed_range: tuple[int, int] = (0, 100_000)
    eval_seed_start: int = 1_000_000
    eval_instances: int = 50
    # Success = mean over `eval_samples` trajectories per instance at `eval_temperature` (the issue's `eval`
    # stage); greedy success (one trajectory at temperature 0) is reported next to it.
    eval_samples: int = 4
    eval_temperature: float = 1.0
    max_completion_length: int = 48

    def env_config(self, turn_order: Sequence[str] = WORKFLOW) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "cols": self.cols,
            "wall_density": self.wall_density,
            "max_turns": self.max_turns,
            "invalid_action_penalty": self.invalid_action_penalty,
            "turn_order": list(turn_order),
        }

    @property
    def demo_seeds(self) -> range:
        return range(self.demo_seed_start, self.demo_seed_start + self.demo_problems)

    @property
    def eval_seeds(self) -> range:
        return range(self.eval_seed_start, self.eval_seed_start + self.eval_instances)

    def warm_start_key(self, seed: int) -> str:
        """Hash of everything the warm-start checkpoint and its start numbers depend on (the reward
        settings change neither: demonstrations come from the oracle, success is reaching the goal)."""
        values = dataclasses.asdict(self)
        values.pop("invalid_action_penalty")
        return settings_hash({"task": values, "seed": seed})


@dataclass(frozen=True)
class RLSettings:
    """RL hyper-parameters of one cell (ATGRPOConfig names) and its sample budget."""

    sample_budget: int = 4500  # sampled completions during RL, equal for every method
    num_generations: int = 4
    problems_per_step: int = 4
    learning_rate: float = 1e-4
    temperature: float = 1.0
    loss_type: str = "dapo"
    # Dr. GRPO's unscaled advantages: in pilots, group-std scaling blew up the small reward differences
    # between failed candidates and drove the policy to one-move answers within ~300 completions.
    scale_rewards: str = "none"
    epsilon: float = 0.2
    beta: float = 0.0  # KL to the frozen warm start (0: no reference model)
    num_iterations: int = 1
    per_device_train_batch_size: int = 16
    gradient_accumulation_steps: int = 1
    max_grad_norm: float = 1.0
    alpha: float | None = None  # None: the environment's own (1.0)
    lr_scheduler_type: str = "constant"
    eval_every: int = 1500  # also evaluate after every this many completions (0: only at the end)
    lora_r: int = 8
    lora_alpha: int = 16
    greedy_selection: bool = True  # tree rollouts continue the best candidate (False: a random one)


# Settings added after cells were recorded: left out of a cell's key while at these values, so the
# finished cells (which ran with them) still match.
KEY_OMITTED_DEFAULTS = {"greedy_selection": True}


# ================================================================================= pure helpers


def settings_hash(values: Mapping[str, Any]) -> str:
    """Short stable hash of a JSON-able mapping (keys sorted)."""
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:12]


def check_heldout(train_ranges: Mapping[str, Sequence[int] | range], eval_seeds: range) -> None:
    """Assert that every training seed range (``[start, stop)`` pairs or ranges) misses ``eval_seeds``."""
    for name, seeds in train_ranges.items():
        seeds = seeds if isinstance(seeds, range) else range(int(seeds[0]), int(seeds[1]))
        overlap = range(max(seeds.start, eval_seeds.start), min(seeds.stop, eval_seeds.stop))
        assert len(overlap) == 0, (
            f"{name} [{seeds.start}, {seeds.stop}) overlaps the held-out seeds "
            f"[{eval_seeds.start}, {eval_seeds.stop}) at {list(overlap[:5])}"
        )


def check_task_heldout(task: TaskSettings, train_seed_range: Sequence[int]) -> None:
    """Assert that the held-out seeds miss both the RL training seeds and the demonstration seeds."""
    check_heldout({"RL train seeds": train_seed_range, "demonstration seeds": task.demo_seeds}, task.eval_seeds)


def completions_per_step_bounds(
    sampling_mode: str, num_agents: int, k: int, problems: int, max_turns: int
) -> tuple[int, int]:
    """(fewest, most) completions one RL step samples.

    Tree: K per (problem, turn, agent) decision; an episode ends at the earliest after the last agent of
    turn 0 acts. Independent: K trajectories per problem, one completion per agent decision.
    Both: at most ``max_turns * num_agents`` decisions per problem.
    """
    if sampling_mode not in ("tree", "independent"):
        raise ValueError(f"`sampling_mode` must be 'tree' or 'independent', got {sampling_mode!r}")
    for name, value in (("num_agents", num_agents), ("k", k), ("problems", problems), ("max_turns", max_turns)):
        if value < 1:
            raise ValueError(f"`{name}` must be >= 1, got {value}")
    per_decision = k * problems
    return per_decision * num_agents, per_decision * num_agents * max_turns


def max_steps_for_budget(budget: int, fewest_per_step: int) -> int:
    """Steps that certainly reach ``budget`` completions: ``ceil(budget / fewest_per_step)``."""
    if budget < 1 or fewest_per_step < 1:
        raise ValueError(f"`budget` and `fewest_per_step` must be >= 1, got {budget}, {fewest_per_step}")
    return math.ceil(budget / fewest_per_step)


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _display(path: Path) -> str:
    """``path`` relative to the repository root where it lies inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def _points(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:+.0f}"


def tools_text(roles: Sequence[str]) -> str:
    """``tool: simulate; plan: none`` for a row's agents."""
    return "; ".join(f"{role}: {', '.join(TOOLS[role]) or 'none'}" for role in roles)


def build_table(
    seeds: Sequence[int], warm: Mapping[int, Mapping[str, Any]], cells: Mapping[tuple[str, int], Mapping[str, Any]],
    methods: Sequence[str],
) -> tuple[list[dict[str, Any]], str]:
    """Rows (dicts) and the markdown table: the two starts, then each RL method over ``seeds``."""
    rows: list[dict[str, Any]] = []

    def start_row(label: str, key: str, roles: Sequence[str]) -> dict[str, Any]:
        values = {s: warm[s][key] for s in seeds if s in warm}
        greedy = [warm[s][key + "_greedy"] for s in seeds if s in warm and key + "_greedy" in warm[s]]
        return {
            "row": label, "tools": tools_text(roles), "per_seed": values, "mean": mean(list(values.values())),
            "greedy_mean": mean(greedy),
            "start_mean": None, "gain": None, "completions": 0, "minutes": None,
        }

    rows.append(start_row("multi-agent workflow before RL (warm start)", "start_multi", WORKFLOW))
    rows.append(start_row("single agent before RL (warm start)", "start_single", ("single",)))
    for name in methods:
        method = METHODS[name]
        done = {s: cells[(name, s)] for s in seeds if (name, s) in cells}
        values = {s: c["success_after"] for s, c in done.items()}
        starts = [c["success_before"] for c in done.values()]
        after, start = mean(list(values.values())), mean(starts)
        rows.append({
            "row": method.label, "method": name, "tools": tools_text(method.roles), "per_seed": values,
            "mean": after, "start_mean": start,
            "greedy_mean": mean([c["greedy_after"] for c in done.values() if "greedy_after" in c]),
            "gain": None if after is None else after - start,
            "completions": mean([c["completions"] for c in done.values()]),
            "minutes": mean([c["seconds_total"] / 60 for c in done.values()]),
        })
    header = ["Row", "Agents: tools", *[f"seed {s}" for s in seeds], "mean", "Δ vs start (points)", "greedy mean",
              "RL completions / cell", "min / cell"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        completions = row["completions"]
        lines.append("| " + " | ".join([
            row["row"], row["tools"], *[_pct(row["per_seed"].get(s)) for s in seeds], _pct(row["mean"]),
            _points(row["gain"]), _pct(row["greedy_mean"]), "—" if not completions else f"{completions:.0f}",
            "—" if row["minutes"] is None else f"{row['minutes']:.1f}",
        ]) + " |")
    return rows, "\n".join(lines)


def target_checks(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The issue's targets per AT-GRPO row: gain over the multi-agent start >= 30 points, and success
    minus single-agent GRPO's >= 10 points (None where a number is missing)."""
    by_method = {r.get("method"): r for r in rows if r.get("method")}
    multi_start = rows[0]["mean"]
    grpo = by_method.get("grpo_l0", {}).get("mean")
    out: dict[str, Any] = {}
    for name, row in by_method.items():
        if name == "grpo_l0" or row["mean"] is None:
            continue
        gain = None if multi_start is None else row["mean"] - multi_start
        margin = None if grpo is None else row["mean"] - grpo
        out[name] = {
            "gain_over_multi_start": gain, "gain_target": TARGET_GAIN,
            "gain_met": None if gain is None else gain >= TARGET_GAIN - 1e-9,
            "margin_over_grpo_l0": margin, "margin_target": TARGET_MARGIN,
            "margin_met": None if margin is None else margin >= TARGET_MARGIN - 1e-9,
        }
    return out


# ================================================================================= jobs (run in a subprocess)


def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def _policy(level: str, model_path: str, seed: int, rl: RLSettings | None = None):
    from pettingllms.execution import PolicyConfig, build_policy

    lora = {"lora_r": rl.lora_r, "lora_alpha": rl.lora_alpha} if rl is not None else {}
    config = PolicyConfig(policy_level=level, model=model_path, seed=seed, dtype="float32", **lora)
    return build_policy(config, WORKFLOW)


def _trainer(method: Method, policy, task: TaskSettings, rl: RLSettings, seed: int, output_dir: Path, max_steps: int):
    from pettingllms.trainer.at_grpo import ATGRPOTrainer
    from pettingllms.trainer.at_grpo_config import ATGRPOConfig

    config = ATGRPOConfig(
        policy_level=method.policy_level,
        sampling_mode=method.sampling_mode,
        greedy_selection=rl.greedy_selection,
        num_generations=rl.num_generations,
        problems_per_step=rl.problems_per_step,
        train_seed_range=list(task.train_seed_range),
        max_steps=max_steps,
        learning_rate=rl.learning_rate,
        lr_scheduler_type=rl.lr_scheduler_type,
        loss_type=rl.loss_type,
        scale_rewards=rl.scale_rewards,
        epsilon=rl.epsilon,
        beta=rl.beta,
        num_iterations=rl.num_iterations,
        per_device_train_batch_size=rl.per_device_train_batch_size,
        gradient_accumulation_steps=rl.gradient_accumulation_steps,
        max_grad_norm=rl.max_grad_norm,
        temperature=rl.temperature,
        max_completion_length=task.max_completion_length,
        alpha=rl.alpha,
        output_dir=str(output_dir),
        seed=seed,
        disable_tqdm=True,
    )
    agent_options = {"tool": {"tools": TOOLS["tool"]}} if "tool" in method.roles else None
    return ATGRPOTrainer(
        config, policy=policy, env_name="plan_path", env_config=task.env_config(), agent_options=agent_options
    )


def _evaluate(trainer, task: TaskSettings) -> dict[str, float]:
    """Held-out success: ``sampled`` (mean over ``eval_samples`` trajectories at ``eval_temperature``) and
    ``greedy`` (one trajectory at temperature 0)."""
    check_task_heldout(task, trainer.config.train_seed_range)
    ids = list(task.eval_seeds)
    sampled = trainer.evaluate(ids, num_samples=task.eval_samples, temperature=task.eval_temperature, log=False)
    greedy = trainer.evaluate(ids, num_samples=1, temperature=0.0, log=False)
    return {"sampled": sampled["eval/success_rate"], "greedy": greedy["eval/success_rate"]}


def detour_turns(instance_seed: int, fraction: float, max_turns: int, seed: int) -> int:
    """Random-play turns before the oracle takes over in a demonstration episode: 0 with probability
    ``1 - fraction``, else uniform in ``1 .. max_turns - 1`` (drawn from a generator seeded by both seeds)."""
    import random

    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"`demo_late_turn_fraction` must be in [0, 1], got {fraction}")
    rng = random.Random(f"detour-{seed}-{instance_seed}")
    if max_turns < 2 or rng.random() >= fraction:
        return 0
    return rng.randint(1, max_turns - 1)


class DetourOracle:
    """Random answers (with some malformed ones) for the first ``detour`` turns, not recorded; then the
    oracle's answers, recorded as ``(role, prompt, response)``."""

    def __init__(self, detour: int, seed: int, tool_candidates: int = 1, accept_proposals: bool = False) -> None:
        from pettingllms.scripted import OraclePolicy, RandomPolicy

        self.detour = detour
        self.oracle = OraclePolicy(tool_candidates=tool_candidates, seed=seed, accept_proposals=accept_proposals)
        self.random = RandomPolicy(seed=seed, malformed_prob=0.25)
        self.records: list[tuple[str, Any, str]] = []

    def respond(self, agent: Any, env: Any) -> str:
        if env.state.turn < self.detour:
            return self.random.respond(agent, env)
        response = self.oracle.respond(agent, env)
        self.records.append((agent.role, __import__("copy").deepcopy(agent.prompt), response))
        return response


def late_turn_demonstrations(
    task: TaskSettings, turn_order: Sequence[str], agent_options: Mapping[str, Any] | None, seed: int
) -> dict[str, list[Any]]:
    """Oracle demonstrations per role on the demonstration seeds, a ``demo_late_turn_fraction`` of them
    after a random detour (:func:`detour_turns`), recorded through the agents' own prompts."""
    import asyncio

    from pettingllms.registry import make_agents, make_env
    from pettingllms.scripted import play_episode
    from pettingllms.trainer.demonstrations import Demonstration

    env = make_env("plan_path", task.env_config(turn_order))
    agents = make_agents("plan_path", env.config.turn_order, agent_options)
    by_role: dict[str, list[Demonstration]] = {a.role: [] for a in agents}

    async def run() -> None:
        try:
            for instance in task.demo_seeds:
                detour = detour_turns(instance, task.demo_late_turn_fraction, task.max_turns, seed)
                recorder = DetourOracle(detour, seed=instance, tool_candidates=task.demo_tool_candidates,
                                        accept_proposals=task.demo_accept_proposals)
                result = await play_episode(env, agents, recorder, instance)
                if recorder.records and not result.success:
                    raise RuntimeError(f"the oracle did not solve demonstration instance {instance}")
                for role, prompt, response in recorder.records:
                    by_role[role].append(Demonstration(prompt, response))
        finally:
            await env.close()

    asyncio.run(run())
    return by_role


def job_warm_start(seed: int, task: TaskSettings, results: Path) -> dict[str, Any]:
    """The seed's warm-start checkpoint (oracle demonstrations of every role, one shared model) and its
    start success for the multi-agent workflow and the single agent; cached by settings."""
    from comlrl.atomic_io import atomic_replace_dir, atomic_write_json
    from comlrl.models import build_preset
    from comlrl.policy import MultiAgentPolicy
    from pettingllms.trainer.demonstrations import make_demonstrations
    from pettingllms.trainer.sft import sft_warm_start

    record_path = results / f"warmstart-seed{seed}.json"
    key = task.warm_start_key(seed)
    model_dir = results / "cache" / f"warmstart-seed{seed}"
    t0 = time.perf_counter()
    check_heldout({"demonstration seeds": task.demo_seeds, "RL train seeds": task.train_seed_range}, task.eval_seeds)
    tool_options = {"tool": {"tools": TOOLS["tool"]}}
    if task.demo_late_turn_fraction > 0:
        demos = late_turn_demonstrations(task, WORKFLOW, tool_options, seed)
        demos.update(late_turn_demonstrations(task, ("single",), None, seed))
    else:  # the pipeline's `sft` stage demonstrations
        demos = make_demonstrations("plan_path", task.env_config(WORKFLOW), task.demo_seeds,
                                    agent_options=tool_options, held_out_seeds=task.eval_seeds,
                                    tool_candidates=task.demo_tool_candidates,
                                    accept_proposals=task.demo_accept_proposals)
        demos.update(make_demonstrations("plan_path", task.env_config(("single",)), task.demo_seeds,
                                         held_out_seeds=task.eval_seeds))
    demo_s = time.perf_counter() - t0
    base = build_preset(task.model, seed=seed)
    roles = ["single", *WORKFLOW]
    policy = MultiAgentPolicy.shared(str(base), roles, seed=seed, dtype=__import__("torch").float32)
    t1 = time.perf_counter()
    metrics = sft_warm_start(
        policy, demos, epochs=task.sft_epochs, learning_rate=task.sft_learning_rate,
        batch_size=task.sft_batch_size, seed=seed, max_length=task.sft_max_length, progress=False,
    )
    sft_s = time.perf_counter() - t1
    handle = policy.handle("shared")
    tmp = model_dir.with_name(model_dir.name + ".tmp")
    handle.model.save_pretrained(tmp)
    handle.tokenizer.save_pretrained(tmp)
    atomic_replace_dir(tmp, model_dir)
    del policy, handle

    t2 = time.perf_counter()
    starts = {}
    for name, level_method in (("start_multi", METHODS["at_grpo_l1"]), ("start_single", METHODS["grpo_l0"])):
        policy = _policy(level_method.policy_level, str(model_dir), seed)
        trainer = _trainer(level_method, policy, task, RLSettings(), seed, results / "cache" / "eval-tmp", 1)
        result = _evaluate(trainer, task)
        starts[name], starts[name + "_greedy"] = result["sampled"], result["greedy"]
    record = {
        "seed": seed, "settings_key": key, "task": dataclasses.asdict(task), "model_dir": str(model_dir),
        "demonstrations": {role: len(v) for role, v in demos.items()},
        "sft_loss_first": metrics.get("sft/loss_first"), "sft_loss_last": metrics.get("sft/loss_last"),
        **starts, "eval_instances": task.eval_instances,
        "seconds": {"demonstrations": demo_s, "sft": sft_s, "eval": time.perf_counter() - t2,
                    "total": time.perf_counter() - t0},
    }
    atomic_write_json(record_path, record)
    return record


def job_cell(method_name: str, seed: int, task: TaskSettings, rl: RLSettings, results: Path, time_cap_s: float):
    """One RL cell from the seed's warm start: train until the completion budget, then evaluate."""
    from comlrl.atomic_io import atomic_write_json

    method = METHODS[method_name]
    warm = json.loads((results / f"warmstart-seed{seed}.json").read_text())
    if warm["settings_key"] != task.warm_start_key(seed):
        raise RuntimeError(f"warm start of seed {seed} is stale; rerun the warm-start job first")
    t0 = time.perf_counter()
    fewest, most = completions_per_step_bounds(
        method.sampling_mode, len(method.roles), rl.num_generations, rl.problems_per_step, task.max_turns
    )
    max_steps = max_steps_for_budget(rl.sample_budget, fewest)
    policy = _policy(method.policy_level, warm["model_dir"], seed, rl)
    run_dir = results / "cache" / f"{method_name}-seed{seed}"
    trainer = _trainer(method, policy, task, rl, seed, run_dir, max_steps)
    before = _evaluate(trainer, task)
    eval_s = time.perf_counter() - t0
    completions, history, curve = 0, [], [{"completions": 0, "success": before["sampled"],
                                           "greedy": before["greedy"]}]
    next_eval = rl.eval_every or None
    stopped_by = "budget"
    train_start = time.perf_counter()
    while completions < rl.sample_budget:
        if time.perf_counter() - t0 > time_cap_s:
            stopped_by = "time_cap"
            break
        metrics = trainer.step()
        drawn = int(metrics["num_samples"] + metrics["dropped_samples"])
        completions += drawn
        history.append({
            "step": trainer.global_step, "completions": drawn, "success_rate": metrics["success_rate"],
            "reward": metrics["reward"], "frac_reward_zero_std": metrics["frac_reward_zero_std"],
            "parse_error_rate": metrics["parse_error_rate"], "mean_length": metrics["completions/mean_length"],
            "step_s": metrics["time/step_s"],
            **{k: v for k, v in metrics.items() if k.startswith("policy/") and k.split("/")[-1] in
               ("loss", "clip_ratio/region_mean", "approx_kl", "entropy", "grad_norm")},
        })
        print(json.dumps({"cell": f"{method_name}-seed{seed}", **history[-1], "total": completions}), flush=True)
        if next_eval is not None and completions >= next_eval and completions < rl.sample_budget:
            point = _evaluate(trainer, task)
            curve.append({"completions": completions, "success": point["sampled"], "greedy": point["greedy"]})
            next_eval += rl.eval_every
    train_s = time.perf_counter() - train_start
    after = _evaluate(trainer, task)
    trainer.save_model(run_dir / "final")  # for failure analysis (cache/, not committed)
    curve.append({"completions": completions, "success": after["sampled"], "greedy": after["greedy"]})
    result = {
        "method": method_name, "label": method.label, "seed": seed, "policy_level": method.policy_level,
        "sampling_mode": method.sampling_mode, "roles": list(method.roles),
        "tools": {r: TOOLS[r] for r in method.roles}, "settings_key": cell_key(method_name, seed, task, rl),
        "rl": dataclasses.asdict(rl), "task": dataclasses.asdict(task),
        "warm_start": {k: warm[k] for k in ("start_multi", "start_single", "model_dir")},
        "success_before": before["sampled"], "success_after": after["sampled"],
        "gain": after["sampled"] - before["sampled"],
        "greedy_before": before["greedy"], "greedy_after": after["greedy"],
        "eval_samples": task.eval_samples, "eval_temperature": task.eval_temperature,
        "completions": completions, "sample_budget": rl.sample_budget, "steps": trainer.global_step,
        "completions_per_step_bounds": [fewest, most], "stopped_by": stopped_by,
        "eval_instances": task.eval_instances, "eval_seeds": [task.eval_seeds.start, task.eval_seeds.stop],
        "train_seed_range": list(task.train_seed_range),
        "curve": curve, "history": history,
        "seconds_train": train_s, "seconds_total": time.perf_counter() - t0, "seconds_eval_before": eval_s,
        "threads": __import__("torch").get_num_threads(),
    }
    atomic_write_json(results / f"{method_name}-seed{seed}.json", result)
    return result


def cell_key(method_name: str, seed: int, task: TaskSettings, rl: RLSettings) -> str:
    rl_values = {k: v for k, v in dataclasses.asdict(rl).items()
                 if not (k in KEY_OMITTED_DEFAULTS and v == KEY_OMITTED_DEFAULTS[k])}
    return settings_hash({"method": method_name, "seed": seed, "task": dataclasses.asdict(task), "rl": rl_values})


def job_smollm(task: TaskSettings, results: Path, eval_instances: int) -> dict[str, Any]:
    """AT-GRPO L1 on the smollm2-135m-instruct preset, no warm start: 2 steps x 2 problems, K = 2."""
    from comlrl.atomic_io import atomic_write_json

    small_task = dataclasses.replace(task, model="smollm2-135m-instruct", eval_instances=eval_instances)
    rl = RLSettings(num_generations=2, problems_per_step=2, learning_rate=1e-5)
    method = METHODS["at_grpo_l1"]
    t0 = time.perf_counter()
    policy = _policy("L1", small_task.model, 0, rl)
    load_s = time.perf_counter() - t0
    trainer = _trainer(method, policy, small_task, rl, 0, results / "cache" / "smollm2-l1", max_steps=2)
    t1 = time.perf_counter()
    before = _evaluate(trainer, small_task)
    eval_before_s = time.perf_counter() - t1
    t2 = time.perf_counter()
    history = trainer.train()
    train_s = time.perf_counter() - t2
    after = _evaluate(trainer, small_task)
    result = {
        "model": small_task.model, "method": "at_grpo_l1", "steps": trainer.global_step, "problems_per_step": 2,
        "num_generations": 2, "learning_rate": rl.learning_rate, "warm_start": False,
        "eval_instances": eval_instances, "success_before": before["sampled"], "success_after": after["sampled"],
        "greedy_before": before["greedy"], "greedy_after": after["greedy"],
        "completions": int(sum(h.get("num_samples", 0) for h in history)),
        "train_success_rate": [h.get("success_rate") for h in history],
        "parse_error_rate": [h.get("parse_error_rate") for h in history],
        "frac_reward_zero_std": [h.get("frac_reward_zero_std") for h in history],
        "mean_completion_length": [h.get("completions/mean_length") for h in history],
        "max_completion_length": small_task.max_completion_length,
        "example_responses": [
            {"role": s.role, "turn": s.turn, "response": s.response, "parse_error": s.parse_error}
            for s in (trainer.last_eval.samples[:4] if trainer.last_eval is not None else [])
        ],
        "seconds": {"load": load_s, "eval_before": eval_before_s, "train": train_s,
                    "total": time.perf_counter() - t0},
        "threads": __import__("torch").get_num_threads(),
    }
    atomic_write_json(results / "smollm2-l1.json", result)
    return result


# ================================================================================= orchestration


def parse_rl_overrides(items: Sequence[str], methods: Sequence[str]) -> dict[str, RLSettings]:
    """``key=value`` (every method) or ``method.key=value`` -> RLSettings per method (types checked)."""
    fields = {f.name: f for f in dataclasses.fields(RLSettings)}
    common: dict[str, Any] = {}
    per: dict[str, dict[str, Any]] = {m: {} for m in methods}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"--rl {item!r}: expected key=value or method.key=value")
        key, raw = item.split("=", 1)
        target = common
        if "." in key:
            method, key = key.split(".", 1)
            if method not in METHODS:
                raise SystemExit(f"--rl {item!r}: unknown method {method!r}; methods: {list(METHODS)}")
            target = per.setdefault(method, {})
        if key not in fields:
            raise SystemExit(f"--rl {item!r}: unknown key {key!r}; keys: {sorted(fields)}")
        default = getattr(RLSettings(), key)
        if raw.lower() in ("none", "null") and default is None:
            value = None
        elif isinstance(default, bool):
            value = raw.lower() in ("1", "true", "yes")
        elif isinstance(default, int):
            value = int(raw)
        elif isinstance(default, float) or key == "alpha":
            value = float(raw)
        else:
            value = raw
        target[key] = value
    return {m: RLSettings(**{**common, **per.get(m, {})}) for m in methods}


def _job_done(path: Path, key: str) -> bool:
    if not path.exists():
        return False
    try:
        return json.loads(path.read_text()).get("settings_key") == key
    except (OSError, json.JSONDecodeError):
        return False


@dataclass
class Job:
    name: str
    argv: list[str]
    result: Path
    key: str | None
    needs: list[str] = field(default_factory=list)


def run_jobs(jobs: Sequence[Job], parallel: int, threads: int, logs: Path) -> dict[str, int]:
    """Run pending jobs as subprocesses, at most ``parallel`` at once, each after the jobs it needs."""
    logs.mkdir(parents=True, exist_ok=True)
    pending = [j for j in jobs if not (j.key is not None and _job_done(j.result, j.key))]
    for j in jobs:
        if j not in pending:
            print(f"[skip] {j.name}: finished ({_display(j.result)})", flush=True)
    finished: set[str] = {j.name for j in jobs if j not in pending}
    failed: set[str] = set()
    running: dict[str, tuple[subprocess.Popen, float, Any]] = {}
    codes: dict[str, int] = {}
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    while pending or running:
        for job in list(pending):
            if len(running) >= parallel:
                break
            if any(n in failed for n in job.needs):
                pending.remove(job)
                failed.add(job.name)
                print(f"[skip] {job.name}: a job it needs failed", flush=True)
                continue
            if all(n in finished for n in job.needs):
                pending.remove(job)
                if job.key is not None and _job_done(job.result, job.key):  # finished by another run meanwhile
                    finished.add(job.name)
                    print(f"[skip] {job.name}: finished ({_display(job.result)})", flush=True)
                    continue
                log = open(logs / f"{job.name}.log", "w")  # noqa: SIM115 - closed when the job ends
                cmd = [sys.executable, "-m", "benchmarks.learning", *job.argv, "--threads", str(threads)]
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
                running[job.name] = (proc, time.perf_counter(), log)
                print(f"[start] {job.name} (pid {proc.pid}, log {log.name})", flush=True)
        time.sleep(2)
        for name, (proc, started, log) in list(running.items()):
            code = proc.poll()
            if code is None:
                continue
            log.close()
            del running[name]
            codes[name] = code
            took = (time.perf_counter() - started) / 60
            if code == 0:
                finished.add(name)
                print(f"[done] {name} in {took:.1f} min", flush=True)
            else:
                failed.add(name)
                print(f"[FAIL] {name} (exit {code}) after {took:.1f} min; see {logs / (name + '.log')}", flush=True)
    return codes


def write_plot(cells: Mapping[tuple[str, int], Mapping[str, Any]], path: Path) -> Path | None:
    """Training success per RL step and held-out curve per cell (one panel each); None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"grpo_l0": "tab:gray", "at_grpo_l1": "tab:blue", "at_grpo_l3": "tab:orange", "at_grpo_l2": "tab:green"}
    for (name, seed), cell in sorted(cells.items()):
        xs, ys, total = [], [], 0
        for h in cell["history"]:
            total += h["completions"]
            xs.append(total)
            ys.append(h["success_rate"])
        label = f"{name} s{seed}"
        axes[0].plot(xs, ys, color=colors.get(name), alpha=0.6, label=label)
        curve = cell["curve"]
        axes[1].plot([c["completions"] for c in curve], [c["success"] for c in curve], "o-",
                     color=colors.get(name), alpha=0.7, label=label)
    axes[0].set(xlabel="RL completions sampled", ylabel="training success (sampled)", title="training rollouts")
    axes[1].set(xlabel="RL completions sampled", ylabel="held-out success (mean of K samples)", title="held-out", ylim=(0, 1))
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    import io

    from comlrl.atomic_io import atomic_write_bytes

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue())


def summarize(args, task: TaskSettings, rls: Mapping[str, RLSettings], results: Path) -> dict[str, Any]:
    warm, cells = {}, {}
    for seed in args.seeds:
        path = results / f"warmstart-seed{seed}.json"
        if _job_done(path, task.warm_start_key(seed)):
            warm[seed] = json.loads(path.read_text())
        for name in args.methods:
            path = results / f"{name}-seed{seed}.json"
            if _job_done(path, cell_key(name, seed, task, rls[name])):
                cells[(name, seed)] = json.loads(path.read_text())
    rows, table = build_table(args.seeds, warm, cells, args.methods)
    targets = target_checks(rows)
    plot = write_plot(cells, results / "learning_curves.png") if cells else None
    smollm_path = results / "smollm2-l1.json"
    smollm = json.loads(smollm_path.read_text()) if smollm_path.exists() else None
    summary = {
        "benchmark": "learning", "task": dataclasses.asdict(task),
        "rl": {name: dataclasses.asdict(rl) for name, rl in rls.items()},
        "seeds": list(args.seeds), "methods": list(args.methods), "rows": rows, "table": table,
        "targets": targets, "warm_starts": {str(s): w for s, w in warm.items()},
        "cells": {f"{n}-seed{s}": {k: v for k, v in c.items() if k != "history"} for (n, s), c in cells.items()},
        "smollm2": smollm, "plot": None if plot is None else _display(plot),
        "cells_parallel": args.cells_parallel, "threads": args.threads,
    }
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), choices=list(METHODS))
    parser.add_argument("--cells-parallel", type=int, default=1, help="jobs run at once (2 cores: 1 or 2)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per job (default 2 // parallel)")
    parser.add_argument("--budget-minutes", type=float, default=6.0,
                        help="intended minutes per cell; a cell stops at 2x this even short of its sample budget")
    parser.add_argument("--eval-instances", type=int, default=None, help="held-out instances (default 50)")
    parser.add_argument("--rl", action="append", default=[], metavar="[METHOD.]KEY=VALUE",
                        help=f"RL setting override; keys: {[f.name for f in dataclasses.fields(RLSettings)]}")
    parser.add_argument("--task", action="append", default=[], metavar="KEY=VALUE",
                        help=f"task/warm-start override; keys: {[f.name for f in dataclasses.fields(TaskSettings)]}")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="folder of the per-cell JSON files")
    parser.add_argument("--summary", type=Path, default=None, help="summary JSON (default benchmarks/results/learning.json)")
    parser.add_argument("--smollm", action="store_true", help="also run the tiny smollm2-135m-instruct run")
    parser.add_argument("--smollm-eval-instances", type=int, default=10)
    parser.add_argument("--no-run", action="store_true", help="only rebuild the table from finished cells")
    # Internal: one job in this process.
    parser.add_argument("--job", choices=["warm_start", "cell", "smollm"], help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads is None:
        args.threads = max(1, 2 // max(1, args.cells_parallel))

    task_overrides = {}
    task_fields = {f.name: f for f in dataclasses.fields(TaskSettings)}
    for item in args.task:
        key, _, raw = item.partition("=")
        if key not in task_fields:
            raise SystemExit(f"--task {item!r}: unknown key {key!r}; keys: {sorted(task_fields)}")
        default = getattr(TaskSettings(), key)
        if isinstance(default, bool):
            if raw.lower() not in ("true", "false", "1", "0"):
                raise SystemExit(f"--task {item!r}: {key} takes true or false")
            task_overrides[key] = raw.lower() in ("true", "1")
        elif isinstance(default, tuple):
            task_overrides[key] = tuple(int(x) for x in raw.split(","))
        else:
            task_overrides[key] = type(default)(raw)
    if args.eval_instances is not None:
        task_overrides["eval_instances"] = args.eval_instances
    task = TaskSettings(**task_overrides)
    if task.eval_instances < 1:
        raise SystemExit(f"`eval_instances` must be >= 1, got {task.eval_instances}")
    all_methods = sorted(set(args.methods) | ({args.method} if args.method else set()))
    rls = parse_rl_overrides(args.rl, all_methods)
    results = args.results.resolve()
    results.mkdir(parents=True, exist_ok=True)

    if args.job:
        _set_threads(args.threads)
        if args.job == "warm_start":
            print(json.dumps(job_warm_start(args.seed, task, results)))
        elif args.job == "cell":
            out = job_cell(args.method, args.seed, task, rls[args.method], results, 120 * args.budget_minutes)
            print(json.dumps({k: v for k, v in out.items() if k not in ("history",)}))
        else:
            print(json.dumps(job_smollm(task, results, args.smollm_eval_instances)))
        return 0

    common = ["--results", str(results), "--budget-minutes", str(args.budget_minutes)]
    common += [x for item in args.rl for x in ("--rl", item)] + [x for item in args.task for x in ("--task", item)]
    if args.eval_instances is not None:
        common += ["--eval-instances", str(args.eval_instances)]
    jobs: list[Job] = []
    for seed in args.seeds:  # seed-major order: one seed's row of the table lands before the next starts
        jobs.append(Job(f"warmstart-seed{seed}", ["--job", "warm_start", "--seed", str(seed), *common],
                        results / f"warmstart-seed{seed}.json", task.warm_start_key(seed)))
        for name in args.methods:
            jobs.append(Job(
                f"{name}-seed{seed}",
                ["--job", "cell", "--method", name, "--seed", str(seed), "--methods", name, *common],
                results / f"{name}-seed{seed}.json", cell_key(name, seed, task, rls[name]),
                needs=[f"warmstart-seed{seed}"],
            ))
    if args.smollm:
        jobs.append(Job("smollm2-l1", ["--job", "smollm", "--smollm-eval-instances", str(args.smollm_eval_instances),
                                       *common], results / "smollm2-l1.json", None))
    if not args.no_run:
        run_jobs(jobs, args.cells_parallel, args.threads, results / "cache" / "logs")

    summary = summarize(args, task, rls, results)
    from comlrl.atomic_io import atomic_write_json

    summary_path = args.summary or (SUMMARY_PATH if results == DEFAULT_RESULTS.resolve() else results / "learning.json")
    atomic_write_json(summary_path, summary)
    print()
    print(summary["table"])
    for name, check in summary["targets"].items():
        print(f"{name}: gain over multi-agent start {_points(check['gain_over_multi_start'])} points "
              f"(target +{100 * TARGET_GAIN:.0f}), margin over single-agent GRPO "
              f"{_points(check['margin_over_grpo_l0'])} points (target +{100 * TARGET_MARGIN:.0f})")
    if summary["smollm2"]:
        s = summary["smollm2"]
        print(f"smollm2-135m-instruct, AT-GRPO L1, no warm start, {s['steps']} steps: success "
              f"{_pct(s['success_before'])} -> {_pct(s['success_after'])} on {s['eval_instances']} held-out "
              f"instances, {s['seconds']['total']:.0f} s")
    print(f"\nwrote {summary_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
