"""One walk over a folder tree that follows links, as copying it does, and enters each real
folder once (a link back up is not followed round)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path


def walk_once(root: Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(root, followlinks=True)`` with cycles cut; an unreadable folder raises its
    OSError. Callers may prune the yielded folder list, as with ``os.walk``."""
    seen: set[tuple[int, int]] = set()

    def fail(exc: OSError) -> None:
        raise exc

    for folder, dirs, files in os.walk(root, followlinks=True, onerror=fail):
        info = os.stat(folder)
        if (info.st_dev, info.st_ino) in seen:
            dirs[:] = []
            continue
        seen.add((info.st_dev, info.st_ino))
        yield folder, dirs, files
