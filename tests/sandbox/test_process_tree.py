"""Ending a process tree: a real shell whose children and grandchildren ignore SIGTERM, honour
it, or (with ``descendants`` reach) move to a session of their own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rayeval.sandbox.process_tree import Reach, end_process_tree

# A child: itself, a grandchild with its disposition, a grandchild ignoring SIGTERM. "note"
# writes its pid to termed when SIGTERM comes and exits.
CHILD = """\
out=$1
if [ "$2" = ignore ]; then trap '' TERM; else trap 'echo $$ >> "$out/termed"; exit 0' TERM; fi
echo $$ >> "$out/pids"
sleep 600 &
echo $! >> "$out/pids"
(trap '' TERM; exec sleep 600) &
echo $! >> "$out/pids"
wait
"""
TREE = """\
out=$1
echo $$ >> "$out/pids"
sh "$out/child.sh" "$out" ignore &
sh "$out/child.sh" "$out" note &
if [ "$2" = descendants ]; then setsid sh "$out/child.sh" "$out" ignore & fi
wait
"""


def _gone(pid: int) -> bool:
    """No such process, or a zombie (ended, not reaped by its parent yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


def _wait_for(condition: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {limit:g} s")
        time.sleep(0.05)


@pytest.mark.parametrize("reach", ["descendants", "session"])
def test_every_process_of_the_tree_ends(tmp_path: Path, reach: Reach) -> None:
    (tmp_path / "child.sh").write_text(CHILD)
    (tmp_path / "tree.sh").write_text(TREE)
    expected = 1 + 3 * (3 if reach == "descendants" else 2)
    shell = subprocess.Popen(
        ["sh", str(tmp_path / "tree.sh"), str(tmp_path), reach], start_new_session=reach == "session"
    )
    pids_file = tmp_path / "pids"
    pids: list[int] = []
    try:
        _wait_for(lambda: pids_file.exists() and len(pids_file.read_text().split()) == expected, "the tree started")
        pids = [int(pid) for pid in pids_file.read_text().split()]
        if reach == "descendants":  # one child left the shell's session: only parent links find it
            assert len({os.getsid(pid) for pid in pids}) == 2
        end_process_tree(shell, reach, grace=5)
        shell.wait(timeout=60)
        _wait_for(lambda: all(_gone(pid) for pid in pids), "every process ended")
        # SIGTERM came first: the child that honours it noted it, within the grace
        assert len((tmp_path / "termed").read_text().split()) == 1
    finally:
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        shell.kill()
        shell.wait()


def test_without_grace_everything_is_killed_at_once(tmp_path: Path) -> None:
    (tmp_path / "child.sh").write_text(CHILD)
    child = subprocess.Popen(["sh", str(tmp_path / "child.sh"), str(tmp_path), "note"], start_new_session=True)
    pids_file = tmp_path / "pids"
    _wait_for(lambda: pids_file.exists() and len(pids_file.read_text().split()) == 3, "the tree started")
    pids = [int(pid) for pid in pids_file.read_text().split()]
    try:
        end_process_tree(child, "session")
        assert child.wait(timeout=60) == -signal.SIGKILL  # no SIGTERM: it noted nothing
        _wait_for(lambda: all(_gone(pid) for pid in pids), "every process ended")
        assert not (tmp_path / "termed").exists()
    finally:
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_a_reaped_child_is_left_alone(tmp_path: Path) -> None:
    """Its pid may be another process's by now."""
    child = subprocess.Popen(["true"])
    child.wait()
    end_process_tree(child, "descendants", grace=5)  # nothing to signal: returns at once
    assert child.returncode == 0
