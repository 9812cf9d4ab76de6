"""The QA loaders (FlashRAG's NQ, HotpotQA, 2Wiki, MuSiQue, Bamboogle; the original and Search-R1 spellings), the
normalised layout, `pettingllms dataprocess search` (QA splits and the BM25 index) through the CLI, every shipped
search config loading and validating, and the oracle scoring 1.000 on every loader fixture through the CLI."""

from __future__ import annotations

import json

import pytest

from pettingllms.cli import main
from pettingllms.envs.search.data import SearchDataError, SearchProblem, load_problems, read_jsonl
from tests.helpers.search_data import CORPUS, FIXTURES, SOURCES, write_search_root


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> str:
    return str(write_search_root(tmp_path_factory.mktemp("search-data")))


def test_flashrag_files_normalise_with_their_splits_answers_and_supporting_titles():
    nq = load_problems("nq", FIXTURES / "nq" / "test.jsonl")
    assert [(p.problem_id, p.split, p.answers) for p in nq] == [
        ("nq/test_0", "test", ["Merrin Halvorsen"]), ("nq/test_1", "test", ["Vessany"]),
        ("nq/test_2", "test", ["June 1931", "1931"])]
    assert all(p.metadata == {} for p in nq)
    hotpot = load_problems("hotpotqa", FIXTURES / "hotpotqa" / "dev.jsonl")
    assert hotpot[0].split == "dev" and hotpot[0].metadata == {
        "type": "bridge", "level": "medium", "supporting_titles": ["The Glass Orchard", "Merrin Halvorsen"]}
    wiki = load_problems("2wiki", FIXTURES / "2wikimultihopqa" / "dev.jsonl")
    assert wiki[1].metadata["type"] == "comparison" and wiki[1].answers == ["The Glass Orchard", "Glass Orchard"]
    musique = load_problems("musique", FIXTURES / "musique" / "dev.jsonl")
    assert musique[1].metadata == {"supporting_titles": ["The Glass Orchard", "Merrin Halvorsen"], "answerable": True,
                                   "hops": 2}
    assert musique[2].metadata["hops"] == 3
    bamboogle = load_problems("bamboogle", FIXTURES / "bamboogle" / "test.jsonl")
    assert len(bamboogle) == 3 and bamboogle[2].answers == ["Teskar"]


def test_original_and_search_r1_spellings(tmp_path):
    original = load_problems("hotpotqa", FIXTURES / "hotpotqa" / "hotpot_dev_distractor_v1.json", split="dev")
    assert [(p.problem_id, p.answers, p.supporting_titles) for p in original] == [
        ("hotpotqa/5f3a0c1e9b2d4e6f8a7c2001", ["Oradell"], ["Lumen Bridge", "Corvale"])]
    search_r1 = tmp_path / "train.jsonl"
    search_r1.write_text(json.dumps({"id": "train_7", "question": "who founded the marrow street theatre?",
                                     "data_source": "nq", "reward_model": {"ground_truth": {"target": ["Ida Quenby"]}}})
                         + "\n" + json.dumps({"question": "q?", "answer": "A", "answer_aliases": ["a", "B"]}) + "\n")
    rows = load_problems("musique", search_r1)
    assert [(p.problem_id, p.split, p.answers) for p in rows] == [("musique/train_7", "train", ["Ida Quenby"]),
                                                                  ("musique/train/1", "train", ["A", "a", "B"])]


@pytest.mark.parametrize(("row", "message"), [
    ({"id": "1", "golden_answers": ["x"]}, "missing field 'question'"),
    ({"id": "1", "question": "q"}, "missing field 'golden_answers'"),
    ({"id": "1", "question": "q", "golden_answers": []}, "no non-empty golden answer"),
    ({"id": "1", "question": " ", "golden_answers": ["x"]}, "`question` is empty"),
])
def test_schema_errors_name_the_row_and_field(tmp_path, row, message):
    source = tmp_path / "test.jsonl"
    source.write_text(json.dumps(row) + "\n")
    with pytest.raises(SearchDataError, match=message) as caught:
        load_problems("nq", source)
    assert f"{source} row 0" in str(caught.value)


def test_records_round_trip_and_reject_bad_fields(tmp_path):
    problem = SearchProblem("nq/1", "nq", "test", "q?", ["a"], {"type": "x"})
    assert SearchProblem.from_json(problem.to_json()) == problem
    with pytest.raises(SearchDataError, match="answers"):
        SearchProblem("nq/1", "nq", "test", "q?", ["a", ""])
    with pytest.raises(SearchDataError, match=r"unknown \['extra'\]"):
        SearchProblem.from_json({**problem.to_json(), "extra": 1})
    with pytest.raises(SearchDataError, match="unknown search dataset"):
        load_problems("triviaqa", tmp_path / "x.jsonl")
    with pytest.raises(SearchDataError, match="cannot tell which split"):
        (tmp_path / "qa.jsonl").write_text(json.dumps({"question": "q", "golden_answers": ["a"]}) + "\n")
        load_problems("nq", tmp_path / "qa.jsonl")


