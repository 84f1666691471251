"""Writes that fail for good: a full disk under the results root or under the write-ahead log,
an S3 endpoint answering errors for longer than the writer retries.  The writer gives up
(ResultsRootUnwritable); every row it took is stored or in the WAL, whole, and nothing more."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from rayeval.storage import ResultsRootUnwritable, ResultStore, RowWriter, RunManifest, UnitRecord
from rayeval.storage.layout import MANIFEST_NAME, MANIFEST_RESERVE_NAME
from rayeval.storage.manifest import EvalFileRef

from .helpers import make_row

MODEL = "m"


def _bulky_row(run_id: str, i: int) -> UnitRecord:
    """A row of ~40 KB that does not compress: a few fill a small disk."""
    return make_row(run_id, MODEL, i, answer_json=json.dumps({"padding": os.urandom(20_000).hex()}))


def _add_until_refused(writer: RowWriter, run_id: str, batches: int = 400) -> tuple[set[str], set[str]]:
    """Add rows two at a time until the writer refuses them: (unit ids taken, unit ids refused)."""
    taken: set[str] = set()
    for n in range(batches):
        rows = [_bulky_row(run_id, 2 * n), _bulky_row(run_id, 2 * n + 1)]
        try:
            writer.add(rows)
        except ResultsRootUnwritable:
            return taken, {row.unit_id for row in rows}
        taken |= {row.unit_id for row in rows}
        time.sleep(0.01)
    pytest.fail(f"the writer took {len(taken)} rows and never gave up")


def _wal_unit_ids(directory: Path) -> list[str]:
    """Unit ids of the rows in a run's WAL folder; every line must be a whole row."""
    ids = []
    for segment in sorted(directory.glob("*.jsonl")):
        for line in segment.read_bytes().splitlines():
            ids.append(UnitRecord.model_validate_json(line).unit_id)
    return ids


def _stored_unit_ids(store: ResultStore, run_id: str) -> list[str]:
    return store.read_table(run_id, columns=["unit_id"]).column("unit_id").to_pylist()


def test_full_disk_under_a_local_root(small_disk) -> None:
    """Root and WAL on one small disk: the writer gives up at the first ENOSPC; the rows it took
    are stored or in the WAL (whole lines, the refused batch cut off); with room again, recovery
    stores them, each once."""
    disk = small_disk("disk", "1m")
    store = ResultStore(str(disk.path))
    writer = store.open_writer("r", flush_rows=5, flush_seconds=0.1)
    taken, refused = _add_until_refused(writer, "r")
    with pytest.raises(ResultsRootUnwritable) as stopped:
        writer.check()
    message = str(stopped.value)
    assert f"results root {disk.path}" in message and "No space left on device (ENOSPC)" in message
    assert "run r stopped" in message and str(store.wal_run_dir("r")) in message
    try:
        writer.close(timeout=5)  # one more attempt to store; it may fail, as the run stops anyway
    except ResultsRootUnwritable as exc:
        assert exc is stopped.value
    wal = _wal_unit_ids(store.wal_run_dir("r"))
    stored = _stored_unit_ids(store, "r")
    assert not refused & set(wal) and not refused & set(stored)
    assert set(wal) | set(stored) == taken and len(stored) == len(set(stored))

    disk.resize("16m")
    store.recover("r")
    stored = _stored_unit_ids(store, "r")
    assert sorted(stored) == sorted(taken)  # each row taken, stored once
    assert not list(store.wal_run_dir("r").glob("*.jsonl"))


