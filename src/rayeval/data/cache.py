"""Node-local content cache shared by every process staging data on this machine.

Many Ray workers stage the same nodes at once, so the cache must download each URI once
and never expose a half-written entry. Layout under the cache root::

    entries/<h>/meta.json   sidecar: key, kind, size, sha256, per-file records, source
    entries/<h>/payload     the file, or the directory tree, exactly as fetched (read-only)
    locks/<h>.lock          flock target for the entry (never deleted)
    tmp/<h>.<pid>.<token>/  scratch for an entry being built; renamed to entries/<h>

``<h>`` is the first 32 hex digits of sha256(key); the key is the exact URI (local paths:
``file://`` + absolute path). An entry appears only by renaming a fully written and
fsynced scratch dir, so readers see either nothing or a complete entry. Builders hold an
exclusive lock on the key; readers hold a shared one while they copy from it, so a stale
entry is never replaced under a reader.

Staging never links payload files anywhere, yet the cache does not take their bytes on
trust: each file's record keeps its sha256 and its (inode, size, mtime, ctime) as of
the commit. A reuse whose files all still show that stat reads nothing (ctime cannot be
set from user space, so any chmod, write or utime since shows); otherwise the changed
files are hashed again, and the entry is reused (their stat recorded anew) only if every
byte is as recorded, else rebuilt from its source.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError, computed_field

from .._files import fsync_dir, write_atomic
from .._walk import walk_once
from ..errors import RayevalError

CACHE_ENV = "RAYEVAL_CACHE_DIR"
META_VERSION = 2
CHUNK = 1 << 20
_STALE_TMP_SECONDS = 24 * 3600

Kind = Literal["file", "directory"]


class LockTimeout(RayevalError, TimeoutError):
    """Another process held the entry's lock until the deadline passed."""


class FileRecord(BaseModel):
    """One payload file: ``path`` is POSIX-relative to the payload ('' for a single file)."""

    path: str
    size: int
    sha256: str


class StoredFile(FileRecord):
    """A committed payload file with its stat when its bytes were last known to be
    ``sha256``: while its inode, size, mtime and ctime stay the same, so do its bytes."""

    ino: int
    mtime_ns: int
    ctime_ns: int


class Payload(BaseModel):
    """What a builder wrote into the payload path."""

    kind: Kind
    files: list[FileRecord]
    #: Basename reported by the source (a resolver); None: the one derived from the URI.
    name: str | None = None
    #: For local sources: (relative path, size, mtime_ns) of the source at copy time.
    source: list[tuple[str, int, int]] | None = None

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented form, which mypy rejects
    @property
    def size_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented form, which mypy rejects
    @property
    def sha256(self) -> str:
        """The file's sha256; for a directory, ``tree_digest`` of its files."""
        if self.kind == "file":
            return self.files[0].sha256
        return tree_digest(self.files)


class EntryMeta(BaseModel):
    """The JSON sidecar of a cache entry (``Payload`` plus identity, in readable order)."""

    version: int = META_VERSION
    key: str
    uri: str
    #: Basename to stage under (before collision renaming).
    name: str
    kind: Kind
    size_bytes: int
    sha256: str
    files: list[StoredFile]
    source: list[tuple[str, int, int]] | None = None
    created_at: float


@dataclass(frozen=True)
class CacheEntry:
    """A valid entry, usable while the caller holds it (see ``open_entry``)."""

    path: Path
    meta: EntryMeta

    @property
    def payload(self) -> Path:
        return self.path / "payload"


