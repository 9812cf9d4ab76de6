"""Where the learning benchmark's multi-agent episodes fail: a breakdown of held-out evaluations.

For each named policy (a seed's warm start, or a finished cell's final policy, which the cell's pipeline
run leaves in ``<results>/cache/<cell>/policies``) it builds the run's policy from the benchmark's config
and loads those weights (as a resumed pipeline does), runs the benchmark's sampled held-out evaluation
(:func:`pettingllms.stages.eval.held_out_evaluations`: ``eval.num_samples`` trajectories per instance at
``eval.temperature``) and splits the episodes by what happened:

- ``success``: episodes that reached the goal; ``solved_at_turn``: share solved at each turn.
- ``tool_found``: episodes where some ``simulate`` call reached the goal (the team *had* a solution).
- ``plan_dropped``: episodes where a turn's proposal reached the goal but the plan agent did not play it.
- ``plan_alone``: episodes solved by the plan agent's own answer (not ``#### proposal``).
- per tool response: calls, distinct calls, calls that reached the goal, and calls that repeat a call
  of an earlier turn of the same episode from the same cell (wasted: the report is already known).
- ``success_by_distance``: success by the instance's shortest-path length from the start.

A single agent with the team's tools (``env.agent_options.single.tools``) is broken down the same way: its
tool turns (a response of calls) count as the tool agent's responses, its action turns as the plan agent's.

    .venv/bin/python -m benchmarks.learning_failures warmstart-seed0 at_grpo_l1-seed0 at_grpo_l3-seed0

``--config math/arith`` breaks the math task's episodes down instead (:func:`math_episode_breakdown`): tool
responses correct / wrong / failed / unparseable, and whether each final answer copies the latest tool answer,
overrides a wrong one, or drops a right one.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks import learning  # the benchmark's configs

GOAL_REACHED = "goal reached"
_ACCEPT = re.compile(r"####\s*proposal\s*$", re.IGNORECASE)
_ENDS_AT = re.compile(r"ends at row (\d+), col (\d+)")


def _calls(sample: Any) -> list[str]:
    """The simulate arguments of a tool sample (normalised: moves upper-case, single spaces)."""
    if not sample.action:
        return []
    return [" ".join(call.argument.upper().split()) for call in sample.action if call.name == "simulate"]


def _is_tool_response(sample: Any, tool_role: str) -> bool:
    """The tool agent's response, or a single agent's tool turn (its action is the calls it made)."""
    from pettingllms.envs.game_parsers import ToolCall

    if sample.role == tool_role:
        return True
    action = sample.action
    return isinstance(action, tuple) and bool(action) and all(isinstance(call, ToolCall) for call in action)


def _hits(sample: Any) -> int:
    """Calls of a tool sample whose report says the goal was reached (one report line per call)."""
    return sum(GOAL_REACHED in line for line in (sample.feedback or "").splitlines())


def episode_breakdown(
    samples: Iterable[Any], starts: Mapping[int, tuple[int, int]], tool_role: str = "tool"
) -> dict[str, Any]:
    """Split evaluation episodes of the tool -> plan workflow, or of a single agent with the tool, by what
    happened (see the module docstring).

    ``samples``: the evaluation's samples (``problem_id``, ``env_index``, ``turn``, ``role``, ``action``,
    ``response``, ``feedback``, ``success``); an episode is one ``(problem_id, env_index)``. ``starts``:
    each problem's start cell; later cells come from the action turns' reports (``ends at row r, col c``).
    A sample of ``tool_role`` or whose action is tool calls is a tool response; every other sample is an
    action turn (the plan agent's, or a single agent's ``#### <answer>``).
    """
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
            if _is_tool_response(sample, tool_role):
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
            else:
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


_TOOL_GAVE = re.compile(r" ran (?:its program|the calculator): gave (.*) \((correct|wrong)\)$")
_TOOL_FAILED = re.compile(r" ran (?:its program|the calculator): failed")
_ANSWERED = re.compile(r" answered (.*) \((correct|wrong)\)$")


def math_episode_breakdown(samples: Iterable[Any]) -> dict[str, Any]:
    """Split math evaluation episodes by what the tool and the answers did (the team, or a single agent with
    its tool): per tool response, correct / wrong / failed / unparseable; per final answer, whether it copies
    the latest tool answer, overrides a wrong (or missing) tool answer with a correct one, or drops a correct
    tool answer for a wrong one; per episode, success and the turn it was solved at.

    ``samples``: the evaluation's samples (``problem_id``, ``env_index``, ``turn``, ``role``, ``action``,
    ``feedback``, ``success``); the outcomes are read from the agents' reports (``feedback``)."""
    episodes: dict[tuple[int, int], list[Any]] = defaultdict(list)
    for sample in samples:
        episodes[(sample.problem_id, sample.env_index)].append(sample)
    if not episodes:
        raise ValueError("`samples` is empty: nothing to break down")
    tools = defaultdict(int)
    answers = defaultdict(int)
    counts = defaultdict(int)
    solved_at: dict[int, int] = defaultdict(int)
    for steps in episodes.values():
        steps.sort(key=lambda s: (s.turn, s.role != "tool_generator"))
        latest: tuple[str, bool] | None = None  # the latest tool answer and whether it verified
        tool_right = False
        for sample in steps:
            report = (sample.feedback or "").strip().splitlines()[-1:] or [""]
            gave, failed, answered = _TOOL_GAVE.search(report[0]), _TOOL_FAILED.search(report[0]), _ANSWERED.search(report[0])
            if sample.action is None and sample.role == "tool_generator":
                tools["unparseable"] += 1
            elif gave:
                latest = (gave.group(1), gave.group(2) == "correct")
                tools["correct" if latest[1] else "wrong"] += 1
                tool_right = tool_right or latest[1]
            elif failed:
                tools["failed"] += 1
                latest = None
            if sample.action is None and sample.role != "tool_generator":
                answers["unparseable"] += 1
            elif answered:
                correct = answered.group(2) == "correct"
                answers["total"] += 1
                answers["correct"] += correct
                if latest is None:
                    answers["without_tool_answer"] += 1
                    answers["correct_without_tool_answer"] += correct
                elif answered.group(1).strip() == latest[0].strip() or correct == latest[1] and _agree(answered.group(1), latest[0]):
                    answers["copies_tool"] += 1
                elif correct and not latest[1]:
                    answers["overrides_wrong_tool"] += 1
                elif latest[1] and not correct:
                    answers["drops_right_tool"] += 1
                else:
                    answers["differs_both_wrong"] += 1
                if correct and latest is not None and not latest[1]:
                    counts["overrides_in_episodes"] += 1
        success = any(s.success for s in steps)
        counts["success"] += success
        counts["tool_right"] += tool_right
        if success:
            solved_at[min(s.turn for s in steps if s.success)] += 1
    n = len(episodes)
    tool_total = sum(tools.values())
    total = answers["total"]
    return {
        "episodes": n,
        "success": counts["success"] / n,
        "solved_at_turn": {t: solved_at[t] / n for t in sorted(solved_at)},
        "tool_right_in_episode": counts["tool_right"] / n,
        "tool_responses": tool_total,
        **{f"tool_{k}": tools[k] / tool_total if tool_total else 0.0 for k in ("correct", "wrong", "failed", "unparseable")},
        "answers": total,
        "answer_correct": answers["correct"] / total if total else 0.0,
        "answer_unparseable": answers["unparseable"],
        **{k: answers[k] / total if total else 0.0 for k in (
            "copies_tool", "overrides_wrong_tool", "drops_right_tool", "differs_both_wrong", "without_tool_answer")},
        "correct_without_tool_answer": answers["correct_without_tool_answer"],
    }


