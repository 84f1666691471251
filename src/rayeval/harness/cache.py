"""Node-local content cache shared by every process staging data on this machine.

Many Ray workers stage the same nodes at once, so the cache must download each URI once
and never expose a half-written entry. Layout under the cache root::

    entries/<h>/meta.json   sidecar: key, kind, size, sha256, per-file records, source
    entries/<h>/payload     the file, or the directory tree, exactly as fetched
    locks/<h>.lock          flock target for the entry (never deleted)
    tmp/<h>.<pid>.<token>/  scratch for an entry being built; renamed to entries/<h>

``<h>`` is the first 32 hex digits of sha256(key); the key is the exact URI (local paths:
``file://`` + absolute path). An entry appears only by renaming a fully written and
fsynced scratch dir, so readers see either nothing or a complete entry. Builders hold an
exclusive lock on the key; readers hold a shared one while they link/copy from it, so a
stale entry is never replaced under a reader. Payload files are read-only (0o444) because
staging hard-links them into work dirs.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError, computed_field

CACHE_ENV = "RAYEVAL_CACHE_DIR"
META_VERSION = 1
CHUNK = 1 << 20
_STALE_TMP_SECONDS = 24 * 3600

Kind = Literal["file", "directory"]


class LockTimeout(TimeoutError):
    """Another process held the entry's lock until the deadline passed."""


class FileRecord(BaseModel):
    """One payload file: ``path`` is POSIX-relative to the payload ('' for a single file)."""

    path: str
    size: int
    sha256: str
    mtime_ns: int


class Payload(BaseModel):
    """What a builder wrote into the payload path."""

    kind: Kind
    files: list[FileRecord]
    #: Basename reported by the source (a resolver); None: the one derived from the URI.
    name: str | None = None
    #: For local sources: (relative path, size, mtime_ns) of the source at copy time.
    source: list[tuple[str, int, int]] | None = None

    @computed_field
    @property
    def size_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @computed_field
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
    files: list[FileRecord]
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
    return FileRecord(path=rel, size=size, sha256=h.hexdigest(), mtime_ns=dest.stat().st_mtime_ns)


def list_tree(root: Path) -> tuple[list[str], list[tuple[str, Path, os.stat_result]]]:
    """Directories and regular files under ``root`` (symlinks followed, cycles cut), sorted.

    Returns (POSIX relative dirs, [(POSIX relative path, absolute path, stat)]).
    Unreadable directories raise; dangling symlinks and special files are skipped.
    """
    seen: set[tuple[int, int]] = set()
    dirs: list[str] = []
    files: list[tuple[str, Path, os.stat_result]] = []

    def fail(exc: OSError) -> None:
        raise exc

    for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=fail):
        st = os.stat(dirpath)
        if (st.st_dev, st.st_ino) in seen:
            dirnames[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
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


def walk_files(root: Path) -> list[tuple[str, Path, os.stat_result]]:
    """Regular files under ``root`` as (relative path, absolute path, stat), in path order."""
    return list_tree(root)[1]


def _payload_matches(payload: Path, meta: EntryMeta) -> bool:
    """Cheap integrity check on reuse: every recorded file present with its size and mtime."""
    try:
        if meta.kind == "file":
            st = payload.lstat()
            rec = meta.files[0]
            return stat.S_ISREG(st.st_mode) and st.st_size == rec.size and st.st_mtime_ns == rec.mtime_ns
        if not payload.is_dir() or payload.is_symlink():
            return False
        present = {rel: st for rel, _, st in walk_files(payload)}
    except (OSError, IndexError):
        return False
    if len(present) != len(meta.files):
        return False
    for rec in meta.files:
        st = present.get(rec.path)
        if st is None or st.st_size != rec.size or st.st_mtime_ns != rec.mtime_ns:
            return False
    return True


def _load_valid(entry_dir: Path, key: str, is_fresh: Callable[[EntryMeta], bool] | None) -> EntryMeta | None:
    try:
        meta = EntryMeta.model_validate_json((entry_dir / "meta.json").read_bytes())
    except (OSError, ValidationError, ValueError):
        return None
    if meta.version != META_VERSION or meta.key != key or not meta.files:
        return None
    if not _payload_matches(entry_dir / "payload", meta):
        return None
    if is_fresh is not None and not is_fresh(meta):
        return None
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


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_tree(path: Path) -> None:
    """Remove a file or tree even when its directories are read-only (staged dirs are 0o555)."""
    try:
        os.rmdir(path)  # the common case of a quick unit: an empty folder, one system call
        return
    except OSError:
        pass
    if path.is_symlink() or path.is_file():
        path.unlink()
        return
    if not path.exists():
        return
    for dirpath, _, _ in os.walk(path):
        os.chmod(dirpath, 0o755)
    shutil.rmtree(path)


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
        meta = EntryMeta(key=key, uri=uri, created_at=time.time(), **fields)
        with open(scratch / "meta.json", "w", encoding="utf-8") as fh:
            fh.write(meta.model_dump_json(indent=1))
            fh.flush()
            os.fsync(fh.fileno())
        if meta.kind == "directory":
            for dirpath, _, _ in os.walk(scratch / "payload"):
                _fsync_dir(Path(dirpath))
        _fsync_dir(scratch)
        entry = root / "entries" / h
        if entry.exists() or entry.is_symlink():
            old = tmp_root / f"{h}.old.{secrets.token_hex(6)}"
            os.rename(entry, old)
            remove_tree(old)
        os.rename(scratch, entry)
        _fsync_dir(entry.parent)
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
    payload reports its own (kept in the sidecar, so hits need no resolver). ``is_fresh`` can reject an otherwise intact
    entry (a local source that changed). The entry stays valid (shared lock) until the
    block exits. ``deadline`` (time.monotonic) bounds lock waits: ``LockTimeout``.
    """
    for sub in ("entries", "locks", "tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    h = key_hash(key)
    entry_dir = root / "entries" / h
    fd = os.open(root / "locks" / f"{h}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _flock(fd, fcntl.LOCK_SH, deadline)
        meta = _load_valid(entry_dir, key, is_fresh)
        from_cache = meta is not None
        if meta is None:
            # Upgrading drops the shared lock first; whoever wins builds, the rest re-check.
            _flock(fd, fcntl.LOCK_EX, deadline)
            meta = _load_valid(entry_dir, key, is_fresh)
            from_cache = meta is not None
            if meta is None:
                meta = _commit(root, h, key, uri, name, build)
            _flock(fd, fcntl.LOCK_SH, None)  # downgrade: keep the entry while staging from it
        yield CacheEntry(entry_dir, meta), from_cache
    finally:
        os.close(fd)  # releases the flock
