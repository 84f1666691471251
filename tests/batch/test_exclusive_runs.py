"""Exclusive runs: one driver at a time per run id, through the run's lease (issue 16)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pytest

from rayeval import batch
from rayeval.batch import engine
from rayeval.storage import LeaseHeld, ResultStore, run_lease
from tests.batch.conftest import completed_units, read_invocations, write_mc_evals

REPO = Path(__file__).resolve().parents[2]
FAST = {"show_progress": False, "flush_seconds": 0.5, "retry_backoff_s": 0.1}


def _ran_now(stdout: str) -> tuple[int, int]:
    match = re.search(r"\((\d+) run now, (\d+) already done\)", stdout)
    assert match, stdout
    return int(match[1]), int(match[2])


def _wait_for(condition, what: str, proc: subprocess.Popen | None = None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the driver ended before {what}: {proc.communicate()}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout:g}s")
        time.sleep(0.05)


def _replace_lease(path: Path, record: dict) -> None:
    """Write a lease record as a driver does: whole, by rename."""
    tmp = path.with_name(".lease-test.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def _as_from_another_machine(record: dict, **changes: object) -> dict:
    return {**record, "host": "other-host", "machine": "other-host/another-boot", "pid_namespace": "pid:[1]", **changes}


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.mark.slow  # fault injection: run with -m slow, as CI does
def test_a_second_driver_and_a_resume_are_refused_while_the_first_runs(tmp_path: Path) -> None:
    evals = write_mc_evals(tmp_path / "evals", [f"e{i}" for i in range(12)])
    out = tmp_path / "out"
    lease = out / "run_id=r1" / "_lease.json"
    command = [
        sys.executable, "-m", "rayeval.cli", "run", str(evals), "--agent", "sleep", "--agent-arg", "seconds=2",
        "--output", str(out), "--run-id", "r1", "--max-concurrency", "2", "--no-progress",
    ]  # fmt: skip
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    first = subprocess.Popen(
        command, cwd=REPO, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for(lease.exists, "lease", first)
        assert json.loads(lease.read_text())["pid"] == first.pid
        for extra in ([], ["--resume"]):
            other = subprocess.run(
                [*command, *extra], cwd=REPO, env=env, check=False, capture_output=True, text=True, timeout=300
            )
            assert other.returncode == 2, (extra, other.stdout, other.stderr)
            message = other.stderr.strip()
            assert message.count("\n") == 0 and "Traceback" not in message, message  # one line, one message
            assert (
                f"is held by another driver: host {socket.gethostname()}, pid {first.pid} (alive on this machine), since "
                in message
            )
            assert "expires" in message and "--resume --run-id r1" in message
        assert first.poll() is None, "the first driver ended before the others were refused: the test proves nothing"
        stdout, stderr = first.communicate(timeout=300)
    finally:
        _stop(first)
    assert first.returncode == 0, stderr
    assert _ran_now(stdout) == (12, 0)
    frame = pd.read_parquet(out / "run_id=r1")
    assert len(frame) == 12 and frame["unit_id"].is_unique
    assert not lease.exists()  # released at the end
    assert json.loads((out / "run_id=r1" / "_manifest.json").read_text())["status"] == "completed"


@pytest.mark.slow  # a killed driver, then a lease expiry: ~30 s
def test_a_killed_drivers_run_is_taken_over_by_resume_once_its_lease_expired(tmp_path: Path) -> None:
    """SIGKILL leaves the lease behind. On the driver's own machine its lock went with it (the
    next --resume takes over at once: test_engine's kill test); here the record says the driver
    ran on another machine sharing the folder, so only its expiry frees the run."""
    evals = write_mc_evals(tmp_path / "evals", [f"e{i}" for i in range(12)])
    out = tmp_path / "out"
    lease = out / "run_id=r1" / "_lease.json"
    command = [
        sys.executable, "-m", "rayeval.cli", "run", str(evals), "--agent", "tests.batch.agents:counting_sleep",
        "--agent-arg", "seconds=0.5", "--seeds", "2", "--output", str(out), "--run-id", "r1",
        "--max-concurrency", "4", "--no-progress",
    ]  # fmt: skip
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAYEVAL_LEASE_TTL": "15"}
    driver = subprocess.Popen(
        command, cwd=REPO, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        _wait_for(lambda: len(completed_units(out)) >= 6, "6 units done", driver)
    finally:
        _stop(driver)
    completed = completed_units(out)
    assert 6 <= len(completed) < 24
    record = json.loads(lease.read_text())
    assert record["pid"] == driver.pid  # not released: the driver was killed
    _replace_lease(lease, _as_from_another_machine(record))
    expires = datetime.fromisoformat(record["expires_at"])

    refused = subprocess.run(
        [*command, "--resume"], cwd=REPO, env=env, check=False, capture_output=True, text=True, timeout=300
    )
    assert refused.returncode == 2, refused.stderr
    assert f"host other-host, pid {driver.pid}" in refused.stderr and "expires" in refused.stderr
    assert datetime.now(timezone.utc) < expires  # refused while the lease was live
    assert completed_units(out) == completed  # nothing ran

    time.sleep(max(0.0, (expires - datetime.now(timezone.utc)).total_seconds()) + 0.2)
    done = subprocess.run(
        [*command, "--resume"], cwd=REPO, env=env, check=False, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert _ran_now(done.stdout) == (24 - len(completed), len(completed))
    frame = pd.read_parquet(out / "run_id=r1")
    assert len(frame) == 24 and frame["unit_id"].is_unique and (frame["status"] == "passed").all()
    assert set(zip(frame["eval_id"], frame["seed"])) == {(f"e{i}", s) for i in range(12) for s in (1, 2)}
    assert not lease.exists()
    assert json.loads((out / "run_id=r1" / "_manifest.json").read_text())["status"] == "completed"


@pytest.mark.slow  # a lease taken over mid-run, then a resume: ~26 s
def test_a_driver_that_loses_its_lease_stops_and_stores_nothing_more(tmp_path: Path, invocation_log: Path) -> None:
    """This driver stalled past its lease's expiry and a driver on another machine took the run
    over: at its next renewal it finds the other driver's lease, stops its units, stores none of
    its buffered rows, leaves the manifest and the lease to the other driver, and exits 2."""
    evals = write_mc_evals(tmp_path / "evals", [f"e{i}" for i in range(12)])
    out = tmp_path / "out"
    run = out / "run_id=r1"
    lease = run / "_lease.json"
    command = [
        sys.executable, "-m", "rayeval.cli", "run", str(evals), "--agent", "tests.batch.agents:counting_sleep",
        "--agent-arg", "seconds=1", "--seeds", "2", "--output", str(out), "--run-id", "r1", "--max-concurrency", "2",
        "--no-progress", "--isolation", "process", "--agent-env", "RAYEVAL_TEST_INVOCATION_LOG",
    ]  # fmt: skip
    env = {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAYEVAL_LEASE_TTL": "3",
        "RAYEVAL_TEST_INVOCATION_LOG": str(invocation_log),
    }
    driver = subprocess.Popen(
        command, cwd=REPO, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for(lambda: completed_units(out), "unit done", driver)
        # rows reach Parquet 5 s after the first one: these are still buffered in the driver
        assert not list(run.rglob("*.parquet")), "flushed before the take-over: the test would prove nothing"
        now = datetime.now(timezone.utc)
        usurper = _as_from_another_machine(
            json.loads(lease.read_text()), token="f" * 32, pid=4242,
            acquired_at=now.isoformat(), renewed_at=now.isoformat(), expires_at=(now + timedelta(minutes=5)).isoformat(),
        )  # fmt: skip
        _replace_lease(lease, usurper)
        _, stderr = driver.communicate(timeout=120)
    finally:
        _stop(driver)
    assert driver.returncode == 2, stderr
    assert "lost its lease" in stderr and "host other-host, pid 4242" in stderr and "Traceback" not in stderr, stderr
    assert len(read_invocations(invocation_log)) < 24, "the driver ran on after losing its lease"
    assert not list(run.rglob("*.parquet")), "rows stored after the lease was lost"
    assert json.loads((run / "_manifest.json").read_text())["status"] == "running"  # the other driver's to end
    assert json.loads(lease.read_text()) == usurper  # its lease is left alone
    kept = completed_units(out)  # the rows this driver made stay in its write-ahead log
    assert kept

    lease.unlink()  # the other driver is gone and released the run: --resume finishes it, each unit once
    done = subprocess.run(
        [*command, "--resume"], cwd=REPO, env=env, check=False, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    frame = pd.read_parquet(run)
    assert len(frame) == 24 and frame["unit_id"].is_unique and (frame["status"] == "passed").all()
    assert kept <= set(zip(frame["eval_id"], frame["seed"]))
    assert not lease.exists()


@pytest.mark.slow
def test_s3_run_refused_while_another_driver_holds_it_then_runs_holding_it(
    s3_bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the S3 root's WAL lives here
    evals = write_mc_evals(tmp_path / "evals", ["e1", "e2", "e3"])
    root = s3_bucket.uri("results")
    store = ResultStore(root, s3_endpoint_url=s3_bucket.endpoint_url)
    options = {
        "agent": "tests.batch.agents:instant",
        "output": root,
        "run_id": "r1",
        "s3_endpoint_url": s3_bucket.endpoint_url,
        **FAST,
    }

    def keys() -> list[str]:
        listing = s3_bucket.client.list_objects_v2(Bucket=s3_bucket.name, Prefix="results/")
        return sorted(obj["Key"] for obj in listing.get("Contents", []))

    other = run_lease(store, "r1").take()
    with pytest.raises(
        LeaseHeld, match=rf"host {re.escape(socket.gethostname())}, pid {os.getpid()}, since .* expires"
    ):
        batch.run(str(evals), **options)
    assert keys() == ["results/run_id=r1/_lease.json"]  # nothing of the run was written
    other.release()

    holders = []
    real_run_units = engine._DriverRun._run_units

    def run_units(*args: object, **kwargs: object) -> None:
        holders.append(run_lease(store, "r1").read())
        real_run_units(*args, **kwargs)

    monkeypatch.setattr(engine._DriverRun, "_run_units", run_units)
    summary = batch.run(str(evals), **options)
    assert summary.stored_rows == 3
    assert holders[0].pid == os.getpid() and holders[0].token != other.token
    assert "results/run_id=r1/_lease.json" not in keys()  # released at the end
    assert store.read_manifest("r1").status == "completed"


@pytest.mark.slow  # a race of two drivers, each starting Ray: ~15 s
def test_two_drivers_started_together_one_runs_the_other_is_refused(tmp_path: Path) -> None:
    """Neither waits for the other's lease to show: whichever takes it runs every unit once, the
    other exits 2 naming it, and writes nothing of the run."""
    evals = write_mc_evals(tmp_path / "evals", [f"e{i}" for i in range(8)])
    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "rayeval.cli", "run", str(evals), "--agent", "sleep", "--agent-arg", "seconds=0.5",
        "--output", str(out), "--run-id", "r1", "--max-concurrency", "2", "--no-progress",
    ]  # fmt: skip
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    drivers = [
        subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        results = [driver.communicate(timeout=300) for driver in drivers]
    finally:
        for driver in drivers:
            _stop(driver)
    assert sorted(driver.returncode for driver in drivers) == [0, 2], results
    (winner, (stdout, _)), (_, (_, refusal)) = sorted(zip(drivers, results), key=lambda pair: pair[0].returncode)
    assert f"is held by another driver: host {socket.gethostname()}, pid {winner.pid} " in refusal, refusal
    assert "Traceback" not in refusal
    assert _ran_now(stdout) == (8, 0)
    frame = pd.read_parquet(out / "run_id=r1")
    assert len(frame) == 8 and frame["unit_id"].is_unique
    assert json.loads((out / "run_id=r1" / "_manifest.json").read_text())["status"] == "completed"
