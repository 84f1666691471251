"""The response cache: a reply stored under the hash of its request, in a local folder or
under ``s3://bucket/prefix``, so running an eval again costs no model call.

The key covers what decides the reply: provider, model, the base URL without credentials,
messages and generation settings; never the API key. Entries are JSON read back into
pydantic models (nothing is unpickled); an unreadable entry is a miss, and a cache that
cannot be read or written costs the call, never the unit.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ValidationError

from .._messages import field_problems
from ..filesystem import is_s3, resolve_root
from .types import ModelOutput

log = logging.getLogger(__name__)


class CacheEntry(BaseModel):
    key: str
    request: dict[str, Any]
    #: as the provider answered it, with its cost
    output: ModelOutput


def public_base_url(base_url: str) -> str:
    """``base_url`` without user, password, query or fragment (where keys may hide)."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def request_key(request: dict[str, Any]) -> str:
    """SHA-256 of the request as canonical JSON (sorted keys, no spaces)."""
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ResponseCache:
    """Entries at ``<location>/<key[:2]>/<key>.json``; ``location`` a folder or ``s3://...``
    (``s3_endpoint_url`` or ``AWS_ENDPOINT_URL`` for MinIO, moto and the like)."""

    def __init__(self, location: str, s3_endpoint_url: str | None = None):
        self.location = location
        self.fs, self.base = resolve_root(location, s3_endpoint_url)
        self.atomic_rename = not is_s3(location)  # an S3 PUT is atomic already

    def _path(self, key: str) -> str:
        return f"{self.base}/{key[:2]}/{key}.json"

    def get(self, key: str) -> CacheEntry | None:
        path = self._path(key)
        try:
            with self.fs.open_input_stream(path) as stream:
                data = stream.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("response cache %s: cannot read %s: %s", self.location, path, exc)
            return None
        try:
            entry = CacheEntry.model_validate_json(data)
        except ValidationError as exc:
            log.warning(
                "response cache %s: %s is not a cache entry (ignored): %s",
                self.location,
                path,
                field_problems(exc)[0],
            )
            return None
        return entry if entry.key == key else None

    def put(self, entry: CacheEntry) -> None:
        path = self._path(entry.key)
        data = entry.model_dump_json().encode("utf-8")
        try:
            if self.atomic_rename:
                self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
                partial = f"{path}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial"
                with self.fs.open_output_stream(partial) as stream:
                    stream.write(data)
                self.fs.move(partial, path)
            else:
                with self.fs.open_output_stream(path) as stream:
                    stream.write(data)
        except OSError as exc:
            log.warning("response cache %s: cannot write %s: %s", self.location, path, exc)
