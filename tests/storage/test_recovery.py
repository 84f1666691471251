"""Crash safety: a driver killed with SIGKILL loses nothing that reached the WAL, and recovery
stores those rows exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from rayeval.storage import ResultStore

from .helpers import make_row

REPO = Path(__file__).resolve().parents[2]
MODELS = ["anthropic/claude@x", "plain"]


def _expected(run_id: str, n: int) -> set[str]:
    return {make_row(run_id, MODELS[i % 2], i).unit_id for i in range(n)}


def _kill_writer_after_add(
    root: str, run_id: str, *, wal_dir="-", endpoint="-", writer_id="crash", flushed: int = 100, unflushed: int = 37
) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.storage._writer_proc",
            root,
            run_id,
            str(wal_dir),
            endpoint,
            writer_id,
            str(flushed),
            str(unflushed),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("ADDED"), (line, proc.stderr.read() if proc.poll() is not None else "")
        assert line.strip() == f"ADDED pending={unflushed}"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL


def _ids(store: ResultStore, run_id: str) -> list[str]:
    return store.read_table(run_id, columns=["unit_id"]).column("unit_id").to_pylist()


def test_sigkill_local_then_recover_exactly_once(local_store: ResultStore):
    _kill_writer_after_add(local_store.root, "crash-run")
    assert len(_ids(local_store, "crash-run")) == 100  # only the flushed batch made it to Parquet
    wal = Path(local_store.wal_run_dir("crash-run"))
    assert sum(len(p.read_text().splitlines()) for p in wal.glob("*.jsonl")) == 37

    assert local_store.recover("crash-run") == 37
    assert local_store.recover("crash-run") == 0
    ids = _ids(local_store, "crash-run")
    assert len(ids) == 137 and set(ids) == _expected("crash-run", 137)
    assert not wal.exists()


def test_sigkill_s3_then_open_writer_recovers(s3_store: ResultStore, tmp_path):
    wal_dir = tmp_path / "wal"
    _kill_writer_after_add(
        s3_store.root, "crash-s3", wal_dir=wal_dir, endpoint=s3_store.s3_endpoint_url, flushed=50, unflushed=25
    )
    assert len(_ids(s3_store, "crash-s3")) == 50
    # Reusing the dead writer's id: its WAL is recovered first, and its part numbers are not reused.
    with s3_store.open_writer("crash-s3", writer_id="crash", wal_dir=wal_dir) as writer:
        assert writer.recovered == 25
        writer.add(make_row("crash-s3", MODELS[75 % 2], 75))
    assert s3_store.recover("crash-s3", wal_dir=wal_dir) == 0
    ids = _ids(s3_store, "crash-s3")
    assert len(ids) == 76 and set(ids) == _expected("crash-s3", 76)
    names = sorted(p.rsplit("/", 1)[1] for p in s3_store.part_paths("crash-s3") if "/part-crash-" in p)
    assert names == ["part-crash-000000.parquet", "part-crash-000001.parquet", "part-crash-000002.parquet"]


def test_truncated_line_and_already_stored_rows(local_store: ResultStore, tmp_path):
    """A WAL whose writer died between storing a part and dropping the segment, with the last line
    cut mid-write: only the unstored, complete rows are written."""
    run = "trunc"
    rows = [make_row(run, MODELS[i % 2], i) for i in range(12)]
    local_store.write_rows(run, rows[:5])  # already in Parquet
    wal = tmp_path / "wal" / run
    wal.mkdir(parents=True)
    lines = [row.model_dump_json() for row in rows[:11]]
    (wal / "dead.000001.jsonl").write_text("\n".join(lines[:6]) + "\n")
    (wal / "dead.jsonl").write_text("\n".join(lines[6:]) + "\n" + rows[11].model_dump_json()[:70])
    # and a second attempt of unit 3 (a retry) that is not stored yet
    retry = make_row(run, MODELS[1], 3, attempt=2)
    (wal / "other.jsonl").write_text(retry.model_dump_json() + "\n")

    assert local_store.recover(run, wal_dir=tmp_path / "wal") == 7  # rows 5..10 + the retry
    assert local_store.recover(run, wal_dir=tmp_path / "wal") == 0
    table = local_store.read_table(run, columns=["unit_id", "attempt"]).to_pylist()
    keys = [(r["unit_id"], r["attempt"]) for r in table]
    assert len(keys) == len(set(keys)) == 12
    assert (retry.unit_id, 2) in keys
    assert rows[11].unit_id not in {k[0] for k in keys}  # the truncated row never completed
    assert not wal.exists()


def test_live_writer_wal_is_not_recovered(local_store: ResultStore):
    writer = local_store.open_writer("live", flush_rows=1000, flush_seconds=3600)
    writer.add([make_row("live", MODELS[i % 2], i) for i in range(9)])
    other = ResultStore(local_store.root)  # e.g. a second process resuming the run
    assert other.recover("live") == 0
    assert other.stored_unit_ids("live") == set()
    writer.close()
    assert other.recover("live") == 0
    assert _ids(other, "live").__len__() == 9


def test_wal_lines_are_plain_json(local_store: ResultStore):
    writer = local_store.open_writer("json", flush_rows=1000, flush_seconds=3600, writer_id="w")
    writer.add(make_row("json", "m/x", 1))
    (path,) = writer.wal_files
    assert path.name == "w.jsonl"
    record = json.loads(path.read_text())
    assert record["unit_id"] == "u-m/x-000001" and record["model"] == "m/x" and record["run_id"] == "json"
    writer.close()


def test_stored_unit_ids_of_missing_run(local_store: ResultStore, s3_store: ResultStore):
    assert local_store.stored_unit_ids("never") == set()
    assert s3_store.stored_unit_ids("never") == set()
    assert local_store.recover("never") == 0 and s3_store.recover("never") == 0
    assert not os.path.exists(local_store.run_path("never"))
