"""ResultStore and RowWriter: result rows to hive-partitioned Parquet, safely and in batches.

The layout under a root (local folder or ``s3://bucket/prefix``) is :mod:`rayeval.storage.layout`'s:
run folders, parts, the manifest, the WAL (local roots; S3 roots keep their WAL under
~/.cache/rayeval/wal), the quarantine.  Partition columns live only in the path.  Names starting
with ``_`` or ``.`` are ignored by pyarrow/pandas dataset discovery, so the manifest, the WAL and
temporary files never reach a reader.  This module is the one that lists and reads the root.

Write path of one row: ``RowWriter.add`` -> WAL line (fsynced with its batch) -> in-memory buffer ->
(after ``flush_rows`` rows, ``flush_bytes`` of them or ``flush_seconds``) sealed into one
immutable part per model with a name that is never reused -> stored (local: temp file, fsync,
rename; S3: one PUT) -> the WAL segment holding those rows is deleted.  A failed part keeps its name and exact bytes and is
retried with backoff, so a retry (or a stale request that lands late) can only rewrite identical
content: no row is lost or stored twice.  A WAL that cannot be written, a full disk, or storing that
keeps failing beyond ``give_up_after_s`` make the writer give up (:class:`ResultsRootUnwritable`):
the run stops, every row acknowledged before is stored or in the WAL, and ``--resume`` finishes it.

Read path: the readers (:meth:`ResultStore.parts`, ``read_table``, ``stored_unit_ids``, the report)
check every part from its Parquet footer alone (no row is read for that; one ranged GET per part on
S3, in parallel) and leave out, with a logging warning naming the file and the problem, a part that
cannot be read (empty, truncated, not Parquet, a schema rayeval cannot read as rows) and a file that
is no part at all (``notes.txt``, ``part-x.csv``, a Parquet file outside ``run_id=*/model=*/``).  A
part whose footer is fine but whose data cannot be decoded is left out when it is read.  The units of
a left-out part count as not stored, so ``--resume`` runs them again.  Readers never modify the root;
:meth:`ResultStore.open_writer` (the write path, hence ``rayeval run --resume``) moves a run's
unreadable parts to ``run_id=<id>/_quarantine/`` (hidden from every reader, pandas included), keeping
their bytes for inspection; files that are no part are only warned about, never moved.  An error of
the storage itself (network, permissions, a disk) is not a corrupt part: it propagates, so that an
outage never makes a resume run every unit again.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import itertools
import json
import logging
import operator
import os
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pydantic_core
from pydantic import ValidationError

from .._backoff import doubled_s
from .._files import write_atomic
from .._messages import field_problems
from ..errors import RayevalError
from ..filesystem import is_s3, resolve_root, s3_endpoint
from ..record import PARTITION_COLUMNS, UnitRecord
from .attempts import ATTEMPT_COLUMNS, latest_attempts
from .layout import (
    MANIFEST_NAME,
    QUARANTINE_FOLDER,
    Layout,
    decode_partition,
    encode_partition,
    hidden,
    part_problem,
    run_of_folder,
    s3_wal_base,
)
from .manifest import RunManifest, RunStatus, utcnow
from .schema import FILE_SCHEMA, lines_to_table

if TYPE_CHECKING:
    import pyarrow.dataset as ds

from .wal import (
    OrphanLog,
    WriteAheadLog,
    check_writer_id,
    claim_orphans,
    remove_dir_if_empty,
)

log = logging.getLogger(__name__)

__all__ = [
    "MANIFEST_NAME",
    "QUARANTINE_FOLDER",
    "REQUIRED_COLUMNS",
    "TABLE_SCHEMA",
    "ManifestError",
    "Parts",
    "ResultStore",
    "ResultsRootUnwritable",
    "RowWriter",
    "SkippedFile",
    "StorageError",
    "decode_partition",
    "encode_partition",
]

#: Columns every result part has: a Parquet file without them is not a part of rayeval's.
REQUIRED_COLUMNS = ("unit_id", "eval_id", "attempt", "status")
# Footers are read in parallel (the reads release the GIL): S3 reads are round trips.
FOOTER_THREADS_LOCAL = 8
FOOTER_THREADS_S3 = 32
PART_COMPRESSION = "zstd"
# pyarrow's S3 stream switches to a multipart upload above 10 MiB; stay below it so that every
# part is one PUT (moto's multipart completion also confuses pyarrow 26).
MAX_PART_BYTES = 8 * 1024 * 1024
# A row can carry megabytes (artifacts, answers): buffered rows are sealed once their JSON
# lines reach this size, however few they are, so the buffer's memory stays bounded.
FLUSH_BUFFER_BYTES = 64 * 1024 * 1024
BACKOFF_START_S = 0.25
BACKOFF_CAP_S = 10.0
#: Seconds rows may keep failing to be stored (retried with backoff) before the writer gives up
#: and the run stops: an S3 blip is ridden out, an outage ends the run cleanly.
STORE_RETRY_S = 60.0
# Room held on a local root's disk for a running run's manifest beyond its size (its
# temporary copy, the folder growing): see ResultStore.write_manifest.
MANIFEST_RESERVE_SLACK = 64 * 1024
# Errors of a local disk that no retry mends: the run stops at the first one.
_LASTING_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG})

_PARTITION_SCHEMA = pa.schema([(name, pa.string()) for name in PARTITION_COLUMNS])
#: Schema of :meth:`ResultStore.read_table` and :meth:`Parts.dataset`: the partition keys
#: first, then the file columns.
TABLE_SCHEMA = pa.schema([*_PARTITION_SCHEMA, *FILE_SCHEMA])


@functools.cache
def _dataset_api() -> tuple[ds.Partitioning, ds.ParquetFileFormat]:
    """pyarrow.dataset's hive partitioning and Parquet format, loaded on first use: the module
    imports pandas (≈0.3 s), which a run's driver does not need before its first rows are stored."""
    import pyarrow.dataset as ds

    return ds.partitioning(_PARTITION_SCHEMA, flavor="hive"), ds.ParquetFileFormat()


class ManifestError(RayevalError, ValueError):
    """A run's manifest file exists but is not a run manifest (damaged, or not rayeval's)."""


class StorageError(RayevalError, RuntimeError):
    """Rows could not be stored (they remain in the write-ahead log)."""


