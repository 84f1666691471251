"""While a worker runs instant units, all its threads share one CPU of their own.

A worker runs two calls of instant units at once (see FAST_CALLS_PER_WORKER), so that one
thread's units fill the other's waits on the file system.  The two threads pass the GIL at
every system call; when the scheduler has put them on different CPUs each pass is a
cross-CPU wake-up, tens of microseconds on a virtual machine: measured, a unit's CPU cost
rose from 260 µs on one thread to 350-370 µs on two.  On one CPU the passes cost nothing.

Only while instant units run: agents that wait (LLM calls, CLI agents in their own
processes) are left where the scheduler puts them, and no process they start inherits a
single CPU.  Workers on a node take different CPUs by holding a lock file per CPU (see
``lock_folder``) for as long as they live; when every CPU is taken (more workers than CPUs,
another run on the node), a worker simply stays where the scheduler puts it.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCKS_ENV = "RAYEVAL_CPU_LOCKS"


def lock_folder() -> Path:
    """``$RAYEVAL_CPU_LOCKS``, else ``<temp folder>/rayeval-cpus``.  Workers that must take
    different CPUs must share it: containers on one host with temp folders of their own need a
    folder they all mount."""
    return Path(os.environ.get(LOCKS_ENV) or Path(tempfile.gettempdir()) / "rayeval-cpus")


def _current_cpu() -> int | None:
    """The CPU this thread runs on now: where the scheduler has already spread busy processes."""
    try:
        fields = Path("/proc/thread-self/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[36])
    except (OSError, IndexError, ValueError):
        return None


def _set_process_cpus(cpus: set[int]) -> None:
    """Every thread of this process on ``cpus`` (a thread's affinity is its own on Linux)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # the thread has ended meanwhile
            pass


class CpuShare:
    """Counts the calls a worker runs; pins the process to its CPU while only instant calls run."""

    def __init__(self, locks: Path | None = None):
        self.lock_folder = locks if locks is not None else lock_folder()
        self.cpu: int | None = None  # the CPU this process holds the lock of
        self._claim_fd: int | None = None
        self._lock = threading.Lock()
        self._instant_calls = 0
        self._other_calls = 0
        self._cpus_before: set[int] | None = None  # set while pinned
        self.supported = hasattr(os, "sched_setaffinity") and os.path.isdir("/proc/self/task")

    @property
    def pinned(self) -> bool:
        return self._cpus_before is not None

    @contextmanager
    def call(self, *, instant: bool) -> Iterator[None]:
        """Around a call of units: ``instant`` as the driver decided (its fast group)."""
        with self._lock:
            if instant:
                self._instant_calls += 1
            else:
                self._other_calls += 1
            self._update()
        try:
            yield
        finally:
            with self._lock:
                if instant:
                    self._instant_calls -= 1
                else:
                    self._other_calls -= 1
                self._update()

    def _update(self) -> None:
        if self._instant_calls and not self._other_calls:
            self._pin()
        else:
            self._unpin()

    def _pin(self) -> None:
        if self.pinned or not self.supported or self._claim() is None:
            return
        self._cpus_before = os.sched_getaffinity(0)
        _set_process_cpus({self.cpu})

    def _unpin(self) -> None:
        if self._cpus_before is not None:
            _set_process_cpus(self._cpus_before)
            self._cpus_before = None

    def _claim(self) -> int | None:
        """This process's CPU: the first free one, starting from where it runs now."""
        if self.cpu is not None:
            return self.cpu
        allowed = sorted(os.sched_getaffinity(0))
        here = _current_cpu()
        start = allowed.index(here) if here in allowed else 0
        try:
            self.lock_folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        for cpu in allowed[start:] + allowed[:start]:
            try:
                fd = os.open(self.lock_folder / f"cpu-{cpu}.lock", os.O_CREAT | os.O_RDONLY, 0o644)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # another worker's
                os.close(fd)
                continue
            self.cpu, self._claim_fd = cpu, fd  # held until the process ends
            return cpu
        return None