def test_full_disk_under_the_wal_of_an_s3_root(
    s3_store: ResultStore, small_disk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An S3 root keeps its WAL on the local disk ($XDG_CACHE_HOME): that disk full stops the
    writer the same way; the rows it took still reach S3, and the WAL is gone."""
    disk = small_disk("cache", "1m")
    monkeypatch.setenv("XDG_CACHE_HOME", str(disk.path))
    assert s3_store.wal_run_dir("r").is_relative_to(disk.path)
    writer = s3_store.open_writer("r", flush_rows=1000, flush_seconds=60)  # the rows pile up in the WAL
    taken, _ = _add_until_refused(writer, "r")
    assert writer.broken is not None and writer.broken.target == "write-ahead log"
    assert "No space left on device (ENOSPC)" in str(writer.broken) and s3_store.root in str(writer.broken)
    writer.close(timeout=30)  # S3 is fine: every row taken is stored
    assert sorted(_stored_unit_ids(s3_store, "r")) == sorted(taken)
    assert not s3_store.wal_run_dir("r").exists()


# 500 and 503 take the same path: the default run tries one, the slow run both
@pytest.mark.parametrize("status", [pytest.param(500, marks=pytest.mark.slow), 503])
def test_s3_errors_beyond_the_retries(s3_bucket, s3_proxy, tmp_path: Path, status: int) -> None:
    """The endpoint answers HTTP errors: for a moment (well within ``give_up_after_s``) the writer
    rides it out; for longer, it gives up naming the root and the error, keeps the rows in
    the WAL, and recovery stores them once the endpoint is back."""
    store = ResultStore(s3_bucket.uri("res"), s3_endpoint_url=s3_proxy.endpoint_url)
    writer = store.open_writer("r", flush_rows=10, flush_seconds=0.1, wal_dir=tmp_path, give_up_after_s=8)
    try:
        writer.add([make_row("r", MODEL, i) for i in range(20)])
        s3_proxy.fail(status)
        writer.add([make_row("r", MODEL, i) for i in range(20, 40)])
        deadline = time.monotonic() + 30
        while not writer.failing and time.monotonic() < deadline:
            time.sleep(0.02)
        assert writer.failing, "the errors never reached the writer"
        s3_proxy.up()  # a blip: the next retry gets through
        writer.add([make_row("r", MODEL, i) for i in range(40, 60)])
        assert writer.flush(timeout=30), writer.last_error
        assert writer.broken is None

        s3_proxy.fail(status)
        writer.add([make_row("r", MODEL, i) for i in range(60, 80)])
        deadline = time.monotonic() + 60
        while writer.broken is None and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(ResultsRootUnwritable) as stopped:
            writer.add(make_row("r", MODEL, 80))
        reason = {500: "Internal Server Error", 503: "Service Unavailable"}[status]
        assert store.root in str(stopped.value) and f"{reason} (injected by the test)" in str(stopped.value)
        with pytest.raises(ResultsRootUnwritable):
            writer.close(timeout=30)
    finally:
        s3_proxy.up()
    assert set(_wal_unit_ids(tmp_path / "r")) >= {make_row("r", MODEL, i).unit_id for i in range(60, 80)}
    store.recover("r", wal_dir=tmp_path)
    assert sorted(_stored_unit_ids(store, "r")) == sorted(make_row("r", MODEL, i).unit_id for i in range(80))


def test_a_full_disk_still_takes_the_manifest_marked_failed(small_disk) -> None:
    """The room a run's manifest takes is held aside (a reserve file beside it) while the run
    runs: with the disk full of rows, the manifest is still replaced by one saying failed,
    and the reserve is gone with the run's end."""
    disk = small_disk("disk", "1m")
    store = ResultStore(str(disk.path))
    running = store.write_manifest(RunManifest(run_id="r", eval_files=_many_eval_refs()))
    reserve = disk.path / "run_id=r" / MANIFEST_RESERVE_NAME
    assert reserve.stat().st_size > len((disk.path / "run_id=r" / MANIFEST_NAME).read_bytes())
    assert not store.parts("r").skipped  # hidden from readers, as the manifest is
    writer = store.open_writer("r", flush_rows=5, flush_seconds=0.1)
    _add_until_refused(writer, "r")
    with pytest.raises(ResultsRootUnwritable):
        writer.close(timeout=5)
    disk.fill()  # what room the writer's failed appends gave back, taken too

    store.write_manifest(running.with_status("failed"))
    assert store.read_manifest("r").status == "failed"
    assert not reserve.exists()


def _many_eval_refs() -> list[EvalFileRef]:
    """Eval references enough for a manifest of several disk pages."""
    return [EvalFileRef(path=f"evals/e{i}.json", id=f"e{i}", eval_hash=f"{i:064x}") for i in range(200)]
