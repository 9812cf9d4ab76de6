"""The same MADPO job with this project's ``comlrl`` and with the public CoMLRL 1.4.3, side by side.

Both libraries import as ``comlrl``, so the public one is installed by this script into its own virtual
environment (``benchmarks/.venvs/comlrl-1.4.3``: ``python -m venv`` + ``pip install torch==2.13.0
comlrl==1.4.3``; the torch pin keeps the CPU wheel) and every run is a fresh subprocess:
``_vs_comlrl_ours.py`` with this interpreter, ``_vs_comlrl_theirs.py`` with the other one, alternating
(ours, theirs, ours, theirs, ...), each in its own scratch working directory.

Equal work on both sides: one random-init checkpoint folder (a built preset, default ``test-tiny``, seed 0)
loaded by path, float32, SDPA attention; the same items, two agents with the same prompt formatters, the
same joint reward, ``preference_num_candidates``, ``preference_pairs_per_sample`` (reward-gap selection),
epochs, ``train_batch_size``, learning rate, ``dpo_beta``, sampling (temperature, top-p, top-k) and
``max_new_tokens``; no evaluation; one torch thread (``OMP_NUM_THREADS=1`` and ``torch.set_num_threads(1)``);
W&B off (``wandb_config=None``, ``WANDB_MODE=disabled``). Ours runs with
``exclude_last_completion_token=True``, the public scorer's behaviour. The rewards are continuous, so ties
are rare and both sides build the same pairs count; the table shows pairs and updates of both.

Measured per run: wall time of ``train()``; every ``model.generate`` call (wrapped on the model instances:
its time, and the new non-pad tokens up to each row's first EOS) giving generation tokens/s; the library's
generation step around it (ours ``backend.generate``; theirs ``_generate_completions``); the collection
and learning phases. Medians over the runs, and the ratios ours / theirs. Targets: ours' ``train()`` at most 1/4
of theirs, generation at least 3x faster.

One case per ``--train-batch-size`` value (default ``2 8``: the public default of 2 pairs per update is the
headline; 8 shows how the two update schemes scale: one padded forward per agent per batch against four
forwards per pair and agent).

    python -m benchmarks.vs_comlrl                   # 16 items, 4 candidates, 4 pairs/item, 5+5 runs per case
    python -m benchmarks.vs_comlrl --items 64 --train-batch-size 2 --repeats 3 --profile
    python -m benchmarks.vs_comlrl --skip-theirs     # only ours

``--profile`` adds one cProfile'd ``train()`` per side and case (not counted in the timings) and prints its
top functions. Results: ``benchmarks/results/vs_comlrl.json``. If the public library cannot be installed,
the script says why, still times ours, and records the reason in the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from comlrl.atomic_io import atomic_write_json  # noqa: E402
from comlrl.models import build_preset  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results" / "vs_comlrl.json"
DEFAULT_VENV = HERE / ".venvs" / "comlrl-1.4.3"
PUBLIC_VERSION = "1.4.3"
TORCH_PIN = "torch==2.13.0"
RESULT_PREFIX = "VS_COMLRL_RESULT "  # the runners' result line (see _vs_comlrl_common.py)
TARGET_TRAIN_RATIO = 0.25  # ours / theirs, train() wall time
TARGET_GENERATION_SPEEDUP = 3.0  # ours / theirs, generation tokens per second
RUN_TIMEOUT_S = 900

# Per-run fields summarised by their median (name in the runner's JSON -> column label).
FIELDS = {
    "train_s": "train() s",
    "generate_s": "generate s",
    "generated_tokens": "gen tokens",
    "generate_tokens_per_s": "gen tok/s",
    "generate_calls": "generate calls",
    "engine_s": "gen step s",
    "collect_s": "collect s",
    "learn_s": "learn s",
    "pairs_built": "pairs",
    "updates": "updates",
    "ready_s": "imports+init s",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=16, help="training items")
    parser.add_argument("--candidates", type=int, default=4, help="preference_num_candidates")
    parser.add_argument("--pairs-per-item", type=int, default=4, help="preference_pairs_per_sample")
    parser.add_argument("--epochs", type=int, default=1, help="num_train_epochs")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument(
        "--train-batch-size",
        type=int,
        nargs="+",
        default=[2, 8],
        help="pairs per update, one case per value (the first, by default the public default 2, is the headline)",
    )
    parser.add_argument("--lr", type=float, default=1e-3, help="agent_learning_rate")
    parser.add_argument("--beta", type=float, default=0.1, help="dpo_beta")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0, help="model build seed and run seed")
    parser.add_argument("--preset", default="test-tiny", help="built preset of the shared checkpoint folder")
    parser.add_argument("--repeats", type=int, default=5, help="runs per side (alternating), >= 1")
    parser.add_argument("--venv", default=str(DEFAULT_VENV), help="virtual environment of the public library")
    parser.add_argument("--skip-theirs", action="store_true", help="time ours only")
    parser.add_argument("--profile", action="store_true", help="one extra cProfile'd run per side")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    for name in ("items", "candidates", "pairs_per_item", "epochs", "max_new_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.candidates < 2:
        parser.error(f"--candidates must be >= 2 (pairs need two candidates), got {args.candidates}")
    if min(args.train_batch_size) < 1:
        parser.error(f"--train-batch-size values must be >= 1, got {args.train_batch_size}")
    return args


def job_of(args: argparse.Namespace, train_batch_size: int) -> dict[str, Any]:
    return {
        "items": args.items,
        "candidates": args.candidates,
        "pairs_per_item": args.pairs_per_item,
        "epochs": args.epochs,
        "max_new_tokens": args.max_new_tokens,
        "train_batch_size": train_batch_size,
        "lr": args.lr,
        "beta": args.beta,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "seed": args.seed,
    }


# ---------------------------------------------------------------------------------------- the public venv
def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def installed_public_version(venv: Path) -> str | None:
    python = venv_python(venv)
    if not python.exists():
        return None
    probe = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('comlrl'))"],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),  # never the repository root, whose comlrl/ would shadow the venv's
        env=runner_env(public=True),
    )
    return probe.stdout.strip() if probe.returncode == 0 else None


def ensure_public_venv(venv: Path) -> tuple[Path | None, str | None]:
    """The public library's interpreter, installing it first if needed; else (None, why not)."""
    if installed_public_version(venv) == PUBLIC_VERSION:
        return venv_python(venv), None
    base = getattr(sys, "_base_executable", None) or sys.executable
    steps = [
        [base, "-m", "venv", str(venv)],
        [str(venv_python(venv)), "-m", "pip", "install", "-q", TORCH_PIN, f"comlrl=={PUBLIC_VERSION}"],
    ]
    for step in steps:
        print("$", " ".join(step), flush=True)
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
            return None, f"`{' '.join(step)}` failed (exit {done.returncode}): {tail}"
    version = installed_public_version(venv)
    if version != PUBLIC_VERSION:
        return None, f"after installing, {venv} imports comlrl {version!r}, not {PUBLIC_VERSION}"
    return venv_python(venv), None


