"""A file written whole or not at all, and a rename made durable: the one way for every layer
(standard library only: a unit's program imports it too)."""

from __future__ import annotations

import contextlib
import os
import secrets


def write_atomic(path: str | os.PathLike[str], data: bytes | str, *, durable: bool = False) -> None:
    """``data`` (text: UTF-8) at ``path``, visible whole or not at all: written to a file of
    its own beside it, then renamed over it. ``durable``: on disk before the rename, and the
    rename too (the folder synced after)."""
    target = os.fspath(path)
    directory, name = os.path.split(target)
    partial = os.path.join(directory, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(partial, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
    if durable:
        fsync_dir(directory or ".")


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a rename or creation in ``directory`` durable (best effort: a folder that cannot
    be opened or synced, as on some network file systems, is left as it is)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