def test_dataprocess_search_writes_splits_and_the_index(tmp_path, monkeypatch, capsys):
    from pettingllms.envs.search.bm25 import BM25Index

    monkeypatch.setenv("PETTINGLLMS_DATA", str(tmp_path))
    assert main(["dataprocess", "search", "--dataset", "hotpotqa", "--source", str(FIXTURES / "hotpotqa" / "dev.jsonl")]) == 0
    target = tmp_path / "search" / "hotpotqa" / "dev.jsonl"
    assert read_jsonl(target) == load_problems("hotpotqa", FIXTURES / "hotpotqa" / "dev.jsonl")
    assert f"wrote 3 hotpotqa questions to {target}" in capsys.readouterr().out
    assert main(["dataprocess", "search", "--corpus", str(CORPUS)]) == 0
    assert f"indexed 19 passages of {CORPUS} into {tmp_path / 'search' / 'index'}" in capsys.readouterr().out
    assert len(BM25Index.load(tmp_path / "search" / "index")) == 19
    out = tmp_path / "elsewhere"
    assert main(["dataprocess", "search", "--dataset", "bamboogle", "--source", str(FIXTURES / "bamboogle" / "test.jsonl"),
                 "--split", "eval", "--output", str(out)]) == 0
    assert [p.split for p in read_jsonl(out / "eval.jsonl")] == ["eval"] * 3


@pytest.mark.parametrize(("argv", "message"), [
    ([], "give --corpus PATH"),
    (["--corpus", "c.jsonl", "--dataset", "nq"], "one of the two"),
    (["--dataset", "nq"], "no --source for nq and Hub downloads are off (COMLRL_ALLOW_HUB is not 1)"),
    (["--corpus", "c.jsonl", "--split", "dev"], "go with --dataset"),
    (["--corpus", "MISSING"], "no corpus file at"),
    (["--dataset", "nq", "--source", "MISSING"], "no data file or folder"),
])
def test_dataprocess_search_errors_are_one_line_and_status_2(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("COMLRL_ALLOW_HUB", raising=False)
    argv = [str(tmp_path / a) if a == "MISSING" else a for a in argv]
    assert main(["dataprocess", "search", *argv, "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err and err.startswith("pettingllms: error: dataprocess search:")
    assert not (tmp_path / "out").exists()


SEARCH_CONFIGS = ["L0", "L1", "L2", "L3", "synthetic", "nq", "hotpotqa", "2wiki", "musique", "bamboogle", "train_hotpotqa"]


def test_every_shipped_search_config_loads_and_validates(data_root, monkeypatch):
    from pettingllms.config import load_config, shipped_configs, validate_config

    assert sorted(p.stem for p in shipped_configs() if p.parent.name == "search") == sorted(SEARCH_CONFIGS)
    monkeypatch.setenv("PETTINGLLMS_DATA", data_root)
    for name in SEARCH_CONFIGS:
        config = load_config(f"search/{name}")
        validate_config(config)
        level = name if name.startswith("L") else "L1"
        roles = ["single"] if level == "L0" else ["web_search_agent", "search_reasoning_agent"]
        assert config["env"]["name"] == "search" and config["policy"]["level"] == level, name
        assert config["env"]["turn_order"] == roles and sorted(config["policy"]["agents"]) == sorted(roles), name


def test_a_dataset_config_without_its_index_is_refused_before_a_run(data_root, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PETTINGLLMS_DATA", data_root)
    missing = tmp_path / "no-index"
    assert main(["eval", "search/nq", "--policy", "oracle", f"env.index_dir={missing}",
                 f"run.output_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert f"no BM25 index at {missing}" in err and "pettingllms dataprocess search --corpus" in err
    monkeypatch.setenv("PETTINGLLMS_DATA", str(tmp_path / "empty"))
    assert main(["eval", "search/nq", "--policy", "oracle", f"run.output_dir={tmp_path / 'run'}"]) == 2
    assert "pettingllms dataprocess search --dataset nq" in capsys.readouterr().err


@pytest.mark.parametrize("dataset", list(SOURCES))
def test_eval_cli_oracle_scores_one_on_every_loader_fixture(dataset, data_root, tmp_path, monkeypatch, capsys):
    """The oracle team searches the BM25 index of the fixture corpus (which holds every answer), finds every
    supporting passage and answers: success 1.000 on each dataset's evaluation split."""
    monkeypatch.setenv("PETTINGLLMS_DATA", data_root)
    monkeypatch.delenv("SEARCH_API_URL", raising=False)
    assert main(["eval", f"search/{dataset}", "--policy", "oracle", f"run.output_dir={tmp_path}", "run.progress=false"]) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "eval_results.json").read_text())
    assert report["metrics"]["success_rate"] == 1.0 and "success 1.000 on 3 held-out instances" in out, out
