"""A chunked session's checkpoint: its work folder (the program's state in it) as one tar,
written by the trusted side after each chunk and unpacked into a fresh work folder when the
unit resumes on another node.

The folder was writable by the agent, so both ways are guarded: packing takes regular
files and folders only (no links, devices or pipes) up to a size cap, and unpacking treats
the tar as untrusted input (each name contained in its folder, regular files and folders
only, the same cap), extracting member by member, never with ``extractall``.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import re
import stat
import tarfile
from collections.abc import Callable, Collection
from pathlib import Path, PurePosixPath
from typing import IO, Annotated, Any, BinaryIO
from urllib.parse import quote

from pyarrow.fs import FileSelector
from pydantic import BaseModel, Field, StringConstraints

from .._json import json_fallback
from ..data.cache import FOLDER_FLAGS, remove_tree
from ..errors import RayevalError
from ..filesystem import resolve_root
from ..gateway.server import ModelUsage, SessionReport
from ..secrets import redact

#: What a checkpoint may hold in all (file bytes), by default.
DEFAULT_CHECKPOINT_BYTES = 256 << 20
#: At most this many entries: a tar of empty files costs its reader too.
MAX_CHECKPOINT_ENTRIES = 100_000
_COPY_BYTES = 1 << 20
#: The largest checkpoint record read back (the gateway's transcript of the calls so far).
MAX_RECORD_BYTES = 256 << 20
#: The folder of the work folder the unit's data is staged in: staged again on resume, not saved.
STAGED_DATA_FOLDER = "data"


class CheckpointError(RayevalError):
    """A checkpoint that is too large, or whose tar is not one this module writes."""


def pack(
    folder: Path, out: BinaryIO, *, leave_out: Collection[str] = (), max_bytes: int = DEFAULT_CHECKPOINT_BYTES
) -> int:
    """Write ``folder`` (but its top-level entries named in ``leave_out``) to ``out`` as a tar
    stream; the bytes of file data packed. Links, devices and pipes are left out; past
    ``max_bytes`` or :data:`MAX_CHECKPOINT_ENTRIES`, :class:`CheckpointError`.

    The agent's processes may still run, and change the folder as it is packed: it is walked
    one folder open at a time, each opened by its name in the folder above (never by a path,
    whose parts a link swapped in would lead out of it), without recursion (at any depth)."""
    budget = _Budget(max_bytes)
    with tarfile.open(fileobj=out, mode="w|") as tar:
        _pack_tree(tar, folder, leave_out, budget)
    return budget.used


def unpack(
    source: BinaryIO, into: Path, *, leave_out: Collection[str] = (), max_bytes: int = DEFAULT_CHECKPOINT_BYTES
) -> int:
    """Extract a tar stream written by :func:`pack` (but read as untrusted) into the folder
    ``into``; the bytes of file data extracted. A member of another kind, or a path outside
    ``into``, through a link or under a top-level name in ``leave_out`` (which pack left
    out), or past the caps, raises :class:`CheckpointError`."""
    budget = _Budget(max_bytes)
    checked = {into}  # folders known to be no link: each path is looked at once, however deep
    try:
        with tarfile.open(fileobj=source, mode="r|") as tar:
            for member in tar:
                target = _target_of(member, into, checked)
                if target.relative_to(into).parts[0] in leave_out:
                    raise CheckpointError(f"the checkpoint holds {member.name!r}, which is left out of it")
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

    def count_listed(self, listed: int) -> None:
        """Refuse a folder listing more entries than are left, before they are packed."""
        if self.entries + listed > MAX_CHECKPOINT_ENTRIES:
            raise CheckpointError(f"the checkpoint holds more than {MAX_CHECKPOINT_ENTRIES} entries")

    def take(self, size: int) -> None:
        self.used += size
        self.entries += 1
        if self.used > self.max_bytes:
            raise CheckpointError(f"the checkpoint holds more than {self.max_bytes} bytes")
        if self.entries > MAX_CHECKPOINT_ENTRIES:
            raise CheckpointError(f"the checkpoint holds more than {MAX_CHECKPOINT_ENTRIES} entries")


_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: what opening a name without following it says when the entry listed is now a link, another
#: kind of file, or gone: it is left out, as it would have been when listed so
_NOT_PACKED = frozenset({errno.ELOOP, errno.ENOTDIR, errno.ENXIO, errno.ENOENT})


def _pack_tree(tar: tarfile.TarFile, folder: Path, leave_out: Collection[str], budget: _Budget) -> None:
    """Pack ``folder`` depth first, one folder open at a time: going down by a folder's name,
    up by ``..``, checked to be the folder it came from (else the agent moved it meanwhile, and
    what is above it is not known to be inside ``folder``)."""
    fd = os.open(folder, FOLDER_FLAGS)
    try:
        above: list[tuple[str, list[str], tuple[int, int]]] = []  # per level: its prefix, folders to go, identity
        prefix = ""
        folders = _pack_folder(tar, fd, prefix, leave_out, budget)
        while True:
            if folders:
                name = folders.pop()
                child = _open_at(name, fd, FOLDER_FLAGS)
                if child is None:
                    continue
                above.append((prefix, folders, _identity(fd)))
                os.close(fd)
                fd, prefix = child, f"{prefix}{name}/"
                folders = _pack_folder(tar, fd, prefix, (), budget)
                continue
            if not above:
                return
            came_from = prefix
            prefix, folders, identity = above.pop()
            parent = os.open("..", FOLDER_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            if _identity(fd) != identity:
                raise CheckpointError(f"the work folder's {came_from!r} was moved while it was packed")
    finally:
        os.close(fd)


def _pack_folder(tar: tarfile.TarFile, fd: int, prefix: str, leave_out: Collection[str], budget: _Budget) -> list[str]:
    """Pack the folders (as entries) and regular files (with their data) in the folder open as
    ``fd``, named ``prefix`` in the tar, in name order, but those in ``leave_out``; the names of
    its folders, in the order to go down into them (popped from the end)."""
    folders, files = [], []
    with os.scandir(fd) as listing:
        for entry in listing:
            if entry.name in leave_out:
                continue
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.name)
            elif entry.is_file(follow_symlinks=False):
                files.append(entry.name)
            budget.count_listed(len(folders) + len(files))
    folders.sort()
    for name in folders:
        info = tarfile.TarInfo(prefix + name)
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        budget.take(0)
        tar.addfile(info)
    for name in sorted(files):
        _pack_file(tar, fd, name, prefix + name, budget)
    folders.reverse()
    return folders


def _pack_file(tar: tarfile.TarFile, folder_fd: int, name: str, tar_name: str, budget: _Budget) -> None:
    """Add the regular file ``name`` of the folder open as ``folder_fd``, opened without
    following a link swapped in since the listing, with only its name, size, mode and time."""
    fd = _open_at(name, folder_fd, _FILE_FLAGS)
    if fd is None:
        return
    with os.fdopen(fd, "rb") as file:
        info_of_file = os.fstat(file.fileno())
        if not stat.S_ISREG(info_of_file.st_mode):
            return
        budget.take(info_of_file.st_size)
        info = tarfile.TarInfo(tar_name)
        info.size, info.mode, info.mtime = info_of_file.st_size, info_of_file.st_mode & 0o755, info_of_file.st_mtime
        tar.addfile(info, file)


def _open_at(name: str, folder_fd: int, flags: int) -> int | None:
    """``name`` in the folder open as ``folder_fd`` opened with ``flags`` (never following a
    link), or None when it is no longer what was listed (see :data:`_NOT_PACKED`)."""
    try:
        return os.open(name, flags, dir_fd=folder_fd)
    except OSError as exc:
        if exc.errno in _NOT_PACKED:
            return None
        raise


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def _target_of(member: tarfile.TarInfo, into: Path, checked: set[Path]) -> Path:
    """Where ``member`` goes: a plain relative path under ``into``, through no link (``checked``:
    the folders under ``into`` known to be none, which this adds to)."""
    if not (member.isfile() or member.isdir()):
        raise CheckpointError(f"the checkpoint's {member.name!r} is neither a file nor a folder")
    parts = PurePosixPath(member.name).parts
    if not parts or member.name.startswith("/") or ".." in parts:
        raise CheckpointError(f"the checkpoint's {member.name!r} is outside its folder")
    target = into.joinpath(*parts)
    looked_at: list[Path] = []
    for path in itertools.chain((target,), target.parents):  # up to the nearest folder known
        if path in checked:
            checked.update(looked_at if member.isdir() else looked_at[1:])  # the folders among them
            return target
        if path.is_symlink():  # none is unpacked, but the folder may hold some
            raise CheckpointError(f"the checkpoint's {path} is a link")
        looked_at.append(path)
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
#: agent's chunk report; anything else is dropped (one starting with ``-`` too: it goes back on
#: the program's command line).
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")
_CHUNK_RECORD = re.compile(r"chunk-([0-9]{1,9})\.json")
_CHUNK_FILE = re.compile(r"chunk-([0-9]{1,9})\.(?:json|tar)")


class SavedChunk(BaseModel):
    """A checkpoint's record, ``chunk-<n>.json``, written by the trusted side beside its tar:
    the gateway's counts of the unit's calls so far and their transcript, the turns its
    session reported (at most one a model call), and the tar's size (a shorter tar was cut)."""

    chunk: int = Field(ge=1)
    #: the run's attempt at the unit that saved it
    attempt: int = Field(ge=1)
    session_id: Annotated[str, StringConstraints(pattern=_SESSION_ID.pattern)] | None
    counted: ModelUsage
    calls: list[dict[str, Any]]
    turns: int = Field(ge=0)
    tar_bytes: int = Field(ge=0)


