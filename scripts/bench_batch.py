"""Batch engine benchmarks (issue 4), each against a baseline measured in the same run.

  (a) sleep:   N units of the `sleep` agent at S seconds with --max-concurrency C; wall time
               against the ideal N*S/C (Ray start-up reported apart).
  (b) instant: N units of an instant agent, graded and written to Parquet, on the Ray engine
               against a plain single-process loop over the same harness, graders and writer;
               also the machine's ceiling: the same units in forked processes (one per CPU,
               two threads each, as the engine's workers) that need no start-up and store nothing.
  (c) files:   Parquet files and bytes per 10,000 rows of run (b).

Usage: python scripts/bench_batch.py [--which a,b] [--units-a 2000] [--units-b 10000] [--rounds-b 3]
"""

from __future__ import annotations

import argparse
import compileall
import json
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import ray

import rayeval
from rayeval import load_evals
from rayeval.agents.sleep import sleep_agent
from rayeval.batch import BatchConfig, run_batch
from rayeval.batch.engine import connect
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
    process (Ray sets up its serializers on first use: ≈0.15 s).  Nothing runs on the workers
    before the run, as in a real `rayeval run`; the run pays for its workers' first use."""
    start = time.monotonic()
    connect(BatchConfig(evals=[], agent="sleep", output=".", object_store_memory=512 * 1024 * 1024))
    ray.get(ray.put(None))
    cpus = int(ray.cluster_resources().get("CPU", 1))
    while _idle_ray_workers() < cpus and time.monotonic() - start < 60:
        time.sleep(0.02)
    return time.monotonic() - start


def settle(seconds: float = 1.0) -> None:
    """Let the file system finish what the previous measurement left it (its journal, and the
    discards of the thousands of folders it removed), so that no measurement pays for the one
    before it: without this pause the loop, run after the engine, took 4.2-5.1 s in rounds 2-5
    against 3.7-4.0 s in round 1."""
    os.sync()
    time.sleep(seconds)


def unit_timing(root: Path, run_id: str) -> tuple[float, float]:
    """(seconds from the run's start to its first unit starting, first unit start to last unit end)."""
    import pandas as pd

    rows = pd.read_parquet(root / f"run_id={run_id}", columns=["started_at", "finished_at"])
    created = pd.Timestamp(json.loads((root / f"run_id={run_id}" / "_manifest.json").read_text())["created_at"])
    return (rows.started_at.min() - created).total_seconds(), (
        rows.finished_at.max() - rows.started_at.min()
    ).total_seconds()


def storage_figures(root: Path, run_id: str) -> tuple[int, int, int]:
    files = list((root / f"run_id={run_id}").rglob("*.parquet"))
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    return len(files), sum(f.stat().st_size for f in files), rows


