"""Where everything lives under a results root: the one module that knows the layout.

::

    <root>/run_id=<run>/model=<model>/part-<writer_id>-<seq>.parquet   the rows
    <root>/run_id=<run>/_manifest.json                                 the run's manifest
    <root>/run_id=<run>/_manifest.reserve                              room held for it (local roots)
    <root>/run_id=<run>/_lease.json, _lease.lock                       the run's lease (lock: local roots)
    <root>/run_id=<run>/_wal/                                          its write-ahead log (local roots)
    <root>/run_id=<run>/_quarantine/                                   parts moved aside by --resume
    <root>/run_id=<run>/_sessions/<unit>/chunk-<n>.tar, .json          a chunked session's checkpoints
    <root>/_datasets/<path>/<version>.json                             stored evaluation datasets
    <root>/_prompts/<path>/<version>.json                              stored prompt versions

Partition values and names in paths are percent-encoded (``urllib.parse.quote(value,
safe="")``); pyarrow's hive partitioning decodes them on read. A name starting with ``_`` or
``.`` is hidden: pyarrow/pandas dataset discovery and rayeval's readers never look there.
:class:`~rayeval.storage.ResultStore` lists and reads the root with these paths; the other
modules ask the store.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

MANIFEST_NAME = "_manifest.json"
MANIFEST_RESERVE_NAME = "_manifest.reserve"
LEASE_NAME = "_lease.json"
LOCK_NAME = "_lease.lock"
WAL_FOLDER = "_wal"
QUARANTINE_FOLDER = "_quarantine"
SESSIONS_FOLDER = "_sessions"
# the folder of each kind of versioned file evaluations.run stores by path
CATALOG_FOLDERS = {"dataset": "_datasets", "prompt": "_prompts"}
RUN_PREFIX = "run_id="
MODEL_PREFIX = "model="
PART_SUFFIX = ".parquet"


def encode_partition(value: str) -> str:
    """Path-safe form of a partition value (``anthropic/claude@x`` -> ``anthropic%2Fclaude%40x``)."""
    return quote(str(value), safe="")


def s3_wal_base() -> Path:
    """Where the write-ahead logs of S3 roots are kept on this machine, outside any root:
    ``$XDG_CACHE_HOME/rayeval/wal``, else ``~/.cache/rayeval/wal``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rayeval" / "wal"


def decode_partition(segment: str) -> str:
    return unquote(segment)


def hidden(relative: str) -> bool:
    """A path (relative to the root) that readers never see: a ``.`` or ``_`` name in it."""
    return any(part.startswith((".", "_")) for part in relative.split("/") if part)


def run_of_folder(name: str) -> str | None:
    """The run id of a ``run_id=<run>`` folder name (None for any other name)."""
    return decode_partition(name[len(RUN_PREFIX) :]) if name.startswith(RUN_PREFIX) else None


def part_problem(relative: str) -> str | None:
    """Why a visible file (path relative to the root) is not a part of the layout (None: it is)."""
    if not relative.endswith(PART_SUFFIX):
        return "not a Parquet part file (ignored)"
    segments = relative.split("/")
    if len(segments) != 3 or not segments[0].startswith(RUN_PREFIX) or not segments[1].startswith(MODEL_PREFIX):
        return "a Parquet file outside the run_id=<run>/model=<model>/ folders (ignored)"
    for segment in segments[:2]:
        try:
            unquote(segment, errors="strict")
        except UnicodeDecodeError:
            return f"folder {segment!r} does not decode to text (UTF-8), as rayeval's folder names do (ignored)"
    return None


@dataclass(frozen=True)
class Layout:
    """The paths under one root (``base``: a local folder, or ``bucket/prefix`` on S3)."""

    base: str

    def run(self, run_id: str) -> str:
        return f"{self.base}/{RUN_PREFIX}{encode_partition(run_id)}"

    def model(self, run_id: str, model: str) -> str:
        return f"{self.run(run_id)}/{MODEL_PREFIX}{encode_partition(model)}"

    def part(self, run_id: str, model: str, name: str) -> str:
        return f"{self.model(run_id, model)}/{name}"

    def manifest(self, run_id: str) -> str:
        return f"{self.run(run_id)}/{MANIFEST_NAME}"

    def manifest_reserve(self, run_id: str) -> str:
        return f"{self.run(run_id)}/{MANIFEST_RESERVE_NAME}"

    def lease(self, run_id: str) -> str:
        return f"{self.run(run_id)}/{LEASE_NAME}"

    def wal(self, run_id: str) -> str:
        """A local root's WAL folder of a run (S3 roots keep theirs in a local cache)."""
        return f"{self.run(run_id)}/{WAL_FOLDER}"

    def quarantine(self, run_id: str, part: str) -> str:
        """Where a run's unreadable part (a path under the run's folder) is moved aside."""
        run_folder = self.run(run_id)
        return f"{run_folder}/{QUARANTINE_FOLDER}/{part[len(run_folder) + 1 :]}"

    def sessions(self, run_id: str) -> str:
        """Where a run's chunked sessions save their checkpoints, a folder per unit."""
        return f"{self.run(run_id)}/{SESSIONS_FOLDER}"

    def catalog_folder(self, kind: str, path: str) -> str:
        """The versions of a stored dataset or prompt (``kind``: a key of CATALOG_FOLDERS)."""
        return f"{self.base}/{CATALOG_FOLDERS[kind]}/{encode_partition(path)}"

    def catalog_entry(self, kind: str, path: str, version_id: str) -> str:
        return f"{self.catalog_folder(kind, path)}/{encode_partition(version_id)}.json"

    def relative(self, path: str) -> str:
        """A path under the root, relative to it."""
        return path[len(self.base) :].lstrip("/")


__all__ = [
    "CATALOG_FOLDERS",
    "LEASE_NAME",
    "LOCK_NAME",
    "MANIFEST_NAME",
    "MANIFEST_RESERVE_NAME",
    "QUARANTINE_FOLDER",
    "WAL_FOLDER",
    "Layout",
    "decode_partition",
    "encode_partition",
    "hidden",
    "part_problem",
    "run_of_folder",
]
