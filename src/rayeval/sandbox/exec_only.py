"""Program binaries a unit is shown execute-only.

The kernel makes a process started from a file it cannot read not dumpable: no other
process of the same user may read its memory, environment or open files (``/proc/<pid>/mem``,
``environ``, ``fd``) nor trace it. A real agent program's binary (Claude Code's, Codex's, the
node that runs pi) is shown to its unit as a copy of mode 0111 over its own path, so the
program's tools, which run as the same user, cannot read its environment or write into its
event pipe through ``/proc``. Its copies are made once per version of the file, outside the
sandbox, and shown read-only.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

#: where the copies are kept, under the unit runner's cache folder (hidden from units)
FOLDER = ".exec-only"
MODE = 0o111
PARTIAL = ".partial-"
#: a copy still being made after this long was abandoned
ABANDONED_AFTER_S = 3600.0
#: a copy no unit runner asked for in this long is removed when another is made
UNUSED_AFTER_S = 7 * 24 * 3600.0


def exec_only_copy(path: str, folder: Path) -> str:
    """An execute-only copy of the file at ``path`` in ``folder``, named by its real path,
    size and modification time: made once (atomically, for workers that ask together)."""
    real = os.path.realpath(path)
    info = os.stat(real)
    digest = hashlib.sha256(f"{real}\0{info.st_size}\0{info.st_mtime_ns}".encode()).hexdigest()[:16]
    copy = folder / f"{digest}-{os.path.basename(real)}"
    if copy.exists():
        mark_in_use([(str(copy), real)])
        return str(copy)
    folder.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(folder)
    fd, partial = tempfile.mkstemp(dir=folder, prefix=PARTIAL)
    os.close(fd)
    try:
        shutil.copyfile(real, partial)
        os.chmod(partial, MODE)
        os.replace(partial, copy)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
    return str(copy)


def _remove_abandoned(folder: Path) -> None:
    """Copies a killed worker left half made, and copies no runner used for a week (of a
    program since updated or moved: a program's binary is hundreds of MB). A copy a unit still
    shows stays readable to it: its mount holds the file."""
    for entry in folder.iterdir():
        unused_for = ABANDONED_AFTER_S if entry.name.startswith(PARTIAL) else UNUSED_AFTER_S
        with contextlib.suppress(OSError):
            if time.time() - entry.stat().st_mtime > unused_for:
                entry.unlink()


def mark_in_use(views: list[tuple[str, str]]) -> None:
    """The copies a unit is about to show are in use (a long-lived runner's too): the clean-up
    of unused copies leaves them."""
    for copy, _ in views:
        with contextlib.suppress(OSError):
            os.utime(copy)


def exec_only_views(paths: tuple[str, ...], folder: Path) -> list[tuple[str, str]]:
    """``(copy, real path)`` for each of ``paths`` that is a file: what a unit's view mounts
    over every name its runner's view shows the real path by. None where ``folder`` lies on a
    file system mounted ``noexec``: no copy there could run (the programs are then shown as
    they are)."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.statvfs(folder).f_flag & os.ST_NOEXEC:
        log.warning("%s is on a file system mounted noexec: programs are shown to units as they are", folder)
        return []
    return [(exec_only_copy(path, folder), os.path.realpath(path)) for path in paths if os.path.isfile(path)]
