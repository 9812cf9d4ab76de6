"""Training never plays an evaluation problem, whatever split labels say (the promise of docs/code.md): train
and eval problems compare by native id and statement (:func:`pettingllms.envs.records.problem_key`), so two
splits made from one file are refused in one line before anything is written, while APPS's ``train/N`` and
``test/N`` (different problems under one number) stay apart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pettingllms.cli import main
from pettingllms.envs.records import native_id, problem_key
from pettingllms.scripts.guard import EXIT_USAGE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_a_problem_key_drops_the_split_from_the_id_and_compares_the_statement_as_text():
    assert native_id("apps/train/4000", "train") == "apps/4000" and native_id("mbpp/11", "test") == "mbpp/11"
    same = problem_key("apps/train/4000", "train", "Sum two  numbers.\n")
    assert same == problem_key("apps/test/4000", "test", " Sum two numbers.")
    assert same != problem_key("apps/test/4000", "test", "Reverse a string.")  # APPS numbers each split from 0
    assert same != problem_key("apps/test/4001", "test", "Sum two numbers.")


@pytest.mark.parametrize(
    ("kind", "dataset", "source", "config", "shared"),
    [
        ("code", "apps", FIXTURES / "code/apps/test.jsonl", "code/apps", r"apps/train/(\d+) = apps/test/\1"),
        ("math", "gsm8k", FIXTURES / "math/gsm8k/main/test-00000-of-00001.jsonl", "math/gsm8k", "gsm8k/train/0 = gsm8k/test/0"),
    ],
)
def test_two_splits_made_from_one_file_are_refused_in_one_line_before_anything_is_written(
    kind, dataset, source, config, shared, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("PETTINGLLMS_DATA", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    for split in ("train", "test"):
        assert main(["dataprocess", kind, "--dataset", dataset, "--source", str(source), "--split", split]) == 0
    capsys.readouterr()
    assert main(["train", config, "sft.num_problems=2", "eval.num_instances=2", "run.output_dir=runs/x"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert re.search(r"`\w+\.\w+` / `eval.seed_start`: the \w+ instances and the eval instances must be disjoint", err)
    assert "splits made from different problems" in err
    assert re.search(shared, err), err
    assert not (tmp_path / "runs").exists()
