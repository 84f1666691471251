"""Fetchers: write one source (local path, HTTP(S) URL, S3 object or prefix) into a new path,
or (``check_http``, ``check_s3``) tell that a remote one is there without downloading it.

Each fetcher writes into ``dest`` (which must not exist), returns the ``Payload`` it
wrote, and raises ``FetchError`` with a plain-language reason; the staging layer adds
the URI. Network fetchers use per-socket timeouts and poll an abort flag between
chunks, so ``run_with_deadline`` can give up at the deadline and the abandoned thread
stops soon after, deleting its scratch files.
"""

from __future__ import annotations

import http.client
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from .._s3 import s3_client as _s3_client
from ..errors import RayevalError
from .cache import CHUNK, FileRecord, Payload, list_tree, write_file

#: Longest silence tolerated on a socket; also capped by the time left before the deadline.
DEFAULT_SOCKET_TIMEOUT = 60.0
_USER_AGENT = "rayeval-staging/1"

T = TypeVar("T")


class FetchError(RayevalError):
    """A source could not be fetched; the message is the reason, without the URI."""


class FetchTimeout(FetchError):
    """The download stalled past a socket timeout or the overall deadline."""


class _Aborted(RayevalError):
    """Raised inside an abandoned fetch thread to stop it."""


def _chunks(read: Callable[[int], bytes], abort: threading.Event) -> Iterator[bytes]:
    while True:
        if abort.is_set():
            raise _Aborted()
        chunk = read(CHUNK)
        if not chunk:
            return
        yield chunk


def local_fingerprint(path: Path) -> list[tuple[str, int, int]]:
    """(relative path, size, mtime_ns) of a local file or every file under a directory."""
    if path.is_dir():
        return [(rel, st.st_size, st.st_mtime_ns) for rel, _, st in list_tree(path)[1]]
    st = path.stat()
    return [("", st.st_size, st.st_mtime_ns)]


def copy_local(src: Path, dest: Path, abort: threading.Event) -> Payload:
    """Copy a local file or tree into ``dest``, hashing as it goes (one read per byte)."""
    try:
        if src.is_dir():
            dirs, found = list_tree(src)
            dest.mkdir()
            for rel in dirs:  # parents sort before children; empty dirs are kept
                (dest / rel).mkdir()
            files = []
            for rel, path, _ in found:
                with open(path, "rb") as fh:
                    files.append(write_file(dest / rel, _chunks(fh.read, abort), rel))
            return Payload(kind="directory", files=files)
        if not src.is_file():
            raise FetchError(f"{src} is not a regular file or directory")
        with open(src, "rb") as fh:
            return Payload(kind="file", files=[write_file(dest, _chunks(fh.read, abort))])
    except PermissionError as exc:
        raise FetchError(f"permission denied reading {exc.filename or src}") from exc
    except FileNotFoundError as exc:
        raise FetchError(f"no such file or directory: {exc.filename or src}") from exc


def download_http(url: str, dest: Path, socket_timeout: float, abort: threading.Event) -> Payload:
    """GET ``url`` into the file ``dest``; non-2xx statuses and short bodies are errors."""
    request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT, "Accept-Encoding": "identity"})
    try:
        with urllib.request.urlopen(request, timeout=socket_timeout) as response:
            expected = response.headers.get("Content-Length")
            # read1: return whatever arrived, so a trickling server still lets us see ``abort``
            record = write_file(dest, _chunks(response.read1, abort))
    except urllib.error.URLError as exc:
        raise _request_error(url, exc, socket_timeout) from None
    except TimeoutError:
        raise FetchTimeout(f"{_redact(url)} stalled: no data for {socket_timeout:g}s") from None
    except http.client.IncompleteRead as exc:
        got = len(exc.partial)
        raise FetchError(f"connection closed early by {_redact(url)} after {got} bytes") from None
    except (http.client.HTTPException, ConnectionError) as exc:
        raise FetchError(f"download from {_redact(url)} failed: {type(exc).__name__}: {exc}") from None
    if expected is not None and expected.isdigit() and int(expected) != record.size:
        raise FetchError(f"truncated download from {_redact(url)}: {record.size} of {expected} bytes")
    return Payload(kind="file", files=[record])


