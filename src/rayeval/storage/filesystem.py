"""Where results live: a local folder or ``s3://bucket/prefix``, as a pyarrow filesystem."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

import pyarrow.fs as pafs

ENDPOINT_ENV_VARS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
# Bounded S3 timeouts: with the SDK defaults a PUT to an unreachable endpoint hangs ~28 s,
# and the writer retries with its own backoff anyway.
S3_CONNECT_TIMEOUT_S = 3.0
S3_REQUEST_TIMEOUT_S = 10.0
S3_MAX_ATTEMPTS = 2


def s3_endpoint(explicit: str | None = None) -> str | None:
    """The S3 endpoint override: the argument, else the standard AWS environment variables."""
    if explicit:
        return explicit
    for name in ENDPOINT_ENV_VARS:
        if os.environ.get(name):
            return os.environ[name]
    return None


def is_s3(root: str) -> bool:
    return root.startswith("s3://")


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
            "region": os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
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


def s3_client(s3_endpoint_url: str | None = None):
    """A boto3 S3 client for the same store as :func:`resolve_root`: the standard AWS credential
    chain and region, the endpoint override, and the same bounded timeouts.  For what pyarrow's
    filesystem cannot do, such as conditional PUTs (``If-None-Match``/``If-Match``)."""
    import boto3
    from botocore.config import Config

    config = Config(
        region_name=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        connect_timeout=S3_CONNECT_TIMEOUT_S,
        read_timeout=S3_REQUEST_TIMEOUT_S,
        retries={"max_attempts": S3_MAX_ATTEMPTS, "mode": "standard"},
    )
    return boto3.session.Session().client("s3", endpoint_url=s3_endpoint(s3_endpoint_url), config=config)


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
