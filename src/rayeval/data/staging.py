"""Stage an eval's ``data_node`` inputs read-only into a run's ``data/`` folder.

Every node goes through the node-local cache (``cache.py``): concurrent runs on one
machine download a URI once. The agent under evaluation is untrusted and owns whatever
is in its work dir, so nothing there shares an inode with the cache or a source:

- ``mode="copy"``: each staged file is its own read-only copy of the cached bytes (a
  reflink, sharing extents copy-on-write, where the filesystem allows; else a byte copy).
- ``mode="mount"``: nothing is copied; ``data/<name>`` is an empty placeholder (file or
  directory) and ``StagedNode.view_source`` names the cache payload for a sandbox to
  bind-mount read-only onto it.

Local sources are copied into the cache too (never linked), so a user's own file never
reaches a work dir, and a changed one is copied again.

Supported nodes: local paths (relative ones against ``base_dir``), ``file://``,
``http(s)://``, ``s3://bucket/key`` (a file), ``s3://bucket/prefix/`` (a directory), and
any scheme with a registered resolver (``resolvers.py``), such as ``latch://``. Local nodes
must resolve inside the data roots given (``evals/data_roots.py``): the loader checked them
already, staging checks again, as a symlink may have changed since.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ConfigDict

from ..errors import RayevalError
from ..evals.data_roots import (
    checked_data_tree,
    file_url_path,
    local_node_path,
    resolve_roots,
)
from .cache import (
    CHUNK,
    EntryMeta,
    LockTimeout,
    Payload,
    default_cache_dir,
    open_entry,
    remove_tree,
)
from .fetch import (
    DEFAULT_SOCKET_TIMEOUT,
    FetchError,
    FetchTimeout,
    copy_local,
    download_http,
    download_s3,
    local_fingerprint,
    run_with_deadline,
    s3_client,
    scrub,
)
from .resolvers import BUILTIN_SCHEMES, Resolved, get_resolver, missing_resolver_message

__all__ = ["StagedNode", "StagingError", "stage_data"]

StageMode = Literal["copy", "mount"]
#: ioctl making the destination file share the source's extents (btrfs, XFS, bcachefs...).
_FICLONE = 0x40049409


class StagedNode(BaseModel):
    """Where one data node landed, and what it contained (for provenance in results)."""

    model_config = ConfigDict(frozen=True)

    uri: str
    #: POSIX path relative to ``data_dir.parent``, e.g. ``data/pbmc.h5ad``.
    path: str
    kind: Literal["file", "directory"]
    size_bytes: int
    #: sha256 of the file; for a directory, sha256 over ``<relpath>\\0<file sha256>\\n`` lines.
    sha256: str
    #: True when a valid cache entry already existed (this call downloaded/copied nothing).
    from_cache: bool
    #: Mount mode: absolute path of the cache payload to bind-mount read-only onto ``path``
    #: (an empty placeholder). Bind it before the entry can be rebuilt (its local source
    #: changes). None in copy mode.
    view_source: str | None = None


class StagingError(RayevalError):
    """A data node could not be staged; the message names the URI and the problem."""

    def __init__(self, uri: str, problem: str) -> None:
        self.uri = uri
        self.problem = problem
        super().__init__(f"cannot stage data node {uri!r}: {problem}")

    def __reduce__(self):  # keep it picklable across Ray/multiprocessing boundaries
        return (type(self), (self.uri, self.problem))


@dataclass(frozen=True)
class _Source:
    uri: str  # as written in the eval
    scheme: str  # "local", "http", "https", "s3" or a resolver scheme
    key: str  # cache key: the exact URI, or file://<absolute path> for local nodes
    name: str  # staged basename before collision handling
    local: Path | None = None


_NETWORK = ("http", "https", "s3")


def _safe_name(candidate: str) -> str:
    if candidate in ("", ".", "..") or "/" in candidate or "\0" in candidate:
        return "data"
    return candidate


def _last_segment(path: str) -> str:
    return unquote(next((part for part in reversed(path.split("/")) if part), ""))


def _file_url_path(uri: str) -> str:
    try:
        return file_url_path(uri)
    except ValueError as exc:
        raise FetchError(str(exc)) from None


def _parse(uri: str, base_dir: Path) -> _Source:
    if not isinstance(uri, str) or not uri.strip():
        raise StagingError(str(uri), "a data node must be a non-empty string")
    try:
        path = local_node_path(uri, base_dir)
    except ValueError as exc:
        raise StagingError(uri, str(exc)) from None
    if path is not None:
        return _Source(uri, "local", f"file://{path}", _safe_name(path.name), path)
    scheme = urlsplit(uri).scheme
    parts = urlsplit(uri)
    if scheme == "s3":
        if not uri[len("s3://") :].partition("/")[0] or uri[:5].lower() != "s3://":
            raise StagingError(uri, "expected s3://bucket/key or s3://bucket/prefix/")
        bucket, _, key = uri[len("s3://") :].partition("/")
        name = next((part for part in reversed(key.split("/")) if part), bucket)
        return _Source(uri, scheme, uri, _safe_name(name))
    if scheme in _NETWORK:
        return _Source(uri, scheme, uri, _safe_name(_last_segment(parts.path)))
    if get_resolver(scheme) is None:
        if scheme == "latch":
            raise StagingError(uri, missing_resolver_message(scheme))
        raise StagingError(
            uri,
            f"unknown URI scheme {scheme}:// (supported: local paths, file://, http(s)://, s3://, "
            f"and schemes with a resolver registered via rayeval.data.register_resolver)",
        )
    return _Source(uri, scheme, uri, _safe_name(_last_segment(parts.path) or parts.netloc))


def _inside_roots(src: _Source, roots: Sequence[Path]) -> _Source:
    """A local source checked against the data roots, with every file of a directory (whose
    symlinks copying follows), to be copied from its real path: what is copied is what was
    checked. Other sources are returned as they are."""
    if src.local is None:
        return src
    try:
        real = checked_data_tree(src.local, roots)
    except ValueError as exc:
        raise StagingError(src.uri, str(exc)) from None
    except OSError as exc:  # an unreadable folder of the directory
        raise StagingError(src.uri, f"cannot read {exc.filename or src.local}: {exc.strerror or exc}") from None
    return replace(src, local=real)


def _claim_name(name: str, uri: str, used: set[str]) -> str:
    """``name``, or ``<stem>-<8 hex of sha256(uri)><suffix>`` when an earlier node took it."""
    if name not in used:
        used.add(name)
        return name
    dot = name.find(".", 1)
    stem, suffix = (name, "") if dot == -1 else (name[:dot], name[dot:])
    tag = hashlib.sha256(uri.encode("utf-8")).hexdigest()[:8]
    candidate, n = f"{stem}-{tag}{suffix}", 2
    while candidate in used:
        candidate, n = f"{stem}-{tag}-{n}{suffix}", n + 1
    used.add(candidate)
    return candidate


def _make_file(dst: Path, copy_of: Path | None) -> None:
    """Create ``dst`` read-only, holding its own copy of ``copy_of`` (a reflink where the
    filesystem can, else the bytes), or empty (a mount placeholder) for None. Never a
    link: the agent owns ``dst`` and may chmod and rewrite it."""
    with open(dst, "xb") as out:
        if copy_of is not None:
            with open(copy_of, "rb") as fh:
                try:
                    fcntl.ioctl(out.fileno(), _FICLONE, fh.fileno())
                except OSError:  # no shared extents here (ext4, tmpfs, across filesystems)
                    shutil.copyfileobj(fh, out, CHUNK)
    os.chmod(dst, 0o444)


def _place(payload: Path, kind: str, target: Path, mode: StageMode) -> None:
    """Build the staged copy (or mount placeholder) beside ``target`` and rename it into
    place, so it is never half-visible."""
    scratch = target.parent / f".{target.name}.staging-{secrets.token_hex(4)}"
    try:
        if kind == "file":
            _make_file(scratch, payload if mode == "copy" else None)
        elif mode == "mount":
            scratch.mkdir()
        else:
            for dirpath, _, filenames in os.walk(payload):
                here = scratch / Path(dirpath).relative_to(payload)
                here.mkdir()
                for name in filenames:
                    _make_file(here / name, Path(dirpath, name))
        if target.exists() or target.is_symlink():
            remove_tree(target)  # the reference replaces whatever was there
        os.rename(scratch, target)
    except BaseException:
        with contextlib.suppress(OSError):
            remove_tree(scratch)
        raise
    if kind == "directory":
        for dirpath, _, _ in os.walk(target, topdown=False):
            os.chmod(dirpath, 0o555)


def _resolve(src: _Source) -> tuple[str, str | None]:
    """Ask the scheme's resolver for a fetchable target (and maybe the real basename)."""
    resolver = get_resolver(src.scheme)
    if resolver is None:  # unregistered since _parse
        raise FetchError(missing_resolver_message(src.scheme))
    try:
        answer = resolver(src.uri)
        if not isinstance(answer, Resolved):
            answer = Resolved(answer)
        target = os.fspath(answer.target)
    except Exception as exc:
        raise FetchError(f"the {src.scheme!r} resolver failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(target, str):
        raise FetchError(f"the {src.scheme!r} resolver returned {target!r}, not a path or URL")
    return target, (_safe_name(answer.name) if answer.name else None)


def _fetch_remote(
    src: _Source, dest: Path, abort: threading.Event, socket_timeout: float, endpoint_url: str | None
) -> Payload:
    if src.scheme in BUILTIN_SCHEMES:
        target, name = src.uri, None
    else:
        target, name = _resolve(src)
    scheme = urlsplit(target).scheme
    if scheme in ("", "file") and src.scheme not in BUILTIN_SCHEMES:
        path = Path(_file_url_path(target) if scheme == "file" else target)
        if not path.is_absolute():
            raise FetchError(f"the {src.scheme!r} resolver returned a relative path {target!r}")
        if not path.exists():
            raise FetchError(f"the {src.scheme!r} resolver returned {path}, which does not exist")
        payload = copy_local(path, dest, abort)
    elif scheme == "s3":
        payload = download_s3(target, dest, s3_client(endpoint_url, socket_timeout), abort)
    elif scheme in ("http", "https"):
        payload = download_http(target, dest, socket_timeout, abort)
    else:
        raise FetchError(
            f"the {src.scheme!r} resolver returned a {scheme}:// URI; resolvers must return "
            "a local path or an http(s):// or s3:// URL"
        )
    return payload.model_copy(update={"name": name}) if name else payload


def _builder(src: _Source, deadline: float | None, endpoint_url: str | None):
    """The cache-miss action for a network or resolver node, bounded by ``deadline``."""

    def build(dest: Path) -> Payload:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise FetchTimeout("no time left for this node")
        sock = DEFAULT_SOCKET_TIMEOUT if remaining is None else min(DEFAULT_SOCKET_TIMEOUT, remaining)
        return run_with_deadline(
            lambda abort: _fetch_remote(src, dest, abort, sock, endpoint_url),
            deadline,
            on_abort=lambda: scrub(dest.parent),
        )

    return build


def _stage_one(
    src: _Source,
    data_dir: Path,
    used: set[str],
    cache_dir: Path,
    deadline: float | None,
    endpoint_url: str | None,
    placed: list[Path],
    mode: StageMode,
) -> StagedNode:
    local = src.local
    if local is not None:
        if not local.exists():
            raise FetchError(f"no such file or directory: {local}")
        fingerprint = local_fingerprint(local)

        def build(dest: Path) -> Payload:
            payload = copy_local(local, dest, threading.Event())
            return payload.model_copy(update={"source": fingerprint})

        def is_fresh(meta: EntryMeta) -> bool:
            return meta.source == fingerprint

        opened = open_entry(cache_dir, src.key, src.uri, build, name=src.name, is_fresh=is_fresh)
    else:
        build = _builder(src, deadline, endpoint_url)
        opened = open_entry(cache_dir, src.key, src.uri, build, name=src.name, deadline=deadline)
    with opened as (entry, from_cache):
        name = _claim_name(entry.meta.name, src.uri, used)
        _place(entry.payload, entry.meta.kind, data_dir / name, mode)
        placed.append(data_dir / name)
        return StagedNode(
            uri=src.uri,
            path=f"{data_dir.name}/{name}",
            kind=entry.meta.kind,
            size_bytes=entry.meta.size_bytes,
            sha256=entry.meta.sha256,
            from_cache=from_cache,
            view_source=os.path.abspath(entry.payload) if mode == "mount" else None,
        )


def stage_data(
    nodes: list[str] | str | None,
    data_dir: Path,
    *,
    base_dir: Path | None = None,
    cache_dir: Path | None = None,
    timeout: float | None = None,
    s3_endpoint_url: str | None = None,
    mode: StageMode = "copy",
    data_roots: Sequence[str | Path] = (),
) -> list[StagedNode]:
    """Stage every node read-only into ``data_dir``; one ``StagedNode`` per input, in order.

    Local nodes (plain paths, ``file://``) must resolve, symlinks included, inside one of
    ``data_roots`` and not under /proc, /sys or /dev (with no data roots, none is staged);
    so must every file of a local directory. ``StagingError`` names the node otherwise.

    ``timeout`` (the eval's ``download_timeout``) is one deadline for all network and
    resolver fetches of this call, including waits for another process fetching the same
    URI; local copies are not bounded. On any failure the nodes this call placed are
    removed and ``StagingError`` is raised. A node given twice (same URI or same local
    path) is staged once and reported at both positions. An existing ``data_dir/<name>``
    is replaced (reference behaviour); same-named nodes within one call get distinct names.
    ``data_dir`` itself is left read-only (0o555), like everything staged into it.
    ``mode`` says how the bytes reach ``data_dir`` (copies, or placeholders to mount the
    cache payloads on: ``view_source``); nothing staged is ever a link.
    """
    if isinstance(nodes, str):
        nodes = [nodes]
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if mode not in ("copy", "mount"):
        raise ValueError(f"mode must be 'copy' or 'mount', got {mode!r}")
    if not nodes:
        return []  # nothing to stage: no data folder either (and no cwd or cache lookups per unit)
    data_dir = Path(data_dir)
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    cache_root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    deadline = None if timeout is None else time.monotonic() + timeout

    roots = resolve_roots(data_roots)
    sources = [_inside_roots(_parse(uri, base), roots) for uri in nodes]  # fail fast on bad URIs
    data_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(data_dir, 0o755)  # read-only again below, whatever happens
    used: set[str] = set()
    placed: list[Path] = []
    by_key: dict[str, StagedNode] = {}
    staged: list[StagedNode] = []
    try:
        for src in sources:
            if src.key in by_key:
                staged.append(by_key[src.key].model_copy(update={"uri": src.uri}))
                continue
            try:
                node = _stage_one(src, data_dir, used, cache_root, deadline, s3_endpoint_url, placed, mode)
            except (FetchTimeout, LockTimeout) as exc:
                limit = f" after {timeout:g}s (download_timeout)" if timeout is not None else ""
                raise StagingError(src.uri, f"download timed out{limit}: {exc}") from None
            except FetchError as exc:
                raise StagingError(src.uri, str(exc)) from None
            except OSError as exc:
                where = f": {exc.filename}" if exc.filename else ""
                raise StagingError(src.uri, f"{exc.strerror or exc}{where}") from exc
            by_key[src.key] = node
            staged.append(node)
    except BaseException:
        for path in placed:
            with contextlib.suppress(OSError):
                remove_tree(path)
        raise
    finally:
        os.chmod(data_dir, 0o555)
    return staged
