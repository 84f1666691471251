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


#: what an S3 failure's text says, and the set-up it points to
_SIGNS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("NETWORK_CONNECTION", "Could not connect", "Connection refused", "EndpointConnectionError", "curlCode: 7",
      "Failed to connect", "Connect timeout", "Couldn't connect"),
     ("the S3 endpoint {endpoint} cannot be reached: name an S3-compatible server (MinIO, moto) with --s3-endpoint "
     "URL or AWS_ENDPOINT_URL, or check that it runs")),
    (("NoCredentials", "No credentials", "Unable to locate credentials", "InvalidAccessKeyId", "SignatureDoesNotMatch",
      "ACCESS_DENIED", "AccessDenied", "Access Denied", "Forbidden"),
     ("the credentials were refused or are missing: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) "
     "for an identity that may use the bucket")),
    (("NoSuchBucket", "NO_SUCH_BUCKET", "bucket does not exist", "The specified bucket does not exist"),
     "no such bucket at {endpoint}: create it, or check the bucket's name and --s3-endpoint"),
)  # fmt: skip


def s3_hint(root: str, problem: object, endpoint_url: str | None = None) -> str:
    """What to check, for a failure of an ``s3://`` root (``problem``: the error, as text): the
    endpoint, the credentials or the bucket, by what the error says; "" for another root or an
    error that says none of these."""
    if not str(root).startswith("s3://"):
        return ""
    text = str(problem)
    endpoint = s3_endpoint(endpoint_url) or "AWS's own (no --s3-endpoint, no AWS_ENDPOINT_URL)"
    for signs, hint in _SIGNS:
        if any(sign.lower() in text.lower() for sign in signs):
            return hint.format(endpoint=endpoint)
    return ""
