"""Write-ahead log for result rows: JSON lines on local disk, written before any Parquet.

Layout of one run's WAL folder (``<wal_dir>/<run_id>/`` or ``<root>/run_id=<id>/_wal/``)::

    <writer_id>.lock            held (flock) by the live writer for its whole life
    <writer_id>.jsonl           active segment: rows not yet sealed into a Parquet part
    <writer_id>.<n>.jsonl       closed segments: rows sealed into parts, some maybe not stored yet

Every ``append`` (one batch of rows) is written and fsynced before it returns: an acknowledged
row survives the death of the process and of the machine (one fsync per batch, not per row).
An append that fails (a full disk, an I/O error) is cut off again, so a segment holds whole
batches only.  When the writer seals its buffer into Parquet parts it
*rotates* the active segment into a closed one; closed segments are deleted once every part
made from them is stored, so the WAL stays small.  A WAL whose lock nobody holds belongs to a
dead writer: :func:`claim_orphans` hands its segments to recovery.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .._files import fsync_dir
from ..errors import RayevalError

log = logging.getLogger(__name__)

__all__ = ["OrphanLog", "WriteAheadLog", "WriterIdInUse", "check_writer_id", "claim_orphans", "read_lines"]

_WRITER_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
_SEGMENT_RE = re.compile(r"^(?P<writer>[A-Za-z0-9][A-Za-z0-9_-]*)(?:\.(?P<n>\d+))?\.jsonl$")


class WriterIdInUse(RayevalError, RuntimeError):
    """Another live writer holds the WAL lock of this writer id."""


def check_writer_id(writer_id: str) -> None:
    """Refuse an id other than letters, digits, ``_`` and ``-``: no dot (it separates segment
    numbers), no leading ``_``/``-``."""
    if not _WRITER_ID_RE.fullmatch(writer_id):
        raise ValueError(f"invalid writer id {writer_id!r}: use letters, digits, '_' and '-'")


def _segment_files(directory: Path, writer_id: str | None = None) -> dict[str, list[tuple[int, Path]]]:
    """writer id -> [(order, path)], closed segments by number, the active one last."""
    found: dict[str, list[tuple[int, Path]]] = {}
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return found
    for entry in entries:
        match = _SEGMENT_RE.match(entry.name)
        if not match or (writer_id is not None and match["writer"] != writer_id):
            continue
        order = int(match["n"]) if match["n"] is not None else 1 << 62
        found.setdefault(match["writer"], []).append((order, Path(entry.path)))
    for segments in found.values():
        segments.sort()
    return found


def try_lock(path: Path) -> int | None:
    """An fd holding an exclusive flock on ``path`` (created if missing), or None if held elsewhere."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise
    return fd