def default_cache_dir() -> Path:
    """``$RAYEVAL_CACHE_DIR``, else ``~/.cache/rayeval/data``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rayeval" / "data"


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def tree_digest(files: Iterable[FileRecord]) -> str:
    """Digest of a directory: sha256 over ``<relpath>\\0<file sha256>\\n`` in path order."""
    h = hashlib.sha256()
    for rec in sorted(files, key=lambda r: r.path):
        h.update(f"{rec.path}\0{rec.sha256}\n".encode())
    return h.hexdigest()


def write_file(dest: Path, chunks: Iterable[bytes], rel: str = "") -> FileRecord:
    """Write ``chunks`` to ``dest`` (new file), fsync, make read-only; hash while writing."""
    h = hashlib.sha256()
    size = 0
    with open(dest, "xb") as out:
        for chunk in chunks:
            out.write(chunk)
            h.update(chunk)
            size += len(chunk)
        out.flush()
        os.fsync(out.fileno())
    os.chmod(dest, 0o444)
    return FileRecord(path=rel, size=size, sha256=h.hexdigest())


def list_tree(root: Path) -> tuple[list[str], list[tuple[str, Path, os.stat_result]]]:
    """Directories and regular files under ``root`` (symlinks followed, cycles cut), sorted.

    Returns (POSIX relative dirs, [(POSIX relative path, absolute path, stat)]).
    Unreadable directories raise; dangling symlinks and special files are skipped.
    """
    dirs: list[str] = []
    files: list[tuple[str, Path, os.stat_result]] = []
    for dirpath, _, filenames in walk_once(root):
        rel_dir = Path(dirpath).relative_to(root)
        if rel_dir.parts:
            dirs.append(rel_dir.as_posix())
        for name in filenames:
            path = Path(dirpath, name)
            try:
                fst = path.stat()
            except FileNotFoundError:  # dangling symlink
                continue
            if stat.S_ISREG(fst.st_mode):
                files.append(((rel_dir / name).as_posix(), path, fst))
    return sorted(dirs), sorted(files, key=lambda item: item[0])


def _stamp(st: os.stat_result) -> dict[str, int]:
    return {"ino": st.st_ino, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}


def _same_stat(rec: StoredFile, st: os.stat_result) -> bool:
    return (rec.ino, rec.size, rec.mtime_ns, rec.ctime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _payload_stats(payload: Path, kind: Kind) -> dict[str, os.stat_result] | None:
    """lstat of each payload file by relative path; None when the payload is missing or
    holds anything but real directories and regular files (never built so: tampered)."""
    try:
        st = payload.lstat()
        if kind == "file":
            return {"": st} if stat.S_ISREG(st.st_mode) else None
        if not stat.S_ISDIR(st.st_mode):
            return None
        found: dict[str, os.stat_result] = {}

        def fail(exc: OSError) -> None:
            raise exc

        for dirpath, dirnames, filenames in os.walk(payload, onerror=fail):
            for name in dirnames + filenames:  # symlinks land in either list, unfollowed
                path = Path(dirpath, name)
                st = path.lstat()
                if stat.S_ISREG(st.st_mode):
                    found[path.relative_to(payload).as_posix()] = st
                elif not stat.S_ISDIR(st.st_mode):
                    return None
        return found
    except OSError:
        return None


def _hash_file(path: Path) -> tuple[os.stat_result, str]:
    """The file's stat, taken before reading (a write during the read changes its ctime,
    so the next reuse hashes again), and the sha256 of its bytes."""
    with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as fh:
        st = os.fstat(fh.fileno())
        h = hashlib.sha256()
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return st, h.hexdigest()


def _verified(payload: Path, meta: EntryMeta, *, rehash: bool) -> list[StoredFile] | None:
    """The payload's records with their current stat if it holds exactly the recorded
    files and bytes, else None. A file still showing its recorded stat is trusted unread;
    any other is hashed again, or with ``rehash`` False, makes the answer None at once."""
    stats = _payload_stats(payload, meta.kind)
    if stats is None or stats.keys() != {rec.path for rec in meta.files}:
        return None
    files = []
    for rec in meta.files:
        if _same_stat(rec, stats[rec.path]):
            files.append(rec)
            continue
        if not rehash:
            return None
        try:
            st, digest = _hash_file(payload / rec.path)
        except OSError:
            return None
        if st.st_size != rec.size or digest != rec.sha256:
            return None
        files.append(rec.model_copy(update=_stamp(st)))
    return files


def _write_meta(entry_dir: Path, meta: EntryMeta) -> None:
    """Write ``meta.json`` durably, replacing any old one in a single rename."""
    write_atomic(entry_dir / "meta.json", meta.model_dump_json(indent=1), durable=True)


def _reusable(
    entry_dir: Path, key: str, is_fresh: Callable[[EntryMeta], bool] | None, *, rehash: bool
) -> EntryMeta | None:
    """The entry's sidecar if its payload can be staged from, else None (rebuild).

    A payload whose files all keep their recorded stat is trusted unread. Otherwise, and
    only with ``rehash`` (the caller holds the exclusive lock), the changed files are
    hashed again: when every byte is as recorded the entry stands and the new stat is
    recorded, so the next reuse is cheap again.
    """
    try:
        meta = EntryMeta.model_validate_json((entry_dir / "meta.json").read_bytes())
    except (OSError, ValidationError, ValueError):
        return None
    if meta.version != META_VERSION or meta.key != key or not meta.files:
        return None
    if is_fresh is not None and not is_fresh(meta):
        return None
    files = _verified(entry_dir / "payload", meta, rehash=rehash)
    if files is None:
        return None
    if files != meta.files:
        meta = meta.model_copy(update={"files": files})
        _write_meta(entry_dir, meta)
    return meta


def _flock(fd: int, op: int, deadline: float | None) -> None:
    if deadline is None:
        fcntl.flock(fd, op)
        return
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
        if time.monotonic() >= deadline:
            raise LockTimeout("timed out waiting for another process building the same cache entry")
        time.sleep(0.02)


def remove_tree(path: Path) -> None:
    """Remove a file or tree even when its directories are read-only (staged dirs are 0o555)."""
    try:
        os.rmdir(path)  # the common case of a quick unit: an empty folder, one system call
        return
    except OSError:
        pass
    if path.is_symlink() or not path.is_dir():
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    _remove_folder(path)


#: how a folder is opened to be walked: never through a link
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _remove_folder(path: Path) -> None:
    """Remove a folder and all it holds, one folder open at a time and without recursion: an
    agent's work folder may be thousands of levels deep (too deep for a recursive walk, its
    paths too long to name). Links are removed, never followed. Each folder is made writable
    and readable first (staged ones are read-only, an agent may have locked its own)."""
    os.chmod(path, 0o700)
    fd = os.open(path, FOLDER_FLAGS)
    try:
        left: list[tuple[str, list[str]]] = []  # per open level: its name, its parent's folders to go
        folders = _empty_of_files(fd)
        while True:
            if folders:
                name = folders.pop()
                os.chmod(name, 0o700, dir_fd=fd)  # a folder, as listed: no link to follow
                child = os.open(name, FOLDER_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
                left.append((name, folders))
                folders = _empty_of_files(fd)
                continue
            if not left:
                break
            name, folders = left.pop()
            parent = os.open("..", FOLDER_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir(name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(path)


def _empty_of_files(fd: int) -> list[str]:
    """Unlink everything but folders in the folder open as ``fd``; the names of its folders."""
    folders = []
    with os.scandir(fd) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.name)
            else:
                os.unlink(entry.name, dir_fd=fd)
    return folders


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: beyond any process id
        return False
    except PermissionError:
        return True
    return True


def left_by_gone_processes(folder: Path, owner: Callable[[str], int | None]) -> list[Path]:
    """The entries of ``folder`` whose name ``owner`` maps to the id of a process that no
    longer runs on this host; [] when the folder cannot be listed."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    here = os.getpid()
    return [folder / name for name in names if (pid := owner(name)) is not None and pid != here and not pid_alive(pid)]


