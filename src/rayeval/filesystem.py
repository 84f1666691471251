"""Where results live: a local folder or ``s3://bucket/prefix``, as a pyarrow filesystem."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

from ._s3 import s3_client as _s3_client
from ._s3 import s3_endpoint, s3_region

# Bounded S3 timeouts: with the SDK defaults a PUT to an unreachable endpoint hangs ~28 s,
# and the writer retries with its own backoff anyway.
S3_CONNECT_TIMEOUT_S = 3.0
S3_REQUEST_TIMEOUT_S = 10.0
S3_MAX_ATTEMPTS = 2


def is_s3(root: str) -> bool:
    return root.startswith("s3://")


def inside_root(path: str | Path, root: str) -> bool:
    """Whether a local ``path`` is a local results ``root`` or lies under it (links resolved):
    a file written there would make the root no longer a Parquet dataset."""
    if is_s3(root) or "://" in root:
        return False
    target, base = Path(path).expanduser().resolve(), Path(root).expanduser().resolve()
    return target == base or base in target.parents


def check_root(root: str | Path) -> str:
    """The results root as given, if it is one: a folder, or ``s3://bucket[/prefix]``
    (ValueError otherwise, before anything is opened)."""
    text = str(root)
    if not text.strip():
        raise ValueError("the results root is empty")
    if is_s3(text) and not urlparse(text).netloc:
        raise ValueError(f"results root {text!r} has no bucket")
    return text


def resolve_root(root: str | Path, s3_endpoint_url: str | None = None) -> tuple[pafs.FileSystem, str]:
    """(filesystem, base path without scheme) for a results root.

    S3 credentials come from the standard AWS chain; ``s3_endpoint_url`` (or
    ``AWS_ENDPOINT_URL``) points at MinIO, moto or another S3-compatible store.
    """
    text = check_root(root)
    if is_s3(text):
        parsed = urlparse(text)
        endpoint = s3_endpoint(s3_endpoint_url)
        options: dict = {
            "region": s3_region() or "us-east-1",
            # small objects go up as one PutObject instead of a multipart upload
            "allow_delayed_open": True,
            "connect_timeout": S3_CONNECT_TIMEOUT_S,
            "request_timeout": S3_REQUEST_TIMEOUT_S,
            "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=S3_MAX_ATTEMPTS),
        }
        if endpoint:
            scheme = urlparse(endpoint).scheme or "http"
            options["endpoint_override"] = endpoint
            options["scheme"] = scheme
        return pafs.S3FileSystem(**options), f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/")
    return pafs.LocalFileSystem(), str(Path(text).expanduser().resolve())


def s3_client(s3_endpoint_url: str | None = None) -> Any:
    """A boto3 S3 client for the same store as :func:`resolve_root`, with the same bounded
    timeouts: for conditional PUTs (``If-None-Match``/``If-Match``), which pyarrow cannot do."""
    return _s3_client(
        s3_endpoint_url,
        connect_timeout=S3_CONNECT_TIMEOUT_S,
        read_timeout=S3_REQUEST_TIMEOUT_S,
        max_attempts=S3_MAX_ATTEMPTS,
    )


def pandas_storage_options(root: str | Path, s3_endpoint_url: str | None = None) -> dict | None:
    """``storage_options`` for ``pandas.read_parquet`` on the same root (s3fs)."""
    if not is_s3(str(root)):
        return None
    endpoint = s3_endpoint(s3_endpoint_url)
    # s3fs caches folder listings per process: a reader of a growing run must not
    options: dict = {"use_listings_cache": False}
    if endpoint:
        options["client_kwargs"] = {"endpoint_url": endpoint}
    return options
