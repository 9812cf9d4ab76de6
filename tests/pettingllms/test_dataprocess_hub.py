"""`pettingllms dataprocess` without `--source`: the public copy read through `datasets.load_dataset` from the Hub's
data files, here from a local folder laid out like the Hub (`PETTINGLLMS_HUB_MIRROR`, built from tests/fixtures, the
parquet repositories' files written as parquet), normalising to the same records as the local route; the one-line
refusal, before `datasets` is reached, when Hub access is not allowed; OlympiadBench's English text-only default and
its opt-in; a lone `train` split of an evaluation-only benchmark written as `test`; the missing-split message."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pettingllms.cli import main
from pettingllms.envs import sources
from pettingllms.envs.code import data as code_data
from pettingllms.envs.math import data as math_data
from pettingllms.envs.search import data as search_data

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
OLYMPIAD = [f"OE_{m}_maths_{c}" for m in ("TO", "MM") for c in ("en_COMP", "zh_COMP", "zh_CEE")]

#: A file of each Hub repository (as the table in pettingllms.envs.sources names it) -> the fixture it holds.
MIRROR = {
    "codeparrot/apps/train.jsonl": "code/apps/train.jsonl",
    "codeparrot/apps/test.jsonl": "code/apps/test.jsonl",
    "deepmind/code_contests/data/train-00000-of-00001.parquet": "code/codecontests/train.jsonl",
    "deepmind/code_contests/data/test-00000-of-00001.parquet": "code/codecontests/test.jsonl",
    "livecodebench/code_generation_lite/test.jsonl": "code/livecodebench/test.jsonl",
    "google-research-datasets/mbpp/full/test-00000-of-00001.parquet": "code/mbpp/test.jsonl",
    "openai/gsm8k/main/train-00000-of-00001.parquet": "math/gsm8k/main/train-00000-of-00001.jsonl",
    "openai/gsm8k/main/test-00000-of-00001.parquet": "math/gsm8k/main/test-00000-of-00001.jsonl",
    "DigitalLearningGmbH/MATH-lighteval/data/test-00000-of-00001.parquet": "math/math/test-00000-of-00001.jsonl",
    "HuggingFaceH4/MATH-500/test.jsonl": "math/math500/test.jsonl",
    "Maxwell-Jia/AIME_2024/aime_2024_problems.parquet": "math/aime24/aime_2024_problems.jsonl",
    "opencompass/AIME2025/aime2025-I.jsonl": "math/aime25/aime2025-I.jsonl",
    "opencompass/AIME2025/aime2025-II.jsonl": "math/aime25/aime2025-II.jsonl",
    "gneubig/aime-1983-2024/AIME_Dataset_1983_2024.csv": "math/aime_past/AIME_Dataset_1983_2024.csv",
    **{f"Hothan/OlympiadBench/{c}/train-00000-of-00001.parquet": f"math/olympiadbench/{c}/train-00000-of-00001.jsonl"
       for c in OLYMPIAD},
    "POLARIS-Project/Polaris-Dataset-53K/polaris-data-53K.jsonl": "math/polaris/polaris-data-53K.jsonl",
    "BytedTsinghua-SIA/DAPO-Math-17k/data/dapo-math-17k.parquet": "math/dapo/dapo-math-17k.jsonl",
    **{f"RUC-NLPIR/FlashRAG_datasets/{name}": f"search/{name}" for name in (
        "nq/test.jsonl", "nq/train.jsonl", "hotpotqa/dev.jsonl", "hotpotqa/train.jsonl", "2wikimultihopqa/dev.jsonl",
        "musique/dev.jsonl", "bamboogle/test.jsonl")},
}


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hub-mirror")
    for target, fixture in MIRROR.items():
        path = root / target
        path.parent.mkdir(parents=True, exist_ok=True)
        if target.endswith(".parquet"):
            rows = [json.loads(line) for line in (FIXTURES / fixture).read_text(encoding="utf-8").splitlines()]
            pq.write_table(pa.Table.from_pylist(rows), path)
        else:
            shutil.copyfile(FIXTURES / fixture, path)
    return root


@pytest.fixture
def hub(mirror, monkeypatch, tmp_path) -> Path:
    """Hub access allowed, the mirror standing in for the Hub, output under a fresh $PETTINGLLMS_DATA."""
    monkeypatch.setenv("COMLRL_ALLOW_HUB", "1")
    for name in sources.OFFLINE_ENVS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(sources.MIRROR_ENV, str(mirror))
    monkeypatch.setenv("PETTINGLLMS_DATA", str(tmp_path / "data"))
    return tmp_path / "data"


def test_every_mirrored_file_is_a_data_file_of_the_table():
    patterns = {f"{s.repo}/{p}" for env in sources.SOURCES.values() for s in env.values() for ps in s.splits.values()
                for p in ps}
    assert all(any(Path(target).match(p) for p in patterns) for target in MIRROR)
    assert {(env, d) for env, table in sources.SOURCES.items() for d in table} == (
        {("code", d) for d in code_data.DATASETS if d != "humaneval"} | {("math", d) for d in math_data.DATASETS}
        | {("search", d) for d in search_data.DATASETS})


# ------------------------------------------------------------------- the Hub route = the local route


@pytest.mark.parametrize(("dataset", "split", "fixture", "ids"), [
    ("apps", "train", "apps/train.jsonl", [f"apps/train/{n}" for n in range(4000, 4006)]),
    ("apps", "test", "apps/test.jsonl", None),
    ("codecontests", "test", "codecontests/test.jsonl", [f"codecontests/{1500 + i}_B. {n}" for i, n in
                                                         enumerate(("Triangular", "Distinct", "Negatives", "Leap", "Hyphen"))]),
    ("codecontests", "train", "codecontests/train.jsonl", None),
    ("livecodebench", "test", "livecodebench/test.jsonl", None),
    ("mbpp", "test", "mbpp/test.jsonl", None),
])
def test_code_from_the_hub_is_the_local_normalisation(hub, dataset, split, fixture, ids):
    fetched = code_data.load_problems(dataset, None, split)
    assert fetched == code_data.load_problems(dataset, FIXTURES / "code" / fixture, split)
    assert {p.split for p in fetched} == {split} and len(fetched) == len((FIXTURES / "code" / fixture).read_text().splitlines())
    if ids is not None:
        assert [p.problem_id for p in fetched] == ids


@pytest.mark.parametrize(("dataset", "split", "files"), [
    ("gsm8k", "train", ["gsm8k/main/train-00000-of-00001.jsonl"]),
    ("math", "test", ["math/test-00000-of-00001.jsonl"]),
    ("math500", "test", ["math500/test.jsonl"]),
    ("aime24", "test", ["aime24/aime_2024_problems.jsonl"]),
    ("aime25", "test", ["aime25/aime2025-I.jsonl", "aime25/aime2025-II.jsonl"]),
    ("aime_past", "test", ["aime_past/AIME_Dataset_1983_2024.csv"]),
    ("olympiadbench", "test", [f"olympiadbench/{c}/train-00000-of-00001.jsonl" for c in OLYMPIAD]),
    ("polaris", "train", ["polaris/polaris-data-53K.jsonl"]),
    ("dapo", "train", ["dapo/dapo-math-17k.jsonl"]),
])
def test_math_from_the_hub_is_the_local_normalisation(hub, dataset, split, files):
    asked = split if len(sources.SOURCES["math"][dataset].splits) > 1 else None  # a lone split needs no --split
    fetched = math_data.load_problems(dataset, None, asked, language=None, modality=None)
    local = [p for name in files for p in math_data.load_problems(dataset, FIXTURES / "math" / name, language=None,
                                                                  modality=None)]
    assert fetched == local and {p.split for p in fetched} == {split}
    assert len({p.problem_id for p in fetched}) == len(fetched) > 0


def test_search_from_the_hub_is_the_local_normalisation(hub):
    for dataset, folder, split in (("nq", "nq", "train"), ("hotpotqa", "hotpotqa", "dev"), ("2wiki", "2wikimultihopqa", "dev"),
                                   ("musique", "musique", "dev"), ("bamboogle", "bamboogle", "test")):
        fetched = search_data.load_problems(dataset, None, split if dataset != "bamboogle" else None)
        assert fetched == search_data.load_problems(dataset, FIXTURES / "search" / folder / f"{split}.jsonl"), dataset
        assert {p.split for p in fetched} == {split}


def test_dataprocess_without_source_writes_the_hub_split_and_says_where_it_came_from(hub, mirror, capsys):
    assert main(["dataprocess", "code", "--dataset", "apps", "--split", "train"]) == 0
    out = capsys.readouterr().out.splitlines()
    target = hub / "code" / "apps" / "train.jsonl"
    assert out[0] == f"apps train: read from the Hub mirror: {mirror}/codeparrot/apps/train.jsonl"
    assert out[-1] == f"wrote 6 apps problems to {target}"
    assert [p.problem_id for p in code_data.read_jsonl(target)][:2] == ["apps/train/4000", "apps/train/4001"]
    assert main(["dataprocess", "search", "--dataset", "hotpotqa", "--split", "train"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote 2 hotpotqa questions to {hub / 'search/hotpotqa/train.jsonl'}"
    assert main(["dataprocess", "math", "--dataset", "aime24"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"wrote 3 aime24 problems to {hub / 'math/aime24/test.jsonl'} (the Hub's 'train' split, read as 'test': an "
        "evaluation-only benchmark)")


@pytest.mark.parametrize(("argv", "message"), [
    (["code", "--dataset", "apps"], "apps on the Hub (codeparrot/apps) has the splits ['train', 'test']: pick one with --split"),
    (["search", "--dataset", "bamboogle", "--split", "dev"], "bamboogle on the Hub (RUC-NLPIR/FlashRAG_datasets) has no split 'dev'"),
    (["math", "--dataset", "gsm8k", "--source", "x.jsonl", "--revision", "abc"], "--revision picks the Hub commit; it goes without --source"),
])
def test_hub_usage_errors_are_one_line(hub, argv, message, capsys):
    assert main(["dataprocess", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


# ---------------------------------------------------------------------------------------- not allowed


@pytest.mark.parametrize(("env", "blocker"), [
    ({"COMLRL_ALLOW_HUB": None, "HF_HUB_OFFLINE": None, "HF_DATASETS_OFFLINE": None}, "COMLRL_ALLOW_HUB is not 1"),
    ({"COMLRL_ALLOW_HUB": "1", "HF_HUB_OFFLINE": None, "HF_DATASETS_OFFLINE": "1"}, "HF_DATASETS_OFFLINE=1 is set"),
    ({"COMLRL_ALLOW_HUB": "1", "HF_HUB_OFFLINE": "true", "HF_DATASETS_OFFLINE": None}, "HF_HUB_OFFLINE=true is set"),
], ids=["switch-off", "datasets-offline", "hub-offline"])
def test_without_hub_access_nothing_is_fetched_and_the_refusal_is_one_line(env, blocker, mirror, tmp_path, monkeypatch, capsys):
    import datasets

    def no_network(*args, **kwargs):
        raise AssertionError("datasets.load_dataset was called")

    monkeypatch.setattr(datasets, "load_dataset", no_network)
    monkeypatch.setenv(sources.MIRROR_ENV, str(mirror))  # even a local mirror is not read
    for name, value in env.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    out = tmp_path / "out"
    assert main(["dataprocess", "math", "--dataset", "gsm8k", "--split", "test", "--output", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"pettingllms: error: dataprocess math: no --source for gsm8k and Hub downloads are off ({blocker}): pass "
        "--source PATH (a local copy), or set COMLRL_ALLOW_HUB=1 with HF_HUB_OFFLINE and HF_DATASETS_OFFLINE unset to "
        "fetch it from openai/gsm8k\n")
    assert not out.exists()
    for argv in (["code", "--dataset", "livecodebench"], ["search", "--dataset", "nq", "--split", "test"]):
        assert main(["dataprocess", *argv, "--output", str(out)]) == 2
        assert capsys.readouterr().err.count("\n") == 1
    assert main(["dataprocess", "code", "--dataset", "humaneval", "--output", str(out)]) == 0  # packaged: no Hub


# ----------------------------------------------------------------------- OlympiadBench, train-as-test


def test_olympiadbench_keeps_english_text_only_by_default_and_the_rest_on_request(hub, capsys):
    assert main(["dataprocess", "math", "--dataset", "olympiadbench"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == ("olympiadbench test: kept 4 English Text-only problems, left out 7 (3 Chinese Text-only, "
                      "2 English Multi-modal, 2 Chinese Multi-modal); --language all --modality all keeps them")
    written = math_data.read_jsonl(hub / "math" / "olympiadbench" / "test.jsonl")
    assert [p.problem_id for p in written] == [f"olympiadbench/{n}" for n in (2001, 2002, 2003, 2004)]
    assert {(p.metadata["language"], p.metadata["modality"]) for p in written} == {("English", "Text-only")}
    assert main(["dataprocess", "math", "--dataset", "olympiadbench", "--language", "all", "--modality", "all"]) == 0
    assert "left out" not in capsys.readouterr().out
    assert len(math_data.read_jsonl(hub / "math" / "olympiadbench" / "test.jsonl")) == 11
    assert main(["dataprocess", "math", "--dataset", "olympiadbench", "--language", "chinese", "--modality", "multi-modal"]) == 0
    assert "kept 2 chinese multi-modal problems, left out 9" in capsys.readouterr().out
    kept, left_out = math_data.select_olympiadbench(written, language="English", modality="multimodal")
    assert kept == [] and left_out == {"English Text-only": 4}


def test_olympiadbench_filter_on_a_local_file(tmp_path, capsys):
    source = FIXTURES / "math" / "olympiadbench" / "OE_TO_maths_zh_COMP" / "train-00000-of-00001.jsonl"
    assert main(["dataprocess", "math", "--dataset", "olympiadbench", "--source", str(source), "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no olympiadbench problems left" in err and "language English, modality Text-only" in err
    assert main(["dataprocess", "math", "--dataset", "olympiadbench", "--source", str(source), "--language", "Chinese",
                 "--output", str(tmp_path)]) == 0
    assert len(math_data.read_jsonl(tmp_path / "test.jsonl")) == 2
    assert main(["dataprocess", "math", "--dataset", "gsm8k", "--source", str(source), "--language", "all"]) == 2
    assert "--language and --modality select OlympiadBench rows; gsm8k has none" in capsys.readouterr().err
    assert len(math_data.load_problems("olympiadbench", source)) == 0  # the library default is the same


@pytest.mark.parametrize(("kind", "dataset", "rows"), [
    ("math", "math500", [{"problem": "Compute $9 - 4$.", "answer": "5", "unique_id": "test/prealgebra/9.json"}]),
    ("code", "livecodebench", None),
    ("search", "bamboogle", [{"id": "b1", "question": "who founded the lumen bridge society", "golden_answers": ["Ida"]}]),
])
def test_a_lone_train_split_of_an_evaluation_benchmark_is_written_as_test(kind, dataset, rows, tmp_path, capsys):
    source = tmp_path / "train-00000-of-00001.jsonl"
    if rows is None:
        shutil.copyfile(FIXTURES / "code" / "livecodebench" / "test.jsonl", source)
    else:
        source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    assert main(["dataprocess", kind, "--dataset", dataset, "--source", str(source), "--output", str(out)]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.endswith(f"to {out / 'test.jsonl'} ({source} names its only split 'train'; read as 'test': an "
                         "evaluation-only benchmark, --split train keeps the name)")
    assert main(["dataprocess", kind, "--dataset", dataset, "--source", str(source), "--split", "train", "--output", str(out)]) == 0
    assert "read as" not in capsys.readouterr().out and (out / "train.jsonl").is_file()


def test_a_saved_folder_whose_only_split_is_train_is_test_too(tmp_path):
    import datasets

    folder = tmp_path / "aime"
    rows = [json.loads(line) for line in (FIXTURES / "math/aime24/aime_2024_problems.jsonl").read_text().splitlines()]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(folder))
    assert sources.named_split(folder) == "train"
    assert {p.split for p in math_data.load_problems("aime24", folder)} == {"test"}
    assert {p.split for p in math_data.load_problems("gsm8k", FIXTURES / "math/gsm8k/main/train-00000-of-00001.jsonl")} == {"train"}


# ------------------------------------------------------------------------------ a run's missing split


def test_a_missing_split_names_both_ways_to_make_it(tmp_path):
    message = sources.missing_split_message("math", "gsm8k", "train", tmp_path / "math" / "gsm8k" / "train.jsonl")
    assert message == (
        f"no normalised gsm8k 'train' split at {tmp_path}/math/gsm8k/train.jsonl: make it with `pettingllms dataprocess "
        f"math --dataset gsm8k --split train --source PATH --output {tmp_path}/math/gsm8k`, or leave out --source to "
        "fetch it from openai/gsm8k on the Hub (with COMLRL_ALLOW_HUB=1 and HF_HUB_OFFLINE / HF_DATASETS_OFFLINE unset)")
    assert "Hub" not in sources.missing_split_message("math", "gsm8k", "dev", tmp_path / "dev.jsonl")  # no such Hub split
