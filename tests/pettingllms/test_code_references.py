"""Every reference solution passes its ground-truth tests through the environment's judge (``env.judge``) with
a real SandboxPool, under the dataset's default comparison mode (its config's ``env.compare``): the
fixtures of every dataset, and all 164 packaged HumanEval problems with their prompt as the trusted setup.
A wrong program fails, so the check can tell."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from pettingllms.config import load_config
from pettingllms.envs.code.data import load_problems
from pettingllms.envs.code.env import CodeConfig, judge
from pettingllms.envs.code.scripted import wrong_program
from pettingllms.sandbox import SandboxConfig, SandboxPool

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "code"
SOURCES = {"apps": "apps/test.jsonl", "codecontests": "codecontests/train.jsonl",
           "livecodebench": "livecodebench/test.jsonl", "mbpp": "mbpp/test.jsonl", "humaneval": "humaneval/test.jsonl"}


@pytest.fixture(scope="module")
def pool():
    config = SandboxConfig(cpu_time_s=4, wall_time_s=20, memory_mb=256, file_size_mb=1, scratch_mb=8,
                           max_processes=16, max_open_files=32, max_output_bytes=1 << 18)
    with SandboxPool(config, max_workers=2) as p:
        yield p


def default_config(dataset: str) -> CodeConfig:
    compare = load_config(f"code/{dataset}")["env"]["compare"]
    return CodeConfig(dataset=dataset, compare=compare, time_limit_s=4.0)


def judge_all(pool, config, problems_and_programs):
    async def run():
        return await asyncio.gather(*(judge(pool, [program], list(problem.tests), config, problem)
                                      for problem, program in problems_and_programs))
    return [judged for (judged,) in asyncio.run(run())]


@pytest.mark.parametrize("dataset", sorted(SOURCES))
def test_fixture_references_pass_through_the_judge_and_a_wrong_program_fails(dataset, pool):
    problems = load_problems(dataset, FIXTURES / SOURCES[dataset])
    lcb = json.loads((FIXTURES / "livecodebench" / "solutions.json").read_text())
    pairs = [(p, s) for p in problems
             for s in (p.solutions or ([lcb[p.problem_id.split("/")[1]]] if dataset == "livecodebench" else []))]
    assert len(pairs) >= 11
    config = default_config(dataset)
    assert config.compare == "float"
    for (problem, _), judged in zip(pairs, judge_all(pool, config, pairs)):
        assert judged.all_passed and all(judged.counted), (problem.problem_id, judged.first_failure)
    wrong = [(p, wrong_program(p)) for p, _ in pairs[:3]]
    assert not any(judged.all_passed for judged in judge_all(pool, config, wrong))


@pytest.mark.slow
def test_all_164_humaneval_references_pass_through_the_judge(pool):
    problems = load_problems("humaneval", None)
    assert len(problems) == 164 and all(p.test_setup == p.prompt for p in problems)
    judged = judge_all(pool, default_config("humaneval"), [(p, p.solutions[0]) for p in problems])
    failing = [(p.problem_id, j.first_failure) for p, j in zip(problems, judged) if not j.all_passed]
    assert failing == []