class ResultsRootUnwritable(StorageError):
    """A run cannot go on: its results root, or its write-ahead log, cannot be written (a full
    disk, an I/O error, an S3 outage outlasting the retries).  Every row acknowledged before is
    stored or on disk in the write-ahead log; ``--resume`` finishes the run once writes work."""

    def __init__(
        self,
        run_id: str,
        root: str,
        target: Literal["results root", "write-ahead log"],
        cause: BaseException,
        wal_dir: Path,
    ):
        super().__init__(run_id, root, target, cause, wal_dir)
        self.run_id = run_id
        self.root = root
        self.target = target
        self.cause = cause
        self.wal_dir = wal_dir
        #: how the run's manifest ended up, once the driver has tried to mark it failed
        self.manifest_note: str | None = None

    def __str__(self) -> str:
        wal = f" (its write-ahead log {self.wal_dir})" if self.target == "write-ahead log" else ""
        manifest = f"; {self.manifest_note}" if self.manifest_note else ""
        return (
            f"run {self.run_id} stopped: cannot write the results root {self.root}{wal}: {describe_write_error(self.cause)}. "
            f"The rows it took before are stored, or on disk in the write-ahead log {self.wal_dir}{manifest}"
        )


def describe_write_error(exc: BaseException) -> str:
    """Why a write failed, in one line: ``No space left on device (ENOSPC)``, an S3 error."""
    if isinstance(exc, OSError) and exc.errno is not None and exc.strerror:
        return f"{exc.strerror} ({errno.errorcode.get(exc.errno, exc.errno)})"
    text = _describe(exc)
    return text if isinstance(exc, OSError) else f"{type(exc).__name__}: {text}"


def _default_writer_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"


def _coerce_row(row: UnitRecord | Mapping[str, Any]) -> UnitRecord:
    if isinstance(row, UnitRecord):
        return row
    if isinstance(row, Mapping):
        return UnitRecord.model_validate(row)
    raise TypeError(f"expected a UnitRecord, got {type(row).__name__}")


def _line_prefix(run_id: str, model: str) -> bytes:
    """How every JSON line of a row of this run and model starts (``to_line`` puts them first)."""
    return pydantic_core.to_json({"run_id": run_id, "model": model})[:-1] + b","


def _file_error(exc: BaseException) -> bool:
    """True for an error about one file's content (not Parquet, truncated, undecodable, a column
    that does not cast), or a file gone since it was listed: that file is left out.  False for
    anything else, which propagates: an error of the storage itself (network, permissions, a
    disk: an ``OSError`` with an errno, or an AWS SDK error) taken for a corrupt part would make
    an outage look like damage, and a resume run every unit again."""
    if isinstance(exc, FileNotFoundError):  # listed, then gone (moved aside meanwhile)
        return True
    if isinstance(exc, MemoryError) or not isinstance(exc, (OSError, pa.ArrowException)):
        return False
    return not (isinstance(exc, OSError) and (exc.errno is not None or "AWS Error" in str(exc)))


def _describe(exc: BaseException) -> str:
    """An Arrow error as one short line, without the path Arrow repeats in it."""
    text = str(exc).strip()
    if text.startswith("Could not open Parquet input source") and "': " in text:
        text = text.split("': ", 1)[1]
    text = " ".join(line.strip() for line in text.splitlines() if line.strip())
    return (text[:300] + " ...") if len(text) > 300 else text or type(exc).__name__


