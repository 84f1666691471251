"""How the runner hands a unit's process to the worker: a pidfd on Linux, a pid elsewhere."""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest

from rayeval.sandbox import unit_runner, units


@pytest.mark.parametrize("with_pidfd", [True, False])
def test_the_worker_can_end_the_process_it_is_handed(with_pidfd: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not with_pidfd:  # as on a system without pidfds (macOS): the pid, as text
        monkeypatch.delattr(os, "pidfd_open")
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    runner_end, worker_end = socket.socketpair()
    try:
        unit_runner._hand_over(runner_end, child.pid)
        agent = units._started(worker_end, time.monotonic() + 5, group=True)
        assert agent.pid == child.pid and (agent.pidfd is not None) is with_pidfd
        agent.kill()
        assert child.wait(timeout=5) == -9
        agent.close()
    finally:
        child.kill()
        runner_end.close()
        worker_end.close()


def test_anything_else_is_not_a_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    runner_end, worker_end = socket.socketpair()
    with runner_end, worker_end:
        runner_end.sendall(b"?garbage")
        with pytest.raises(EOFError):
            units._started(worker_end, time.monotonic() + 5, group=False)