# ---------------------------------------------------------------------------------------- one run
def runner_env(public: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        WANDB_MODE="disabled",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONHASHSEED="0",
    )
    env.pop("VIRTUAL_ENV", None)
    if public:
        env.pop("PYTHONPATH", None)  # the public side must import its own comlrl only
    else:
        env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_once(
    side: str, python: str, model: Path, job: dict[str, Any], profile: bool = False
) -> dict[str, Any]:
    script = HERE / ("_vs_comlrl_ours.py" if side == "ours" else "_vs_comlrl_theirs.py")
    command = [python, str(script), "--model", str(model), "--job", json.dumps(job)]
    if profile:
        command.append("--profile")
    with tempfile.TemporaryDirectory(prefix=f"vs-comlrl-{side}-") as scratch:
        start = time.perf_counter()
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            cwd=scratch,
            env=runner_env(public=side == "theirs"),
            timeout=RUN_TIMEOUT_S,
        )
        process_s = time.perf_counter() - start
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if done.returncode != 0 or not lines:
        tail = "\n".join((done.stderr + done.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"{side} run failed (exit {done.returncode}):\n{tail}")
    result = json.loads(lines[-1][len(RESULT_PREFIX) :])
    result["process_s"] = process_s
    return result


# ---------------------------------------------------------------------------------------- summary
def median_of(runs: list[dict[str, Any]]) -> dict[str, float]:
    return {key: statistics.median(float(r[key]) for r in runs) for key in FIELDS if runs and key in runs[0]}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def format_value(value: float | None) -> str:
    if value is None:
        return "-"
    if float(value).is_integer() and abs(value) >= 1:
        return str(int(value))
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3f}"


