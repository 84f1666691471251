"""Child process for the crash tests: add rows, report, then wait to be killed with SIGKILL.

usage: python -m tests.storage._writer_proc ROOT RUN_ID WAL_DIR|- ENDPOINT|- WRITER_ID FLUSHED UNFLUSHED
"""

from __future__ import annotations

import sys
import time

from rayeval.storage import ResultStore

from .helpers import make_row


def main() -> None:
    root, run_id, wal_dir, endpoint, writer_id, flushed, unflushed = sys.argv[1:8]
    store = ResultStore(root, s3_endpoint_url=None if endpoint == "-" else endpoint)
    n_flushed, n_unflushed = int(flushed), int(unflushed)
    writer = store.open_writer(
        run_id,
        writer_id=writer_id,
        flush_rows=max(n_flushed, 1),
        flush_seconds=3600,
        wal_dir=None if wal_dir == "-" else wal_dir,
    )
    models = ["anthropic/claude@x", "plain"]
    writer.add([make_row(run_id, models[i % 2], i) for i in range(n_flushed)])
    deadline = time.monotonic() + 20
    while writer.pending and time.monotonic() < deadline:  # the first batch reaches Parquet
        time.sleep(0.01)
    for i in range(n_flushed, n_flushed + n_unflushed):  # these only reach the WAL
        writer.add(make_row(run_id, models[i % 2], i))
    print(f"ADDED pending={writer.pending}", flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
