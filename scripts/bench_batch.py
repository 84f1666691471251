"""Batch engine benchmarks (issue 17), each against a baseline measured in the same run.

  (a) shape:   N units of the `sleep` agent at S seconds, --max-concurrency C: `rayeval run` on
               the repository's example evals (N / their number seeds) in a subprocess, timed
               from outside (bench_sandbox.py's measure), default isolation; and inspect_ai at
               the same shape in the same run (bench_sandbox.py's, with --inspect-python).
               Wall minus start-up against the ideal N*S/C (goal: <= 1.1x).
  (s) start-up: `rayeval run` of one unit per example eval (`sleep` at 0 s) on an embedded
               Ray, from the command's start to the first unit's started_at, per round; with
               --baseline-src, another checkout's rayeval in turn (e.g. `git worktree add
               /tmp/old <commit>` and --baseline-src /tmp/old/src); with --inspect-python,
               inspect_ai's first sample at the same shape in turn.
  (b) engine:  N units (`sleep` at 0 s, inline), graded and written to Parquet, on the
               Ray engine (run_batch in this process) against a plain single-process loop over
               the same harness, graders and writer: the engine's own cost per unit.
  (c) files:   Parquet files and bytes per 10,000 rows of run (b).

Usage: python scripts/bench_batch.py [--which a,s,b] [--inspect-python /tmp/inspect-venv/bin/python]
           [--units-a 2000] [--rounds-s 5] [--baseline-src DIR] [--units-b 10000] [--rounds-b 3]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import ray

# scripts/ is on sys.path when run as a script
from bench_common import compile_bytecode, loadavg, make_evals, settle, unit_timing
from bench_sandbox import INSPECT_VARIANTS, bench_inspect, bench_rayeval_run, inspect_version

from rayeval import load_evals
from rayeval.agents.sleep import sleep_agent
from rayeval.batch import BatchConfig, run_batch
from rayeval.batch.plan import plan_units
from rayeval.batch.rows import row_from_result
from rayeval.storage.schema import rows_to_table
from rayeval.unit import EvalRunner, grade_execution

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_EVALS = REPO / "evals"


def storage_figures(root: Path, run_id: str) -> tuple[int, int, int]:
    files = list((root / f"run_id={run_id}").rglob("*.parquet"))
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    return len(files), sum(f.stat().st_size for f in files), rows


def bench_shape(work: Path, args: argparse.Namespace) -> None:
    """(a): `rayeval run` and, with --inspect-python, inspect_ai at the same shape, alternately."""
    evals_count = len(load_evals(EXAMPLE_EVALS))
    seeds = max(1, args.units_a // evals_count)
    units = seeds * evals_count
    ideal = units * args.seconds_a / args.concurrency_a
    jobs = [
        (
            f"rayeval --isolation {args.isolation}",
            lambda tag: bench_rayeval_run(
                work, EXAMPLE_EVALS, args.isolation, seeds, args.seconds_a, args.concurrency_a, tag
            ),
        )
    ]
    if args.inspect_python:
        print(f"inspect_ai {inspect_version(args.inspect_python)} from {args.inspect_python}")
        jobs += [
            (
                INSPECT_VARIANTS[variant],
                lambda tag, variant=variant: bench_inspect(
                    work, args.inspect_python, variant, units, args.seconds_a, args.concurrency_a, tag
                ),
            )
            for variant in INSPECT_VARIANTS
        ]
    else:
        print("(a) inspect_ai skipped: no --inspect-python (see bench_sandbox.py for its one-time setup)")
    for round_ in range(1, args.rounds_a + 1):
        for label, job in jobs:
            settle()
            record = job(f"a{round_}")
            after = record["wall_s"] - record["startup_s"]
            print(
                f"(a) round {round_} {label}: {record['units']} units x {args.seconds_a} s at concurrency "
                f"{args.concurrency_a}: wall {record['wall_s']:.1f} s, start-up {record['startup_s']:.1f} s, "
                f"wall - start-up {after:.1f} s = {after / ideal:.2f}x ideal ({ideal:.1f} s), span "
                f"{record['span_s']:.1f} s = {record['span_s'] / ideal:.2f}x; {record['errors']} errors; "
                f"load {record['load1_before']:.1f}",
                flush=True,
            )


def bench_startup(work: Path, rounds: int, baseline: str | None, inspect_python: str | None) -> None:
    """(s): `rayeval run` of one unit (`sleep` at 0 s) per example eval, from the command's start to the
    first unit's start; a fresh embedded Ray each round. ``baseline``: the `src` folder of another
    checkout (e.g. the commit before a change), run in turn with this one, round by round;
    ``inspect_python``: inspect_ai's `inspect eval` of as many samples (`asyncio.sleep(0)`), in turn too."""
    sources: dict[str, str | None] = {"this": None, **({"baseline": baseline} if baseline else {})}
    figures: dict[str, list[float]] = {name: [] for name in [*sources, *(["inspect_ai"] if inspect_python else [])]}
    units = len(load_evals(EXAMPLE_EVALS))
    for round_ in range(1, rounds + 1):
        for name, values in figures.items():
            settle()
            tag = f"s{round_}-{name}"
            if name == "inspect_ai":
                record = bench_inspect(work, str(inspect_python), "asyncio", units, 0.0, units, tag)
            else:
                record = bench_rayeval_run(work, EXAMPLE_EVALS, "sandbox", 1, 0.0, units, tag, sources[name])
            values.append(record["startup_s"])
            print(
                f"(s) round {round_} {name}: start-up {record['startup_s']:.2f} s (wall {record['wall_s']:.2f} s), "
                f"load {record['load1_before']:.1f}",
                flush=True,
            )
    for name, values in figures.items():
        print(f"(s) {name}: start-up median of {rounds}: {statistics.median(values):.2f} s (min {min(values):.2f} s)")
    for other in ("baseline", "inspect_ai"):
        if other in figures:
            ratio = statistics.median(figures["this"]) / statistics.median(figures[other])
            print(f"(s) this / {other} (medians): {ratio:.2f}")


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
        rows.append(
            row_from_result(
                result,
                unit=unit,
                eval_=eval_,
                run_id=name,
                agent="sleep",
                agent_args={"seconds": "0"},
                attempt=1,
                node=node,
            )
        )
    out = work / "out_loop" / f"run_id={name}" / "model=default"
    out.mkdir(parents=True)
    pq.write_table(rows_to_table(rows), out / "part-0.parquet")
    return time.monotonic() - start


