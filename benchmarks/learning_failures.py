"""Where the learning benchmark's multi-agent episodes fail: a breakdown of held-out evaluations.

For each named policy (a seed's warm start, or a finished cell's final policy, which
``benchmarks/learning.py`` saves to ``<results>/cache/<cell>/final``) it runs the benchmark's sampled
evaluation (``eval_samples`` trajectories per held-out instance at ``eval_temperature``) and splits the
episodes by what happened:

- ``success``: episodes that reached the goal; ``solved_at_turn``: share solved at each turn.
- ``tool_found``: episodes where some ``simulate`` call reached the goal (the team *had* a solution).
- ``plan_dropped``: episodes where a turn's proposal reached the goal but the plan agent did not play it.
- ``plan_alone``: episodes solved by the plan agent's own answer (not ``#### proposal``).
- per tool response: calls, distinct calls, calls that reached the goal, and calls that repeat a call
  of an earlier turn of the same episode from the same cell (wasted: the report is already known).
- ``success_by_distance``: success by the instance's shortest-path length from the start.

    .venv/bin/python -m benchmarks.learning_failures warmstart-seed0 at_grpo_l1-seed0 at_grpo_l3-seed0
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks import learning  # the benchmark's settings, policies and trainer

GOAL_REACHED = "goal reached"
_ACCEPT = re.compile(r"####\s*proposal\s*$", re.IGNORECASE)
_ENDS_AT = re.compile(r"ends at row (\d+), col (\d+)")


def _calls(sample: Any) -> list[str]:
    """The simulate arguments of a tool sample (normalised: moves upper-case, single spaces)."""
    if not sample.action:
        return []
    return [" ".join(call.argument.upper().split()) for call in sample.action if call.name == "simulate"]


def _hits(sample: Any) -> int:
    """Calls of a tool sample whose report says the goal was reached (one report line per call)."""
    return sum(GOAL_REACHED in line for line in (sample.feedback or "").splitlines())


def episode_breakdown(
    samples: Iterable[Any], starts: Mapping[int, tuple[int, int]], roles: tuple[str, str] = ("tool", "plan")
) -> dict[str, Any]:
    """Split evaluation episodes of the tool -> plan workflow by what happened (see the module docstring).

    ``samples``: the evaluation's samples (``problem_id``, ``env_index``, ``turn``, ``role``, ``action``,
    ``response``, ``feedback``, ``success``); an episode is one ``(problem_id, env_index)``. ``starts``:
    each problem's start cell; later cells come from the plan agent's reports (``ends at row r, col c``).
    """
    tool_role, plan_role = roles
    episodes: dict[tuple[int, int], list[Any]] = defaultdict(list)
    for sample in samples:
        episodes[(sample.problem_id, sample.env_index)].append(sample)
    if not episodes:
        raise ValueError("`samples` is empty: nothing to break down")
    counts = defaultdict(int)
    solved_at: dict[int, int] = defaultdict(int)
    calls = distinct = hits = repeats = responses = 0
    for steps in episodes.values():
        steps.sort(key=lambda s: (s.turn, s.role != tool_role))
        seen: set[tuple[Any, str]] = set()
        found = dropped = turn_hit = False
        cell: Any = tuple(starts[steps[0].problem_id])
        for sample in steps:
            if sample.role == tool_role:
                made = _calls(sample)
                responses += 1
                calls += len(made)
                distinct += len(set(made))
                turn_hits = _hits(sample)
                hits += turn_hits
                repeats += sum((cell, c) in seen for c in set(made))
                seen.update((cell, c) for c in made)
                turn_hit = turn_hits > 0
                found = found or turn_hit
            elif sample.role == plan_role:
                accepted = bool(_ACCEPT.search(sample.response.strip()))
                moved = _ENDS_AT.search(sample.feedback or "")
                if moved:
                    cell = (int(moved.group(1)), int(moved.group(2)))
                if turn_hit and not sample.success:
                    dropped = True
                if sample.success:
                    solved_at[sample.turn] += 1
                    if not accepted:
                        counts["plan_alone"] += 1
        success = any(s.success for s in steps)
        counts["success"] += success
        counts["tool_found"] += found
        counts["plan_dropped"] += dropped
    n = len(episodes)
    return {
        "episodes": n,
        "success": counts["success"] / n,
        "solved_at_turn": {t: solved_at[t] / n for t in sorted(solved_at)},
        "tool_found": counts["tool_found"] / n,
        "plan_dropped": counts["plan_dropped"] / n,
        "plan_alone": counts["plan_alone"] / n,
        "tool_responses": responses,
        "calls_per_response": calls / responses if responses else 0.0,
        "distinct_per_response": distinct / responses if responses else 0.0,
        "hit_rate_per_call": hits / calls if calls else 0.0,
        "repeat_rate_per_distinct_call": repeats / distinct if distinct else 0.0,
    }


def success_by_distance(per_episode: Mapping[int, Sequence[bool]], distance: Mapping[int, int]) -> dict[int, dict]:
    """Success rate and episode count per shortest-path length (``per_episode``: problem -> successes)."""
    table: dict[int, list[bool]] = defaultdict(list)
    for problem, successes in per_episode.items():
        table[distance[problem]].extend(successes)
    return {d: {"episodes": len(v), "success": sum(v) / len(v)} for d, v in sorted(table.items())}


# ================================================================================= running a policy


def _load(name: str, results: Path, task: learning.TaskSettings, threads: int):
    """A trainer whose policy is ``warmstart-seedN`` (multi-agent workflow, L1) or a cell's final policy."""
    learning._set_threads(threads)
    if name.startswith("warmstart-seed"):
        seed, method_name, final = int(name.removeprefix("warmstart-seed")), "at_grpo_l1", None
    else:
        method_name, _, seed_text = name.rpartition("-seed")
        seed, final = int(seed_text), results / "cache" / name / "final"
        if method_name not in learning.METHODS or not final.exists():
            raise SystemExit(f"{name}: no saved final policy at {final} (rerun the cell with this code)")
    method = learning.METHODS[method_name]
    if method.roles != learning.WORKFLOW:
        raise SystemExit(f"{name}: the breakdown covers the tool -> plan workflow, not {method.roles}")
    warm = json.loads((results / f"warmstart-seed{seed}.json").read_text())
    policy = learning._policy(method.policy_level, warm["model_dir"], seed, learning.RLSettings())
    if final is not None:
        policy.load_weights_(final)
    out = results / "cache" / "failures-tmp"
    return learning._trainer(method, policy, task, learning.RLSettings(), seed, out, 1)