def check_http(url: str, socket_timeout: float) -> None:
    """FetchError unless ``url`` answers as something to download: a HEAD request, or, where
    HEAD is refused (a presigned URL signed for GET, a server without HEAD), a GET of its
    first byte.  Nothing is downloaded."""
    for method, extra in (("HEAD", {}), ("GET", {"Range": "bytes=0-0"})):
        headers = {"User-Agent": _USER_AGENT, "Accept-Encoding": "identity", **extra}
        try:
            with urllib.request.urlopen(
                urllib.request.Request(url, headers=headers, method=method), timeout=socket_timeout
            ):
                return
        except urllib.error.URLError as exc:
            if method == "HEAD" and isinstance(exc, urllib.error.HTTPError) and exc.code in (403, 405, 501):
                exc.close()
                continue
            raise _request_error(url, exc, socket_timeout) from None
        except (TimeoutError, http.client.HTTPException, ConnectionError) as exc:
            raise FetchError(f"no answer from {_redact(url)}: {type(exc).__name__}: {exc}") from None


def _request_error(url: str, exc: urllib.error.URLError, socket_timeout: float) -> FetchError:
    """What a request of ``url`` that failed before its body is reported as: the server's
    HTTP error status (its response closed), no response in time, or no connection."""
    if isinstance(exc, urllib.error.HTTPError):
        exc.close()
        return FetchError(f"HTTP {exc.code} {exc.reason} from {_redact(url)}")
    if isinstance(exc.reason, TimeoutError):
        return FetchTimeout(f"no response from {_redact(url)} within {socket_timeout:g}s")
    return FetchError(f"cannot reach {_redact(url)}: {exc.reason}")