def table(ours: dict[str, float], theirs: dict[str, float] | None) -> str:
    header = ["metric (median)", "ours", "CoMLRL 1.4.3", "ours / theirs"]
    rows = [header]
    for key, label in FIELDS.items():
        a = ours.get(key)
        b = theirs.get(key) if theirs else None
        rows.append([label, format_value(a), format_value(b), format_value(ratio(a, b))])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def run_case(
    job: dict[str, Any], model: Path, public_python: Path | None, repeats: int, profile: bool
) -> dict[str, Any]:
    """Alternating runs of one job (ours, theirs, ours, ...), their medians, ratios and profiles."""
    sides = [("ours", sys.executable)] + ([("theirs", str(public_python))] if public_python else [])
    print(f"\n== case: train_batch_size {job['train_batch_size']} ==", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "theirs": []}
    load_before = load_average()
    for repeat in range(repeats):
        for side, python in sides:
            result = run_once(side, python, model, job)
            runs[side].append(result)
            print(
                f"run {repeat + 1}/{repeats} {side:6s}: train() {result['train_s']:.3f} s, "
                f"generate {result['generate_s']:.3f} s ({result['generate_tokens_per_s']:.0f} tok/s, "
                f"{result['generate_calls']} calls), pairs {result['pairs_built']}, updates {result['updates']}",
                flush=True,
            )
    load_after = load_average()
    profiles = (
        {side: run_once(side, python, model, job, profile=True)["profile"] for side, python in sides}
        if (profile)
        else {}
    )

    ours = median_of(runs["ours"])
    theirs = median_of(runs["theirs"]) if runs["theirs"] else None
    first = runs["ours"][0]
    equal_work = bool(theirs) and all(
        int(r["pairs_built"]) == int(first["pairs_built"]) and int(r["updates"]) == int(first["updates"])
        for r in runs["ours"] + runs["theirs"]
    )
    train_ratio = ratio(ours["train_s"], theirs["train_s"]) if theirs else None
    generation_speedup = (
        ratio(ours["generate_tokens_per_s"], theirs["generate_tokens_per_s"]) if theirs else None
    )
    return {
        "job": job,
        "median": {"ours": ours, "theirs": theirs},
        "train_ratio_ours_over_theirs": train_ratio,
        "generation_speedup_ours_over_theirs": generation_speedup,
        "generation_step_ratio_ours_over_theirs": ratio(ours["engine_s"], theirs["engine_s"])
        if theirs
        else None,
        "train_ratio_met": train_ratio is not None and train_ratio <= TARGET_TRAIN_RATIO,
        "generation_speedup_met": generation_speedup is not None
        and generation_speedup >= TARGET_GENERATION_SPEEDUP,
        "equal_work": equal_work,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "runs": {
            side: [{k: v for k, v in r.items() if k != "profile"} for r in rs] for side, rs in runs.items()
        },
        "profiles": profiles,
    }


def report(case: dict[str, Any]) -> None:
    ours, theirs = case["median"]["ours"], case["median"]["theirs"]
    print(
        f"\n-- train_batch_size {case['job']['train_batch_size']}: medians of {len(case['runs']['ours'])} runs --"
    )
    print(table(ours, theirs))
    if theirs:
        train_ratio, speedup = (
            case["train_ratio_ours_over_theirs"],
            case["generation_speedup_ours_over_theirs"],
        )
        print(
            f"train() ours/theirs = {train_ratio:.3f} (target <= {TARGET_TRAIN_RATIO}: "
            f"{'met' if case['train_ratio_met'] else 'MISSED'}); generation tokens/s ours/theirs = {speedup:.2f}x "
            f"(target >= {TARGET_GENERATION_SPEEDUP}x: {'met' if case['generation_speedup_met'] else 'MISSED'}); "
            f"equal pairs and updates in every run: {case['equal_work']}"
        )
    for side, blocks in case["profiles"].items():
        print(f"\n---- cProfile of one {side} train() ----")
        for block in blocks:
            print("\n".join(block.splitlines()[:32]))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    model = build_preset(args.preset, seed=args.seed)
    print(f"model: {args.preset} (seed {args.seed}) at {model}")

    public_python, unavailable = (
        (None, "skipped (--skip-theirs)") if args.skip_theirs else ensure_public_venv(Path(args.venv))
    )
    if unavailable and not args.skip_theirs:
        print(f"\nThe public CoMLRL {PUBLIC_VERSION} is NOT available: {unavailable}\nTiming ours only.\n")

    cases = [
        run_case(job_of(args, batch), model, public_python, args.repeats, args.profile)
        for batch in args.train_batch_size
    ]
    for case in cases:
        report(case)
    if unavailable:
        print(f"\nCoMLRL {PUBLIC_VERSION}: {unavailable}")

    headline = cases[0]
    payload = {
        "benchmark": "vs_comlrl",
        "model": {"preset": args.preset, "seed": args.seed, "path": str(model)},
        "agents": 2,
        "repeats": args.repeats,
        "public_library": {
            "version": PUBLIC_VERSION,
            "available": public_python is not None,
            "unavailable_reason": unavailable,
            "venv": str(args.venv),
        },
        "targets": {
            "train_ratio_max": TARGET_TRAIN_RATIO,
            "generation_speedup_min": TARGET_GENERATION_SPEEDUP,
        },
        "headline": {
            key: headline[key]
            for key in (
                "job",
                "train_ratio_ours_over_theirs",
                "generation_speedup_ours_over_theirs",
                "train_ratio_met",
                "generation_speedup_met",
                "equal_work",
            )
        },
        "cases": cases,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
        },
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    atomic_write_json(args.out, payload)
    print(f"\nwrote {args.out}")
    return payload


if __name__ == "__main__":
    main()
