"""A chunked session's checkpoint: its work folder (the program's state in it) as one tar,
written by the trusted side after each chunk and unpacked into a fresh work folder when the
unit resumes on another node.

The folder was writable by the agent, so both ways are guarded: packing takes regular
files and folders only (no links, devices or pipes) up to a size cap, and unpacking treats
the tar as untrusted input (each name contained in its folder, regular files and folders
only, the same cap), extracting member by member, never with ``extractall``.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tarfile
from collections.abc import Callable, Collection
from pathlib import Path, PurePosixPath
from typing import IO, Any, BinaryIO

from .._json import json_fallback
from ..errors import RayevalError
from ..filesystem import resolve_root
from ..gateway.server import SessionReport

#: What a checkpoint may hold in all (file bytes), by default.
DEFAULT_CHECKPOINT_BYTES = 256 << 20
#: At most this many entries: a tar of empty files costs its reader too.
MAX_CHECKPOINT_ENTRIES = 100_000
_COPY_BYTES = 1 << 20
#: The folder of the work folder the unit's data is staged in: staged again on resume, not saved.
STAGED_DATA_FOLDER = "data"


class CheckpointError(RayevalError):
    """A checkpoint that is too large, or whose tar is not one this module writes."""


def pack(
    folder: Path, out: BinaryIO, *, leave_out: Collection[str] = (), max_bytes: int = DEFAULT_CHECKPOINT_BYTES
) -> int:
    """Write ``folder`` (but its top-level entries named in ``leave_out``) to ``out`` as a tar
    stream; the bytes of file data packed. Links, devices and pipes are left out; past
    ``max_bytes`` or :data:`MAX_CHECKPOINT_ENTRIES`, :class:`CheckpointError`."""
    budget = _Budget(max_bytes)
    with tarfile.open(fileobj=out, mode="w|") as tar:
        for path, relative in _regular_entries(folder, leave_out):
            _pack_entry(tar, path, relative, budget)
    return budget.used


def unpack(source: BinaryIO, into: Path, *, max_bytes: int = DEFAULT_CHECKPOINT_BYTES) -> int:
    """Extract a tar stream written by :func:`pack` (but read as untrusted) into the folder
    ``into``; the bytes of file data extracted. A member of another kind, or a path outside
    ``into`` or through a link, or past the caps, raises :class:`CheckpointError`."""
    budget = _Budget(max_bytes)
    try:
        with tarfile.open(fileobj=source, mode="r|") as tar:
            for member in tar:
                target = _target_of(member, into)
                budget.take(member.size if member.isfile() else 0)
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                data = tar.extractfile(member)
                assert data is not None  # a regular file's member always has data
                _copy_new_file(data, target, member.size)
    except tarfile.TarError as exc:
        raise CheckpointError(f"the checkpoint is no readable tar: {exc}") from exc
    return budget.used


class _Budget:
    """The bytes and entries a checkpoint has left."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.used = 0
        self.entries = 0

    def take(self, size: int) -> None:
        self.used += size
        self.entries += 1
        if self.used > self.max_bytes:
            raise CheckpointError(f"the checkpoint holds more than {self.max_bytes} bytes")
        if self.entries > MAX_CHECKPOINT_ENTRIES:
            raise CheckpointError(f"the checkpoint holds more than {MAX_CHECKPOINT_ENTRIES} entries")