def _redact(url: str) -> str:
    """Drop query and userinfo: presigned URLs from resolvers carry credentials there."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}" + ("?…" if parts.query else "")


def s3_client(endpoint_url: str | None, socket_timeout: float) -> Any:
    """rayeval's S3 client (see ``rayeval._s3``) with this fetch's timeouts."""
    return _s3_client(endpoint_url, connect_timeout=socket_timeout, read_timeout=socket_timeout, max_attempts=3)


_S3_MISSING = ("NoSuchKey", "404", "NotFound")


def _s3_code(exc: Any) -> str:
    """The error code of a botocore ClientError (HEAD responses carry only the status)."""
    code = exc.response.get("Error", {}).get("Code")
    return str(code or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def _s3_problem(exc: Exception, bucket: str, key: str) -> FetchError:
    from botocore.exceptions import (
        ClientError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        ReadTimeoutError,
    )

    where = f"s3://{bucket}/{key}"
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code = _s3_code(exc)
        if code == "NoSuchBucket":
            return FetchError(f"no such S3 bucket: {bucket}")
        if code in _S3_MISSING:
            return FetchError(f"no such S3 key: {where}")
        if code in ("AccessDenied", "403", "Forbidden"):
            return FetchError(f"access denied to {where}")
        return FetchError(f"S3 error {code} for {where}: {err.get('Message', exc)}")
    if isinstance(exc, (ReadTimeoutError, ConnectTimeoutError)):
        return FetchTimeout(f"S3 request for {where} timed out: {exc}")
    if isinstance(exc, NoCredentialsError):
        return FetchError("no AWS credentials found (boto3 default chain: env, ~/.aws, instance role)")
    if isinstance(exc, EndpointConnectionError):
        return FetchError(f"cannot reach S3 endpoint: {exc}")
    return FetchError(f"S3 download of {where} failed: {type(exc).__name__}: {exc}")


def _s3_get(client: Any, bucket: str, key: str, dest: Path, rel: str, abort: threading.Event) -> FileRecord:
    obj = client.get_object(Bucket=bucket, Key=key)
    body = obj["Body"]
    try:
        record = write_file(dest, _chunks(body.read, abort), rel)
    finally:
        body.close()
    if record.size != obj.get("ContentLength", record.size):
        expected = obj["ContentLength"]
        raise FetchError(f"truncated S3 download of s3://{bucket}/{key}: {record.size} of {expected} bytes")
    return record


def _safe_relpath(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and all(p not in ("", ".", "..") for p in parts)


def _s3_parts(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://") :].partition("/")  # keys are literal: no %-decoding, '?'/'#' allowed
    if not bucket:
        raise FetchError("S3 URI has no bucket (expected s3://bucket/key)")
    return bucket, key


def _s3_object_exists(client: Any, bucket: str, key: str) -> bool:
    """Whether ``key`` names an object (False: a prefix to list, or nothing)."""
    from botocore.exceptions import ClientError

    if not key or key.endswith("/"):
        return False
    try:
        client.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if _s3_code(exc) not in _S3_MISSING:
            raise
        return False
    return True


def _s3_prefix(key: str) -> str:
    return key if not key or key.endswith("/") else key + "/"


def _s3_nothing_at(bucket: str, key: str) -> FetchError:
    if key and not key.endswith("/"):
        return FetchError(f"no such S3 key: s3://{bucket}/{key}")
    return FetchError(f"no objects under S3 prefix s3://{bucket}/{_s3_prefix(key)}")


def check_s3(uri: str, client: Any) -> None:
    """FetchError unless ``uri`` names something :func:`download_s3` would download: an
    object (one HEAD), else at least one object under the prefix (one listing of one key)."""
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, key = _s3_parts(uri)
    try:
        if _s3_object_exists(client, bucket, key):
            return
        listed = client.list_objects_v2(Bucket=bucket, Prefix=_s3_prefix(key), MaxKeys=1)
    except (ClientError, BotoCoreError) as exc:
        raise _s3_problem(exc, bucket, key) from None
    if not listed.get("KeyCount", len(listed.get("Contents", []))):
        raise _s3_nothing_at(bucket, key)


def download_s3(uri: str, dest: Path, client: Any, abort: threading.Event) -> Payload:
    """``s3://bucket/key`` → file; ``s3://bucket/prefix/`` (or a key with no object but
    objects under ``key/``) → directory of every object under the prefix."""
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, key = _s3_parts(uri)
    try:
        if _s3_object_exists(client, bucket, key):
            return Payload(kind="file", files=[_s3_get(client, bucket, key, dest, "", abort)])
        prefix = _s3_prefix(key)
        keys: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys.extend(obj["Key"] for obj in page.get("Contents", []))
        if not keys:
            raise _s3_nothing_at(bucket, key)
        dest.mkdir()
        files = []
        for full in sorted(keys):
            marker = full.endswith("/")  # a "folder" marker object: a folder, checked as a file's path is
            rel = full[len(prefix) : -1 if marker else None]
            if marker and not rel:
                continue
            if not _safe_relpath(rel):
                raise FetchError(f"refusing S3 key with an unsafe relative path: s3://{bucket}/{full}")
            if marker:
                (dest / rel).mkdir(parents=True, exist_ok=True)
                continue
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            files.append(_s3_get(client, bucket, full, dest / rel, rel, abort))
        return Payload(kind="directory", files=files)
    except (ClientError, BotoCoreError) as exc:
        raise _s3_problem(exc, bucket, key) from None


def run_with_deadline(
    fn: Callable[[threading.Event], T],
    deadline: float | None,
    on_abort: Callable[[], None],
) -> T:
    """Run ``fn(abort)``; past ``deadline`` (time.monotonic) raise FetchTimeout at once.

    The work runs in a daemon thread so the caller returns exactly at the deadline; the
    thread sees ``abort`` at its next chunk (or socket timeout) and calls ``on_abort``
    to delete whatever it wrote.
    """
    abort = threading.Event()
    if deadline is None:
        return fn(abort)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(abort)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            box["error"] = exc
        finally:
            if abort.is_set():
                on_abort()

    worker = threading.Thread(target=target, name="rayeval-staging-fetch", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if worker.is_alive():
        abort.set()
        on_abort()
        raise FetchTimeout("deadline passed")
    if "error" in box:
        error = box["error"]
        if isinstance(error, _Aborted):
            raise FetchTimeout("deadline passed")
        raise error
    return box["value"]


def scrub(path: Path) -> None:
    """Best-effort removal of a scratch path (fetch-thread cleanup)."""
    shutil.rmtree(path, ignore_errors=True)
