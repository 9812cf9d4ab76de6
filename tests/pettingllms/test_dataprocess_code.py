"""`pettingllms dataprocess code`: a local benchmark file normalised into the data layout, through the CLI."""

from __future__ import annotations

from pathlib import Path

from pettingllms.cli import main
from pettingllms.envs.code.data import load_problems, read_jsonl

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "code"


def test_code_split_is_written_in_the_normalised_layout(tmp_path, capsys):
    source = FIXTURES / "apps" / "test.jsonl"
    code = main(["dataprocess", "code", "--dataset", "apps", "--source", str(source), "--max-tests", "2",
                 "--output", str(tmp_path)])
    assert code == 0
    written = read_jsonl(tmp_path / "test.jsonl")
    expected = load_problems("apps", source, max_tests=2)
    assert written == expected and len(written) == 12
    assert all(len(p.tests) <= 2 for p in written)
    assert f"wrote 12 apps problems to {tmp_path / 'test.jsonl'}" in capsys.readouterr().out


def test_default_output_is_under_pettingllms_data(tmp_path, monkeypatch):
    monkeypatch.setenv("PETTINGLLMS_DATA", str(tmp_path))
    source = FIXTURES / "mbpp" / "test.jsonl"
    assert main(["dataprocess", "code", "--dataset", "mbpp", "--source", str(source)]) == 0
    assert read_jsonl(tmp_path / "code" / "mbpp" / "test.jsonl") == load_problems("mbpp", source)


def test_a_missing_source_is_one_line_and_status_2(tmp_path, capsys):
    missing = tmp_path / "nope.jsonl"
    assert main(["dataprocess", "code", "--dataset", "apps", "--source", str(missing)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(missing) in err and err.startswith("pettingllms: error: dataprocess code:")


def test_a_difficulty_that_keeps_nothing_is_an_error(tmp_path, capsys):
    source = FIXTURES / "apps" / "test.jsonl"
    assert main(["dataprocess", "code", "--dataset", "apps", "--source", str(source), "--difficulty", "legendary",
                 "--output", str(tmp_path)]) == 2
    assert "no apps problems left" in capsys.readouterr().err
    assert not (tmp_path / "test.jsonl").exists()


def test_dataprocess_prints_the_classification_and_leaves_out_problems_without_a_test(tmp_path, capsys):
    import json

    rows = [json.loads(line) for line in (FIXTURES / "mbpp" / "test.jsonl").read_text().splitlines()][:2]
    pair = {"task_id": 601, "text": "Chain pairs.", "code": "class Pair:\n    pass\ndef chain(xs):\n    return 0\n",
            "test_list": ["assert chain([Pair()]) == 0", "assert chain(lambda: 0) == 0"], "test_setup_code": "",
            "challenge_test_list": []}
    source = tmp_path / "test.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in [*rows, pair]))
    assert main(["dataprocess", "code", "--dataset", "mbpp", "--source", str(source), "--output", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "mbpp test: 3 problems, 0 stdin/stdout tests, 6 function tests supported, 2 unsupported (1 passes a lambda "
        "to `...`; 1 uses `...`, which the solution defines); 1 problem(s) left with no test: mbpp/601",
        f"wrote 2 mbpp problems to {tmp_path / 'out' / 'test.jsonl'}",
    ]
    assert [p.problem_id for p in read_jsonl(tmp_path / "out" / "test.jsonl")] == ["mbpp/900", "mbpp/901"]


def test_the_packaged_humaneval_is_processed_offline(tmp_path, capsys):
    assert main(["dataprocess", "code", "--dataset", "humaneval", "--output", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "humaneval test: 164 problems, 0 stdin/stdout tests, 164 function tests supported, 0 unsupported")
    assert len(read_jsonl(tmp_path / "test.jsonl")) == 164
