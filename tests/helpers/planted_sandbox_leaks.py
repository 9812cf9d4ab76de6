"""One sandbox-load run with every leak planted, in a fresh interpreter (``python -m
tests.helpers.planted_sandbox_leaks OUT.json``): the RSS check compares this process's resident memory
before and after the plant, which only means something in a process that ran nothing else (a pytest
worker that ran other test files may hand memory back to the system during the run and hide the plant).
Writes ``{"row": ..., "cgroups": [...], "summary_ok": ...}``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from benchmarks import sandbox_load as load
from pettingllms.sandbox import SandboxConfig

PLANTED_BYTES = 256 << 20  # far above the 16 MiB limit the run is given


def run_planted(out_path: str) -> None:
    config = SandboxConfig(**load.DEFAULT_CONFIG)
    held: dict = {"fds": [], "bytes": None, "child": None, "files": [], "cgroups": []}

    def plant(pool, marker):
        held["fds"].append(os.open("/dev/null", os.O_RDONLY))
        for fd in os.listdir("/proc/self/fd"):  # a lock fd the pool forgot: its flock outlives close()
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if os.path.basename(target) == f"uid-{pool.uids[0]}.lock":
                held["fds"].append(os.dup(int(fd)))
        with open(os.path.join(pool.work_root, "planted"), "w") as f:
            f.write("x")
        held["files"].append(f"/tmp/{marker}-planted")
        with open(held["files"][-1], "w") as f:
            f.write("x")
        held["child"] = subprocess.Popen(["sleep", "60"])
        for folder in load.pool_cgroups():  # a run's memory cgroup the pool forgot to remove
            held["cgroups"].append(os.path.join(folder, "run-planted"))
            os.mkdir(held["cgroups"][-1])
        held["bytes"] = bytearray(b"\x01") * PLANTED_BYTES  # every page written: a calloc may stay unmapped

    marker = f"sbxload-test-{os.getpid()}"
    programs = load.make_programs(len(load.KINDS), 0, marker, config, 0.25)
    try:
        row = load.run_load(programs, 1, config, marker, rss_growth_limit_mb=16, settle_s=0.2,
                            progress=None, inject=plant)
    finally:
        for fd in held["fds"]:
            os.close(fd)
        if held["child"] is not None:
            held["child"].kill()
            held["child"].wait()
        for path in held["files"]:
            if os.path.exists(path):
                os.unlink(path)
        for path in held["cgroups"]:
            for folder in (path, os.path.dirname(path)):
                if os.path.isdir(folder):
                    os.rmdir(folder)
    result = {"row": row, "marker": marker, "cgroups": held["cgroups"],
              "summary_ok": load.summarize([row], {}, config, (0.0, 0.0, 0.0), 1.0)["ok"]}
    with open(out_path, "w") as f:
        json.dump(result, f, default=str)


if __name__ == "__main__":
    run_planted(sys.argv[1])
