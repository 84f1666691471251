"""Per-run work folders: unique per run, eval, model, seed and attempt; empty ones reused."""

from __future__ import annotations

import atexit
import itertools
import os
import random
import re
import stat
import tempfile
import threading
from pathlib import Path

from ..errors import RayevalError
from .cache import left_by_gone_processes

WORK_ROOT_ENV = "RAYEVAL_WORK_ROOT"
ARTIFACT_NAMES = ("trajectory.json", "agent_output.log", "agent_stdout.log", "refusal_verdict.json")
#: Default of the last bytes kept of each artifact (``UnitLimits.artifact_mb``).
MAX_ARTIFACT_BYTES = 2 << 20

# The reference agent wrote its files in this subfolder of the work folder.
LEGACY_SUBDIR = "agent_workspace"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_SPARE_NAME = re.compile(r"\.spare-(\d+)-\d+")

# Work-folder name suffixes.  A generator of our own, not ``random``'s (an agent seeding it for
# determinism would make every process draw the same names) nor ``uuid4`` (``os.urandom`` is a
# system call, which hands the GIL to a unit running on another thread); reseeded from the OS
# in forked children, so that they do not draw their parent's names.
_SUFFIXES = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_SUFFIXES.seed)

# The folders the agent could leave files in (the work folder first, then its legacy
# subfolder when there is one) and the names in each.
Listing = list[tuple[Path, set[str]]]


def default_work_root() -> Path:
    return Path(os.environ.get(WORK_ROOT_ENV) or Path(tempfile.gettempdir()) / "rayeval-work")


def _component(text: str) -> str:
    return _UNSAFE.sub("_", text).strip("._")[:80] or "x"


class _SpareFolders:
    """Empty work folders, as they were made, kept under a hidden name for the next unit in
    the same parent folder, which takes one by renaming it.

    Removing a folder and making the next one cost the file system two journal entries and a
    block freed and allocated again (on a file system mounted with ``discard``, also trimmed):
    ≈70 µs here, a third of a unit whose agent answers at once (replays, cached or in-memory
    agents), and more with several processes doing it side by side.  Two renames cost ≈15 µs
    and no block.
    """

    PER_PARENT = 4  # threads sharing a parent folder each find one, mostly

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: dict[Path, list[Path]] = {}
        # (mode, owner, group) of the folders made in each parent: a spare must still have them
        self._made: dict[Path, tuple[int, int, int]] = {}
        self._names = itertools.count()

    def made(self, path: Path) -> None:
        info = os.lstat(path)
        self._made[path.parent] = (info.st_mode, info.st_uid, info.st_gid)

    def take(self, path: Path) -> bool:
        """Whether a spare of ``path``'s parent is now ``path`` (never one that exists: a
        rename would replace an empty folder)."""
        with self._lock:
            free = self._free.get(path.parent)
            spare = free.pop() if free else None
        if spare is None:
            return False
        if os.path.lexists(path):
            self._keep(spare)
            return False
        try:
            os.rename(spare, path)
        except OSError:  # gone meanwhile (a cleaner of the temp folder)
            return False
        return True

    def retire(self, work_dir: Path, info: os.stat_result) -> bool:
        """Whether the empty ``work_dir`` (``info``: its lstat) is gone under its name: kept as
        a spare when it is as it was made (an agent may have changed its mode) and there is
        room, else removed.  A spare's name is this process's own; should a host sharing the
        work root use it too, the rename replaces an empty folder, whose owner makes another."""
        parent = work_dir.parent
        if (info.st_mode, info.st_uid, info.st_gid) == self._made.get(parent):
            with self._lock:
                first = parent not in self._free
                room = len(self._free.get(parent, ())) < self.PER_PARENT
            if first:  # the first spare this process keeps there
                _remove_dead_spares(parent)
            if room:
                spare = parent / f".spare-{os.getpid()}-{next(self._names)}"
                try:
                    os.rename(work_dir, spare)
                except OSError:
                    pass
                else:
                    self._keep(spare)
                    return True
        try:
            os.rmdir(work_dir)
        except OSError:  # not empty any more: the agent is still writing
            return False
        return True

    def _keep(self, spare: Path) -> None:
        with self._lock:
            self._free.setdefault(spare.parent, []).append(spare)

    def forget(self) -> None:
        """In a forked child: the spares are the parent process's."""
        self._lock = threading.Lock()
        self._free = {}

    def remove_all(self) -> None:
        with self._lock:
            spares = [spare for free in self._free.values() for spare in free]
            self._free = {}
        for spare in spares:
            try:
                os.rmdir(spare)
            except OSError:
                pass