def _agree(a: str, b: str) -> bool:
    from pettingllms.envs.math.verify import answers_agree

    return answers_agree(a, b)


# ================================================================================= running a policy


def _load(name: str, results: Path, task: Sequence[str], bench: Any = learning.PLAN_PATH) -> tuple[Any, dict[str, Any]]:
    """``(policy, config)``: ``warmstart-seedN`` (the multi-agent workflow, L1) or a cell's final policy,
    with the config it ran under (sampled evaluation only)."""
    from pettingllms.pipeline import POLICIES_DIR
    from pettingllms.stages.context import build_run_policy

    if name.startswith("warmstart-seed"):
        seed = int(name.removeprefix("warmstart-seed"))
        config = learning.warm_start_config(seed, task, results, bench)
    else:
        method_name, _, seed_text = name.rpartition("-seed")
        if method_name not in bench.methods:
            raise SystemExit(f"{name}: not a warm start or a cell; methods: {list(bench.methods)}")
        seed = int(seed_text)
        warm = json.loads((results / f"warmstart-seed{seed}.json").read_text())
        config = learning.cell_config(method_name, seed, task, [], results, warm["model_dir"], bench=bench)
    folder = Path(config["run"]["output_dir"]) / POLICIES_DIR
    if not folder.exists():
        raise SystemExit(f"{name}: no saved policy at {folder} (rerun it with this code)")
    config["eval"]["greedy"] = False
    policy = build_run_policy(config)
    if bench is learning.PLAN_PATH and list(policy.agents) not in (["tool", "plan"], ["single"]):
        raise SystemExit(f"{name}: the breakdown covers the tool -> plan workflow and the single agent, "
                         f"not {policy.agents}")
    policy.load_weights_(folder)
    return policy, config