def analyse(name: str, results: Path, task: learning.TaskSettings, threads: int) -> dict[str, Any]:
    from pettingllms.registry import make_env

    trainer = _load(name, results, task, threads)
    ids = list(task.eval_seeds)
    learning.check_task_heldout(task, trainer.config.train_seed_range)
    trainer.evaluate(ids, num_samples=task.eval_samples, temperature=task.eval_temperature, log=False)
    result = trainer.last_eval
    env = make_env("plan_path", task.env_config())
    levels = {pid: env.initial_state(pid).level for pid in ids}
    breakdown = episode_breakdown(result.samples, {pid: level.start for pid, level in levels.items()})
    distance = {pid: level.dist(level.start) for pid, level in levels.items()}
    per_episode: dict[int, list[bool]] = defaultdict(list)
    for outcome in result.outcomes:
        if not outcome.dropped:
            per_episode[outcome.problem_id].append(outcome.success)
    breakdown["success_by_distance"] = success_by_distance(per_episode, distance)
    if abs(breakdown["success"] - result.success_rate) > 1e-9:  # the samples' episodes are the outcomes'
        raise RuntimeError(f"{name}: episodes from samples give success {breakdown['success']}, "
                           f"the evaluation {result.success_rate}")
    return breakdown


def _int_keys(mapping: Mapping[Any, Any]) -> dict[int, Any]:
    return {int(k): v for k, v in mapping.items()}  # JSON turned the int keys into strings


def build_table(found: Mapping[str, Mapping[str, Any]]) -> str:
    """Two markdown tables: the episode breakdown per policy, and success by shortest-path length."""
    lines = [
        "| policy | success | solved at turn 1 / 2 / 3 (%) | tool found the goal | plan dropped a solving proposal "
        "| plan solved alone | calls / tool answer | distinct | calls reaching the goal "
        "| calls repeating an earlier turn's from the same cell |",
        "|" + "---|" * 10,
    ]
    for name, b in found.items():
        solved = _int_keys(b["solved_at_turn"])
        turns = " / ".join(f"{100 * solved.get(t, 0):.0f}" for t in range(3))
        lines.append(
            f"| {name} | {100 * b['success']:.1f}% | {turns} | {100 * b['tool_found']:.1f}% | "
            f"{100 * b['plan_dropped']:.1f}% | {100 * b['plan_alone']:.1f}% | {b['calls_per_response']:.2f} | "
            f"{b['distinct_per_response']:.2f} | {100 * b['hit_rate_per_call']:.1f}% | "
            f"{100 * b['repeat_rate_per_distinct_call']:.1f}% |"
        )
    by_distance = {name: _int_keys(b["success_by_distance"]) for name, b in found.items()}
    distances = sorted({d for table in by_distance.values() for d in table})
    lines += ["", "| policy | " + " | ".join(f"distance {d}" for d in distances) + " |",
              "|" + "---|" * (len(distances) + 1)]
    for name, table in by_distance.items():
        cells = [table.get(d) for d in distances]
        lines.append(f"| {name} | " + " | ".join(
            f"{100 * c['success']:.0f}% ({c['episodes']})" if c else "—" for c in cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", help="warmstart-seedN or a finished cell, e.g. at_grpo_l1-seed0")
    parser.add_argument("--results", type=Path, default=learning.DEFAULT_RESULTS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=Path, default=learning.ROOT / "benchmarks" / "results" / "learning_failures.json")
    parser.add_argument("--merge", action="store_true",
                        help="keep the policies already in --output (same task settings); new ones replace them")
    args = parser.parse_args(argv)
    from comlrl.atomic_io import atomic_write_json

    task = learning.TaskSettings()
    found: dict[str, Any] = {}
    if args.merge and args.output.exists():
        earlier = json.loads(args.output.read_text())
        if earlier.get("task") != json.loads(json.dumps(learning.dataclasses.asdict(task))):
            raise SystemExit(f"--merge: {args.output} was made with other task settings")
        found.update(earlier["policies"])
    for name in args.names:
        found[name] = analyse(name, args.results, task, args.threads)
    table = build_table(found)
    print(table)
    atomic_write_json(args.output, {"task": learning.dataclasses.asdict(task), "policies": found, "table": table})
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
