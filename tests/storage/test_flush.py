"""Batching: flush by row count and by age, few files per 10,000 rows, WAL compaction."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from rayeval.storage import ResultStore

from .helpers import make_row, make_rows


def _wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_flush_by_row_count(local_store: ResultStore):
    writer = local_store.open_writer("rows", flush_rows=100, flush_seconds=3600)
    try:
        for i in range(99):
            writer.add(make_row("rows", "m", i))
        time.sleep(0.3)
        assert writer.parts_written == 0 and writer.pending == 99  # below the threshold: buffered
        writer.add(make_row("rows", "m", 99))
        assert _wait_for(lambda: writer.parts_written == 1)
        assert writer.pending == 0 and writer.rows_stored == 100
        for i in range(100, 150):
            writer.add(make_row("rows", "m", i))
        time.sleep(0.2)
        assert writer.pending == 50 and local_store.read_table("rows").num_rows == 100
    finally:
        writer.close()
    assert local_store.read_table("rows").num_rows == 150


def test_flush_by_buffered_bytes(local_store: ResultStore):
    """Rows heavy with artifacts are stored once they add up to flush_bytes, however few."""
    writer = local_store.open_writer("heavy", flush_rows=10_000, flush_seconds=3600, flush_bytes=200_000)
    try:
        heavy = [
            make_row("heavy", "m", i, artifacts_json='{"trajectory.json": "%s"}' % ("x" * 60_000)) for i in range(4)
        ]
        writer.add(heavy[:3])
        time.sleep(0.3)
        assert writer.parts_written == 0 and writer.pending == 3  # 180 kB: below the bound
        writer.add(heavy[3])
        assert _wait_for(lambda: writer.parts_written == 1)
        assert writer.pending == 0 and local_store.read_table("heavy").num_rows == 4
    finally:
        writer.close()


def test_flush_by_time(local_store: ResultStore):
    writer = local_store.open_writer("age", flush_rows=10_000, flush_seconds=0.3)
    try:
        started = time.monotonic()
        writer.add(make_rows("age", ["a", "b"], 7))
        assert writer.parts_written == 0
        assert _wait_for(lambda: writer.parts_written == 2, timeout=5)  # one part per model
        assert time.monotonic() - started >= 0.3
        assert local_store.read_table("age").num_rows == 7
    finally:
        writer.close()


def test_files_per_10000_rows_stay_few(local_store: ResultStore):
    """10,000 rows added one at a time (as results arrive) make a handful of files, not 10,000."""
    rows = make_rows("many", ["model-a"], 10_000)
    with local_store.open_writer("many", flush_rows=1000, flush_seconds=5.0) as writer:
        for row in rows:
            writer.add(row)
    parts = local_store.part_paths("many")
    assert 1 <= len(parts) <= 20  # about 10_000 / flush_rows; fewer when rows arrive faster than flushes
    assert local_store.read_table("many").num_rows == 10_000
    assert len(local_store.stored_unit_ids("many")) == 10_000


def test_threads_adding_concurrently(local_store: ResultStore):
    """RowWriter is thread-safe: 8 threads x 500 rows -> every row stored once."""
    writer = local_store.open_writer("threads", flush_rows=300, flush_seconds=0.2)

    def work(k: int) -> None:
        for i in range(500):
            writer.add(make_row("threads", f"m{k % 3}", k * 1000 + i))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writer.close()
    ids = local_store.read_table("threads", columns=["unit_id"]).column("unit_id").to_pylist()
    assert len(ids) == 4000 and len(set(ids)) == 4000


def test_wal_is_compacted_after_flushes(local_store: ResultStore):
    writer = local_store.open_writer("wal", flush_rows=200, flush_seconds=3600)
    wal_dir = Path(local_store.wal_run_dir("wal"))
    try:
        sizes = []
        for batch in range(10):
            writer.add(make_rows("wal", ["m"], 200, start=batch * 200))
            assert _wait_for(lambda: writer.pending == 0)
            assert _wait_for(lambda: len(list(wal_dir.glob("*.jsonl"))) == 1)  # closed segments dropped
            sizes.append(writer.wal_bytes)
        assert max(sizes) == 0  # everything flushed: the WAL holds nothing
        writer.add(make_rows("wal", ["m"], 5, start=5000))
        assert 0 < writer.wal_bytes < 10_000  # only the unflushed rows
    finally:
        writer.close()
    assert not wal_dir.exists()
    assert local_store.read_table("wal").num_rows == 2005
