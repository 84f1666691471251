#!/usr/bin/env python
"""Benchmark: ``rayeval view``'s server over one run of 100,000 synthetic units.

    python scripts/bench_view.py [--units 100000] [--repeat 5]

The rows (20 models × 1,000 evals × 5 seeds at the default size; 10 % failed, 2 % errored,
costs, tokens, a 2 KB trajectory and a 300-character answer and reasoning each) are written
through ``ResultStore.open_writer`` (WAL + Parquet parts) into a temporary results root, with
a manifest. A real ``ViewServer`` on 127.0.0.1 is then timed over HTTP: the first units page
(reading the unit index once), a filtered and sorted page, a deep page, and a unit page (its
heavy columns read for that unit only). Each figure after the first is the best of
``--repeat`` requests; the first page is timed once, as a user meets it. Last, the static
folder of the same run is written (``--static``): its time, file count and largest file.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from rayeval.record import UnitRecord
from rayeval.report import ResultsReader
from rayeval.storage import ResultStore
from rayeval.storage.manifest import RunManifest
from rayeval.view import ViewData, ViewServer, write_static

RUN_ID = "bench"
N_MODELS, N_SEEDS = 20, 5
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _trajectory(i: int) -> str:
    steps = [{"role": "assistant", "content": f"step {k} of unit {i}: " + "x" * 160} for k in range(10)]
    return json.dumps({"trajectory.json": json.dumps(steps)})


def write_rows(root: Path, units: int, seed: int = 3) -> None:
    rng = np.random.default_rng(seed)
    store = ResultStore(root)
    n_evals = max(1, units // (N_MODELS * N_SEEDS))
    store.write_manifest(
        RunManifest(
            run_id=RUN_ID,
            status="completed",
            models=[f"model-{m}" for m in range(N_MODELS)],
            seeds=list(range(1, N_SEEDS + 1)),
            total_units=units,
        )
    )
    draw = rng.random(units)
    with store.open_writer(RUN_ID, flush_rows=20_000, wal_dir=root.parent / "wal") as writer:
        for i in range(units):
            status = "error" if draw[i] < 0.02 else "failed" if draw[i] < 0.12 else "passed"
            duration = float(rng.gamma(3.0, 100.0))
            writer.add(
                UnitRecord(
                    run_id=RUN_ID,
                    model=f"model-{i % N_MODELS}",
                    unit_id=f"u{i:08d}",
                    eval_id=f"eval-{(i // N_MODELS) % n_evals:05d}",
                    eval_hash="h",
                    agent="bench",
                    harness="bench",
                    seed=1 + (i // (N_MODELS * n_evals)) % N_SEEDS,
                    attempt=1,
                    status=status,
                    passed=status == "passed",
                    score=float(status == "passed"),
                    score_max=1.0,
                    normalized_score=float(status == "passed"),
                    grader_type="numeric_tolerance",
                    metrics_json='{"error": 0.1}',
                    reasoning="r" * 300,
                    answer_json=json.dumps({"answer": "a" * 280}),
                    error_type="AgentCrashed" if status == "error" else None,
                    error_message="boom" if status == "error" else None,
                    duration_s=duration,
                    agent_s=duration,
                    grade_s=0.01,
                    cost_usd=float(rng.gamma(2.0, 0.3)),
                    input_tokens=int(rng.integers(1_000, 100_000)),
                    output_tokens=int(rng.integers(100, 10_000)),
                    n_turns=int(rng.integers(1, 40)),
                    started_at=T0 + timedelta(seconds=i),
                    finished_at=T0 + timedelta(seconds=i + duration),
                    node="bench",
                    isolation="sandbox",
                    metadata_json="{}",
                    artifacts_json=_trajectory(i),
                    rayeval_version="bench",
                )
            )


def timed(url: str) -> tuple[float, dict]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as response:
        body = json.loads(response.read())
    return time.perf_counter() - start, body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "results"
        start = time.perf_counter()
        write_rows(root, args.units)
        print(f"wrote {args.units:,} rows through ResultStore in {time.perf_counter() - start:.1f} s")
        server = ViewServer(ViewData(ResultsReader(root)))
        server.start()
        base = server.url + "api/"
        try:
            first, page = timed(base + f"units?run={RUN_ID}")
            assert page["total"] == args.units, page["total"]
            print(f"first units page (index read once): {first * 1000:.0f} ms")
            cases = {
                "filtered + sorted page (model, verdict=failed, cost desc)": f"units?run={RUN_ID}&model=model-3&verdict=failed&sort=cost&order=desc",
                "sorted page (tokens desc), page 1000": f"units?run={RUN_ID}&sort=tokens&order=desc&page=1000",
                "filtered page (seed=2), sorted by duration": f"units?run={RUN_ID}&seed=2&sort=duration",
                "unit page (heavy columns of one unit)": f"unit?run={RUN_ID}&id=u{args.units // 2:08d}",
            }
            for label, path in cases.items():
                best = min(timed(base + path)[0] for _ in range(args.repeat))
                print(f"{label}: {best * 1000:.1f} ms (best of {args.repeat})")
        finally:
            server.shutdown()
            server.server_close()
        start = time.perf_counter()
        site = write_static(ViewData(ResultsReader(root)), Path(tmp) / "site")
        files = list((site / "data").rglob("*"))
        largest = max(path.stat().st_size for path in files if path.is_file())
        print(
            f"--static folder: {time.perf_counter() - start:.1f} s, {len(files):,} data files, largest {largest / 1e6:.1f} MB"
        )


if __name__ == "__main__":
    main()
