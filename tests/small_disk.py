"""A small file system made by the test: a tmpfs of a few MiB that fills up, then grows.

Mounting needs root, as the test command runs here and in CI: without it the tests using it fail,
saying so (a disk-full test that is skipped proves nothing).
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


class SmallDisk:
    """A tmpfs mounted at ``path``; :meth:`resize` gives it room again (``-o remount,size=``)."""

    def __init__(self, path: Path, size: str):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))

    def resize(self, size: str) -> None:
        _mount("-o", f"remount,size={size}", str(self.path))

    def free_bytes(self) -> int:
        stats = os.statvfs(self.path)
        return stats.f_bavail * stats.f_frsize

    def fill(self) -> None:
        """Take what room is left, to the last byte (a ``filler`` file at the top)."""
        with (self.path / "filler").open("ab", buffering=0) as out:
            for size in (1 << 16, 4096, 1):
                try:
                    while True:
                        out.write(b"x" * size)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise

    def unmount(self) -> None:
        subprocess.run(["umount", "--lazy", str(self.path)], check=False, capture_output=True)


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], check=False, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(
            f"cannot mount a tmpfs here (mount {' '.join(args)}: {done.stderr.strip()}): the disk-full tests need root"
        )


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[str, str], SmallDisk]]:
    """``small_disk(name, size)``: a tmpfs of ``size`` (``"2m"``) at ``tmp_path / name``,
    unmounted after the test."""
    if os.geteuid() != 0:
        pytest.fail("the disk-full tests mount a tmpfs, which needs root: run the tests as root (as .ci/run does)")
    disks: list[SmallDisk] = []

    def make(name: str, size: str) -> SmallDisk:
        disk = SmallDisk(tmp_path / name, size)
        disks.append(disk)
        return disk

    yield make
    for disk in disks:
        disk.unmount()
