"""Shared test setup: deterministic threads, hypothesis profiles, offline hub, temporary model cache."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# A Ray cluster a test starts stays on the loopback address (Ray reads this when it is imported; without it a
# local cluster binds and talks to the machine's outside address).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

transformers.utils.logging.disable_progress_bar()

# The shell and every helper share 2 cores: one torch thread per test process keeps timings stable.
torch.set_num_threads(1)

# "dev" for quick local runs, "ci" sized to CI's budget; tests that need a larger count for their own
# reason (e.g. 10,000 parser cases) set ``max_examples`` explicitly.
settings.register_profile(
    "dev", max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> str:
    """A temporary model cache shared by the whole test session, its xdist workers too (one builds or converts
    a model while the others that want it wait: ``comlrl.models.builder.cached_build``); tests never touch
    the user cache."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, above every worker's own
    path = root / "model-cache"
    path.mkdir(exist_ok=True)
    os.environ["COMLRL_MODEL_CACHE"] = str(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_model_path(model_cache) -> str:
    """The test-tiny preset, built once per session into the temporary cache."""
    from comlrl.models import build_preset

    return str(build_preset("test-tiny", seed=0, cache_dir=model_cache))


@pytest.fixture(scope="session")
def code_data_root(tmp_path_factory) -> str:
    """A ``$PETTINGLLMS_DATA`` root holding normalised train and test splits of every code dataset with a
    fixture under ``tests/fixtures/code`` (HumanEval is packaged): the first 8 problems of each fixture
    as the train split, the other 4 as the test split (their ids differ, so the splits are disjoint)."""
    import dataclasses
    from pathlib import Path

    from pettingllms.envs.code.data import load_problems, write_jsonl

    fixtures = Path(__file__).parent / "fixtures" / "code"
    root = tmp_path_factory.mktemp("pettingllms-data")
    for dataset, source in (("apps", "test"), ("codecontests", "train"), ("livecodebench", "test"), ("mbpp", "test")):
        problems = load_problems(dataset, fixtures / dataset / f"{source}.jsonl", source, None)
        folder = root / "code" / dataset
        for split, part in (("train", problems[:8]), ("test", problems[8:])):
            write_jsonl(folder / f"{split}.jsonl", [dataclasses.replace(p, split=split) for p in part])
    return str(root)


@pytest.fixture(scope="session")
def math_data_root(code_data_root) -> str:
    """The ``$PETTINGLLMS_DATA`` root of :func:`code_data_root`, holding also the normalised ``test`` split of
    every math dataset with a fixture under ``tests/fixtures/math`` (GSM8K, DAPO, POLARIS: a ``train`` split too), read
    through the loaders as ``pettingllms dataprocess math`` would."""
    import dataclasses
    from pathlib import Path

    from pettingllms.envs.math.data import load_problems, write_jsonl

    fixtures = Path(__file__).parent / "fixtures" / "math"
    root = Path(code_data_root)
    sources = {
        "gsm8k": ["main/test-00000-of-00001.jsonl", "main/train-00000-of-00001.jsonl"],
        "math": ["test-00000-of-00001.jsonl"], "math500": ["test.jsonl"], "aime24": ["aime_2024_problems.jsonl"],
        "aime25": ["aime2025-I.jsonl", "aime2025-II.jsonl"], "aime_past": ["AIME_Dataset_1983_2024.csv"],
        "olympiadbench": ["OE_TO_maths_en_COMP/train-00000-of-00001.jsonl"], "polaris": ["polaris-data-53K.jsonl"],
        "dapo": ["dapo-math-17k.jsonl"],
    }
    for dataset, files in sources.items():
        splits: dict[str, list] = {}
        for name in files:
            split = "train" if name.startswith("main/train") else "test"
            problems = load_problems(dataset, fixtures / dataset / name, split)
            splits.setdefault(split, []).extend(dataclasses.replace(p, split=split) for p in problems)
        if dataset in ("dapo", "polaris"):  # training corpora: their one split is what the protocol configs train on
            splits["train"] = [dataclasses.replace(p, split="train") for p in splits["test"]]
        for split, problems in splits.items():
            write_jsonl(root / "math" / dataset / f"{split}.jsonl", problems)
    return code_data_root


@pytest.fixture(scope="session")
def search_data_root(math_data_root) -> str:
    """The ``$PETTINGLLMS_DATA`` root of :func:`math_data_root`, holding also every search fixture split normalised
    and the fixture corpus's BM25 index, as ``pettingllms dataprocess search`` writes them."""
    from pathlib import Path

    from tests.helpers.search_data import write_search_root

    return str(write_search_root(Path(math_data_root)))
