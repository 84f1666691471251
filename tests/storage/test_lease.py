"""The run lease: one driver at a time, on a local root and on the S3 protocol (moto's server)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from rayeval.storage import (
    LEASE_NAME,
    LeaseError,
    LeaseHeld,
    LeaseLapsed,
    LeaseLost,
    ResultStore,
    run_lease,
)
from rayeval.storage.lease import (
    LeaseLostInterrupt,
    LeaseRecord,
    LocalLease,
    S3Lease,
    lease_ttl,
)

REPO = Path(__file__).resolve().parents[2]

# A child process that takes a lease, says so, and waits to be killed.
_HOLDER = """
import sys, time
from rayeval.storage import ResultStore, run_lease
store = ResultStore(sys.argv[1], s3_endpoint_url=sys.argv[4] if len(sys.argv) > 4 else None)
lease = run_lease(store, sys.argv[2], ttl_s=float(sys.argv[3])).take().start_renewing()
print("HELD", flush=True)
time.sleep(600)
"""


def _foreign(record: LeaseRecord, *, expires_in: float, token: str = "f" * 32) -> LeaseRecord:
    """``record`` as a driver on another machine sharing the root would have written it."""
    now = datetime.now(timezone.utc)
    return replace(
        record, token=token, host="other-host", pid=4242, machine="other-host/another-boot",
        pid_namespace="pid:[1]", process_start=1, acquired_at=now, renewed_at=now,
        expires_at=now + timedelta(seconds=expires_in),
    )  # fmt: skip


@pytest.fixture
def holder_process():
    """Start ``_HOLDER`` (root, run id, TTL[, endpoint]); returns the process once it holds the lease."""
    started: list[subprocess.Popen] = []

    def start(*args: str) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        started.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "HELD", proc.communicate()
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


# -- local roots --------------------------------------------------------------------------------
def test_second_taker_is_refused_with_the_holder_named(local_store: ResultStore) -> None:
    lease = run_lease(local_store, "r1", ttl_s=30).take()
    path = Path(local_store.run_path("r1")) / LEASE_NAME
    stored = json.loads(path.read_text())
    assert stored["token"] == lease.token and stored["pid"] == os.getpid() and stored["ttl_s"] == 30
    with pytest.raises(LeaseHeld) as held:
        run_lease(local_store, "r1").take()
    message = str(held.value)
    assert f"pid {os.getpid()}" in message and f"host {lease.record.host}" in message
    assert "since" in message and "expires" in message and "resume=True, run_id=r1" in message
    assert held.value.holder.token == lease.token
    assert json.loads(path.read_text())["token"] == lease.token  # the refused taker changed nothing
    lease.release()
    assert not path.exists()
    assert not Path(local_store.run_path("r1")).exists()  # nothing else was written: no folder left
    run_lease(local_store, "r1").take().release()  # free at once


def test_renewal_moves_the_heartbeat_and_release_stops_it(local_store: ResultStore) -> None:
    lease = run_lease(local_store, "r1", ttl_s=0.6).take().start_renewing()
    first = lease.read()
    time.sleep(0.8)
    renewed = lease.read()
    assert renewed.token == first.token and renewed.acquired_at == first.acquired_at
    assert renewed.renewed_at > first.renewed_at and renewed.expires_at > first.expires_at
    lease.check_writable()  # renewed in time: writable past the first expiry
    (Path(local_store.run_path("r1")) / "_manifest.json").write_text("{}")  # the run has content
    lease.release()
    assert lease.read() is None
    with pytest.raises(LeaseError):
        lease.check_writable()
    time.sleep(0.5)
    assert lease.read() is None  # the thread renews nothing after the release
    assert Path(local_store.run_path("r1"), "_manifest.json").exists()


def test_a_driver_killed_on_this_machine_is_taken_over_at_once(local_store: ResultStore, holder_process) -> None:
    child = holder_process(local_store.root, "r1", "60")
    with pytest.raises(LeaseHeld, match=rf"pid {child.pid} \(alive on this machine\)"):
        run_lease(local_store, "r1").take()
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert run_lease(local_store, "r1").read().pid == child.pid  # the dead driver's lease is still there
    lease = run_lease(local_store, "r1").take()  # its lock went with its process: no wait for the expiry
    assert lease.read().pid == os.getpid()
    lease.release()


def test_a_stalled_driver_on_this_machine_keeps_the_run_until_it_ends(local_store: ResultStore, holder_process) -> None:
    """Stopped (SIGSTOP) past its lease's expiry: its process still holds the run's lock, so
    nobody takes the run over; once it goes on, its renewal finds its lease unchanged."""
    child = holder_process(local_store.root, "r1", "1")
    child.send_signal(signal.SIGSTOP)
    try:
        time.sleep(1.2)
        assert run_lease(local_store, "r1").read().expired()
        with pytest.raises(LeaseHeld, match=rf"no longer renews its lease .* end it \(pid {child.pid} on "):
            run_lease(local_store, "r1").take()
    finally:
        child.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 10
    while run_lease(local_store, "r1").read().expired() and time.monotonic() < deadline:
        time.sleep(0.05)
    record = run_lease(local_store, "r1").read()
    assert record.pid == child.pid and not record.expired()  # renewed again: still the holder


def test_a_lease_of_another_machine_is_taken_over_only_once_expired(local_store: ResultStore) -> None:
    """A driver on another machine sharing the folder (where its lock may not be seen):
    its record counts until it expires."""
    lease = LocalLease(local_store.run_path("r1"), "r1", ttl_s=30)
    lease.take()
    foreign = _foreign(lease.record, expires_in=1.0)
    lease._write(foreign)
    lease.release()  # not ours any more: left in place
    assert lease.read() == foreign
    with pytest.raises(LeaseHeld, match=r"host other-host, pid 4242.*expires .* \(in 1 s\)"):
        run_lease(local_store, "r1").take()
    time.sleep(1.1)
    taker = run_lease(local_store, "r1").take()
    assert taker.read().token == taker.token
    taker.release()


def test_of_many_takers_of_an_expired_lease_one_wins(local_store: ResultStore) -> None:
    seed = LocalLease(local_store.run_path("r1"), "r1", ttl_s=30)
    seed.take()
    seed._write(_foreign(seed.record, expires_in=-1.0))
    seed.release()
    contenders = [run_lease(local_store, "r1", ttl_s=30) for _ in range(12)]
    barrier = threading.Barrier(len(contenders))
    outcome: dict[int, str] = {}

    def take(index: int) -> None:
        barrier.wait()
        try:
            contenders[index].take()
            outcome[index] = "won"
        except LeaseHeld:
            outcome[index] = "refused"

    threads = [threading.Thread(target=take, args=(i,)) for i in range(len(contenders))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    winners = [i for i, result in outcome.items() if result == "won"]
    assert len(outcome) == len(contenders) and len(winners) == 1, outcome
    assert contenders[winners[0]].read().token == contenders[winners[0]].token
    contenders[winners[0]].release()


def test_a_lost_lease_is_not_renewed_fences_writes_and_interrupts_the_run(local_store: ResultStore) -> None:
    lease = LocalLease(local_store.run_path("r1"), "r1", ttl_s=0.9)
    lease.take().start_renewing()
    lease.check_writable()
    usurper = _foreign(lease.record, expires_in=60)
    with pytest.raises(LeaseLostInterrupt), lease.interrupts():
        lease._write(usurper)  # another machine's driver took the run over
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the run's loop, checking the lease on each pass
            lease.stop_if_lost()
            time.sleep(0.01)
    assert isinstance(lease.lost, LeaseLost)
    assert "other-host" in str(lease.lost) and "pid 4242" in str(lease.lost)
    with pytest.raises(LeaseLost):
        lease.check_writable()
    with pytest.raises(LeaseLost):
        lease.renew()
    lease.release()
    assert lease.read() == usurper  # the new holder's record stays


def test_a_lease_not_renewed_in_time_stops_writes_until_renewed(local_store: ResultStore) -> None:
    lease = run_lease(local_store, "r1", ttl_s=0.5).take()  # no renewal thread
    lease.check_writable()
    time.sleep(0.5)
    with pytest.raises(LeaseLapsed, match="last renewed"):
        lease.check_writable()
    lease.renew()  # still unchanged: nobody took the run over meanwhile
    lease.check_writable()
    lease.release()


def test_an_unreadable_record_counts_until_its_file_is_ttl_old(local_store: ResultStore) -> None:
    run_dir = Path(local_store.run_path("r1"))
    run_dir.mkdir(parents=True)
    (run_dir / LEASE_NAME).write_text("{not json")
    other = run_lease(local_store, "r1", ttl_s=30)
    record = other.read()
    assert record.host.startswith("unknown") and not record.expired()
    # this machine's lock is free: the record cannot be told from another machine's, so it counts
    with pytest.raises(LeaseHeld, match="unknown"):
        other.take()
    old = time.time() - 60
    os.utime(run_dir / LEASE_NAME, (old, old))
    run_lease(local_store, "r1", ttl_s=30).take().release()


def test_the_ttl_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAYEVAL_LEASE_TTL", raising=False)
    assert lease_ttl() == 30.0
    monkeypatch.setenv("RAYEVAL_LEASE_TTL", "2.5")
    assert lease_ttl() == 2.5 and lease_ttl(7) == 7.0
    for bad in ("0", "-1", "soon", "nan"):
        monkeypatch.setenv("RAYEVAL_LEASE_TTL", bad)
        with pytest.raises(LeaseError, match="RAYEVAL_LEASE_TTL"):
            lease_ttl()


# -- S3 -----------------------------------------------------------------------------------------
def test_s3_take_refuse_renew_release(s3_store: ResultStore, s3_bucket) -> None:
    lease = run_lease(s3_store, "r1", ttl_s=30)
    assert isinstance(lease, S3Lease) and lease.where == f"s3://{s3_bucket.name}/results/run_id=r1/_lease.json"
    lease.take()
    with pytest.raises(LeaseHeld) as held:
        run_lease(s3_store, "r1").take()
    assert f"host {lease.record.host}, pid {os.getpid()}" in str(held.value) and "expires" in str(held.value)
    etag = lease.etag
    before = lease.read()
    lease.renew()
    after = lease.read()
    assert lease.etag != etag and after.token == lease.token and after.renewed_at > before.renewed_at
    lease.release()
    listing = s3_bucket.client.list_objects_v2(Bucket=s3_bucket.name, Prefix="results/")
    assert listing.get("KeyCount", 0) == 0
    run_lease(s3_store, "r1").take().release()  # free at once


def test_s3_expired_lease_is_taken_over_and_the_old_holder_loses_it(s3_store: ResultStore, s3_bucket) -> None:
    ttl = 3.0  # room for the take below on a loaded machine (each is a few S3 round trips)
    old = run_lease(s3_store, "r1", ttl_s=ttl).take()  # never renewed: as if its driver stalled
    expired = time.monotonic() + ttl + 0.1  # its record was written before take() returned
    with pytest.raises(LeaseHeld):  # its process (this one) is alive: the lease counts until it expires
        run_lease(s3_store, "r1").take()
    time.sleep(max(0.0, expired - time.monotonic()))
    with pytest.raises(LeaseLapsed):
        old.check_writable()
    new = run_lease(s3_store, "r1", ttl_s=30).take()
    with pytest.raises(
        LeaseLost, match=rf"another driver took the run over; it is held now by host \S+, pid {os.getpid()}"
    ):
        old.renew()  # If-Match on the ETag it wrote fails: 412
    assert isinstance(old.lost, LeaseLost)
    with pytest.raises(LeaseLost):
        old.check_writable()
    old.release()  # must not delete the new holder's lease
    assert run_lease(s3_store, "r1").read().token == new.token
    new.renew()
    new.release()


def test_s3_lapsed_lease_renewed_unchanged_is_writable_again(s3_store: ResultStore) -> None:
    lease = run_lease(s3_store, "r1", ttl_s=0.5).take()
    time.sleep(0.5)
    with pytest.raises(LeaseLapsed):
        lease.check_writable()
    lease.renew()
    lease.check_writable()
    lease.release()


def test_s3_of_two_takers_of_an_expired_lease_the_conditional_put_lets_one_win(s3_store: ResultStore) -> None:
    """B reads the expired lease; C takes it over before B writes: B's If-Match PUT fails (412)
    and B is refused, naming C."""
    run_lease(s3_store, "r1", ttl_s=0.2).take()  # abandoned, never released
    time.sleep(0.3)
    b = run_lease(s3_store, "r1", ttl_s=30)
    c = run_lease(s3_store, "r1", ttl_s=30)
    put = b._put

    def c_first(record, **condition):
        assert "IfMatch" in condition
        c.take()
        return put(record, **condition)

    b._put = c_first
    with pytest.raises(LeaseHeld) as held:
        b.take()
    assert held.value.holder.token == c.token
    assert c.read().token == c.token
    c.release()


def test_s3_creation_race_refuses_the_second_creator(s3_store: ResultStore) -> None:
    b = run_lease(s3_store, "r1", ttl_s=30)
    c = run_lease(s3_store, "r1", ttl_s=30)
    put = b._put

    def c_first(record, **condition):
        assert condition == {"IfNoneMatch": "*"}
        c.take()
        return put(record, **condition)

    b._put = c_first
    with pytest.raises(LeaseHeld):
        b.take()
    assert c.read().token == c.token
    c.release()


def test_s3_lease_of_a_killed_driver_on_this_machine_is_taken_over_at_once(
    s3_store: ResultStore, s3_bucket, holder_process
) -> None:
    child = holder_process(s3_store.root, "r1", "60", s3_bucket.endpoint_url)
    with pytest.raises(LeaseHeld, match=rf"pid {child.pid}\b"):
        run_lease(s3_store, "r1").take()
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    stale = run_lease(s3_store, "r1").read()
    assert stale.pid == child.pid and not stale.expired()  # TTL 60: it would count for a minute
    lease = run_lease(s3_store, "r1").take()  # its process is gone from this machine
    assert lease.read().token == lease.token
    lease.release()