def _regular_entries(folder: Path, leave_out: Collection[str]) -> list[tuple[Path, str]]:
    """The folders and regular files under ``folder`` (but its top-level ``leave_out``), as
    their paths and names relative to it, links not followed and anything else left out, in
    a stable order."""
    entries: list[tuple[Path, str]] = []
    for parent, dirs, files in os.walk(folder, followlinks=False):
        if Path(parent) == folder:
            dirs[:] = [name for name in dirs if name not in leave_out]
            files = [name for name in files if name not in leave_out]
        dirs.sort()
        for name in [*dirs, *sorted(files)]:
            path = Path(parent, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
                entries.append((path, path.relative_to(folder).as_posix()))
    return entries


def _pack_entry(tar: tarfile.TarFile, path: Path, name: str, budget: _Budget) -> None:
    """Add one folder or regular file, opened without following a link swapped in since the
    walk, with only its name, kind, size, mode and time (no owner)."""
    if stat.S_ISDIR(os.lstat(path).st_mode):
        info = tarfile.TarInfo(name)
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        budget.take(0)
        tar.addfile(info)
        return
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as file:
        info_of_file = os.fstat(file.fileno())
        if not stat.S_ISREG(info_of_file.st_mode):
            return
        budget.take(info_of_file.st_size)
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = info_of_file.st_size, info_of_file.st_mode & 0o755, info_of_file.st_mtime
        tar.addfile(info, file)


def _target_of(member: tarfile.TarInfo, into: Path) -> Path:
    """Where ``member`` goes: a plain relative path under ``into``, through no link."""
    if not (member.isfile() or member.isdir()):
        raise CheckpointError(f"the checkpoint's {member.name!r} is neither a file nor a folder")
    parts = PurePosixPath(member.name).parts
    if not parts or member.name.startswith("/") or ".." in parts:
        raise CheckpointError(f"the checkpoint's {member.name!r} is outside its folder")
    target = into.joinpath(*parts)
    for path in (target, *target.parents):
        if path == into:
            return target
        if path.is_symlink():  # none is unpacked, but the folder may hold some
            raise CheckpointError(f"the checkpoint's {path} is a link")
    raise CheckpointError(f"the checkpoint's {member.name!r} is outside its folder")


def _copy_new_file(data: IO[bytes], target: Path, size: int) -> None:
    """Write ``size`` bytes of ``data`` to a new file ``target`` (a file of the tar named twice,
    or one there already, is refused)."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError as exc:
        raise CheckpointError(f"the checkpoint names {target} twice") from exc
    with os.fdopen(fd, "wb") as out:
        left = size
        while left > 0:
            block = data.read(min(left, _COPY_BYTES))
            if not block:
                raise CheckpointError("the checkpoint's tar ends mid-file")
            out.write(block)
            left -= len(block)


# ------------------------------------------------------------------------- saved after each chunk
#: A session id as a program names it (Claude Code: a UUID, pi: its own): what is kept of the
#: agent's chunk report; anything else is dropped.
_SESSION_ID = re.compile(r"[A-Za-z0-9._:-]{1,200}")


class ChunkCheckpoints:
    """Saves a unit's checkpoint to ``folder`` (a local folder or ``s3://...``) each time its
    session reports a chunk done: ``chunk-<n>.tar`` (the work folder but its staged data)
    and, after it, ``chunk-<n>.json``: the gateway's counts of the unit's calls so far and
    its transcript (``report``), never the agent's word; of the agent's report only the
    session id is kept, checked. A report with no model call since the last checkpoint saves
    nothing (an agent cannot fill the results root by reporting again and again). A failure
    to save is noted and the unit goes on without it."""

    def __init__(
        self,
        folder: str,
        work_dir: Path,
        report: Callable[[], SessionReport],
        *,
        s3_endpoint_url: str | None = None,
        max_bytes: int = DEFAULT_CHECKPOINT_BYTES,
    ):
        self.filesystem, self.base = resolve_root(folder, s3_endpoint_url)
        self.work_dir = work_dir
        self.report = report
        self.max_bytes = max_bytes
        self.saved = 0
        self.saved_calls = 0
        self.problem: str | None = None

    def __call__(self, agent_report: bytes) -> None:
        session = self.report()
        if session.counted.n_model_calls <= self.saved_calls:
            return
        name = f"{self.base}/chunk-{self.saved + 1}"
        try:
            self.filesystem.create_dir(self.base, recursive=True)
            with self.filesystem.open_output_stream(f"{name}.tar") as out:
                pack(self.work_dir, out, leave_out={STAGED_DATA_FOLDER}, max_bytes=self.max_bytes)
            record = {
                "chunk": self.saved + 1,
                "session_id": _session_id(agent_report),
                "counted": session.counted.model_dump(mode="json"),
                "calls": session.calls,
            }
            with self.filesystem.open_output_stream(f"{name}.json") as out:
                out.write(json.dumps(record, default=json_fallback).encode())
        except (CheckpointError, OSError) as exc:
            self.problem = f"chunk {self.saved + 1} not saved: {type(exc).__name__}: {exc}"
            return
        self.saved += 1
        self.saved_calls = session.counted.n_model_calls

    def metadata(self) -> dict[str, Any]:
        """What a unit's row says of its checkpoints."""
        return {"saved": self.saved, **({"problem": self.problem} if self.problem else {})}


def _session_id(agent_report: bytes) -> str | None:
    try:
        claimed = json.loads(agent_report).get("session_id")
    except (ValueError, AttributeError):
        return None
    return claimed if isinstance(claimed, str) and _SESSION_ID.fullmatch(claimed) else None
