"""The one way rayeval makes an S3 client (boto3), for what pyarrow's filesystem cannot do:
conditional PUTs (run leases) and fetching an eval's ``s3://`` data.  Parquet goes through
``pyarrow.fs.S3FileSystem`` (filesystem.py), configured from the same settings here."""

from __future__ import annotations

import os
from typing import Any

ENDPOINT_ENV_VARS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def s3_endpoint(explicit: str | None = None) -> str | None:
    """The S3 endpoint override: the argument, else the standard AWS environment variables."""
    if explicit:
        return explicit
    for name in ENDPOINT_ENV_VARS:
        if os.environ.get(name):
            return os.environ[name]
    return None


def s3_region() -> str | None:
    """The region the environment names (None: boto3's own chain, e.g. ~/.aws/config)."""
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")


def s3_client(endpoint_url: str | None, *, connect_timeout: float, read_timeout: float, max_attempts: int) -> Any:
    """A boto3 S3 client: the standard AWS credential chain and region, the endpoint override
    (argument or environment), bounded timeouts and standard retries."""
    import boto3
    from botocore.config import Config

    config = Config(
        region_name=s3_region(),
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retries={"max_attempts": max_attempts, "mode": "standard"},
    )
    return boto3.session.Session().client("s3", endpoint_url=s3_endpoint(endpoint_url), config=config)