class WriteAheadLog:
    """The WAL of one live writer.  Not thread-safe: the owning RowWriter serializes calls."""

    def __init__(self, directory: str | Path, writer_id: str):
        check_writer_id(writer_id)
        self.directory = Path(directory)
        self.writer_id = writer_id
        self.lock_path = self.directory / f"{writer_id}.lock"
        self.active_path = self.directory / f"{writer_id}.jsonl"
        self._lock_fd: int | None = None
        for attempt in range(3):  # a concurrent recovery may remove an empty run folder under us
            self.directory.mkdir(parents=True, exist_ok=True)
            try:
                self._lock_fd = try_lock(self.lock_path)
                break
            except FileNotFoundError:
                if attempt == 2:
                    raise
        if self._lock_fd is None:
            raise WriterIdInUse(f"writer id {writer_id!r} is in use by a live writer ({self.lock_path})")
        existing = _segment_files(self.directory, writer_id).get(writer_id, [])
        if existing:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise FileExistsError(
                f"WAL of writer {writer_id!r} already holds unrecovered rows in {self.directory}; "
                "run ResultStore.recover first or use another writer id"
            )
        self._next_segment = 1
        self._fd: int | None = self._open_active()
        self._active_bytes = 0
        self.closed_segments: list[Path] = []

    def _open_active(self) -> int:
        """A new active segment, its name durable (an fsync of its rows alone does not make it so)."""
        fd = os.open(self.active_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fsync_dir(self.directory)
        return fd

    # -- writing ------------------------------------------------------------------------------
    def append(self, lines: list[bytes]) -> None:
        """Append JSON lines (UTF-8, no newline inside), then fsync: on return they are on disk.
        On an error (``OSError``) nothing of them stays in the segment, if it can be cut off."""
        if not lines:
            return
        if self._fd is None:
            raise OSError(errno.EBADF, f"the write-ahead log segment {self.active_path} is not open")
        data = memoryview(b"\n".join(lines) + b"\n")
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, data[written:])
            os.fsync(self._fd)
        except OSError:
            if written:
                self._cut(self._active_bytes)
            raise
        self._active_bytes += len(data)

    def _cut(self, size: int) -> None:
        """Truncate the active segment back to ``size`` bytes (a failed append's partial write)."""
        assert self._fd is not None
        try:
            os.ftruncate(self._fd, size)
        except OSError as exc:  # read back, its cut line is skipped as a truncated write
            log.warning("cannot cut a failed write off %s: %s", self.active_path, exc)

    def rotate(self) -> Path | None:
        """Close the active segment (if it holds anything) and start a new one.  On an error the
        rows stay where they are: in the active segment, or in the closed one if only the new
        active segment could not be made (then :meth:`append` fails until the WAL is closed)."""
        if self._active_bytes == 0:
            return None
        closed = self.directory / f"{self.writer_id}.{self._next_segment:06d}.jsonl"
        os.replace(self.active_path, closed)
        self._next_segment += 1
        self.closed_segments.append(closed)
        self._close_fd()
        self._active_bytes = 0
        self._fd = self._open_active()
        return closed

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def drop_closed(self) -> None:
        """Delete the closed segments (their rows are stored)."""
        for path in self.closed_segments:
            path.unlink(missing_ok=True)
        self.closed_segments = []

    @property
    def files(self) -> list[Path]:
        return [*self.closed_segments, self.active_path]

    def size_bytes(self) -> int:
        total = 0
        for path in self.files:
            try:
                total += path.stat().st_size
            except FileNotFoundError:
                pass
        return total

    def close(self, *, remove: bool) -> None:
        """``remove=True``: everything is stored, delete the WAL.  Otherwise keep it (on disk:
        every append was fsynced) for :func:`claim_orphans`.  The lock is released either way."""
        try:
            self._close_fd()
            if remove:
                self.drop_closed()
                for path in (self.active_path, self.lock_path):
                    path.unlink(missing_ok=True)
                remove_dir_if_empty(self.directory)
            else:  # every append is fsynced already
                fsync_dir(self.directory)
        finally:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None


# -- recovery ----------------------------------------------------------------------------------
@dataclass
class OrphanLog:
    """The WAL segments of a writer that is no longer alive, locked by us while we recover them."""

    writer_id: str
    directory: Path
    segments: list[Path]
    _lock_fd: int | None = field(default=None, repr=False)

    def lines(self) -> Iterator[str]:
        for path in self.segments:
            yield from read_lines(path)

    def remove(self) -> None:
        """Delete the segments and the lock file (rows are stored)."""
        for path in self.segments:
            path.unlink(missing_ok=True)
        (self.directory / f"{self.writer_id}.lock").unlink(missing_ok=True)

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def read_lines(path: Path) -> Iterator[str]:
    """Complete JSON lines of a segment.  A truncated or corrupt line (a write cut by SIGKILL) is
    skipped with a warning."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
            json.loads(text)
        except (UnicodeDecodeError, ValueError):
            log.warning("skipping unreadable WAL line %d of %s (%d bytes, truncated write?)", number, path, len(raw))
            continue
        yield text


def claim_orphans(directory: str | Path) -> list[OrphanLog]:
    """Lock and return the WALs in ``directory`` whose writers are gone (lock not held)."""
    directory = Path(directory)
    claimed: list[OrphanLog] = []
    for writer_id in sorted(_segment_files(directory)):
        try:
            fd = try_lock(directory / f"{writer_id}.lock")
        except FileNotFoundError:  # folder removed meanwhile
            continue
        if fd is None:
            continue  # a live writer
        # List again under the lock: a writer that just closed cleanly has deleted its files.
        segments = [path for _, path in _segment_files(directory, writer_id).get(writer_id, [])]
        orphan = OrphanLog(writer_id=writer_id, directory=directory, segments=segments, _lock_fd=fd)
        if not segments:
            orphan.remove()
            orphan.release()
            continue
        claimed.append(orphan)
    return claimed


def remove_dir_if_empty(directory: str | Path) -> None:
    try:
        Path(directory).rmdir()
    except OSError:
        pass
