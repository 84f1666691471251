"""Ending a process and what it started, the one way every caller does it: SIGTERM to all of
it, a grace period for it to exit, then SIGKILL to whatever is left.

What belongs to the process is its ``Reach``:

* ``descendants``: the process and every process it started, followed by parent links in
  /proc (it shares its caller's session: a program run by an agent harness, a command run by
  mini-swe-agent). A descendant orphaned before it is first seen is out of reach.
* ``session``: every process of the session it leads, its process group signalled at once (it
  was started in a new session: a unit under ``process`` isolation, a grading). A
  process that moved to a session of its own is out of reach.
* ``namespace``: the process is the init of a pid namespace, signalled by pidfd where there
  is one. When it ends the kernel kills every process of the namespace, whatever its session.
  From outside, only SIGKILL reaches an init that does not handle SIGTERM.

Processes are told apart by pid and start time: a pid reused during the grace period is never
signalled. Only the standard library is imported: the unit runner and mini-swe-agent's entry
point import this module in the sandbox.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:
    import subprocess

Reach = Literal["descendants", "session", "namespace"]

_POLL_S = 0.05
_HAS_PROC = os.path.isdir("/proc/self")  # Linux; elsewhere (no /proc) a process alone, by pid


class _Stat(NamedTuple):
    """What /proc/<pid>/stat says of one process."""

    ppid: int
    session: int
    start: int  # clock ticks after boot: with the pid, names one process
    ended: bool  # a zombie, or being reaped


def _stat(pid: int) -> _Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    # pid (comm) state ppid pgrp session ... starttime (field 22); comm may hold spaces and ')'
    try:
        fields = text[text.rindex(")") + 2 :].split()
        return _Stat(int(fields[1]), int(fields[3]), int(fields[19]), fields[0] in ("Z", "X"))
    except (ValueError, IndexError):
        return None


def _table() -> dict[int, _Stat]:
    """Every process this process can see (empty without /proc)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    table = {}
    for entry in entries:
        if entry.isdigit() and (found := _stat(int(entry))) is not None:
            table[int(entry)] = found
    return table


def _members(pid: int, reach: Reach) -> dict[int, int]:
    """Pid -> start time of the live processes that belong to ``pid`` (see ``Reach``)."""
    if reach == "namespace":  # the init alone: the kernel knows the rest
        init = _stat(pid)
        return {pid: init.start} if init is not None and not init.ended else {}
    table = _table()
    if reach == "session":
        return {p: stat.start for p, stat in table.items() if stat.session == pid and not stat.ended}
    children: dict[int, list[int]] = {}
    for p, stat in table.items():
        children.setdefault(stat.ppid, []).append(p)
    found: dict[int, int] = {}
    stack = [pid] if pid in table else []
    while stack:
        p = stack.pop()
        if not table[p].ended:
            found[p] = table[p].start
        stack.extend(children.get(p, []))
    return found


def _alive(pid: int, start: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat.start == start and not stat.ended


def exited(pidfd: int, timeout: float = 0.0) -> bool:
    """Whether the process behind ``pidfd`` has exited, or does within ``timeout`` seconds
    (its pidfd then polls readable)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(int(timeout * 1000)))


class _Tree:
    """One process and the processes seen to belong to it so far."""

    def __init__(self, pid: int | None, reach: Reach, pidfd: int | None):
        self.pid = pid
        self.reach = reach
        self.pidfd = pidfd
        self.seen: dict[int, int] = {}

    def look(self) -> None:
        if self.pid and _HAS_PROC:
            self.seen.update(_members(self.pid, self.reach))

    def alive(self) -> bool:
        if self.pidfd is not None and not exited(self.pidfd):
            return True
        if not _HAS_PROC:  # the process alone, by pid
            return self.pid is not None and self.pid > 0 and _signal(self.pid, 0)
        return any(_alive(pid, start) for pid, start in self.seen.items())

    def signal(self, sig: signal.Signals) -> None:
        self.look()
        live = [pid for pid, start in self.seen.items() if _alive(pid, start)]
        if self.pidfd is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(self.pidfd, sig)
        elif self.pid and not _HAS_PROC:
            _signal(self.pid, sig)
        if self.pid and self.reach == "session" and live:  # members live: the group is still its own
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)  # the whole group at once: none forks out of it meanwhile
            live = [pid for pid in live if _group_of(pid) != self.pid]  # signalled once, not twice
        for pid in live:
            _signal(pid, sig)


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _signal(pid: int, sig: int) -> bool:
    """Whether ``sig`` was sent to ``pid`` (0: whether it exists)."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def end_process_tree(
    process: subprocess.Popen[Any] | int | None,
    reach: Reach,
    *,
    grace: float = 0.0,
    pidfd: int | None = None,
) -> None:
    """End ``process`` and what belongs to it (``reach``): SIGTERM, up to ``grace`` seconds for
    all of it to exit, then SIGKILL (at once when ``grace`` is 0). Returns once SIGKILL is sent:
    the caller reaps its child. ``process``: a child not yet reaped (a reaped one is left
    alone, its pid may be another's by now), a pid, or None when a pid namespace hides it and
    only ``pidfd`` names it."""
    if process is not None and not isinstance(process, int):
        if process.returncode is not None:
            return
        process = process.pid
    tree = _Tree(process, reach, pidfd)
    if grace > 0:
        tree.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            tree.look()  # what it started since
            if not tree.alive():
                return
            time.sleep(_POLL_S)
    tree.signal(signal.SIGKILL)
