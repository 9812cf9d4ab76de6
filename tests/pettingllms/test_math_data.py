"""Maths benchmark loaders: every fixture schema loads into hand-checked records (ids, answers, splits,
levels), mirrors' spellings and formats (CSV, parquet with nested columns) load too, errors name the path
and the field, and the normalised JSONL round-trips exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pettingllms.envs.math.data import (
    DATASETS,
    MathDataError,
    MathProblem,
    load_problems,
    normalised_path,
    read_jsonl,
    write_jsonl,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "math"
FILES = {
    "gsm8k": FIXTURES / "gsm8k" / "main" / "test-00000-of-00001.jsonl",
    "math": FIXTURES / "math" / "test-00000-of-00001.jsonl",
    "math500": FIXTURES / "math500" / "test.jsonl",
    "aime24": FIXTURES / "aime24" / "aime_2024_problems.jsonl",
    "aime25": FIXTURES / "aime25" / "aime2025-I.jsonl",
    "aime_past": FIXTURES / "aime_past" / "AIME_Dataset_1983_2024.csv",
    "olympiadbench": FIXTURES / "olympiadbench" / "OE_TO_maths_en_COMP" / "train-00000-of-00001.jsonl",
    "polaris": FIXTURES / "polaris" / "polaris-data-53K.jsonl",
    "dapo": FIXTURES / "dapo" / "dapo-math-17k.jsonl",
}


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def summary(problems: list[MathProblem]) -> list[tuple]:
    return [(p.problem_id, p.split, p.answer, p.level, p.subject) for p in problems]


def test_every_dataset_has_a_fixture():
    assert set(FILES) == set(DATASETS)


# ------------------------------------------------------------------------------- hand-checked records


def test_gsm8k_both_splits():
    train = load_problems("gsm8k", FIXTURES / "gsm8k" / "main" / "train-00000-of-00001.jsonl")
    test = load_problems("gsm8k", FILES["gsm8k"])
    assert summary(train) == [("gsm8k/train/0", "train", "33", None, None), ("gsm8k/train/1", "train", "81", None, None),
                              ("gsm8k/train/2", "train", "152", None, None)]
    # "#### 62,500": the thousands comma is dropped from the reference answer
    assert [(p.problem_id, p.answer) for p in test] == [("gsm8k/test/0", "62500"), ("gsm8k/test/1", "24"), ("gsm8k/test/2", "22")]
    assert not {p.problem_id for p in train} & {p.problem_id for p in test}
    # the calculator annotations are gone, the worked lines stay, the "####" line is not in the solution
    assert train[0].solution == "Mara buys 4 * 12 = 48 pencils.\nShe has 48 - 15 = 33 pencils left."
    assert train[0].question.startswith("Mara buys 4 packs") and train[0].dataset == "gsm8k"


def test_math_answer_is_the_last_boxed_and_levels_are_normalised():
    problems = load_problems("math", FILES["math"])
    assert summary(problems) == [
        ("math/test/0", "test", "49", "1", "Prealgebra"),
        ("math/test/1", "test", "\\frac{5}{6}", "2", "Prealgebra"),  # nested braces kept whole
        ("math/test/2", "test", "7", "3", "Algebra"),
        ("math/test/3", "test", "12", "4", "Number Theory"),  # two boxes: the last one is the answer
        ("math/test/4", "test", "6", "?", "Counting & Probability"),
    ]
    assert problems[0].solution.endswith("\\boxed{49}$.")


def test_level_filter_accepts_either_spelling_and_several_labels():
    path = FILES["math"]
    assert [p.problem_id for p in load_problems("math", path, level="Level 4")] == ["math/test/3"]
    assert [p.problem_id for p in load_problems("math", path, level="4")] == ["math/test/3"]
    assert [p.problem_id for p in load_problems("math", path, level=["level 1", "?"])] == ["math/test/0", "math/test/4"]
    assert [p.problem_id for p in load_problems("math500", FILES["math500"], level="2")] == [
        "math500/test/number_theory/1002", "math500/test/algebra/1003"]
    assert load_problems("math", path, level="9") == []


def test_math500():
    problems = load_problems("math500", FILES["math500"])
    assert summary(problems) == [
        ("math500/test/prealgebra/1001", "test", "391", "1", "Prealgebra"),
        ("math500/test/number_theory/1002", "test", "2", "2", "Number Theory"),
        ("math500/test/algebra/1003", "test", "-12", "2", "Algebra"),
        ("math500/test/algebra/1004", "test", "\\frac{7}{12}", "3", "Algebra"),
    ]
    assert problems[3].solution.endswith("\\boxed{\\frac{7}{12}}$.")


def test_aime24_capitalised_mirror_and_integer_answers():
    problems = load_problems("aime24", FILES["aime24"])
    assert summary(problems) == [("aime24/2024-I-1", "test", "233", None, None), ("aime24/2024-I-2", "test", "50", None, None),
                                 ("aime24/2024-II-1", "test", "91", None, None)]
    assert problems[2].solution == "$1 + 2 + 3 + 4 + 6 + 9 + 12 + 18 + 36 = 91$."


def test_aime24_lower_case_mirror_whose_only_split_is_train_is_read_as_test(tmp_path):
    rows = [{"id": 60, "problem": "Find $2 + 2$.", "solution": "It is $4$.", "answer": "4", "url": "https://example.invalid/1",
             "year": "2024"}]
    path = write_rows(tmp_path / "train-00000-of-00001.jsonl", rows)
    (problem,) = load_problems("aime24", path)  # evaluation-only: the Hub's lone "train" split is our test
    assert (problem.problem_id, problem.split, problem.answer) == ("aime24/60", "test", "4")
    assert problem.metadata == {"url": "https://example.invalid/1", "year": "2024"}
    assert load_problems("aime24", path, split="train")[0].split == "train"  # asked for: kept
    assert load_problems("gsm8k", write_rows(tmp_path / "train.jsonl", [{"question": "Q", "answer": "#### 4"}]))[0].split == "train"


def test_aime25_ids_come_from_the_file_when_rows_have_none():
    first = load_problems("aime25", FILES["aime25"])
    second = load_problems("aime25", FIXTURES / "aime25" / "aime2025-II.jsonl")
    assert summary(first) == [("aime25/aime2025-I-1", "test", "12", None, None), ("aime25/aime2025-I-2", "test", "19", None, None),
                              ("aime25/aime2025-I-3", "test", "32", None, None)]
    assert [(p.problem_id, p.answer) for p in second] == [("aime25/aime2025-II-1", "21"), ("aime25/aime2025-II-2", "17"),
                                                          ("aime25/aime2025-II-3", "45")]
    assert first[0].question.startswith("Find the least positive integer")


def test_aime_past_from_csv_and_from_a_json_mirror(tmp_path):
    problems = load_problems("aime_past", FILES["aime_past"])
    assert summary(problems) == [("aime_past/1983-1", "test", "7", None, None), ("aime_past/1999-5", "test", "9", None, None),
                                 ("aime_past/2005-II-3", "test", "11", None, None)]
    assert problems[1].question == "Find the number of two-digit positive integers, such as $18$, whose digits sum to $9$."
    assert [p.metadata for p in problems] == [{"year": 1983, "problem_number": 1}, {"year": 1999, "problem_number": 5},
                                             {"year": 2005, "problem_number": 3, "part": "II"}]
    mirror = write_rows(tmp_path / "aime.jsonl", [{"ID": "1990-2", "Year": 1990, "Problem_Number": 2, "Question": "Q?", "Answer": 8}])
    (problem,) = load_problems("aime_past", mirror)
    assert (problem.problem_id, problem.answer, problem.metadata) == ("aime_past/1990-2", "8", {"year": 1990, "problem_number": 2})


def test_olympiadbench():
    problems = load_problems("olympiadbench", FILES["olympiadbench"])
    assert summary(problems) == [
        ("olympiadbench/2001", "test", "0,4", None, "Algebra"),  # "$0,4$": the dollars go; the lone train split is test
        ("olympiadbench/2002", "test", "36", None, "Geometry"),
        ("olympiadbench/2003", "test", "13", None, "Algebra"),
        ("olympiadbench/2004", "test", "\\frac{5}{6}", None, "Algebra"),
    ]
    assert problems[2].question == "Let $f(x) = 2x + 3$.\n\nCompute $f(f(1))$."  # the context comes first
    assert problems[1].metadata["unit"] == "square units" and problems[0].metadata["is_multiple_answer"] is True
    assert problems[1].solution == "The side is $6$, so the area is $36$."


def test_polaris():
    problems = load_problems("polaris", FILES["polaris"])
    assert summary(problems) == [("polaris/train/0", "train", "385", None, None), ("polaris/train/1", "train", "9", None, None),
                                 ("polaris/train/2", "train", "30", None, None)]
    assert [p.metadata["difficulty"] for p in problems] == ["6/8", "8/8", "7/8"]


def test_dapo_drops_the_instruction_wrapper_and_repeated_rows():
    problems = load_problems("dapo", FILES["dapo"])
    assert [(p.problem_id, p.answer) for p in problems] == [
        ("dapo/0f3c2a9e-1b7d-4c55-9e21-000000000001", "13"),
        ("dapo/0f3c2a9e-1b7d-4c55-9e21-000000000002", "999999"),
        ("dapo/0f3c2a9e-1b7d-4c55-9e21-000000000003", "28"),
    ]
    assert problems[0].question == "Find the number of positive integers less than $50$ that are multiples of $3$ but not of $5$."
    assert problems[1].question == "Compute $1001 \\times 999$."
    assert problems[0].split == "train" and problems[0].metadata == {"data_source": "math_dapo", "ability": "MATH"}


def test_dapo_from_parquet_with_nested_columns(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in FILES["dapo"].read_text().splitlines()]
    path = tmp_path / "dapo-math-17k.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    assert load_problems("dapo", path) == load_problems("dapo", FILES["dapo"])


# ------------------------------------------------------------------------------------------------ errors


def test_a_missing_file_names_the_path(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(MathDataError, match=str(missing)):
        load_problems("gsm8k", missing, split="test")


@pytest.mark.parametrize(("dataset", "row", "field"), [
    ("gsm8k", {"question": "Q"}, "'answer'"),
    ("math", {"problem": "Q", "level": "Level 1", "type": "Algebra"}, "'solution'"),
    ("math500", {"problem": "Q", "answer": "1", "level": 1}, "'unique_id'"),
    ("aime24", {"id": 1, "answer": "1"}, "'problem' or 'Problem' or 'question' or 'Question'"),
    ("aime_past", {"ID": "1983-1", "Year": 1983, "Question": "Q", "Answer": 1}, "'Problem Number' or 'Problem_Number'"),
    ("olympiadbench", {"id": 1, "question": "Q"}, "'final_answer'"),
    ("polaris", {"problem": "Q"}, "'answer'"),
    ("dapo", {"prompt": [{"role": "user", "content": "Q"}], "reward_model": {"style": "rule"}}, "reward_model.ground_truth"),
])
def test_a_missing_field_names_the_path_row_and_field(tmp_path, dataset, row, field):
    path = write_rows(tmp_path / "test.jsonl", [row])
    with pytest.raises(MathDataError) as caught:
        load_problems(dataset, path)
    message = str(caught.value)
    assert str(path) in message and "row 0" in message and f"missing field {field} in the {dataset} schema" in message


def test_schema_errors_name_the_field(tmp_path):
    no_hash = write_rows(tmp_path / "test.jsonl", [{"question": "Q", "answer": "It is 4."}])
    with pytest.raises(MathDataError, match=r"row 0: field 'answer' has no '#### <final answer>' line"):
        load_problems("gsm8k", no_hash)
    no_box = write_rows(tmp_path / "test.jsonl", [{"problem": "Q", "solution": "It is 4.", "level": "Level 1", "type": "Algebra"}])
    with pytest.raises(MathDataError, match=r"field 'solution' has no \\boxed"):
        load_problems("math", no_box)
    empty = write_rows(tmp_path / "test.jsonl", [{"problem": "Q", "answer": "  "}])
    with pytest.raises(MathDataError, match="`answer` is empty"):
        load_problems("polaris", empty)


def test_split_unknown_format_unknown_dataset_and_duplicates(tmp_path):
    rows = write_rows(tmp_path / "rows.jsonl", [{"question": "Q", "answer": "#### 4"}])
    with pytest.raises(MathDataError, match="cannot tell which split this file holds; pass split="):
        load_problems("gsm8k", rows)
    assert load_problems("gsm8k", rows, split="dev")[0].problem_id == "gsm8k/dev/0"
    text = tmp_path / "test.txt"
    text.write_text("x")
    with pytest.raises(MathDataError, match="unknown format"):
        load_problems("polaris", text)
    with pytest.raises(MathDataError, match="unknown math dataset 'gsm9k'"):
        load_problems("gsm9k", rows)
    twice = write_rows(tmp_path / "test.jsonl", [{"id": 7, "problem": "Q", "answer": "1"}] * 2)
    with pytest.raises(MathDataError, match="row 1: duplicate id 'aime24/7' \\(first at row 0\\)"):
        load_problems("aime24", twice)


# --------------------------------------------------------------------------------------- normalised layout


def test_round_trip_of_every_fixture(tmp_path):
    problems = [p for name, path in FILES.items() for p in load_problems(name, path)]
    path = write_jsonl(tmp_path / "all" / "test.jsonl", problems)
    assert read_jsonl(path) == problems
    assert json.loads(path.read_text().splitlines()[0]) == problems[0].to_json()
    assert list(problems[0].to_json()) == ["problem_id", "dataset", "split", "question", "answer", "solution", "level",
                                           "subject", "metadata"]
    assert [p.name for p in tmp_path.joinpath("all").iterdir()] == ["test.jsonl"]  # no temporary file left


def test_read_jsonl_errors_name_path_and_line(tmp_path):
    missing = tmp_path / "math" / "gsm8k" / "test.jsonl"
    with pytest.raises(MathDataError, match=f"no normalised data at {missing}: make it with `pettingllms dataprocess math"):
        read_jsonl(missing)
    good = load_problems("polaris", FILES["polaris"])[0].to_json()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(good) + "\n" + json.dumps({**good, "extra": 1}) + "\n")
    with pytest.raises(MathDataError, match=r"bad.jsonl line 2: .*unknown \['extra'\]"):
        read_jsonl(bad)
    bad.write_text(json.dumps({**good, "level": 5}) + "\n")
    with pytest.raises(MathDataError, match="line 1: polaris/train/0: `level` must be a string or null"):
        read_jsonl(bad)


def test_normalised_path_is_under_pettingllms_data(tmp_path, monkeypatch):
    monkeypatch.setenv("PETTINGLLMS_DATA", str(tmp_path))
    assert normalised_path("math500", "test") == tmp_path / "math" / "math500" / "test.jsonl"
