"""Readers polling a run folder while it is written never see a partial or unreadable file."""

from __future__ import annotations

import os
import threading
import time
import traceback

import pandas as pd
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from rayeval.storage import ResultStore, pandas_storage_options

from .helpers import make_row

MODELS = ["a/b@c", "plain"]


def _write_for_a_while(store: ResultStore, run_id: str, n: int, wal_dir, flush_rows: int, pause: float) -> None:
    with store.open_writer(run_id, flush_rows=flush_rows, flush_seconds=0.05, wal_dir=wal_dir) as writer:
        for i in range(n):
            writer.add(make_row(run_id, MODELS[i % 2], i))
            if i % 10 == 0:
                time.sleep(pause)


def _poll(reader, stop: threading.Event, seen: list[int], errors: list[str]) -> None:
    while not stop.is_set():
        try:
            seen.append(reader())
        except (FileNotFoundError, IsADirectoryError):
            # Before the first part the run folder may not exist (or pandas sees it appear between
            # its isdir check and open); once rows were seen, any error is a failure.
            if any(seen):
                errors.append(traceback.format_exc())
            seen.append(0)
        except BaseException:  # noqa: BLE001 - any other failure is what we look for
            errors.append(traceback.format_exc())


def _run(
    store: ResultStore, run_id: str, readers, n: int, wal_dir, *, flush_rows: int, pause: float, min_polls: int
) -> None:
    stop = threading.Event()
    seen: dict[int, list[int]] = {k: [] for k in range(len(readers))}
    errors: list[str] = []
    threads = [threading.Thread(target=_poll, args=(r, stop, seen[k], errors)) for k, r in enumerate(readers)]
    for thread in threads:
        thread.start()
    try:
        _write_for_a_while(store, run_id, n, wal_dir, flush_rows, pause)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert not errors, errors[0]
    for counts in seen.values():
        assert len(counts) >= min_polls, counts  # the reader really polled while writing
        assert counts == sorted(counts)  # rows only ever appear, whole parts at a time
    assert store.read_table(run_id).num_rows == n


def test_local_readers_never_see_partial_files(local_store: ResultStore, tmp_path):
    run_dir = local_store.run_path("vis")

    def list_and_read_each() -> int:
        total = 0
        for folder, _dirs, files in os.walk(run_dir):
            if "_wal" in folder:
                continue
            for name in files:
                if name.startswith((".", "_")):
                    continue
                total += pq.read_table(os.path.join(folder, name)).num_rows
        return total

    def pandas_read() -> int:
        return len(pd.read_parquet(run_dir))

    _run(
        local_store,
        "vis",
        [list_and_read_each, pandas_read, lambda: local_store.read_table("vis").num_rows],
        1500,
        None,
        flush_rows=40,
        pause=0.01,
        min_polls=3,
    )


def test_s3_readers_never_see_partial_objects(s3_store: ResultStore, s3_bucket, tmp_path):
    fs = s3_store.fs
    run_path = s3_store.run_path("vis")

    def list_and_read_each() -> int:
        total = 0
        for info in fs.get_file_info(pafs.FileSelector(run_path, recursive=True, allow_not_found=True)):
            if info.type == pafs.FileType.File and not info.base_name.startswith(("_", ".")):
                total += pq.read_table(info.path, filesystem=fs).num_rows
        return total

    # s3fs caches directory listings in its (process-wide, reused) filesystem instance; a reader
    # polling a growing folder must turn that off or it sees parts listed but "not found".
    options = {**pandas_storage_options(s3_store.root, s3_bucket.endpoint_url), "use_listings_cache": False}

    def pandas_read() -> int:
        return len(pd.read_parquet(s3_store.run_uri("vis"), storage_options=options))

    _run(
        s3_store,
        "vis",
        [list_and_read_each, pandas_read],
        600,
        tmp_path / "wal",
        flush_rows=60,
        pause=0.03,
        min_polls=2,
    )
