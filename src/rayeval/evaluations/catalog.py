"""Datasets and prompt versions stored by path under the results root, so a later run can name them.

A version is one JSON file ``<root>/_datasets/<path>/<version_id>.json`` (or ``_prompts``; the
path URL-encoded into one folder name, ``geo%2Fcapitals``, as :class:`rayeval.storage.layout.Layout` makes it) whose ``version_id`` is a hash of its
content: the same content is the same version. Storing a version again only renews its
``stored_at``; naming a path alone picks the version stored last. Local and S3 roots alike.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any, Literal

import pyarrow.fs as pafs
from pydantic import BaseModel, ValidationError

from ..storage.layout import CATALOG_FOLDERS, decode_partition
from ..storage.store import ResultStore

Kind = Literal["dataset", "prompt"]


class StoredVersion(BaseModel):
    """One stored version of a dataset (``body``: its datapoints) or a prompt (its parameters)."""

    kind: Kind
    path: str
    version_id: str
    body: Any
    stored_at: datetime


def content_hash(body: Any) -> str:
    """A short hash of JSON ``body``'s content (key order and spacing do not count)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def version_id(body: Any) -> str:
    """The content hash that names a version."""
    return "v-" + content_hash(body)


def store_version(store: ResultStore, kind: Kind, path: str, body: Any) -> StoredVersion:
    """Store ``body`` as a version of ``path`` (renewing it when the same content is there)."""
    entry = StoredVersion(
        kind=kind, path=path, version_id=version_id(body), body=body, stored_at=datetime.now(timezone.utc)
    )
    store.put_atomic(store.layout.catalog_entry(kind, path, entry.version_id), entry.model_dump_json().encode())
    return entry


def stored_versions(store: ResultStore, kind: Kind, path: str) -> list[StoredVersion]:
    """Every readable version of ``path``, oldest first (unreadable files are skipped)."""
    versions = []
    for file in store.files_in(store.layout.catalog_folder(kind, path), suffix=".json"):
        try:
            with store.fs.open_input_stream(file) as stream:
                entry = StoredVersion.model_validate_json(stream.read())
        except (OSError, ValidationError, ValueError):
            continue
        if entry.kind == kind and entry.path == path:
            versions.append(entry)
    versions.sort(key=lambda v: (v.stored_at, v.version_id))
    return versions


def stored_paths(store: ResultStore, kind: Kind) -> list[str]:
    """The paths that have a stored version, for error messages."""
    folder = f"{store.layout.base}/{CATALOG_FOLDERS[kind]}"
    try:
        infos = store.fs.get_file_info(pafs.FileSelector(folder, recursive=False, allow_not_found=True))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(decode_partition(info.base_name) for info in infos if info.type == pafs.FileType.Directory)


def find_version(store: ResultStore, kind: Kind, path: str, version: str | None = None) -> StoredVersion | str:
    """The stored version of ``path`` (the one stored last unless ``version`` names one), or
    why there is none, listing what is stored."""
    versions = stored_versions(store, kind, path)
    if version is not None:
        for entry in versions:
            if entry.version_id == version:
                return entry
        known = ", ".join(v.version_id for v in versions) or "none"
        return f"{kind} {path!r} has no stored version {version!r} (stored: {known})"
    if versions:
        return versions[-1]
    known = ", ".join(repr(p) for p in stored_paths(store, kind)) or "none"
    return f"no stored {kind} {path!r} under {store.layout.base} (stored {kind}s: {known})"