def _remove_dead_spares(parent: Path) -> None:
    """The spares a process that is gone left in ``parent`` (killed, it never ran its exit
    handler), removed by the next process that keeps spares there.  A live process's spare on
    another host sharing the folder may go too; its owner then finds it gone and makes a
    folder instead (see ``_SpareFolders.take``)."""
    for spare in left_by_gone_processes(parent, _spare_owner):
        try:
            os.rmdir(spare)
        except OSError:  # taken meanwhile, or not empty: not ours to judge
            pass


def _spare_owner(name: str) -> int | None:
    match = _SPARE_NAME.fullmatch(name)
    return int(match[1]) if match else None


_SPARES = _SpareFolders()
atexit.register(_SPARES.remove_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_SPARES.forget)


def make_work_dir(root: Path, *, run_id: str | None, eval_id: str, model: str | None, seed: int | None) -> Path:
    """``root/<run>/<eval>__<model>__s<seed>__<random>``: parallel runs and retries never collide
    (a name already taken, however unlikely, is drawn again)."""
    stem = f"{_component(eval_id)}__{_component(model or 'nomodel')}__s{seed if seed is not None else 'x'}__"
    parent = root / _component(run_id or "local")
    while True:
        path = parent / f"{stem}{_SUFFIXES.getrandbits(40):010x}"
        if _SPARES.take(path):
            return path
        try:
            path.mkdir(parents=True)
        except FileExistsError:
            continue
        _SPARES.made(path)
        return path


def list_or_retire(work_dir: Path, *, reuse: bool) -> Listing | None:
    """What the agent left behind (see ``list_work_dir``), or None when it left nothing: the
    folder is then gone under its name.  ``reuse``: nothing the agent started can still use
    it, so it may serve the next unit (see ``_SpareFolders``)."""
    if not reuse:
        try:
            os.rmdir(work_dir)  # one system call tells an empty folder, and removes it
        except OSError:
            return list_work_dir(work_dir)
        return None
    try:
        info = os.lstat(work_dir)
        names = os.listdir(work_dir) if stat.S_ISDIR(info.st_mode) else None
    except OSError:
        names = None
    if names is None:  # gone, or replaced by the agent
        return []
    if not names:
        if _SPARES.retire(work_dir, info):
            return None
        return list_work_dir(work_dir)  # something appeared in it since the listing
    return _listing(work_dir, set(names))


def list_work_dir(work_dir: Path) -> Listing:
    """What the agent left behind, listed once for everything that looks (answer files, artifacts)."""
    try:
        names = set(os.listdir(work_dir))
    except OSError:
        return []
    return _listing(work_dir, names)


def _listing(work_dir: Path, names: set[str]) -> Listing:
    listing = [(work_dir, names)]
    legacy = work_dir / LEGACY_SUBDIR
    if LEGACY_SUBDIR in names and not legacy.is_symlink():  # a link would lead out of the work folder
        try:
            listing.append((legacy, set(os.listdir(legacy))))
        except OSError:  # a file of that name, or gone
            pass
    return listing


class FileTooLarge(RayevalError, ValueError):
    """A file the agent left is larger than what may be read of it."""


def read_left_file(path: Path, limit: int, *, tail: bool = False) -> bytes | None:
    """The bytes of a regular file the agent left, without following a symbolic link (a link
    would lead the trusted side to a file the agent cannot read itself) and without reading
    more than ``limit`` bytes: beyond it, the last ``limit`` (``tail``) or ``FileTooLarge``.
    None when ``path`` is not a regular file (a link, a folder, a pipe) or is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        if info.st_size > limit:
            if not tail:
                raise FileTooLarge(f"{path.name} is {info.st_size} bytes, more than the {limit} that are read")
            handle.seek(info.st_size - limit)
            return b"[... truncated ...]\n" + handle.read(limit)
        return handle.read(limit + 1)[:limit]


def collect_artifacts(listing: Listing, limit: int = MAX_ARTIFACT_BYTES) -> dict[str, str]:
    """Text of the files worth keeping after the work folder is gone: the last ``limit`` bytes
    of each, read from its end (never whole)."""
    if not listing:
        return {}
    work_dir, present = listing[0]
    found = {}
    for name in ARTIFACT_NAMES:
        if name in present:
            data = read_left_file(work_dir / name, limit, tail=True)
            if data is not None:
                found[name] = data.decode("utf-8", errors="replace")
    return found