def _sweep_scratch(tmp_root: Path, h: str) -> None:
    """Drop scratch dirs of this key left by dead processes (called under the exclusive lock)."""
    now = time.time()
    for stale in tmp_root.glob(f"{h}.*"):
        parts = stale.name.split(".")
        pid = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else -1
        try:
            old = now - stale.lstat().st_mtime > _STALE_TMP_SECONDS
        except OSError:
            continue
        if pid == -1 or old or not pid_alive(pid):
            with contextlib.suppress(OSError):
                remove_tree(stale)


def _commit(root: Path, h: str, key: str, uri: str, name: str, build: Callable[[Path], Payload]) -> EntryMeta:
    """Build an entry in scratch space, fsync it, and rename it into ``entries/``."""
    tmp_root = root / "tmp"
    _sweep_scratch(tmp_root, h)
    scratch = tmp_root / f"{h}.{os.getpid()}.{secrets.token_hex(6)}"
    scratch.mkdir()
    try:
        payload = build(scratch / "payload")
        fields = payload.model_dump()
        fields["name"] = fields["name"] or name
        # The builder's chmod came last: from here on the payload's ctime stays put.
        fields["files"] = [
            StoredFile(**rec.model_dump(), **_stamp((scratch / "payload" / rec.path).lstat())) for rec in payload.files
        ]
        meta = EntryMeta(key=key, uri=uri, created_at=time.time(), **fields)
        _write_meta(scratch, meta)
        if meta.kind == "directory":
            for dirpath, _, _ in os.walk(scratch / "payload"):
                fsync_dir(Path(dirpath))
        fsync_dir(scratch)
        entry = root / "entries" / h
        if entry.exists() or entry.is_symlink():
            old = tmp_root / f"{h}.old.{secrets.token_hex(6)}"
            os.rename(entry, old)
            remove_tree(old)
        os.rename(scratch, entry)
        fsync_dir(entry.parent)
        return meta
    except BaseException:
        with contextlib.suppress(OSError):
            remove_tree(scratch)
        raise


