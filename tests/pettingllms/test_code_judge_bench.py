"""The code-judge benchmark's correctness part (``benchmarks/code_judge.py``): the quick mode's check on a
handful of HumanEval problems (reference solutions pass; on every mutant the sandbox agrees with a bare
subprocess), and its function-style speed batch. The full check (164 references, ~300 mutants) is the
benchmark itself; the mutator is tested in test_code_mutants.py."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from benchmarks.code_judge import (
    baseline_function_jobs,
    check_correctness,
    function_jobs,
    judge_function_jobs,
)
from pettingllms.sandbox import SandboxConfig, SandboxPool


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")
def test_quick_correctness_on_a_handful_of_humaneval_problems():
    start = time.monotonic()
    with SandboxPool(SandboxConfig(), max_workers=2) as pool:
        report = check_correctness(pool, problems=6, mutants_per_problem=2)
    ref, mut = report["reference"], report["mutants"]
    assert (ref["problems"], ref["passed"], ref["failed"]) == (6, 6, [])
    assert mut["count"] >= 10
    assert mut["disagreements"] == [] and mut["agree"] == mut["count"]
    assert mut["killed"] >= mut["count"] // 2  # the mutants really break most solutions
    assert time.monotonic() - start < 30


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")
def test_the_function_style_batch_agrees_with_one_plain_process():
    jobs = function_jobs(12, "test")
    assert sum(len(programs) for programs, _ in jobs) == 12 and len(jobs) >= 2
    with SandboxPool(SandboxConfig(), max_workers=2) as pool:
        judged = asyncio.run(judge_function_jobs(pool, jobs, 3.0))
        baseline = asyncio.run(baseline_function_jobs(pool.python, jobs, 2))
    assert judged == baseline
    assert judged[0] is True and not all(judged)  # the reference passes, some mutants fail
