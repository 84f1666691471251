#!/usr/bin/env python
"""Throughput of the result store, locally and on S3 (a moto server it starts, or --endpoint).

Prints, per backend: rows/s through ``RowWriter.add`` (WAL + fsync + buffer, ``--batch`` rows per
call: the driver adds the rows of a round of finished calls at once), rows/s stored end to end (first add -> close), rows/s read back (ResultStore.read_table,
pandas.read_parquet of the run folder, stored_unit_ids), and files/bytes per 10,000 rows.

    python scripts/bench_storage.py                 # 50,000 rows local, 20,000 on moto
    python scripts/bench_storage.py --rows 100000 --s3-rows 50000 --models 4
    python scripts/bench_storage.py --batch 1       # one row per call: one fsync per row
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone

import pandas as pd

from rayeval.storage import ResultStore, UnitRecord, pandas_storage_options

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def make_rows(run_id: str, n: int, models: list[str]) -> list[UnitRecord]:
    rows = []
    for i in range(n):
        passed = i % 3 != 0
        rows.append(
            UnitRecord(
                run_id=run_id,
                model=models[i % len(models)],
                unit_id=uuid.uuid4().hex,
                eval_id=f"eval-{i % 200:04d}",
                eval_hash=f"{i % 200:064x}",
                agent="claude_code",
                harness="mini-swe",
                seed=i % 5,
                attempt=1,
                status="passed" if passed else "failed",
                passed=passed,
                score=float(passed),
                score_max=1.0,
                normalized_score=float(passed),
                grader_type="numeric_tolerance",
                metrics_json=f'{{"value": {i}, "tolerance": 0.05}}',
                reasoning=f"Observed {i} clusters; expected {i % 17} +/- 2. " * 3,
                answer_json=f'{{"n_clusters": {i}}}',
                answer_source="answer.json",
                duration_s=30.0 + i % 90,
                agent_s=28.0,
                grade_s=0.01,
                cost_usd=0.0123,
                input_tokens=25_000 + i % 999,
                output_tokens=1_800,
                n_turns=12,
                started_at=T0 + timedelta(seconds=i),
                finished_at=T0 + timedelta(seconds=i + 30),
                node=f"node-{i % 8}",
                task="clustering",
                kit="scanpy",
                time_horizon="short",
                eval_type="numeric",
                metadata_json='{"dataset": "pbmc3k"}',
                artifacts_json=None,
                rayeval_version="0.1.0",
            )
        )
    return rows


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_moto() -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/moto-api/", timeout=1)
            return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("moto server did not start")


def bench(label: str, store: ResultStore, n: int, models: list[str], wal_dir: str | None, batch: int) -> None:
    run_id = f"bench-{uuid.uuid4().hex[:6]}"
    rows = make_rows(run_id, n, models)

    started = time.perf_counter()
    writer = store.open_writer(run_id, wal_dir=wal_dir)  # defaults: flush_rows=1000, flush_seconds=5
    for start in range(0, n, batch):
        writer.add(rows[start : start + batch])
    added = time.perf_counter()
    writer.close()
    closed = time.perf_counter()

    t = time.perf_counter()
    table = store.read_table(run_id)
    read_s = time.perf_counter() - t
    assert table.num_rows == n, table.num_rows
    t = time.perf_counter()
    frame = pd.read_parquet(
        store.run_uri(run_id), storage_options=pandas_storage_options(store.root, store.s3_endpoint_url)
    )
    pandas_s = time.perf_counter() - t
    assert len(frame) == n
    t = time.perf_counter()
    ids = store.stored_unit_ids(run_id)
    ids_s = time.perf_counter() - t
    assert len(ids) == n

    parts = store.part_paths(run_id)
    sizes = [info.size for info in store.fs.get_file_info(parts)]
    per10k = 10_000 / n
    print(f"\n== {label}: {n:,} rows, {len(models)} model(s), {batch} per add, flush_rows=1000 ==")
    print(
        f"add() (WAL + buffer)      {n / (added - started):>12,.0f} rows/s   ({(added - started) / n * 1e6:.1f} us/row)"
    )
    print(
        f"stored end to end         {n / (closed - started):>12,.0f} rows/s   (close() waited {closed - added:.2f} s)"
    )
    print(f"read_table                {n / read_s:>12,.0f} rows/s   ({read_s:.3f} s)")
    print(f"pandas.read_parquet(run)  {n / pandas_s:>12,.0f} rows/s   ({pandas_s:.3f} s)")
    print(f"stored_unit_ids           {n / ids_s:>12,.0f} rows/s   ({ids_s:.3f} s)")
    print(f"files per 10,000 rows     {len(parts) * per10k:>12.1f}")
    print(f"bytes per 10,000 rows     {sum(sizes) * per10k:>12,.0f}   ({sum(sizes) / n:.0f} B/row, zstd)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=50_000, help="rows for the local benchmark")
    parser.add_argument("--s3-rows", type=int, default=20_000, help="rows for the S3 benchmark (0: skip)")
    parser.add_argument("--models", type=int, default=1, help="model partitions the rows are spread over")
    parser.add_argument("--batch", type=int, default=50, help="rows per add() call (one WAL write and fsync each)")
    parser.add_argument("--endpoint", help="an existing S3 endpoint (default: start a moto server)")
    parser.add_argument("--bucket", help="bucket on --endpoint (default: a new one)")
    args = parser.parse_args()
    models = [f"provider/model-{k}@2026" for k in range(args.models)]

    tmp = tempfile.mkdtemp(prefix="bench-storage-")
    try:
        bench("local", ResultStore(os.path.join(tmp, "results")), args.rows, models, None, args.batch)
        if args.s3_rows:
            proc = None
            endpoint = args.endpoint
            if endpoint is None:
                for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                    os.environ.setdefault(name, "testing")
                os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
                proc, endpoint = start_moto()
            try:
                bucket = args.bucket
                if bucket is None:
                    import boto3

                    bucket = f"bench-{uuid.uuid4().hex[:8]}"
                    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
                store = ResultStore(f"s3://{bucket}/results", s3_endpoint_url=endpoint)
                label = "S3 (moto server, 127.0.0.1)" if proc else f"S3 ({endpoint})"
                bench(label, store, args.s3_rows, models, os.path.join(tmp, "wal"), args.batch)
            finally:
                if proc is not None:
                    proc.terminate()
                    proc.wait(timeout=10)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
