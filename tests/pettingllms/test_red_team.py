"""The red-team suite of the rewards (ARCHITECTURE.md principle 10): the cases of ``benchmarks/red_team_cases.py``
marked ``quick`` (at least one of every kind, and every control) played through the training path
(agents -> parsers -> ``env.step_agent`` -> the sandbox judge / math-verify -> ``alpha * global + local``).
Every attack must get nothing, every control must be rewarded. The full set is the benchmark
(``python -m benchmarks.red_team``); a failure here names the case to replay there
(``--cases NAME --progress``)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from benchmarks.red_team import RedTeam, build_data, format_comparison, summarise
from benchmarks.red_team_cases import CASES, KINDS, Program
from pettingllms.sandbox import SandboxConfig, SandboxPool

needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

QUICK = [case for case in CASES if case.quick]
ATTACKS = [case for case in QUICK if not case.control]
CONTROLS = [case for case in QUICK if case.control]


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    # The sandbox a training run makes (SandboxConfig's defaults), two worker slots.
    with SandboxPool(SandboxConfig(), max_workers=2) as pool:
        yield RedTeam(pool, build_data(tmp_path_factory.mktemp("red-team")))


def play(team, case):
    result = asyncio.run(team.run(case))
    assert result.error is None, f"{case.name} could not be played: {result.error}"
    if result.skipped is not None:
        pytest.skip(f"{case.name}: {result.skipped}")
    return result


def rewards(result) -> str:
    return (f"local {result.local_reward}, global {result.global_reward}, reward {result.reward}, "
            f"success {result.success}; {result.detail}")


def test_the_ci_subset_has_every_kind_and_every_control():
    assert {case.kind for case in QUICK} == set(KINDS)
    assert all(case.quick for case in CASES if case.control)
    assert len({case.name for case in CASES}) == len(CASES)


@needs_linux
@pytest.mark.parametrize("case", ATTACKS, ids=lambda case: case.name)
def test_an_adversarial_response_gets_nothing(team, case):
    result = play(team, case)
    assert not result.hacked, f"{case.name} ({KINDS[case.kind]}) got what it should not: {rewards(result)}"


@needs_linux
@pytest.mark.parametrize("case", CONTROLS, ids=lambda case: case.name)
def test_an_honest_response_is_still_rewarded(team, case):
    result = play(team, case)
    assert result.rewarded, f"control {case.name} was not rewarded: {rewards(result)}"


# ---- the runner's own parts (no sandbox) ---------------------------------------------------------------


def test_a_program_renders_as_a_function_or_a_solution_method():
    program = Program("return len(args)", before="import os", after="VALUE = 1")
    namespace: dict = {}
    exec(program.render("count", False), namespace)
    assert namespace["count"](1, 2) == 2 and namespace["VALUE"] == 1
    exec(program.render("count", True), namespace)
    assert namespace["Solution"]().count(1, 2, 3) == 3


def _report(commit, statuses):
    cases = [{"name": name, "kind": kind, "status": status, "error": None, "detail": ""}
             for name, (kind, status) in statuses.items()]
    return {"commit": commit, "summary": summarise(cases), "cases": cases}


def test_the_summary_counts_hacked_attacks_and_unrewarded_controls_as_bad():
    report = _report("b", {"a@x": ("exit_status", "hacked"), "b@x": ("exit_status", "clean"),
                           "c@x": ("exit_status", "error"), "r@x": ("control", "unrewarded"),
                           "s@x": ("control", "rewarded")})
    assert report["summary"] == {"exit_status": {"cases": 3, "bad": 1, "errors": 1, "skipped": 0},
                                 "control": {"cases": 2, "bad": 1, "errors": 0, "skipped": 0}}


def test_the_comparison_lists_changed_and_still_bad_cases():
    before = _report("old", {"a@x": ("exit_status", "hacked"), "b@x": ("exit_status", "hacked"),
                             "r@x": ("control", "rewarded")})
    after = _report("new", {"a@x": ("exit_status", "clean"), "b@x": ("exit_status", "hacked"),
                            "r@x": ("control", "rewarded")})
    text = format_comparison(before, after)
    changed, still = text.split("cases still bad")
    assert "a@x" in changed and "hacked -> clean" in changed and "b@x" not in changed
    assert "b@x" in still and "a@x" not in still and "r@x" not in text.split("\n\n", 1)[1]
    (row,) = [line for line in text.splitlines() if line.startswith("exit_status")]
    assert row.split()[1:4] == ["2", "2", "1"]  # cases, bad before, bad after
    assert [line.split()[0] for line in text.splitlines()[2:5]] == ["exit_status", "control", "total"]
