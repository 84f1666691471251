"""A run whose results root fills up: the driver stops with one message, keeps every finished
unit's row, and ``--resume`` finishes the run once there is room again."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from rayeval.storage import ResultsRootUnwritable, ResultStore, RunManifest
from tests.batch.conftest import completed_units, read_invocations, write_mc_evals

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # two runs, ~40 s
def test_disk_full_mid_run_stops_cleanly_then_resume_completes(
    tmp_path: Path, small_disk, invocation_log: Path
) -> None:
    """100 units of ~100 KiB rows into a 3 MiB results root (work root and cache elsewhere)."""
    evals = write_mc_evals(tmp_path / "evals", [f"e{i}" for i in range(10)])
    disk = small_disk("results", "3m")
    run = disk.path / "run_id=r1"
    command = [
        sys.executable, "-m", "rayeval.cli", "run", str(evals), "--agent", "tests.batch.agents:bulky",
        "--agent-arg", "kib=100", "--agent-arg", "seconds=0.2", "--seeds", "10", "--output", str(disk.path),
        "--run-id", "r1", "--max-concurrency", "4", "--no-progress",
        # the agents log their invocations to the test: a side channel the sandbox blocks
        "--isolation", "process", "--agent-env", "RAYEVAL_TEST_INVOCATION_LOG",
    ]  # fmt: skip

    stopped = _rayeval(command)
    assert stopped.returncode == 2, stopped.stderr
    assert "Traceback" not in stopped.stderr
    ours = [line for line in stopped.stderr.splitlines() if line.startswith("rayeval:")]
    assert len(ours) == 1, stopped.stderr
    message = ours[0]
    assert f"cannot write the results root {disk.path}" in message
    assert "No space left on device (ENOSPC)" in message
    assert "--resume --run-id r1 finishes the run" in message
    # the room held for the manifest takes it marked failed, however full the disk
    assert json.loads((run / "_manifest.json").read_text())["status"] == "failed"
    assert "its manifest says failed" in message
    kept = completed_units(disk.path, "r1")  # in Parquet or in the write-ahead log
    assert 0 < len(kept) < 100, "the disk did not fill mid-run"

    disk.resize("64m")
    done = _rayeval([*command, "--resume"])
    assert done.returncode == 0, done.stderr
    assert f"({100 - len(kept)} run now, {len(kept)} already done)" in done.stdout
    frame = pd.read_parquet(run)
    assert len(frame) == 100 and frame["unit_id"].is_unique and (frame["status"] == "passed").all()
    assert set(zip(frame["eval_id"], frame["seed"])) == {(f"e{i}", s) for i in range(10) for s in range(1, 11)}
    invocations = Counter((i["eval_id"], i["seed"]) for i in read_invocations(invocation_log))
    assert all(invocations[unit] == 1 for unit in kept), "a unit kept at the stop ran again"
    assert json.loads((run / "_manifest.json").read_text())["status"] == "completed"
    assert not list(run.glob("_wal/*.jsonl")) and not (run / "_manifest.reserve").exists()


def _rayeval(command: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run(
        command,
        cwd=REPO,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )


class _StoredWriter:
    """A writer whose rows are all stored: the run stops for its results root alone."""

    def close(self) -> None:
        pass


def test_a_manifest_that_cannot_be_marked_is_said_once_in_the_runs_message(
    tmp_path: Path, small_disk, caplog: pytest.LogCaptureFixture
) -> None:
    """A disk full before the run could even hold room for its manifest: the run's one message
    says the manifest still says running; nothing else is logged about it."""
    disk = small_disk("results", "256k")
    store = ResultStore(str(disk.path))
    manifest = store.write_manifest(RunManifest(run_id="r"))
    (disk.path / "run_id=r" / "_manifest.reserve").unlink()  # no room was left to hold
    disk.fill()
    stopped = ResultsRootUnwritable(
        "r", str(disk.path), "results root", OSError(28, "No space left on device"), disk.path
    )
    with caplog.at_level(logging.WARNING):
        store.end_run(_StoredWriter(), manifest, "completed", stopped)
    assert not caplog.records
    assert "its manifest could not be marked failed either (No space left on device (ENOSPC))" in str(stopped)
    assert store.read_manifest("r").status == "running"
