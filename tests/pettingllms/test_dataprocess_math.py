"""`pettingllms dataprocess math`: a local maths benchmark normalised into the data layout, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pettingllms.cli import main
from pettingllms.envs.math.data import load_problems, read_jsonl

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "math"


def test_math_split_is_written_in_the_normalised_layout(tmp_path, capsys):
    source = FIXTURES / "gsm8k" / "main" / "test-00000-of-00001.jsonl"
    assert main(["dataprocess", "math", "--dataset", "gsm8k", "--source", str(source), "--output", str(tmp_path)]) == 0
    written = read_jsonl(tmp_path / "test.jsonl")
    assert written == load_problems("gsm8k", source)
    assert [(p.problem_id, p.answer) for p in written] == [("gsm8k/test/0", "62500"), ("gsm8k/test/1", "24"), ("gsm8k/test/2", "22")]
    assert f"wrote 3 gsm8k problems to {tmp_path / 'test.jsonl'}" in capsys.readouterr().out


def test_split_and_level_options(tmp_path):
    source = FIXTURES / "math" / "test-00000-of-00001.jsonl"
    assert main(["dataprocess", "math", "--dataset", "math", "--source", str(source), "--split", "eval",
                 "--level", "Level 1", "--level", "4", "--output", str(tmp_path)]) == 0
    written = read_jsonl(tmp_path / "eval.jsonl")
    assert [(p.problem_id, p.split, p.level, p.answer) for p in written] == [("math/eval/0", "eval", "1", "49"),
                                                                            ("math/eval/3", "eval", "4", "12")]


def test_default_output_is_under_pettingllms_data(tmp_path, monkeypatch):
    monkeypatch.setenv("PETTINGLLMS_DATA", str(tmp_path))
    source = FIXTURES / "aime_past" / "AIME_Dataset_1983_2024.csv"
    assert main(["dataprocess", "math", "--dataset", "aime_past", "--source", str(source)]) == 0
    assert read_jsonl(tmp_path / "math" / "aime_past" / "test.jsonl") == load_problems("aime_past", source)


def test_a_missing_source_is_one_line_and_status_2(tmp_path, capsys):
    missing = tmp_path / "nope.jsonl"
    assert main(["dataprocess", "math", "--dataset", "polaris", "--source", str(missing), "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(missing) in err and err.startswith("pettingllms: error: dataprocess math:")
    assert not (tmp_path / "train.jsonl").exists()


def test_a_missing_field_names_it(tmp_path, capsys):
    source = tmp_path / "test.jsonl"
    source.write_text(json.dumps({"problem": "What is 2 + 2?", "solution": "4", "subject": "Algebra", "level": 1,
                                 "unique_id": "test/algebra/1.json"}) + "\n")
    assert main(["dataprocess", "math", "--dataset", "math500", "--source", str(source), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{source} row 0: missing field 'answer' in the math500 schema" in err
    assert not (tmp_path / "out").exists()


def test_a_level_that_keeps_nothing_is_an_error(tmp_path, capsys):
    source = FIXTURES / "math500" / "test.jsonl"
    assert main(["dataprocess", "math", "--dataset", "math500", "--source", str(source), "--level", "9",
                 "--output", str(tmp_path)]) == 2
    assert "no math500 problems left" in capsys.readouterr().err
    assert not (tmp_path / "test.jsonl").exists()


def test_an_unknown_dataset_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["dataprocess", "math", "--dataset", "gsm9k", "--source", "x.jsonl"])
    assert caught.value.code == 2
    assert "invalid choice: 'gsm9k'" in capsys.readouterr().err