def bench_sleep(work: Path, units: int, seconds: float, concurrency: int) -> None:
    evals = make_evals(work / "evals_a", 100)
    seeds = max(1, units // 100)
    startup = ray_startup_seconds()
    start = time.monotonic()
    summary = run_batch(
        BatchConfig(
            evals=[str(evals)],
            agent="sleep",
            agent_args={"seconds": str(seconds)},
            seeds=list(range(1, seeds + 1)),
            output=str(work / "out_a"),
            run_id="sleep",
            max_concurrency=concurrency,
            show_progress=False,
        )
    )
    wall = time.monotonic() - start
    ray.shutdown()
    ideal = summary.total_units * seconds / concurrency
    to_first, span = unit_timing(work / "out_a", "sleep")
    print(
        f"(a) {summary.total_units} sleep units x {seconds}s at concurrency {concurrency}: wall {wall:.1f}s, "
        f"ideal {ideal:.1f}s -> {wall / ideal:.2f}x ideal (Ray start-up {startup:.1f}s not included); "
        f"worker start-up {to_first:.1f}s, first unit start to last unit end {span:.1f}s -> {span / ideal:.2f}x ideal"
    )


def run_loop(work: Path, evals_dir: Path, seeds: list[int], name: str) -> float:
    """The baseline: one process, the same harness, graders, rows and Parquet writer; seconds
    from the eval files to the rows in Parquet, as for the engine (which loads and plans too).

    Work folders go under a folder of their own per run, as on the engine's workers (a folder
    that has held thousands of entries stays slower to create entries in)."""
    node = socket.gethostname()
    start = time.monotonic()
    evals = load_evals(evals_dir)
    plan = plan_units(evals, ["default"], seeds, "sleep")
    rows = []
    for unit in plan:
        eval_ = evals[unit.eval_index]
        execution = EvalRunner(eval_, work_root=work / "loop_work", run_id=name).execute(
            sleep_agent, model=unit.model, seed=unit.seed, agent_args={"seconds": "0"}, isolation="inline"
        )
        result = grade_execution(eval_, execution)
        rows.append(row_from_result(result, unit=unit, eval_=eval_, run_id=name, agent="sleep", attempt=1, node=node))
    out = work / "out_loop" / f"run_id={name}" / "model=default"
    out.mkdir(parents=True)
    pq.write_table(rows_to_table(rows), out / "part-0.parquet")
    return time.monotonic() - start


def _plain_share(work: Path, evals: list, plan: list, name: str, threads: int, barrier, results) -> None:
    """One forked process of ``run_plain_processes``: its units on ``threads`` threads."""
    chunks = [plan[k::threads] for k in range(threads)]

    def run(units: list) -> None:
        for unit in units:
            eval_ = evals[unit.eval_index]
            thread_root = (
                work / f"plain_work_{os.getpid()}" / f"thread-{threading.get_native_id()}"
            )  # as the engine's workers
            execution = EvalRunner(eval_, work_root=thread_root, run_id=name).execute(
                sleep_agent, model=unit.model, seed=unit.seed, agent_args={"seconds": "0"}, isolation="inline"
            )
            row_from_result(
                grade_execution(eval_, execution),
                unit=unit,
                eval_=eval_,
                run_id=name,
                agent="sleep",
                attempt=1,
                node="n",
            )

    barrier.wait()
    pool = [threading.Thread(target=run, args=(chunk,)) for chunk in chunks]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    results.put(time.time())


def run_plain_processes(work: Path, evals: list, plan: list, name: str, threads: int = 2) -> float:
    """The ceiling of any engine on this machine: the units split over forked processes, one
    per CPU, with every module already imported (no start-up), ``threads`` threads each (the
    engine's fast path), rows made but not stored (no driver); seconds from the start signal
    to the last process done."""
    context = multiprocessing.get_context("fork")
    processes = os.cpu_count() or 1
    barrier, results = context.Barrier(processes + 1), context.Queue()
    workers = [
        context.Process(target=_plain_share, args=(work, evals, plan[k::processes], name, threads, barrier, results))
        for k in range(processes)
    ]
    for worker in workers:
        worker.start()
    barrier.wait()
    start = time.time()
    end = max(results.get() for _ in workers)
    for worker in workers:
        worker.join()
    return end - start


def bench_instant(work: Path, units: int, rounds: int) -> None:
    """Rounds alternate loop and engine (a fresh embedded Ray each), each measurement after a
    pause (``settle``): this machine's speed drifts by 10-20 % within a minute, so one pair of
    figures says little; the median ratio is reported."""
    evals_dir = make_evals(work / "evals_b", 100)
    evals = load_evals(evals_dir)
    seeds = list(range(1, max(1, units // 100) + 1))
    plan = plan_units(evals, ["default"], seeds, "sleep")
    n = len(plan)
    ratios, warm_ratios, ceilings = [], [], []
    for round_ in range(1, rounds + 1):
        settle()
        loop_s = run_loop(work, evals_dir, seeds, f"loop{round_}")
        settle()
        plain_s = run_plain_processes(work, evals, plan, f"plain{round_}")
        ceilings.append(loop_s / plain_s)
        startup = ray_startup_seconds()
        settle()
        start = time.monotonic()
        summary = run_batch(
            BatchConfig(
                evals=[str(evals_dir)],
                agent="sleep",
                agent_args={"seconds": "0"},
                seeds=seeds,
                output=str(work / "out_b"),
                run_id=f"instant{round_}",
                max_concurrency=64,
                show_progress=False,
            )
        )
        ray_s = time.monotonic() - start
        ray.shutdown()
        to_first, span = unit_timing(work / "out_b", f"instant{round_}")
        ratios.append(loop_s / ray_s)
        warm_ratios.append(loop_s / span)
        print(
            f"(b) round {round_}: {n} instant units: loop {n / loop_s:,.0f} units/s ({loop_s:.1f}s), "
            f"Ray engine {n / ray_s:,.0f} units/s ({ray_s:.1f}s) -> {loop_s / ray_s:.2f}x the loop "
            f"(Ray start-up {startup:.1f}s not included); stored {summary.stored_rows} rows; "
            f"worker start-up {to_first:.1f}s, then {n / span:,.0f} units/s -> {loop_s / span:.2f}x the loop; "
            f"ceiling (forked processes, no start-up, nothing stored) {n / plain_s:,.0f} units/s -> {loop_s / plain_s:.2f}x"
        )
    print(
        f"(b) median over {rounds} rounds: {statistics.median(ratios):.2f}x the loop overall "
        f"(rounds {', '.join(f'{r:.2f}' for r in ratios)}); after worker start-up {statistics.median(warm_ratios):.2f}x; "
        f"ceiling {statistics.median(ceilings):.2f}x"
    )
    files, size, stored = storage_figures(work / "out_b", f"instant{rounds}")
    print(
        f"(c) {stored} rows in {files} Parquet files, {size / 1e6:.2f} MB -> "
        f"{files * 10000 / stored:.1f} files and {size * 10000 / stored / 1e6:.2f} MB per 10,000 rows"
    )


def compile_bytecode() -> None:
    """Give rayeval's modules their bytecode, as pip does when it installs a package.

    A checkout installed in editable mode on a machine with PYTHONDONTWRITEBYTECODE=1 (this
    one) has none, so every Ray worker would compile rayeval's ~60 modules (≈60 ms) at each
    start-up, which an installed rayeval never does.  The loop has imported them before its
    timer starts either way."""
    compileall.compile_dir(Path(rayeval.__file__).parent, quiet=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--which", default="a,b")
    parser.add_argument("--units-a", type=int, default=2000)
    parser.add_argument("--sleep-seconds", type=float, default=1.0)
    parser.add_argument("--concurrency-a", type=int, default=100)
    parser.add_argument("--units-b", type=int, default=10000)
    parser.add_argument("--rounds-b", type=int, default=3)
    args = parser.parse_args()
    compile_bytecode()
    with tempfile.TemporaryDirectory(prefix="rayeval-bench-") as tmp:
        work = Path(tmp)
        if "a" in args.which:
            bench_sleep(work, args.units_a, args.sleep_seconds, args.concurrency_a)
        if "b" in args.which:
            bench_instant(work, args.units_b, args.rounds_b)
    return 0


if __name__ == "__main__":
    sys.exit(main())