def analyse(name: str, results: Path, task: Sequence[str], threads: int, bench: Any = learning.PLAN_PATH) -> dict[str, Any]:
    from pettingllms.registry import make_env
    from pettingllms.stages.context import workflow_env
    from pettingllms.stages.eval import held_out_evaluations

    learning._set_threads(threads)
    policy, config = _load(name, results, task, bench)
    result = held_out_evaluations(policy, config)["sampled"]
    if bench is not learning.PLAN_PATH:
        breakdown = math_episode_breakdown(result.samples)
        breakdown["roles"] = list(policy.agents)
        if abs(breakdown["success"] - result.success_rate) > 1e-9:
            raise RuntimeError(f"{name}: episodes from samples give success {breakdown['success']}, "
                               f"the evaluation {result.success_rate}")
        return breakdown
    env_name, fields, _ = workflow_env(config)
    env = make_env(env_name, fields)
    start = config["eval"]["seed_start"]
    ids = range(start, start + config["eval"]["num_instances"])
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
    """Two markdown tables: the episode breakdown per policy, and success by shortest-path length. The
    "solved at turn" column lists turns 1-3, or up to the last turn any policy solved at (a single agent with
    the tool plays two turns for the team's one)."""
    solved_turns = [int(t) for b in found.values() for t in b["solved_at_turn"]]
    n_turns = max(3, *(t + 1 for t in solved_turns)) if solved_turns else 3
    lines = [
        f"| policy | success | solved at turn {' / '.join(str(t + 1) for t in range(n_turns))} (%) "
        "| tool found the goal | plan dropped a solving proposal "
        "| plan solved alone | calls / tool answer | distinct | calls reaching the goal "
        "| calls repeating an earlier turn's from the same cell |",
        "|" + "---|" * 10,
    ]
    for name, b in found.items():
        solved = _int_keys(b["solved_at_turn"])
        turns = " / ".join(f"{100 * solved.get(t, 0):.0f}" for t in range(n_turns))
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


def build_math_table(found: Mapping[str, Mapping[str, Any]]) -> str:
    """The math breakdown per policy, one markdown row each."""
    lines = [
        "| policy | success | tool right in episode | tool responses: correct / wrong / failed / unparseable "
        "| answers correct | copies the tool | overrides a wrong tool answer | drops a right tool answer "
        "| answers with no tool answer |",
        "|" + "---|" * 9,
    ]
    for name, b in found.items():
        tools = " / ".join(f"{100 * b['tool_' + k]:.0f}%" for k in ("correct", "wrong", "failed", "unparseable"))
        lines.append(
            f"| {name} | {100 * b['success']:.1f}% | {100 * b['tool_right_in_episode']:.1f}% | {tools} "
            f"({b['tool_responses']}) | {100 * b['answer_correct']:.1f}% ({b['answers']}) | "
            f"{100 * b['copies_tool']:.1f}% | {100 * b['overrides_wrong_tool']:.1f}% | "
            f"{100 * b['drops_right_tool']:.1f}% | {100 * b['without_tool_answer']:.1f}% |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", help="warmstart-seedN or a finished cell, e.g. at_grpo_l1-seed0")
    parser.add_argument("--config", default=learning.PLAN_PATH.name, choices=list(learning.TASKS),
                        help="the learning benchmark's task the policies come from")
    parser.add_argument("--results", type=Path, default=None, help="the task's results folder (default: its own)")
    parser.add_argument("--task", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="the --task overrides the runs were made with")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=Path, default=None,
                        help="default benchmarks/results/learning_failures.json (math/arith: learning_failures_math_arith.json)")
    parser.add_argument("--merge", action="store_true",
                        help="keep the policies already in --output (same settings); new ones replace them")
    args = parser.parse_args(argv)
    from comlrl.atomic_io import atomic_write_json

    bench = learning.TASKS[args.config]
    results = (args.results or bench.results).resolve()
    if args.output is None:
        suffix = "" if bench is learning.PLAN_PATH else "_" + bench.name.replace("/", "_")
        args.output = learning.ROOT / "benchmarks" / "results" / f"learning_failures{suffix}.json"
    settings = {"settings": list(bench.settings), "task": list(args.task)}
    found: dict[str, Any] = {}
    if args.merge and args.output.exists():
        earlier = json.loads(args.output.read_text())
        if {k: earlier.get(k) for k in settings} != settings:
            raise SystemExit(f"--merge: {args.output} was made with other settings")
        found.update(earlier["policies"])
    for name in args.names:
        found[name] = analyse(name, results, args.task, args.threads, bench)
    table = build_table(found) if bench is learning.PLAN_PATH else build_math_table(found)
    print(table)
    atomic_write_json(args.output, {**settings, "policies": found, "table": table})
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
