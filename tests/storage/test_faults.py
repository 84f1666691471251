"""Storage faults: an S3 endpoint refusing or hanging for seconds, a partition that cannot be
written, a close that cannot finish.  No row is lost, none is stored twice."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from rayeval.storage import ResultStore, StorageError

from .helpers import make_row

MODELS = ["anthropic/claude@x", "plain"]


def _wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def _assert_exactly(store: ResultStore, run_id: str, n: int) -> None:
    table = store.read_table(run_id, columns=["unit_id", "model"])
    ids = table.column("unit_id").to_pylist()
    assert len(ids) == n, f"{len(ids)} rows stored, expected {n}"
    assert len(set(ids)) == n, "duplicate rows"
    assert set(ids) == {make_row(run_id, MODELS[i % 2], i).unit_id for i in range(n)}


def test_s3_endpoint_refusing_connections(s3_bucket, s3_proxy, tmp_path):
    via_proxy = ResultStore(s3_bucket.uri("res"), s3_endpoint_url=s3_proxy.endpoint_url)
    direct = ResultStore(s3_bucket.uri("res"), s3_endpoint_url=s3_bucket.endpoint_url)
    writer = via_proxy.open_writer("out", flush_rows=50, flush_seconds=0.1, wal_dir=tmp_path)
    try:
        writer.add([make_row("out", MODELS[i % 2], i) for i in range(100)])
        assert _wait_for(lambda: writer.pending == 0, 10)

        s3_proxy.down()
        outage_started = time.monotonic()
        slowest_add = 0.0
        for i in range(100, 400):
            t0 = time.perf_counter()
            writer.add(make_row("out", MODELS[i % 2], i))
            slowest_add = max(slowest_add, time.perf_counter() - t0)
            if i % 50 == 0:
                time.sleep(0.1)
        assert _wait_for(lambda: writer.failing, 10)
        assert writer.last_error is not None
        assert writer.pending == 300
        # add never waits for the storage: one that did would wait out the outage (3 s), with
        # no row stored meanwhile; a second is room for a loaded machine's pauses
        assert slowest_add < 1.0
        time.sleep(max(0.0, 3.0 - (time.monotonic() - outage_started)))  # >= 3 s of outage
        assert writer.pending == 300 and direct.read_table("out").num_rows == 100
        s3_proxy.up()

        assert _wait_for(lambda: writer.pending == 0, 15), writer.last_error
        assert not writer.failing and writer.broken is None  # an outage within the retries
    finally:
        s3_proxy.up()
        writer.close(timeout=20)
    _assert_exactly(direct, "out", 400)
    # Retries reused part names; the outage did not turn into one part per retry.
    assert len(direct.part_paths("out")) <= 20


def test_s3_server_hanging(s3_server, s3_bucket, tmp_path):
    """The server process stopped (SIGSTOP) for 3 s: requests hang, then go through."""
    store = ResultStore(s3_bucket.uri("res"), s3_endpoint_url=s3_bucket.endpoint_url)
    writer = store.open_writer("hang", flush_rows=40, flush_seconds=0.1, wal_dir=tmp_path)
    pid = s3_server.process.pid
    try:
        writer.add([make_row("hang", MODELS[i % 2], i) for i in range(80)])
        assert _wait_for(lambda: writer.pending == 0, 10)
        os.kill(pid, signal.SIGSTOP)
        try:
            for i in range(80, 300):
                t0 = time.perf_counter()
                writer.add(make_row("hang", MODELS[i % 2], i))
                assert time.perf_counter() - t0 < 0.2
                if i % 40 == 0:
                    time.sleep(0.1)
            time.sleep(2.0)
            assert writer.pending > 0
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        writer.close(timeout=30)
    _assert_exactly(store, "hang", 300)


def test_close_raises_and_rows_stay_in_the_wal(s3_bucket, s3_proxy, tmp_path):
    store = ResultStore(s3_bucket.uri("res"), s3_endpoint_url=s3_proxy.endpoint_url)
    writer = store.open_writer("down", flush_rows=1000, flush_seconds=60, wal_dir=tmp_path)
    s3_proxy.down()
    writer.add([make_row("down", MODELS[i % 2], i) for i in range(30)])
    started = time.monotonic()
    with pytest.raises(StorageError) as caught:
        writer.close(timeout=1.5)
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert store.root in message and "30 rows" in message and "recover" in message
    assert list((tmp_path / "down").glob("*.jsonl"))  # the rows are still in the WAL

    with pytest.raises(StorageError):  # still down: recovery reports it and keeps the WAL
        store.recover("down", wal_dir=tmp_path)
    assert list((tmp_path / "down").glob("*.jsonl"))

    s3_proxy.up()
    assert store.recover("down", wal_dir=tmp_path) == 30
    assert store.recover("down", wal_dir=tmp_path) == 0
    assert not (tmp_path / "down").exists()
    _assert_exactly(store, "down", 30)


def test_only_failed_partitions_are_retried(local_store: ResultStore):
    """One model folder cannot be created (a file is in the way): the other model's part is stored
    once, the failed part is retried under the same name until it succeeds."""
    run = "partial"
    blocked = Path(local_store.model_path(run, "plain"))
    blocked.parent.mkdir(parents=True)
    blocked.write_text("not a folder")
    writer = local_store.open_writer(run, flush_rows=10_000, flush_seconds=3600)
    try:
        writer.add([make_row(run, MODELS[i % 2], i) for i in range(20)])
        assert writer.flush() is False
        assert writer.pending == 10 and writer.last_error is not None
        good = sorted(os.listdir(local_store.model_path(run, MODELS[0])))
        assert len(good) == 1
        assert writer.flush() is False  # still blocked: nothing written twice
        assert sorted(os.listdir(local_store.model_path(run, MODELS[0]))) == good

        blocked.unlink()
        assert writer.flush() is True
        assert writer.pending == 0
        assert sorted(os.listdir(local_store.model_path(run, MODELS[0]))) == good
        (retried,) = os.listdir(blocked)
        assert retried == good[0].replace("-000000", "-000001")  # the name given at the first attempt
    finally:
        writer.close()
    _assert_exactly(local_store, run, 20)