@contextlib.contextmanager
def open_entry(
    root: Path,
    key: str,
    uri: str,
    build: Callable[[Path], Payload],
    *,
    name: str,
    is_fresh: Callable[[EntryMeta], bool] | None = None,
    deadline: float | None = None,
) -> Iterator[tuple[CacheEntry, bool]]:
    """Yield ``(entry, from_cache)`` for ``key``, building it once across processes.

    ``build(dest)`` writes the payload at ``dest`` (a file or a directory; ``dest.parent``
    is private scratch space) and returns its ``Payload``; it runs only when no valid entry
    exists, under the key's exclusive lock; ``name`` is the staged basename unless the
    payload reports its own (kept in the sidecar, so hits need no resolver). An entry whose
    files changed stat since they were hashed is hashed again first (``_reusable``);
    ``is_fresh`` can reject an otherwise intact entry (a local source that changed). The
    entry stays valid (shared lock) until the block exits. ``deadline`` (time.monotonic)
    bounds lock waits: ``LockTimeout``.
    """
    for sub in ("entries", "locks", "tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    h = key_hash(key)
    entry_dir = root / "entries" / h
    fd = os.open(root / "locks" / f"{h}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _flock(fd, fcntl.LOCK_SH, deadline)
        meta = _reusable(entry_dir, key, is_fresh, rehash=False)
        from_cache = meta is not None
        if meta is None:
            # Upgrading drops the shared lock first; whoever wins re-hashes or rebuilds, the
            # rest re-check and find a valid entry with its stat recorded afresh.
            _flock(fd, fcntl.LOCK_EX, deadline)
            meta = _reusable(entry_dir, key, is_fresh, rehash=True)
            from_cache = meta is not None
            if meta is None:
                meta = _commit(root, h, key, uri, name, build)
            _flock(fd, fcntl.LOCK_SH, None)  # downgrade: keep the entry while staging from it
        yield CacheEntry(entry_dir, meta), from_cache
    finally:
        os.close(fd)  # releases the flock
