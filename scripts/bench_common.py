"""What the benchmark scripts share: eval files, the machine's state, Ray's start-up, unit timings."""

from __future__ import annotations

import compileall
import json
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import ray

import rayeval
from rayeval.batch.config import RayConfig
from rayeval.batch.engine import connect

CLK_TCK = os.sysconf("SC_CLK_TCK")


def make_evals(folder: Path, count: int) -> Path:
    """``count`` multiple-choice eval files (answer B) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        body = {
            "id": f"bench_{index:04d}",
            "task": 'A or B? <EVAL_ANSWER>{"answer": "A|B"}</EVAL_ANSWER>',
            "metadata": {"task": "bench", "kit": "none"},
            "grader": {"type": "multiple_choice", "config": {"correct_answer": "B"}},
        }
        (folder / f"bench_{index:04d}.json").write_text(json.dumps(body))
    return folder


def loadavg() -> tuple[float, float, float]:
    one, five, fifteen = Path("/proc/loadavg").read_text().split()[:3]
    return float(one), float(five), float(fifteen)


def machine_busy_seconds() -> float:
    """CPU-seconds all CPUs spent not idle since boot (user, nice, system, irq, softirq, steal)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def epoch(value: Any) -> float:
    """Seconds since the epoch of a datetime or its ISO text."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.timestamp()


def settle(seconds: float = 1.0) -> None:
    """Let the file system finish what the previous measurement left it (its journal, and the
    discards of the thousands of folders it removed), so that no measurement pays for the one
    before it."""
    os.sync()
    time.sleep(seconds)


def compile_bytecode() -> None:
    """Give rayeval's modules their bytecode, as pip does when it installs a package.

    A checkout installed in editable mode on a machine with PYTHONDONTWRITEBYTECODE=1 (this
    one) has none, so every process (driver, Ray workers, unit runners) would compile
    rayeval's modules at each start-up, which an installed rayeval never does."""
    compileall.compile_dir(Path(rayeval.__file__).parent, quiet=1)


def _idle_ray_workers() -> int:
    """Ray's pooled worker processes that are up and waiting for work (Linux: their process title)."""
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            count += Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::IDLE")
        except OSError:
            pass
    return count


def ray_startup_seconds() -> float:
    """Ray's start-up, measured apart: the embedded Ray `rayeval run` starts, until the worker
    processes Ray starts with it (one per CPU) are up, plus one object put and fetched in this
    process (Ray sets up its serializers on first use)."""
    start = time.monotonic()
    connect(RayConfig(object_store_memory=512 * 1024 * 1024))
    ray.get(ray.put(None))
    cpus = int(ray.cluster_resources().get("CPU", 1))
    while _idle_ray_workers() < cpus and time.monotonic() - start < 60:
        time.sleep(0.02)
    return time.monotonic() - start


def unit_timing(root: Path, run_id: str) -> tuple[float, float]:
    """(seconds from the run's start to its first unit starting, first unit start to last unit end)."""
    import pandas as pd

    rows = pd.read_parquet(root / f"run_id={run_id}", columns=["started_at", "finished_at"])
    created = pd.Timestamp(json.loads((root / f"run_id={run_id}" / "_manifest.json").read_text())["created_at"])
    return (rows.started_at.min() - created).total_seconds(), (
        rows.finished_at.max() - rows.started_at.min()
    ).total_seconds()