def unit_checkpoints(sessions_root: str, eval_id: str, model: str | None, seed: int | None) -> str:
    """The folder of a unit's checkpoints under a run's ``sessions_root``, named after the unit
    (its eval, model and seed: the same for each attempt at it)."""
    unit = f"{eval_id}__{model or 'nomodel'}__s{seed if seed is not None else 'x'}"
    return f"{sessions_root.rstrip('/')}/{quote(unit, safe='')}"


def remove_checkpoints(folder: str, s3_endpoint_url: str | None = None) -> None:
    """Remove a unit's checkpoints ``folder``, best effort: one left behind costs only room."""
    filesystem, base = resolve_root(folder, s3_endpoint_url)
    with contextlib.suppress(OSError):
        filesystem.delete_dir(base)


class ChunkCheckpoints:
    """A unit's checkpoints in ``folder`` (a local folder or ``s3://...``), as its
    ``attempt`` sees them. The attempt goes on from the newest complete one or starts afresh
    (:meth:`start`); then, each time its session reports a chunk done, it saves
    ``chunk-<n>.tar`` (the work folder but its staged data) and, after it, ``chunk-<n>.json``
    (:class:`SavedChunk`, from ``report``: the gateway's word, never the agent's; of the
    agent's report only the session id, checked, and its turns, at most one a model call, are
    kept). A report with no model call since the last checkpoint saves nothing (an agent
    cannot fill the results root by reporting again and again), and a chunk saved removes
    the ones before it: the folder holds the newest whole checkpoint, and the next while it
    is written. A failure to save is noted and the unit goes on without it."""

    def __init__(
        self,
        folder: str,
        work_dir: Path,
        *,
        attempt: int = 1,
        s3_endpoint_url: str | None = None,
        max_bytes: int = DEFAULT_CHECKPOINT_BYTES,
    ):
        self.filesystem, self.base = resolve_root(folder, s3_endpoint_url)
        self.work_dir = work_dir
        self.attempt = attempt
        self.max_bytes = max_bytes
        #: the unit's gateway session's report, once it is open
        self.report: Callable[[], SessionReport] | None = None
        self.resumed: SavedChunk | None = None
        self.saved = 0
        self.saved_calls = 0
        self.turns = 0
        self.problem: str | None = None
        #: the highest chunk number in the folder as the attempt started (None: unknown, the
        #: listing failed), which its own chunks are numbered after
        self.last_listed: int | None = None

    def start(self, from_any_checkpoint: bool = False) -> SavedChunk | None:
        """Where this attempt starts: from the newest whole checkpoint it may go on from, its
        tar unpacked as untrusted input into the work folder (which must be empty), or None
        (afresh). It may go on from a checkpoint of its own (Ray ran the attempt again after
        its node was lost) or, with ``from_any_checkpoint`` (the attempt before was lost or
        could not run), any attempt's; one that cannot be read is passed over for the next
        newest. Afresh, the earlier attempts' checkpoints are removed, but for a storage
        error (a listing or a read that failed, perhaps for a moment): then they are kept, and
        this attempt's own are numbered after them, so that the newest is the highest."""
        try:
            sizes = self._listing()
        except OSError as exc:
            self._note(f"checkpoints not listed: {type(exc).__name__}: {exc}; started afresh, none removed")
            return None
        chunks = sorted(_chunk_numbers(sizes), reverse=True)
        self.last_listed = max(chunks, default=0)
        storage_failed = False
        for chunk in chunks:
            try:
                saved = self._whole(chunk, sizes)
                if saved is None:
                    continue
                if not (saved.attempt == self.attempt or from_any_checkpoint):
                    break
                with self.filesystem.open_input_stream(f"{self.base}/chunk-{chunk}.tar") as source:
                    unpack(source, self.work_dir, leave_out={STAGED_DATA_FOLDER}, max_bytes=self.max_bytes)
            except (CheckpointError, OSError) as exc:
                storage_failed = storage_failed or isinstance(exc, OSError)
                self._note(f"chunk {chunk} not resumed from: {type(exc).__name__}: {exc}")
                remove_tree(self.work_dir)
                self.work_dir.mkdir()
                continue
            self.resumed = saved
            self.saved, self.saved_calls, self.turns = saved.chunk, saved.counted.n_model_calls, saved.turns
            return saved
        if storage_failed:
            self._note("started afresh, none removed")
            return None
        with contextlib.suppress(OSError):  # else this attempt's chunks are numbered after those left
            self.filesystem.delete_dir_contents(self.base, missing_dir_ok=True)
            self.last_listed = 0
        return None

    def _listing(self) -> dict[str, int]:
        """The size of each file in the unit's checkpoint folder, by name (``OSError``: the
        storage could not list it)."""
        listed = self.filesystem.get_file_info(FileSelector(self.base, allow_not_found=True))
        return {PurePosixPath(info.path).name: info.size for info in listed}

    def _whole(self, chunk: int, sizes: dict[str, int]) -> SavedChunk | None:
        """Chunk ``chunk``'s record, if it reads and its tar has the size it records (else it
        was cut short); ``OSError`` when the storage could not read it."""
        with self.filesystem.open_input_stream(f"{self.base}/chunk-{chunk}.json") as record:
            text = record.read(MAX_RECORD_BYTES + 1)
        try:
            saved = SavedChunk.model_validate_json(text) if len(text) <= MAX_RECORD_BYTES else None
        except ValueError:
            return None
        if saved is None or saved.chunk != chunk or sizes.get(f"chunk-{chunk}.tar") != saved.tar_bytes:
            return None
        return saved

    def _note(self, problem: str) -> None:
        """Add ``problem`` to what the unit's row says went wrong with its checkpoints."""
        self.problem = problem if self.problem is None else f"{self.problem}; {problem}"

    def __call__(self, agent_report: bytes) -> None:
        """Save a chunk (see the class). Whatever fails is the row's ``problem``, never raised:
        the unit goes on without that checkpoint, and its session gets its answer."""
        if self.report is None:
            return
        try:
            self._save(self.report(), agent_report)
        except Exception as exc:  # noqa: BLE001 - the agent's folder and report may break anything here
            self.problem = f"chunk not saved: {type(exc).__name__}: {exc}"

    def _save(self, session: SessionReport, agent_report: bytes) -> None:
        calls = session.counted.n_model_calls
        if calls <= self.saved_calls:
            return
        claimed = _chunk_report(agent_report)
        turns = min(self.turns + claimed.get("turns", 0), calls)
        if self.last_listed is None:  # not listed at the start: listed now, else not saved
            self.last_listed = max(_chunk_numbers(self._listing()), default=0)
        chunk = max(self.saved, self.last_listed) + 1
        name = f"{self.base}/chunk-{chunk}"
        self.filesystem.create_dir(self.base, recursive=True)
        with self.filesystem.open_output_stream(f"{name}.tar") as out:
            pack(self.work_dir, out, leave_out={STAGED_DATA_FOLDER}, max_bytes=self.max_bytes)
        record = SavedChunk(
            chunk=chunk,
            attempt=self.attempt,
            session_id=claimed.get("session_id"),
            counted=session.counted,
            calls=redact(session.calls, [session.token]),  # the resumed unit's row masks only its own
            turns=turns,
            tar_bytes=self.filesystem.get_file_info(f"{name}.tar").size,
        )
        with self.filesystem.open_output_stream(f"{name}.json") as out:
            out.write(json.dumps(record.model_dump(mode="json"), default=json_fallback).encode())
        self.saved, self.saved_calls, self.turns = chunk, calls, turns
        self._remove_before(chunk)

    def _remove_before(self, chunk: int) -> None:
        """Remove the chunks numbered before ``chunk``, whose record is written (the newest
        whole one, which an attempt goes on from), whatever attempt saved them, each record
        before its tar. A failure is noted; the next chunk saved lists them again."""
        try:
            older = [name for name in self._listing() if (m := _CHUNK_FILE.fullmatch(name)) and int(m.group(1)) < chunk]
            for name in sorted(older, key=lambda name: name.endswith(".tar")):  # records first
                self.filesystem.delete_file(f"{self.base}/{name}")
        except OSError as exc:
            self.problem = f"chunks before {chunk} not removed: {type(exc).__name__}: {exc}"

    def metadata(self) -> dict[str, Any]:
        """What a unit's row says of its checkpoints."""
        resumed = {"resumed_from": self.resumed.chunk} if self.resumed is not None else {}
        return {"saved": self.saved, **resumed, **({"problem": self.problem} if self.problem else {})}


def _chunk_numbers(names: Collection[str]) -> list[int]:
    """The chunk numbers of the records among ``names``."""
    return [int(m.group(1)) for name in names if (m := _CHUNK_RECORD.fullmatch(name))]


def _chunk_report(agent_report: bytes) -> dict[str, Any]:
    """What is kept of the agent's chunk report: a well-formed session id, and its turns as a
    count (each capped by the caller)."""
    try:
        claimed = json.loads(agent_report)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return {}
    if not isinstance(claimed, dict):
        return {}
    kept: dict[str, Any] = {}
    session, turns = claimed.get("session_id"), claimed.get("turns")
    if isinstance(session, str) and _SESSION_ID.fullmatch(session):
        kept["session_id"] = session
    if type(turns) is int and turns > 0:
        kept["turns"] = turns
    return kept
