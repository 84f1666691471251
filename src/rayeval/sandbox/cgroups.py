"""Per-unit control groups: a limit on all of a unit's processes together.

Resource limits (``setrlimit``) count per process, and the kernel does not apply the process
count limit to processes of user id 0 outside a namespace's mapping (a worker running as
root, as in most containers). Where this process may create control groups (cgroup v1
``pids``/``memory`` hierarchies it can write, or a cgroup v2 subtree with those controllers
delegated), each unit gets its own group with ``pids``/``memory`` limits; the unit's agent
joins it through a descriptor of its ``cgroup.procs`` file, opened here and passed over the
unit's socket, so the sandbox never sees the control-group file system. Elsewhere the
rlimits alone apply.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

CONTROLLERS = ("pids", "memory")
# group names: unique in this process whatever runner makes them, and apart from a process of
# the same id elsewhere (another pid namespace) or earlier (one that died leaving its groups)
_NAMES = itertools.count()
_TOKEN = secrets.token_hex(4)


@dataclass(frozen=True)
class _Hierarchy:
    """Where groups for one controller are made, and how its limit file is named."""

    controller: str
    base: Path  # this process's own group, under which units' groups are made
    limit_file: str


def _own_groups() -> dict[str, str]:
    """``controller -> path`` of this process's groups ("" for the v2 unified hierarchy)."""
    groups: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, names, path = line.split(":", 2)
            for name in names.split(",") if names else [""]:
                groups[name] = path
    return groups


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, file system type, options) of the control-group mounts."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fstype, _, super_options = right.split(" ", 2)
            if fstype in ("cgroup", "cgroup2"):
                found.append((left.split()[4], fstype, set(super_options.split(","))))
    return found


def _writable(folder: Path) -> bool:
    return folder.is_dir() and os.access(folder, os.W_OK)


def _find_hierarchies() -> dict[str, _Hierarchy]:
    groups = _own_groups()
    found: dict[str, _Hierarchy] = {}
    for point, fstype, options in _mounts():
        if fstype == "cgroup":
            for controller in CONTROLLERS:
                if controller in options and controller in groups:
                    base = Path(point) / groups[controller].lstrip("/")
                    limit = "pids.max" if controller == "pids" else "memory.limit_in_bytes"
                    if _writable(base):
                        found.setdefault(controller, _Hierarchy(controller, base, limit))
        elif "" in groups:
            base = Path(point) / groups[""].lstrip("/")
            with contextlib.suppress(OSError):
                delegated = set((base / "cgroup.subtree_control").read_text().split())
                for controller in CONTROLLERS:
                    if controller in delegated and _writable(base):
                        found.setdefault(controller, _Hierarchy(controller, base, f"{controller}.max"))
    return found


class UnitGroups:
    """Makes, fills and removes the control groups of this process's units."""

    def __init__(self) -> None:
        self.hierarchies = _find_hierarchies()
        self._lock = threading.Lock()
        self._pending: list[Path] = []  # groups whose processes had not yet gone

    @property
    def controllers(self) -> set[str]:
        return set(self.hierarchies)

    def create(self, limits: dict[str, int | None]) -> tuple[list[Path], list[int]]:
        """Groups for one unit with ``limits`` (``pids``/``memory`` values, None: none), and a
        descriptor of each group's ``cgroup.procs`` for the unit's agent process to join it by (before it starts anything)."""
        folders: list[Path] = []
        fds: list[int] = []
        name = f"rayeval-{os.getpid()}-{_TOKEN}-{next(_NAMES)}"
        try:
            for controller, hierarchy in self.hierarchies.items():
                value = limits.get(controller)
                if value is None:
                    continue
                folder = hierarchy.base / name
                folder.mkdir()
                folders.append(folder)
                (folder / hierarchy.limit_file).write_text(str(value))
                fds.append(os.open(folder / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            self.remove(folders, fds)
            raise
        return folders, fds

    @staticmethod
    def out_of_memory(folders: list[Path]) -> bool:
        """Whether the kernel killed a process of these groups for their memory limit."""
        for folder in folders:
            for name in ("memory.events", "memory.oom_control"):
                with contextlib.suppress(OSError):
                    for line in (folder / name).read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill" and value.strip() not in ("", "0"):
                            return True
        return False

    def remove(self, folders: list[Path], fds: list[int]) -> None:
        """Close the descriptors and remove the groups. The kernel refuses while a process
        remains (the unit's last processes are still exiting): those are removed by a later call, or
        at exit, so that no unit waits for another's."""
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        with self._lock:
            pending, self._pending = [*self._pending, *folders], []
        left = [folder for folder in pending if not _removed(folder)]
        with self._lock:
            self._pending.extend(left)

    def close(self) -> None:
        """Remove what is left, waiting a moment for the last units' processes to go."""
        for _ in range(100):
            with self._lock:
                pending, self._pending = self._pending, []
            left = [folder for folder in pending if not _removed(folder)]
            if not left:
                return
            with self._lock:
                self._pending.extend(left)
            threading.Event().wait(0.02)


def _removed(folder: Path) -> bool:
    try:
        folder.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True
