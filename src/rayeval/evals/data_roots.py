"""Where local data nodes may come from: inside the allowed data roots, never /proc, /sys, /dev.

Everything a data node names is copied into the work folder of the agent under evaluation,
which is untrusted: an eval file must not be a way to hand it host files (``/etc/shadow``,
``/proc/self/environ``, ``../../..``, a symlink pointing out). The loader checks every eval
against this policy before any work starts; staging checks again at run time, in case a
symlink changed in between. Remote nodes (``s3://``, ``http(s)://``, resolver schemes) are
not concerned.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

from .._walk import walk_once

#: Never staged, whatever the data roots: their files are the host's live state, not data.
SYSTEM_FOLDERS = (Path("/proc"), Path("/sys"), Path("/dev"))


def file_url_path(uri: str) -> str:
    """The local path a ``file://`` URI names; ValueError for a URI naming another host."""
    parts = urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"a file:// URI must name a local path, not host {parts.netloc!r}")
    return url2pathname(parts.path)


def local_node_path(node: str, base_dir: Path) -> Path | None:
    """The absolute path (symlinks not yet resolved) a plain-path or ``file://`` node names,
    relative ones against ``base_dir``; None for a remote node."""
    scheme = urlsplit(node).scheme
    if scheme not in ("", "file"):
        return None
    path = Path(file_url_path(node) if scheme == "file" else node).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    return Path(os.path.abspath(path))


def resolve_roots(roots: Iterable[str | Path]) -> tuple[Path, ...]:
    """The data roots as real absolute paths (symlinks resolved now, once), without duplicates."""
    return tuple(dict.fromkeys(Path(os.path.realpath(Path(root).expanduser())) for root in roots))


def checked_data_path(path: Path, roots: Sequence[Path]) -> Path:
    """The real path of local data at ``path``, or ValueError saying why it may not be staged.

    ``roots`` come from :func:`resolve_roots`. Whether the path exists is not checked here:
    a missing file is reported where it is read.
    """
    real = Path(os.path.realpath(path))
    for system in SYSTEM_FOLDERS:
        if path.is_relative_to(system) or real.is_relative_to(system):
            raise ValueError(f"resolves to {real}, under {system}: /proc, /sys and /dev are never staged as data")
    if not any(real.is_relative_to(root) for root in roots):
        allowed = ", ".join(map(str, roots)) or "none"
        raise ValueError(
            f"resolves to {real}, outside the allowed data roots ({allowed}); "
            "to allow it, pass --data-root DIR (Python: data_roots=[DIR]) with a folder that contains it"
        )
    return real


def checked_data_tree(path: Path, roots: Sequence[Path], eval_files: Collection[Path] = ()) -> Path:
    """:func:`checked_data_path` for a local node and, when it is a folder, for everything in
    it that exists (copying it follows links): the real path to copy from, or ValueError
    naming the first entry that may not be staged. ``eval_files`` (real paths) may not be
    staged either: an eval file's grader config is an answer key. A folder is not entered
    before it is checked, nor twice (a link back up). OSError for a folder that cannot be read."""
    real = _checked_entry(path, roots, eval_files)
    if not real.is_dir():
        return real
    for folder, dirs, files in walk_once(real):
        for name in (*dirs, *files):
            entry = Path(folder, name)
            if not entry.exists():  # a dangling link: never copied
                continue
            try:
                _checked_entry(entry, roots, eval_files)
            except ValueError as exc:
                raise ValueError(f"holds {entry.relative_to(real).as_posix()}, which {exc}") from None
    return real


def _checked_entry(path: Path, roots: Sequence[Path], eval_files: Collection[Path]) -> Path:
    real = checked_data_path(path, roots)
    if real in eval_files:
        raise ValueError(f"resolves to {real}, an eval file: its answer key would reach the agent")
    return real


def unreadable_data(real: Path) -> str | None:
    """Why the local data at ``real`` (a real path, see :func:`checked_data_tree`) cannot be
    staged, or None: it does not exist, is neither a regular file nor a folder, or it (a file),
    or a folder or file in it, cannot be read.  Found when the eval is loaded, so a misspelled
    path stops a run before it starts instead of failing every unit's staging."""
    try:
        info = os.stat(real)
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    if stat.S_ISREG(info.st_mode):
        return _unopenable(real)
    if not stat.S_ISDIR(info.st_mode):
        return "is neither a regular file nor a folder"
    try:
        for folder, _, files in walk_once(real):
            for name in files:
                entry = Path(folder, name)
                if entry.is_file() and (problem := _unopenable(entry)):  # links followed; others are not copied
                    return f"holds {entry.relative_to(real).as_posix()}, which {problem}"
    except OSError as exc:
        return f"holds a folder that cannot be read: {exc.filename}: {exc.strerror or exc}"
    return None


def _unopenable(path: Path) -> str | None:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    return None
