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