def bench_engine(work: Path, units: int, rounds: int) -> None:
    """(b) and (c).  Rounds alternate loop and engine (a fresh embedded Ray each), each
    measurement after a pause (``settle``): this machine's speed drifts by 10-20 % within a
    minute, so one pair of figures says little; the median ratio is reported."""
    evals_dir = make_evals(work / "evals_b", 100)
    seeds = list(range(1, max(1, units // 100) + 1))
    ratios, warm_ratios = [], []
    for round_ in range(1, rounds + 1):
        settle()
        loop_s = run_loop(work, evals_dir, seeds, f"loop{round_}")
        settle()
        start = time.monotonic()
        summary = run_batch(
            BatchConfig(
                evals=[str(evals_dir)],
                agent="sleep",
                agent_args={"seconds": "0"},
                seeds=seeds,
                output=str(work / "out_b"),
                run_id=f"engine{round_}",
                isolation="inline",
                max_concurrency=64,
                show_progress=False,
            )
        )
        ray_s = time.monotonic() - start
        ray.shutdown()
        to_first, span = unit_timing(work / "out_b", f"engine{round_}")
        n = summary.total_units
        ratios.append(loop_s / ray_s)
        warm_ratios.append(loop_s / span)
        print(
            f"(b) round {round_}: {n} units of 0 s: loop {n / loop_s:,.0f} units/s ({loop_s:.1f} s), "
            f"Ray engine {n / ray_s:,.0f} units/s ({ray_s:.1f} s, its start-up included) -> {loop_s / ray_s:.2f}x "
            f"the loop; stored {summary.stored_rows} rows; run start to first unit {to_first:.1f} s, then "
            f"{n / span:,.0f} units/s -> {loop_s / span:.2f}x the loop; load {loadavg()[0]:.1f}",
            flush=True,
        )
    print(
        f"(b) median over {rounds} rounds: {statistics.median(ratios):.2f}x the loop overall "
        f"(rounds {', '.join(f'{r:.2f}' for r in ratios)}); after the first unit {statistics.median(warm_ratios):.2f}x"
    )
    files, size, stored = storage_figures(work / "out_b", f"engine{rounds}")
    print(
        f"(c) {stored} rows in {files} Parquet files, {size / 1e6:.2f} MB -> "
        f"{files * 10000 / stored:.1f} files and {size * 10000 / stored / 1e6:.2f} MB per 10,000 rows"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--which", default="a,s,b")
    parser.add_argument("--units-a", type=int, default=2000)
    parser.add_argument("--seconds-a", type=float, default=1.0)
    parser.add_argument("--concurrency-a", type=int, default=100)
    parser.add_argument("--rounds-a", type=int, default=1)
    parser.add_argument("--isolation", default="sandbox", help="isolation of (a)'s rayeval run")
    parser.add_argument(
        "--inspect-python", help="python of a virtual environment with inspect-ai: (a) and (s) run it too"
    )
    parser.add_argument("--rounds-s", type=int, default=5)
    parser.add_argument(
        "--baseline-src", help="(s): also time the rayeval of this src folder (another checkout), in turn with this one"
    )
    parser.add_argument("--units-b", type=int, default=10000)
    parser.add_argument("--rounds-b", type=int, default=3)
    args = parser.parse_args()
    which = set(args.which.split(","))
    compile_bytecode()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in loadavg())}")
    with tempfile.TemporaryDirectory(prefix="rayeval-bench-") as tmp:
        work = Path(tmp)
        if "a" in which:
            bench_shape(work, args)
        if "s" in which:
            bench_startup(work, args.rounds_s, args.baseline_src, args.inspect_python)
        if "b" in which:
            bench_engine(work, args.units_b, args.rounds_b)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in loadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
