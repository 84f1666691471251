"""CpuShare: a worker's threads on one CPU of their own while only instant calls run."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rayeval.batch.cpu_share import CpuShare

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux-only")

ALL = os.sched_getaffinity(0) if hasattr(os, "sched_setaffinity") else set()
needs_two_cpus = pytest.mark.skipif(len(ALL) < 2, reason="needs two CPUs")


def process_cpus() -> list[set[int]]:
    """The CPUs of every thread of this process."""
    cpus = []
    for tid in os.listdir("/proc/self/task"):
        try:
            cpus.append(os.sched_getaffinity(int(tid)))
        except OSError:
            pass
    return cpus


@pytest.fixture(autouse=True)
def restore_affinity():
    yield
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), ALL)
        except OSError:
            pass


def test_instant_calls_pin_every_thread_to_the_claimed_cpu_and_release_them_after(tmp_path: Path) -> None:
    share = CpuShare(tmp_path)
    started, release = threading.Event(), threading.Event()
    seen_by_new_thread: list[set[int]] = []

    def idle() -> None:  # a thread that exists before the call (as Ray's own threads)
        started.set()
        release.wait()

    before = threading.Thread(target=idle, daemon=True)
    before.start()
    started.wait()
    try:
        with share.call(instant=True):
            assert share.pinned and share.cpu in ALL
            assert all(cpus == {share.cpu} for cpus in process_cpus())
            later = threading.Thread(target=lambda: seen_by_new_thread.append(os.sched_getaffinity(0)))
            later.start()
            later.join()
            with share.call(instant=True):  # a second fast call on another thread
                assert share.pinned
            assert share.pinned  # still one instant call running
        assert not share.pinned
        assert seen_by_new_thread == [{share.cpu}]
        assert all(cpus == ALL for cpus in process_cpus())
    finally:
        release.set()
        before.join()


def test_other_calls_are_never_pinned_and_unpin_running_instant_ones(tmp_path: Path) -> None:
    """An agent that waits may start processes (CLI agents): they must not inherit one CPU."""
    share = CpuShare(tmp_path)
    with share.call(instant=False):
        assert not share.pinned and all(cpus == ALL for cpus in process_cpus())
    with share.call(instant=True):
        assert share.pinned
        with share.call(instant=False):
            assert not share.pinned and all(cpus == ALL for cpus in process_cpus())
            with share.call(instant=True):
                assert not share.pinned
        assert share.pinned  # only instant calls again
    assert not share.pinned


@needs_two_cpus
def test_workers_on_a_node_claim_different_cpus_and_none_when_all_are_taken(tmp_path: Path) -> None:
    shares = [CpuShare(tmp_path) for _ in ALL]
    for share in shares:
        with share.call(instant=True):
            pass
    assert sorted(share.cpu for share in shares) == sorted(ALL)
    extra = CpuShare(tmp_path)
    with extra.call(instant=True):
        assert extra.cpu is None and not extra.pinned
        assert all(cpus == ALL for cpus in process_cpus())


def test_a_claim_ends_with_its_process(tmp_path: Path) -> None:
    """Workers end without notice: the lock of a CPU goes with the process that held it."""
    claim = (
        "import sys; from pathlib import Path; from rayeval.batch.cpu_share import CpuShare\n"
        "share = CpuShare(Path(sys.argv[1]))\n"
        "with share.call(instant=True): print(share.cpu)\n"
    )
    held = {
        int(
            subprocess.run(
                [sys.executable, "-c", claim, str(tmp_path)], capture_output=True, text=True, check=True
            ).stdout
        )
    }
    assert held <= ALL
    shares = [CpuShare(tmp_path) for _ in ALL]
    for share in shares:
        with share.call(instant=True):
            pass
    assert {share.cpu for share in shares} == ALL  # the dead process's CPU included


def test_an_unusable_lock_folder_means_no_pinning(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    share = CpuShare(blocker / "cpus")
    with share.call(instant=True):
        assert share.cpu is None and not share.pinned


def test_the_lock_folder_can_be_shared_through_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Containers on one host, each with its own temporary folder, share a mounted one."""
    monkeypatch.setenv("RAYEVAL_CPU_LOCKS", str(tmp_path / "shared"))
    share = CpuShare()
    with share.call(instant=True):
        assert share.pinned
    assert (tmp_path / "shared" / f"cpu-{share.cpu}.lock").exists()
    monkeypatch.delenv("RAYEVAL_CPU_LOCKS")
    assert CpuShare().lock_folder.name == "rayeval-cpus"