def _string_like(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or str(kind) == "string_view"


def _fits(actual: pa.DataType, expected: pa.DataType) -> bool:
    """A file column of type ``actual`` reads as ``expected`` without surprises: the same type,
    all nulls, or a widening (int32 -> int64, another timestamp unit, a dictionary of strings)."""
    if actual == expected or pa.types.is_null(actual):
        return True
    if pa.types.is_dictionary(actual):
        actual = actual.value_type
    if _string_like(expected):
        return _string_like(actual)
    if pa.types.is_integer(expected):
        return pa.types.is_integer(actual)
    if pa.types.is_floating(expected):
        return pa.types.is_floating(actual) or pa.types.is_integer(actual)
    if pa.types.is_timestamp(expected):
        return pa.types.is_timestamp(actual)
    return actual == expected


def _schema_problem(physical: pa.Schema) -> str | None:
    """Why a Parquet file with this schema is not a readable result part (None: it is)."""
    missing = [name for name in REQUIRED_COLUMNS if name not in physical.names]
    if missing:
        return (
            f"incompatible schema: no {', '.join(missing)} column{'s' if len(missing) > 1 else ''} (not a result part)"
        )
    for column in physical:
        if column.name in PARTITION_COLUMNS or column.name not in FILE_SCHEMA.names:
            continue  # partition values come from the path; extra columns are read as they are
        expected = FILE_SCHEMA.field(column.name).type
        if not _fits(column.type, expected):
            return f"incompatible schema: column {column.name} is {column.type}, not {expected}"
    return None


def _with_extra_columns(found: pa.Schema, physical: pa.Schema) -> tuple[pa.Schema, str | None]:
    """``found`` (the columns beyond :data:`TABLE_SCHEMA` of the parts before) with this part's
    added, in order of appearance; or ``found`` as it was and why this part's cannot be: a
    column of a type other parts do not have (a widening, int32 to int64, is fine)."""
    before = found
    for column in physical:
        if column.name in TABLE_SCHEMA.names:
            continue
        try:
            found = pa.unify_schemas([found, pa.schema([column])], promote_options="permissive")
        except (pa.ArrowTypeError, pa.ArrowInvalid):
            other = found.field(column.name).type
            return before, f"incompatible schema: column {column.name} is {column.type}, where other parts have {other}"
    return found, None


@dataclass(frozen=True)
class SkippedFile:
    """A file under a results root that the readers leave out, and why."""

    path: str  #: as a user names it: a local path or ``s3://bucket/key``
    problem: str
    #: True: a part of the layout that cannot be read (its units count as not stored; moved
    #: aside by :meth:`ResultStore.quarantine`); False: a file that is no part (left alone)
    part: bool
    location: str = field(default="", repr=False, compare=False)  # the path on ``store.fs``

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


def isin_filter(wanted: Mapping[str, Iterable[str] | None]) -> ds.Expression | None:
    """The rows whose columns hold one of the values wanted of each (None: a column not
    filtered), pushed down to the parts' row groups; None when no column is filtered."""
    import pyarrow.dataset as ds

    terms = [ds.field(name).isin(list(values)) for name, values in wanted.items() if values is not None]
    return functools.reduce(operator.and_, terms) if terms else None


def _as_bytes(strings: pa.Array) -> np.ndarray:
    """A string array as a numpy array of fixed-width bytes: a view of its data when all have
    one length (unit ids do), without a Python object per item."""
    lengths = pc.binary_length(strings)
    width = max(1, pc.max(lengths).as_py() or 0)
    if pc.min(lengths).as_py() == width and not strings.null_count:
        offsets = np.int64 if pa.types.is_large_string(strings.type) else np.int32
        start = int(
            np.frombuffer(
                strings.buffers()[1], dtype=offsets, count=1, offset=strings.offset * np.dtype(offsets).itemsize
            )[0]
        )
        return np.frombuffer(strings.buffers()[2], dtype=f"S{width}", count=len(strings), offset=start)
    return np.array([item.encode() for item in strings.to_pylist() if item is not None], dtype=f"S{width}")


class Parts:
    """The readable parts of a selection (checked from their footers) and the files left out.

    :meth:`to_table` reads the rows; :meth:`dataset` is a pyarrow dataset over the same
    fragments, whose footers are already read (a scan does not read them again).
    """

    def __init__(self, store: ResultStore, fragments: list[ds.Fragment], schema: pa.Schema, skipped: list[SkippedFile]):
        self.store = store
        self.fragments = fragments
        self.schema = schema
        self.skipped = skipped

    def __repr__(self) -> str:
        return f"Parts({len(self.fragments)} readable, {len(self.skipped)} skipped, under {self.store.root!r})"

    @property
    def paths(self) -> list[str]:
        return [fragment.path for fragment in self.fragments]

    def keys(self) -> pa.Table:
        """Each readable part's path and its partition values (``run_id``, ``model``), decoded
        from its folders as the layout names them: for readers that read the files themselves."""
        import pyarrow.dataset as ds

        values = [ds.get_partition_keys(fragment.partition_expression) for fragment in self.fragments]
        columns = {"path": pa.array(self.paths, pa.string())}
        for partition in _PARTITION_SCHEMA:
            columns[partition.name] = pa.array([keys.get(partition.name) for keys in values], partition.type)
        return pa.table(columns)

    def dataset(self) -> ds.Dataset:
        import pyarrow.dataset as ds

        return ds.FileSystemDataset(self.fragments, self.schema, _dataset_api()[1], self.store.fs)

    def to_table(self, columns: Sequence[str] | None = None, filter: ds.Expression | None = None) -> pa.Table:
        """The rows of the readable parts (``columns`` of :attr:`schema`, in that order).

        A part whose footer was fine but whose data cannot be decoded is left out with a warning
        (and added to :attr:`skipped`): only then are the parts read one by one to find it.
        """
        names = list(self.schema.names if columns is None else columns)
        unknown = [name for name in names if name not in self.schema.names]
        if unknown:
            raise KeyError(f"unknown column(s) {', '.join(unknown)}")
        if self.fragments:
            try:
                return self.dataset().to_table(columns=names, filter=filter)
            except Exception as exc:
                if not _file_error(exc):
                    raise
        tables, readable = [], []
        for fragment in self.fragments:
            try:
                tables.append(fragment.to_table(schema=self.schema, columns=names, filter=filter))
            except Exception as exc:
                if not _file_error(exc):
                    raise
                skipped = self.store._skipped(fragment.path, f"unreadable Parquet data: {_describe(exc)}", part=True)
                self.store._warn(skipped)
                self.skipped.append(skipped)
                continue
            readable.append(fragment)
        self.fragments = readable
        if not tables:
            return pa.schema([self.schema.field(name) for name in names]).empty_table()
        return pa.concat_tables(tables)


class ResultStore:
    """Result rows and run manifests under one root (a folder or ``s3://bucket/prefix``)."""

    def __init__(self, root: str | Path, *, s3_endpoint_url: str | None = None):
        self.root = str(root)
        self.s3_endpoint_url = s3_endpoint_url
        self.is_s3 = is_s3(self.root)
        fs, base = resolve_root(self.root, s3_endpoint_url)
        self.fs: pafs.FileSystem = fs
        self.base = base.rstrip("/") if self.is_s3 else base
        self.layout = Layout(self.base)
        self._warned: set[SkippedFile] = set()  # each file left out is warned about once per store

    def __repr__(self) -> str:
        return f"ResultStore({self.root!r})"

    # -- paths ---------------------------------------------------------------------------------
    def run_path(self, run_id: str) -> str:
        return self.layout.run(run_id)

    def run_uri(self, run_id: str) -> str:
        """What to hand to ``pandas.read_parquet`` for one run."""
        return self._display(self.run_path(run_id))

    def model_path(self, run_id: str, model: str) -> str:
        return self.layout.model(run_id, model)

    def manifest_path(self, run_id: str) -> str:
        return self.layout.manifest(run_id)

    def wal_run_dir(self, run_id: str, wal_dir: str | Path | None = None) -> Path:
        """Folder of a run's WAL files: ``wal_dir/<run_id>/``; by default ``<root>/run_id=<id>/_wal/``
        for a local root and ``~/.cache/rayeval/wal/<hash of endpoint+root>/<run_id>/`` for S3."""
        if wal_dir is not None:
            return Path(wal_dir).expanduser() / encode_partition(run_id)
        if not self.is_s3:
            return Path(self.layout.wal(run_id))
        endpoint = s3_endpoint(self.s3_endpoint_url) or ""
        digest = hashlib.sha256(f"{endpoint}|{self.base}".encode()).hexdigest()[:16]
        return s3_wal_base() / digest / encode_partition(run_id)

    # -- low-level I/O -------------------------------------------------------------------------
    def put_atomic(self, path: str, data: bytes) -> None:
        """Store ``data`` at ``path`` so that it is visible whole or not at all."""
        if self.is_s3:
            with self.fs.open_output_stream(path) as out:  # one PutObject (delayed open)
                out.write(data)
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, data, durable=True)

    def move(self, source: str, target: str) -> None:
        """Move one file (local: a rename; S3: a copy, then a delete), making folders as needed."""
        if not self.is_s3:  # S3 has no folders to make
            self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        self.fs.move(source, target)

    def _list_files(self, path: str, *, recursive: bool = True) -> list[pafs.FileInfo]:
        """What is under ``path`` (``recursive=False``: directly in it); [] for a missing folder."""
        selector = pafs.FileSelector(path, recursive=recursive, allow_not_found=True)
        try:
            return self.fs.get_file_info(selector)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def files_in(self, folder: str, *, suffix: str = "") -> list[str]:
        """Paths of the files directly in ``folder`` whose names end with ``suffix`` (temporary
        ``.`` files left out), sorted; [] for a missing folder."""
        return sorted(
            info.path
            for info in self._list_files(folder, recursive=False)
            if info.type == pafs.FileType.File
            and info.base_name.endswith(suffix)
            and not info.base_name.startswith(".")
        )

    def _visible_files(self, runs: str | Iterable[str] | None) -> list[pafs.FileInfo]:
        """Files of one run, of several runs or of all runs (None), hidden names (``.``/``_``:
        temporary files, the WAL, the manifest, the quarantine) left out, sorted by path.  Only
        the folders of the runs asked for are listed: reading a few runs of a large root does not
        walk all of it."""
        if runs is None:
            starts = [self.base]
        else:
            wanted = [runs] if isinstance(runs, str) else list(dict.fromkeys(runs))
            starts = [self.run_path(run) for run in wanted]
        files = []
        for start in starts:
            for info in self._list_files(start):
                if info.type == pafs.FileType.File and not hidden(self.layout.relative(info.path)):
                    files.append(info)
        return sorted(files, key=lambda info: info.path)

    def part_paths(self, runs: str | Iterable[str] | None = None) -> list[str]:
        """Visible Parquet part files of one run, of several runs or of all runs (None), sorted,
        as listed (not checked: :meth:`parts` leaves out those that cannot be read)."""
        return [info.path for info in self._visible_files(runs) if info.path.endswith(".parquet")]

    def _display(self, path: str) -> str:
        return f"s3://{path}" if self.is_s3 else path

    def _skipped(self, path: str, problem: str, *, part: bool) -> SkippedFile:
        return SkippedFile(self._display(path), problem, part, location=path)

    def _warn(self, item: SkippedFile) -> None:
        if item not in self._warned:
            self._warned.add(item)
            log.warning("skipping %s", item)

    def parts(
        self, runs: str | Iterable[str] | None = None, *, extra_columns: bool = False, warn: bool = True
    ) -> Parts:
        """The readable parts of one run, of several runs or of all runs (None), checked from
        their Parquet footers (read in parallel; no row is read), and the files left out: those
        that are no part (``notes.txt``; a Parquet file outside ``run_id=*/model=*/``), and parts
        that are empty, truncated, not Parquet, or whose columns cannot be read as result rows.
        Each file left out is logged as a warning naming it and the problem, once per store
        (``warn=False``: not at all).

        ``extra_columns=True`` also exposes the columns a writer added beyond
        :data:`TABLE_SCHEMA`, found in any of the parts (parts without one read it as null); a
        part with such a column of a type the parts before it (in path order) do not have is
        left out, as one that cannot be read.  An error of the storage itself (see the module
        doc) propagates as ``OSError``.
        """
        skipped: list[SkippedFile] = []
        fragments = []
        for info in self._visible_files(runs):
            relative = self.layout.relative(info.path)
            problem = part_problem(relative)
            if problem is not None:
                skipped.append(self._skipped(info.path, problem, part=False))
            elif info.size == 0:
                skipped.append(self._skipped(info.path, "empty file (0 bytes), not a Parquet part", part=True))
            else:
                fragments.append(self._fragment(info, relative.rsplit("/", 1)[0] + "/"))
        readable = []
        extras = pa.schema([])  # columns beyond TABLE_SCHEMA, with extra_columns
        for fragment, footer in zip(fragments, self._footers(fragments)):
            if isinstance(footer, BaseException):
                if not _file_error(footer):
                    raise footer
                gone = isinstance(footer, FileNotFoundError)
                problem = "gone since it was listed" if gone else f"unreadable Parquet file: {_describe(footer)}"
                skipped.append(self._skipped(fragment.path, problem, part=not gone))
                continue
            problem = _schema_problem(footer)
            if problem is None and extra_columns:
                extras, problem = _with_extra_columns(extras, footer)
            if problem is not None:
                skipped.append(self._skipped(fragment.path, problem, part=True))
                continue
            readable.append(fragment)
        schema = pa.schema([*TABLE_SCHEMA, *extras])
        if warn:
            for item in sorted(skipped, key=lambda item: item.path):
                self._warn(item)
        return Parts(self, readable, schema, skipped)

    def _fragment(self, info: pafs.FileInfo, folder: str) -> ds.Fragment:
        partitioning, parquet = _dataset_api()
        partition = partitioning.parse(folder)  # "run_id=<r>/model=<m>/": values decoded
        try:  # the listed size spares S3 a HEAD request per part (pyarrow >= 16)
            return parquet.make_fragment(info.path, self.fs, partition_expression=partition, file_size=info.size)
        except TypeError:
            return parquet.make_fragment(info.path, self.fs, partition_expression=partition)

    def _footers(self, fragments: Sequence[ds.Fragment]) -> list[pa.Schema | BaseException]:
        """Each fragment's physical schema (its footer, kept by the fragment for the scan), or the
        error reading it."""

        def footer(fragment: ds.Fragment) -> pa.Schema | BaseException:
            try:
                return fragment.physical_schema
            except Exception as exc:  # noqa: BLE001 - judged by the caller
                return exc

        if len(fragments) < 2:
            return [footer(fragment) for fragment in fragments]
        threads = min(len(fragments), FOOTER_THREADS_S3 if self.is_s3 else FOOTER_THREADS_LOCAL)
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rayeval-footers") as pool:
            return list(pool.map(footer, fragments))

    def quarantine(self, run_id: str) -> list[SkippedFile]:
        """Move the parts of a run that cannot be read (empty, truncated, not Parquet, columns of
        other types: see :meth:`parts`) to ``run_id=<id>/_quarantine/``, where no reader looks, and
        return them; each is logged as a warning.  Files that are no part (``notes.txt``) stay
        where they are.  A write path (:meth:`open_writer` calls it): readers never move anything.
        A part that cannot be moved is left where it is (and stays skipped by the readers)."""
        moved = []
        run_folder = self.run_path(run_id)
        for item in self.parts(run_id, warn=False).skipped:
            if not item.part or not item.location.startswith(run_folder + "/"):
                continue
            target = self.layout.quarantine(run_id, item.location)
            try:
                if self.fs.get_file_info(target).type != pafs.FileType.NotFound:
                    target = f"{target}.{uuid.uuid4().hex[:8]}"
                self.move(item.location, target)
            except OSError as exc:
                log.warning("skipping %s (cannot move it to %s: %s)", item, QUARANTINE_FOLDER, exc)
                continue
            log.warning("moved %s to %s: %s", item.path, self._display(target), item.problem)
            moved.append(item)
        return moved

    # -- reading -------------------------------------------------------------------------------
    def read_table(
        self,
        run_id: str | None = None,
        *,
        models: Iterable[str] | None = None,
        eval_ids: Iterable[str] | None = None,
        columns: list[str] | None = None,
    ) -> pa.Table:
        """Stored rows (all runs, or one) with ``run_id`` and ``model`` columns from the path;
        parts that cannot be read are left out with a warning (see :meth:`parts`)."""
        schema = TABLE_SCHEMA if columns is None else pa.schema([TABLE_SCHEMA.field(c) for c in columns])
        expression = isin_filter({"model": models, "eval_id": eval_ids})
        return self.parts(run_id).to_table(columns=schema.names, filter=expression)

    def stored_keys(self, run_id: str) -> set[tuple[str, int]]:
        """(unit_id, attempt) of every stored row of a run (readable parts only)."""
        table = self.parts(run_id).to_table(columns=["unit_id", "attempt"])
        return set(zip(table.column("unit_id").to_pylist(), table.column("attempt").to_pylist()))

    def stored_unit_ids(self, run_id: str) -> set[str]:
        """unit_ids that already have a row in a run (reads only that column).  The units of a
        part that cannot be read are not among them: ``--resume`` runs them again."""
        table = self.parts(run_id).to_table(columns=["unit_id"])
        return set(table.column("unit_id").to_pylist())

    def stored_unit_id_array(self, run_id: str) -> np.ndarray:
        """The unit_ids of :meth:`stored_unit_ids` as a sorted array of bytes (a unit with two
        rows is there twice): 32 bytes a unit where a set of strings takes five times that, for
        ``--resume`` to look a big plan up in.  Read a part at a time into one array sized from
        the parts' footers."""
        parts = self.parts(run_id)
        ids = np.empty(sum(fragment.metadata.num_rows for fragment in parts.fragments), dtype="S32")
        filled = 0
        for fragment in parts.fragments:
            column = Parts(self, [fragment], parts.schema, parts.skipped).to_table(columns=["unit_id"]).column(0)
            for chunk in column.chunks:
                values = _as_bytes(chunk)
                if values.dtype.itemsize > ids.dtype.itemsize:  # ids longer than rayeval's own
                    ids = ids.astype(values.dtype)
                ids[filled : filled + len(values)] = values
                filled += len(values)
        ids = ids[:filled]  # fewer when a part turned out unreadable
        ids.sort()
        return ids

    def units_to_run_again(self, run_id: str, *, errors: bool = True) -> dict[str, tuple[int, str | None]]:
        """The units a resume runs again, with their latest attempt (:mod:`.attempts`) and its
        row's ``metadata_json``: those whose model calls the run's spent budget refused
        (``limit_reached: run_cost``) and, with ``errors`` (``--retry-errors``), those that
        ended in an ``error`` or a ``timeout``.  A ``config_error`` is the eval's grader
        configuration, which running the agent again does not change."""
        table = self.read_table(run_id, columns=[*ATTEMPT_COLUMNS, "status", "limit_reached"])
        units = latest_attempts(table.to_pandas())
        again = units[(units["limit_reached"] == "run_cost") | (errors & units["status"].isin(["error", "timeout"]))]
        if again.empty:  # the metadata, a heavy column, is read only for the units run again
            return {}
        ids, attempts = again["unit_id"].tolist(), again["attempt"].tolist()
        rows = (
            self.parts(run_id)
            .to_table(columns=["unit_id", "attempt", "metadata_json"], filter=isin_filter({"unit_id": ids}))
            .to_pylist()
        )
        metadata = {(row["unit_id"], row["attempt"]): row["metadata_json"] for row in rows}
        return {unit: (attempt, metadata.get((unit, attempt))) for unit, attempt in zip(ids, attempts)}

    def root_kind(self) -> Literal["folder", "file", "missing"]:
        """What the root is (an S3 prefix, never an object itself, is a folder); raises
        ``OSError`` when the storage cannot say."""
        info = self.fs.get_file_info(self.base)
        if info.type == pafs.FileType.File:
            return "file"
        if info.type == pafs.FileType.NotFound and not self.is_s3:
            return "missing"
        return "folder"

    def list_runs(self) -> list[str]:
        """Every run under the root (decoded ``run_id=`` folder names), sorted; [] for a missing root."""
        infos = self._list_files(self.base, recursive=False)
        runs = {run_of_folder(info.base_name) for info in infos if info.type == pafs.FileType.Directory}
        return sorted(run for run in runs if run is not None)

    # -- manifests -----------------------------------------------------------------------------
    def write_manifest(self, manifest: RunManifest) -> RunManifest:
        """Store a run's manifest atomically (``updated_at`` set to now); returns what was stored.

        On a local root the manifest of a run not ended yet has room held aside for its next
        version (``_manifest.reserve``, hidden from readers): when rows have filled the disk,
        that room is given back and the manifest replaced in it, so that a run stopped by a
        full disk still says failed.  The reserve goes once the manifest says the run ended."""
        stored = manifest.model_copy(update={"updated_at": utcnow()})
        data = stored.model_dump_json(indent=2).encode()
        path = self.manifest_path(stored.run_id)
        try:
            self.put_atomic(path, data)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not self._drop_manifest_reserve(stored.run_id):
                raise
            self.put_atomic(path, data)
        if stored.finished:
            self._drop_manifest_reserve(stored.run_id)
        elif not self.is_s3:
            self._hold_manifest_reserve(stored.run_id, len(data) + MANIFEST_RESERVE_SLACK)
        return stored

    def end_run(
        self,
        writer: RowWriter,
        manifest: RunManifest | None,
        status: RunStatus,
        unwritable: ResultsRootUnwritable | None = None,
    ) -> None:
        """Store the run's buffered rows, then record how it ended: failed if rows could not be
        stored (they stay in the WAL for the next ``--resume``; the writer's error, which says so,
        is what propagates, even when the manifest cannot be written either), or if the run stopped
        because its results root cannot be written (``unwritable``: it is told what became of the
        manifest)."""
        failure: BaseException | None = None
        try:
            writer.close()
        except BaseException as exc:  # noqa: BLE001 - raised again once the manifest says how the run ended
            failure = exc
            if isinstance(exc, ResultsRootUnwritable):
                unwritable = exc
        stopped = failure is not None or unwritable is not None  # it could not store everything
        if stopped and status == "completed":
            status = "failed"
        if manifest is not None:
            try:
                self.write_manifest(manifest.with_status(status))  # replaced whole or not at all
            except Exception as exc:  # a stopped run's own error says why it stopped
                if not stopped:
                    raise
                if unwritable is None:
                    log.warning("run %s: cannot record its status in the manifest: %s", manifest.run_id, exc)
                else:  # said in the run's one message
                    unwritable.manifest_note = f"its manifest could not be marked {status} either ({describe_write_error(exc)}) and still says running"
            else:
                if unwritable is not None:
                    unwritable.manifest_note = f"its manifest says {status}"
        if failure is not None:
            raise failure

    def _hold_manifest_reserve(self, run_id: str, size: int) -> None:
        """Hold ``size`` bytes of a local root's disk for the run's manifest (best effort: a
        disk without that room goes on without a reserve)."""
        try:
            fd = os.open(self.layout.manifest_reserve(run_id), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size < size:
                    os.posix_fallocate(fd, 0, size)
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            log.debug("run %s: no room held for its manifest: %s", run_id, exc)

    def _drop_manifest_reserve(self, run_id: str) -> bool:
        """Give the room held for the run's manifest back; True when there was a reserve."""
        if self.is_s3:
            return False
        try:
            os.unlink(self.layout.manifest_reserve(run_id))
        except FileNotFoundError:
            return False
        return True

    def _manifest_bytes(self, run_id: str) -> bytes | None:
        try:
            with self.fs.open_input_stream(self.manifest_path(run_id)) as stream:
                return stream.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def read_manifest(self, run_id: str) -> RunManifest | None:
        """A run's manifest, validated (None when the run has none; :class:`ManifestError`
        naming the file when it is not a run manifest)."""
        data = self._manifest_bytes(run_id)
        if data is None:
            return None
        try:
            return RunManifest.model_validate_json(data)
        except ValidationError as exc:
            problems = "; ".join(f"{p.field or 'file'}: {p.message}" for p in field_problems(exc)[:3])
            raise ManifestError(f"{self.manifest_path(run_id)} is not a valid run manifest ({problems})") from None

    def read_manifest_data(self, run_id: str) -> dict[str, Any] | None:
        """A run's manifest as a plain dict, not validated, so that a manifest written by another
        rayeval version is still read.  None when the run has none or it is not a JSON object;
        raises ``ValueError`` for invalid JSON and ``OSError`` when it cannot be read."""
        data = self._manifest_bytes(run_id)
        if data is None:
            return None
        value = json.loads(data)
        return value if isinstance(value, dict) else None

    # -- writing -------------------------------------------------------------------------------
    def open_writer(
        self,
        run_id: str,
        *,
        writer_id: str | None = None,
        flush_rows: int = 1000,
        flush_seconds: float = 5.0,
        flush_bytes: int = FLUSH_BUFFER_BYTES,
        wal_dir: str | Path | None = None,
        recover: bool = True,
        give_up_after_s: float = STORE_RETRY_S,
    ) -> RowWriter:
        """A buffered, WAL-backed writer for one run.

        ``recover=True`` first moves the run's unreadable parts aside (:meth:`quarantine`: their
        units count as not stored, so a resume runs them again) and stores the rows left in the
        WAL by writers of this run that died (see :meth:`recover`); a storage failure there is
        logged and left for later.  ``give_up_after_s``: see :class:`RowWriter`.
        """
        if flush_rows < 1:
            raise ValueError("flush_rows must be >= 1")
        if flush_seconds <= 0:
            raise ValueError("flush_seconds must be > 0")
        if flush_bytes < 1:
            raise ValueError("flush_bytes must be >= 1")
        fresh_id = writer_id is None
        if writer_id is None:
            writer_id = _default_writer_id()
        check_writer_id(writer_id)
        recovered = 0
        if recover:
            try:
                self.quarantine(run_id)
            except OSError as exc:
                log.warning("checking the parts of run %s deferred: %s", run_id, exc)
            try:
                recovered = self.recover(run_id, wal_dir=wal_dir)
            except StorageError as exc:
                log.warning("WAL recovery of run %s deferred: %s", run_id, exc)
        start_seq = 0 if fresh_id else self._next_seq(run_id, writer_id)
        wal = WriteAheadLog(self.wal_run_dir(run_id, wal_dir), writer_id)
        writer = RowWriter(
            self,
            run_id,
            writer_id=writer_id,
            wal=wal,
            flush_rows=flush_rows,
            flush_seconds=flush_seconds,
            flush_bytes=flush_bytes,
            start_seq=start_seq,
            give_up_after_s=give_up_after_s,
        )
        writer.recovered = recovered
        return writer

    def _next_seq(self, run_id: str, writer_id: str) -> int:
        """First free part number of a reused writer id (never overwrite its earlier parts)."""
        prefix = f"part-{writer_id}-"
        highest = -1
        for path in self.part_paths(run_id):
            name = path.rsplit("/", 1)[-1]
            if name.startswith(prefix):
                number = name[len(prefix) : -len(".parquet")]
                if number.isdigit():
                    highest = max(highest, int(number))
        return highest + 1

    def write_rows(self, run_id: str, rows: Iterable[UnitRecord], *, writer_id: str | None = None) -> list[str]:
        """Store rows now, without WAL or buffering (one part per model); returns the part paths.

        Raises :class:`StorageError` on failure.  Used by recovery and for small one-off writes.
        """
        writer_id = writer_id or f"direct-{_default_writer_id()}"
        entries = []
        for row in rows:
            if row.run_id != run_id:
                raise ValueError(f"row {row.unit_id} belongs to run {row.run_id!r}, not {run_id!r}")
            entries.append((row.model, row.to_line()))
        written = []
        try:
            for part in _encode_parts(self.layout, run_id, writer_id, entries, itertools.count()):
                self.put_atomic(part.path, part.data)
                written.append(part.path)
        except Exception as exc:
            raise StorageError(f"could not store rows of run {run_id} under {self.root}: {exc}") from exc
        return written

    def recover(self, run_id: str, wal_dir: str | Path | None = None) -> int:
        """Store the rows that dead writers of ``run_id`` left in their WAL and that are not stored
        yet (matched on unit_id and attempt); returns how many rows were written.

        WALs of live writers (lock held) are left alone, so this is safe while others write.
        Idempotent: a second call finds nothing to do.  Raises :class:`StorageError` if the rows
        cannot be stored (the WAL is kept).
        """
        directory = self.wal_run_dir(run_id, wal_dir)
        orphans: list[OrphanLog] = claim_orphans(directory)
        if not orphans:
            return 0
        try:
            latest: dict[tuple[str, int], UnitRecord] = {}
            for orphan in orphans:
                for line in orphan.lines():
                    try:
                        row = UnitRecord.model_validate_json(line)
                    except ValueError as exc:
                        log.warning("skipping invalid WAL row in %s: %s", orphan.directory, exc)
                        continue
                    if row.run_id != run_id:
                        log.warning("skipping WAL row of run %r found under run %r", row.run_id, run_id)
                        continue
                    latest[(row.unit_id, row.attempt)] = row
            try:
                stored = self.stored_keys(run_id) if latest else set()
            except Exception as exc:
                raise StorageError(f"could not read stored rows of run {run_id} under {self.root}: {exc}") from exc
            missing = [row for key, row in latest.items() if key not in stored]
            if missing:
                self.write_rows(run_id, missing, writer_id=f"recovered-{_default_writer_id()}")
                log.info("recovered %d rows of run %s from the WAL in %s", len(missing), run_id, directory)
            for orphan in orphans:
                orphan.remove()
            return len(missing)
        finally:
            for orphan in orphans:
                orphan.release()
            remove_dir_if_empty(directory)


@dataclass
class _Part:
    path: str
    data: bytes
    rows: int
    attempts: int = 0


def _encode_parts(
    layout: Layout, run_id: str, writer_id: str, entries: Iterable[tuple[str, bytes]], numbers: Iterator[int]
) -> Iterator[_Part]:
    """Rows given as ``(model, JSON line)`` as Parquet parts, one or more per model (each at
    most :data:`MAX_PART_BYTES` unless one row is larger), named ``part-<writer_id>-<n>.parquet``
    with ``n`` the next of ``numbers``: a writer never reuses a part's name."""
    groups: dict[str, list[bytes]] = {}
    for model, line in entries:
        groups.setdefault(model, []).append(line)
    for model, group in groups.items():
        for data, count in _split_encode(group):
            name = f"part-{writer_id}-{next(numbers):06d}.parquet"
            yield _Part(path=layout.part(run_id, model, name), data=data, rows=count)


class RowWriter:
    """Buffered, WAL-backed writer of one run's rows; thread-safe, for one driver process.

    ``add`` never blocks on the results root: rows are in the WAL, fsynced, before ``add``
    returns, and a background thread turns the buffer into Parquet parts, retrying failures
    with backoff.  The writer gives up (:attr:`broken`, raised by :meth:`check` and ``add``)
    when the WAL cannot be written, when a disk error no retry mends occurs (a full disk), or
    when storing keeps failing for ``give_up_after_s`` seconds.
    Made by :meth:`ResultStore.open_writer`, which checks its options; use it as a context
    manager or call :meth:`close`.
    """

    def __init__(
        self,
        store: ResultStore,
        run_id: str,
        *,
        writer_id: str,
        wal: WriteAheadLog,
        flush_rows: int,
        flush_seconds: float,
        flush_bytes: int,
        start_seq: int,
        give_up_after_s: float,
    ):
        self.store = store
        self.run_id = run_id
        self.writer_id = writer_id
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self.flush_bytes = flush_bytes
        self.give_up_after_s = give_up_after_s
        self.recovered = 0
        self._wal = wal
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._io_lock = threading.Lock()
        self._buffer: list[tuple[str, bytes]] = []  # (model, JSON line) of rows not yet in a part
        self._buffer_bytes = 0  # of those lines
        self._buffer_since: float | None = None  # monotonic time of the oldest buffered row
        self._returned_rows = False  # buffer holds rows of a closed WAL segment (encode failed)
        self._pending: dict[str, _Part] = {}  # sealed parts not stored yet
        self._sealing = 0  # rows taken from the buffer, being encoded into parts
        self._numbers = itertools.count(start_seq)  # of the writer's next parts
        self._failures = 0
        # the first failure of the current run of failures, and when (monotonic): what the writer
        # gives up with (later ones may only be its consequences, such as a lapsed lease)
        self._first_failure: tuple[float, BaseException] | None = None
        self._next_attempt = 0.0
        self._closing = False
        self._closed = False
        self.last_error: BaseException | None = None
        self.last_error_at: datetime | None = None
        #: set once the writer gave up: the run must stop (see :meth:`check`)
        self.broken: ResultsRootUnwritable | None = None
        self.rows_added = 0
        self.rows_stored = 0
        self.parts_written = 0
        self.flush_failures = 0
        self._thread = threading.Thread(target=self._run, name=f"rayeval-writer-{writer_id}", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"RowWriter(run_id={self.run_id!r}, writer_id={self.writer_id!r}, pending={self.pending})"

    def __enter__(self) -> RowWriter:  # noqa: PYI034 - typing.Self needs Python 3.11; we support 3.10
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- state ---------------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Rows added but not yet stored in Parquet (buffered or in parts awaiting a retry)."""
        with self._lock:
            return self._pending_locked()

    def _pending_locked(self) -> int:
        return len(self._buffer) + self._sealing + sum(part.rows for part in self._pending.values())

    @property
    def failing(self) -> bool:
        """True while the last flush attempt failed."""
        return self._failures > 0

    def check(self) -> None:
        """Raise :class:`ResultsRootUnwritable` once the writer has given up: the run must stop."""
        if self.broken is not None:
            raise self.broken

    def _give_up(self, target: Literal["results root", "write-ahead log"], exc: BaseException) -> ResultsRootUnwritable:
        """Mark the writer broken (once; under the lock); returns the error the run stops with."""
        if self.broken is None:
            self.broken = ResultsRootUnwritable(self.run_id, self.store.root, target, exc, self._wal.directory)
        return self.broken

    @property
    def wal_files(self) -> list[Path]:
        return [path for path in self._wal.files if path.exists()]

    @property
    def wal_bytes(self) -> int:
        return self._wal.size_bytes()

    # -- adding --------------------------------------------------------------------------------
    def add(self, rows: UnitRecord | Mapping[str, Any] | Iterable[UnitRecord | Mapping[str, Any]]) -> None:
        """Log the rows to the WAL (fsynced) and buffer them for Parquet.  Raises
        :class:`ResultsRootUnwritable` (the rows are not taken) once the writer has given up."""
        if isinstance(rows, (UnitRecord, Mapping)):
            rows = [rows]
        batch = [_coerce_row(row) for row in rows]
        for row in batch:
            if row.run_id != self.run_id:
                raise ValueError(f"row {row.unit_id} belongs to run {row.run_id!r}, this writer to {self.run_id!r}")
            if not row.model:
                raise ValueError(f"row {row.unit_id} has an empty model (it names the partition)")
        self._append([(row.model, row.to_line()) for row in batch])

    def add_lines(self, model: str, lines: list[bytes]) -> None:
        """Like :meth:`add`, for rows of one model already encoded by ``UnitRecord.to_line``
        (e.g. on the worker that made them): no second encoding on the way to the WAL."""
        if not model:
            raise ValueError("rows need a model (it names the partition)")
        prefix = _line_prefix(self.run_id, model)
        for line in lines:
            if not line.startswith(prefix):
                raise ValueError(f"not a JSON line of a row of run {self.run_id!r} and model {model!r}: {line[:120]!r}")
        self._append([(model, line) for line in lines])

    def _append(self, entries: list[tuple[str, bytes]]) -> None:
        if not entries:
            return
        with self._lock:
            if self._closing:
                raise RuntimeError(f"writer {self.writer_id} is closed")
            self.check()
            try:
                self._wal.append([line for _, line in entries])
            except Exception as exc:  # any failure: rows not on disk are not taken
                raise self._give_up("write-ahead log", exc) from exc
            self._buffer.extend(entries)
            self._buffer_bytes += sum(len(line) for _, line in entries)
            self.rows_added += len(entries)
            if self._buffer_since is None:  # the flush thread must start the age clock
                self._buffer_since = time.monotonic()
                self._wake.notify()
            elif self._buffer_full():
                self._wake.notify()

    def _buffer_full(self) -> bool:
        return len(self._buffer) >= self.flush_rows or self._buffer_bytes >= self.flush_bytes

    # -- flushing ------------------------------------------------------------------------------
    def _wait_time(self, now: float) -> float | None:
        """Seconds until the next flush is due (0: now), None: nothing to do.  Under the lock."""
        if not self._buffer and not self._pending:
            return None
        if now < self._next_attempt:
            return self._next_attempt - now
        if self._pending:
            return 0.0
        if self._buffer_full():
            return 0.0
        assert self._buffer_since is not None
        return max(0.0, self._buffer_since + self.flush_seconds - now)

    def _run(self) -> None:
        while True:
            with self._wake:
                while True:
                    if self._closing:
                        return
                    wait = self._wait_time(time.monotonic())
                    if wait == 0.0:
                        break
                    self._wake.wait(wait)
            try:
                self._flush_once(force=False)
            except Exception as exc:  # never let the thread die; rows stay pending
                log.exception("unexpected error in the flush thread of writer %s", self.writer_id)
                self._record_failure(exc)

    def _seal(self, force: bool) -> list[tuple[str, bytes]]:
        """Take the buffer and rotate the WAL, if a flush is due (under the lock)."""
        if not self._buffer:
            return []
        aged = self._buffer_since is not None and time.monotonic() - self._buffer_since >= self.flush_seconds
        # While parts wait for a retry, only a full buffer is sealed: an outage must not turn into
        # one small part per retry.
        if not (force or self._buffer_full() or (aged and not self._pending)):
            return []
        entries, self._buffer, self._buffer_since, self._buffer_bytes = self._buffer, [], None, 0
        self._sealing = len(entries)
        try:
            self._wal.rotate()
        except Exception as exc:  # noqa: BLE001 - the rows stay in the WAL, which takes no more
            self._give_up("write-ahead log", exc)
        return entries

    def _flush_once(self, *, force: bool, io_timeout: float | None = None) -> bool:
        """Seal what is due and try to store every pending part.  True when nothing is pending."""
        if not self._io_lock.acquire(timeout=-1 if io_timeout is None else max(0.0, io_timeout)):
            return False
        try:
            with self._lock:
                entries = self._seal(force)
            if entries:
                try:
                    parts = list(_encode_parts(self.store.layout, self.run_id, self.writer_id, entries, self._numbers))
                except Exception as exc:  # noqa: BLE001 - an unencodable row: keep everything, report
                    with self._lock:
                        self._sealing = 0
                        self._buffer[:0] = entries
                        self._buffer_bytes += sum(len(line) for _, line in entries)
                        self._buffer_since = self._buffer_since or time.monotonic()
                        self._returned_rows = True
                    self._record_failure(exc)
                    return False
                with self._lock:
                    self._sealing = 0
                    self._returned_rows = False
                    for part in parts:
                        self._pending[part.path] = part
            with self._lock:
                todo = list(self._pending.values())
            error: BaseException | None = None
            for part in todo:
                part.attempts += 1
                try:
                    self.store.put_atomic(part.path, part.data)
                except Exception as exc:  # noqa: BLE001 - any storage fault: the part stays pending, retried
                    error = exc
                    continue
                with self._lock:
                    del self._pending[part.path]
                    self.rows_stored += part.rows
                    self.parts_written += 1
            if error is not None:
                self._record_failure(error)
                return False
            with self._lock:
                if self._failures:
                    log.warning(
                        "writer %s: storage at %s is back; pending parts stored", self.writer_id, self.store.root
                    )
                self._failures = 0
                self._first_failure = None
                self._next_attempt = 0.0
                done = not self._pending
                if done and not self._returned_rows and not self._closed:
                    try:
                        self._wal.drop_closed()
                    except OSError as exc:  # harmless: recovery skips rows already stored
                        log.warning("writer %s: cannot delete a stored WAL segment: %s", self.writer_id, exc)
                return done and not self._buffer
        finally:
            self._io_lock.release()

    def _record_failure(self, exc: BaseException) -> None:
        with self._lock:
            now = time.monotonic()
            self._failures += 1
            self.flush_failures += 1
            self.last_error = exc
            self.last_error_at = utcnow()
            self._first_failure = self._first_failure or (now, exc)
            failing_since, first = self._first_failure
            lasting = isinstance(exc, OSError) and exc.errno in _LASTING_ERRNOS
            if lasting or now - failing_since >= self.give_up_after_s:
                self._give_up("results root", exc if lasting else first)
            delay = doubled_s(BACKOFF_START_S, self._failures - 1, BACKOFF_CAP_S)
            self._next_attempt = now + delay
            pending = self._pending_locked()
            failures = self._failures
        if self.broken is not None:  # the run stops, and says why
            log.debug("writer %s: storing rows failed: %s", self.writer_id, exc)
        elif failures == 1:
            log.warning(
                "writer %s: storing rows under %s failed (%s); %d rows kept, retrying with backoff",
                self.writer_id,
                self.store.root,
                exc,
                pending,
            )
        else:
            log.debug("writer %s: retry %d failed: %s", self.writer_id, failures, exc)

    def flush(self, timeout: float | None = None) -> bool:
        """Store everything buffered now (one attempt, ignoring the backoff).  True when all rows
        added so far are stored."""
        return self._flush_once(force=True, io_timeout=timeout)

    def close(self, timeout: float = 60.0) -> None:
        """Final flush, retried with backoff until it succeeds or ``timeout`` passes (tried once
        when the writer has given up).

        Raises :class:`StorageError` naming the root and the last error when rows could not be
        stored (:class:`ResultsRootUnwritable` if the writer gave up); they stay in the WAL for
        :meth:`ResultStore.recover`.
        """
        if self._closed:
            return
        deadline = time.monotonic() + timeout
        with self._wake:
            self._closing = True
            self._wake.notify_all()
        self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
        attempt = 0
        while True:
            ok = self._flush_once(force=True, io_timeout=max(0.0, deadline - time.monotonic()))
            remaining = deadline - time.monotonic()
            if ok or remaining <= 0 or self.broken is not None:
                break
            attempt += 1
            time.sleep(min(doubled_s(BACKOFF_START_S, attempt - 1, BACKOFF_CAP_S), remaining))
        self._closed = True
        pending = self.pending
        if ok and not pending:
            self._wal.close(remove=True)
            return
        # Keep the WAL locked while a flush is still in flight (a hung request that may yet land):
        # recovery must not store those rows a second time meanwhile.
        if self._io_lock.acquire(timeout=0):
            try:
                self._wal.close(remove=False)
            finally:
                self._io_lock.release()
        else:
            threading.Thread(target=self._release_wal_after_flush, daemon=True).start()
        self.check()
        raise StorageError(
            f"could not store {pending} rows of run {self.run_id} under {self.store.root} within "
            f"{timeout:g}s: {self.last_error!r}; they remain in the WAL at {self._wal.directory} "
            f"(ResultStore.recover({self.run_id!r}) stores them)"
        )

    def _release_wal_after_flush(self) -> None:
        with self._io_lock:
            self._wal.close(remove=False)


def _split_encode(lines: list[bytes]) -> Iterable[tuple[bytes, int]]:
    """Rows given as JSON lines (see ``UnitRecord.to_line``) as Parquet parts of at most
    :data:`MAX_PART_BYTES` (unless one row is larger), with how many rows each holds."""
    sink = pa.BufferOutputStream()
    pq.write_table(lines_to_table(lines), sink, compression=PART_COMPRESSION)
    data = sink.getvalue().to_pybytes()
    if len(data) <= MAX_PART_BYTES or len(lines) == 1:
        yield data, len(lines)
        return
    middle = len(lines) // 2
    yield from _split_encode(lines[:middle])
    yield from _split_encode(lines[middle:])
