"""Pluggable resolvers for URI schemes rayeval cannot fetch by itself (``latch://`` …).

Contract: a resolver is ``fn(uri: str) -> str | os.PathLike | Resolved``. It returns either

* a **local path** (absolute, or a ``file://`` URL) to a file or directory the resolver
  has already materialised, e.g. with ``LPath(uri).download(dst)`` from Latch's SDK; or
* a **fetchable URL** (``http://``, ``https://`` or ``s3://``), e.g. a presigned URL,
  which the staging layer then downloads with the same timeout, cache and atomicity
  rules as any other node.

The cache key stays the *original* URI, so a resolver that hands out a fresh presigned
URL each time still hits the cache. The staged basename is the URI's last path component
unless the resolver returns ``Resolved(target, name=...)``: id-style URIs such as
``latch://12345.node`` should name the node that way (``LPath(uri).name()``). The name is
kept in the cache sidecar. A resolver is called only on a cache miss (under the entry's lock, inside the
download deadline); a hit never calls it, so reuse needs no credentials.

A registration is per process: with Ray, register resolvers in every worker (e.g. from a
module the worker imports, or a ``worker_process_setup_hook``), or install a package that
offers its resolver under the ``rayeval.resolvers`` entry-point group (``latch = pkg:resolve``),
which every process finds.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Union

from ..registry import Registry


@dataclass(frozen=True)
class Resolved:
    """A resolver's answer when it also knows the node's real basename."""

    target: str | os.PathLike[str]  # local path, file://, http(s):// or s3:// URL
    name: str | None = None  # staged basename; None: last component of the URI


Resolver = Callable[[str], Union[str, "os.PathLike[str]", Resolved]]

#: Schemes the staging layer fetches itself; resolvers cannot replace them.
BUILTIN_SCHEMES = frozenset({"", "file", "http", "https", "s3"})


def _resolver(value: object) -> Resolver:
    if not callable(value):
        raise TypeError(f"a resolver must be callable, got {type(value).__name__}")
    return value


#: By scheme; installed packages add theirs under the ``rayeval.resolvers`` entry-point group.
RESOLVERS: Registry[Resolver] = Registry("resolvers", _resolver)


def _normalise_scheme(scheme: str) -> str:
    name = scheme.strip().lower().removesuffix("://").removesuffix(":")
    if not name:
        raise ValueError("resolver scheme must be a non-empty string such as 'latch'")
    if name in BUILTIN_SCHEMES:
        raise ValueError(f"{name}:// is fetched by rayeval itself; register resolvers for other schemes")
    return name


def register_resolver(scheme: str, fn: Resolver) -> None:
    """Register ``fn`` to turn ``<scheme>://…`` URIs into a local path or fetchable URL.

    Registering the same scheme again replaces the previous resolver.
    """
    RESOLVERS.register(_normalise_scheme(scheme), _resolver(fn), replace=True)


def unregister_resolver(scheme: str) -> Resolver | None:
    """Remove the resolver for ``scheme``; returns it, or None when there was none."""
    return RESOLVERS.unregister(_normalise_scheme(scheme))


def get_resolver(scheme: str) -> Resolver | None:
    """The resolver registered for ``scheme``, or None."""
    return RESOLVERS.find(scheme.lower())


def missing_resolver_message(scheme: str) -> str:
    """The error text for a URI whose scheme has no resolver (named in StagingError)."""
    hint = " (e.g. using latch's SDK)" if scheme == "latch" else ""
    return (
        f"no resolver for {scheme}:// URIs: install/configure one with "
        f"rayeval.data.register_resolver({scheme!r}, ...){hint}"
    )
