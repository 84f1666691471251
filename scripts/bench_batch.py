"""Batch engine benchmarks (issue 4), each against a baseline measured in the same run.

  (a) sleep:   N units of the `sleep` agent at S seconds with --max-concurrency C; wall time
               against the ideal N*S/C (Ray start-up reported apart).
  (b) instant: N units of an instant agent, graded and written to Parquet, on the Ray engine
               against a plain single-process loop over the same harness, graders and writer.
  (c) files:   Parquet files and bytes per 10,000 rows of run (b).

Usage: python scripts/bench_batch.py [--which a,b] [--units-a 2000] [--units-b 10000]
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import ray

from rayeval import load_evals
from rayeval.agents.sleep import sleep_agent
from rayeval.batch import run_batch, BatchConfig
from rayeval.batch.plan import plan_units
from rayeval.batch.rows import row_from_result
from rayeval.harness import EvalRunner, grade_execution
from rayeval.storage.schema import rows_to_table

REPO = Path(__file__).resolve().parents[1]


def make_evals(folder: Path, count: int) -> Path:
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


@ray.remote(num_cpus=1)
def _ready() -> None:
    """Runs once the raylet's first worker processes are up."""


def ray_startup_seconds() -> float:
    """Start-up, measured apart: init plus the first worker processes being ready."""
    start = time.monotonic()
    ray.init(address="local", include_dashboard=False, object_store_memory=512 * 1024 * 1024, log_to_driver=False)
    ray.get([_ready.remote() for _ in range(int(ray.cluster_resources().get("CPU", 1)))])
    return time.monotonic() - start


def unit_timing(root: Path, run_id: str) -> tuple[float, float]:
    """(seconds from the run's start to its first unit starting, first unit start to last unit end)."""
    import pandas as pd

    rows = pd.read_parquet(root / f"run_id={run_id}", columns=["started_at", "finished_at"])
    created = pd.Timestamp(json.loads((root / f"run_id={run_id}" / "_manifest.json").read_text())["created_at"])
    return (rows.started_at.min() - created).total_seconds(), (rows.finished_at.max() - rows.started_at.min()).total_seconds()


def storage_figures(root: Path, run_id: str) -> tuple[int, int, int]:
    files = list((root / f"run_id={run_id}").rglob("*.parquet"))
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    return len(files), sum(f.stat().st_size for f in files), rows


def bench_sleep(work: Path, units: int, seconds: float, concurrency: int) -> None:
    evals = make_evals(work / "evals_a", 100)
    seeds = max(1, units // 100)
    startup = ray_startup_seconds()
    start = time.monotonic()
    summary = run_batch(BatchConfig(
        evals=[str(evals)], agent="sleep", agent_args={"seconds": str(seconds)}, seeds=list(range(1, seeds + 1)),
        output=str(work / "out_a"), run_id="sleep", max_concurrency=concurrency, show_progress=False,
    ))
    wall = time.monotonic() - start
    ray.shutdown()
    ideal = summary.total_units * seconds / concurrency
    to_first, span = unit_timing(work / "out_a", "sleep")
    print(f"(a) {summary.total_units} sleep units x {seconds}s at concurrency {concurrency}: wall {wall:.1f}s, "
          f"ideal {ideal:.1f}s -> {wall / ideal:.2f}x ideal (Ray start-up {startup:.1f}s not included); "
          f"worker start-up {to_first:.1f}s, first unit start to last unit end {span:.1f}s -> {span / ideal:.2f}x ideal")


def bench_instant(work: Path, units: int) -> None:
    evals_dir = make_evals(work / "evals_b", 100)
    evals = load_evals(evals_dir)
    seeds = list(range(1, max(1, units // 100) + 1))
    plan = plan_units(evals, ["default"], seeds, "sleep")

    start = time.monotonic()
    rows = []
    for unit in plan:
        eval_ = evals[unit.eval_index]
        execution = EvalRunner(eval_, work_root=work / "loop_work").execute(
            sleep_agent, model=unit.model, seed=unit.seed, agent_args={"seconds": "0"}, isolation="inline"
        )
        result = grade_execution(eval_, execution)
        rows.append(row_from_result(result, unit=unit, eval_=eval_, run_id="loop", agent="sleep", attempt=1, node=socket.gethostname()))
    out = work / "out_loop" / "run_id=loop" / "model=default"
    out.mkdir(parents=True)
    pq.write_table(rows_to_table(rows), out / "part-0.parquet")
    loop_s = time.monotonic() - start

    startup = ray_startup_seconds()
    start = time.monotonic()
    summary = run_batch(BatchConfig(
        evals=[str(evals_dir)], agent="sleep", agent_args={"seconds": "0"}, seeds=seeds,
        output=str(work / "out_b"), run_id="instant", max_concurrency=64, show_progress=False,
    ))
    ray_s = time.monotonic() - start
    ray.shutdown()
    n = len(plan)
    to_first, span = unit_timing(work / "out_b", "instant")
    print(f"(b) {n} instant units: loop {n / loop_s:,.0f} units/s ({loop_s:.1f}s), "
          f"Ray engine {n / ray_s:,.0f} units/s ({ray_s:.1f}s) -> {loop_s / ray_s:.2f}x the loop "
          f"(Ray start-up {startup:.1f}s not included); stored {summary.stored_rows} rows; "
          f"worker start-up {to_first:.1f}s, then {n / span:,.0f} units/s -> {loop_s / span:.2f}x the loop")
    files, size, stored = storage_figures(work / "out_b", "instant")
    print(f"(c) {stored} rows in {files} Parquet files, {size / 1e6:.2f} MB -> "
          f"{files * 10000 / stored:.1f} files and {size * 10000 / stored / 1e6:.2f} MB per 10,000 rows")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--which", default="a,b")
    parser.add_argument("--units-a", type=int, default=2000)
    parser.add_argument("--sleep-seconds", type=float, default=1.0)
    parser.add_argument("--concurrency-a", type=int, default=100)
    parser.add_argument("--units-b", type=int, default=10000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rayeval-bench-") as tmp:
        work = Path(tmp)
        if "a" in args.which:
            bench_sleep(work, args.units_a, args.sleep_seconds, args.concurrency_a)
        if "b" in args.which:
            bench_instant(work, args.units_b)
    return 0


if __name__ == "__main__":
    sys.exit(main())
