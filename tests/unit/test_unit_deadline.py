"""A unit's deadline against whatever its agent does with its socket: the worker's reading of
a real socket pair, with a real process as the unit's (the agent holds the same socket as the
runner, and can write anything to it, slowly, or shut it down).

Each attack here, against a deadline renewed per read, would keep the worker far longer than
its deadline (or forever); the bounds asserted are hang guards, far below that, not speeds.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from rayeval.sandbox import units

MAX_OUTPUT = 1000
TRICKLE_S = 0.2  # between two bytes trickled: far below any deadline here


def frame(kind: bytes, data: bytes) -> bytes:
    return struct.pack("!cQ", kind, len(data)) + data


def trickle(sock: socket.socket, data: bytes) -> None:
    """``data`` one byte at a time, ``TRICKLE_S`` apart (until the other end is gone)."""
    for byte in data:
        time.sleep(TRICKLE_S)
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            return


RESULT = frame(b"R", json.dumps({"kind": "returned", "value": {"value": 1}}).encode())


def result_after(deadline_s: float) -> Callable[[socket.socket], None]:
    """A whole result and an exit report, the result's bytes trickled so that its last one
    comes ``TRICKLE_S`` or more after the deadline."""

    def send(sock: socket.socket) -> None:
        late = int(deadline_s / TRICKLE_S) + 2
        sock.sendall(RESULT[:-late])
        trickle(sock, RESULT[-late:])
        with contextlib.suppress(OSError):  # the worker gone
            sock.sendall(frame(b"X", b"0"))

    return send


# what the agent does with its end; each, against a per-read timeout, holds the worker > 10 s
ATTACKS: dict[str, Callable[[socket.socket], None]] = {
    "trickled header": lambda sock: trickle(sock, frame(b"Z", b"x" * 60)),
    "trickled result": lambda sock: (sock.sendall(frame(b"R", b"x" * 500)[:9]), trickle(sock, b"x" * 500)),
    "header promising more, then silence": lambda sock: sock.sendall(frame(b"R", b"{" * 100)[:20]),
    "half-closed": lambda sock: sock.shutdown(socket.SHUT_WR),
    "result completing after the deadline": result_after(1.0),
}


@dataclass
class Unit:
    worker_end: socket.socket
    agent_end: socket.socket
    process: subprocess.Popen[bytes]
    agent: units._AgentProcess

    def collect(self, deadline_s: float | None, attack: Callable[[socket.socket], None]) -> tuple[units._Ended, float]:
        """What the worker makes of ``attack`` (run on a thread), and how long it took, its
        process ended as ``UnitRunner._run`` ends it."""
        threading.Thread(target=attack, args=(self.agent_end,), daemon=True).start()
        start = time.monotonic()
        deadline = None if deadline_s is None else start + deadline_s
        try:
            ended = units._collect(self.worker_end, self.agent, MAX_OUTPUT, deadline)
        finally:
            self.agent.end()
        return ended, time.monotonic() - start


def start_unit(command: list[str]) -> Iterator[Unit]:
    worker_end, agent_end = socket.socketpair()
    process = subprocess.Popen(command, start_new_session=True)
    agent = units._AgentProcess(os.pidfd_open(process.pid), None, group=True)
    try:
        yield Unit(worker_end, agent_end, process, agent)
    finally:
        process.kill()
        process.wait()
        agent.close()
        worker_end.close()
        agent_end.close()


@pytest.fixture
def running() -> Iterator[Unit]:
    """A unit whose process runs on until it is killed."""
    yield from start_unit(["sleep", "60"])


@pytest.fixture
def ending() -> Iterator[Unit]:
    """A unit whose process ends by itself, early."""
    yield from start_unit(["sleep", "0.3"])


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_nothing_sent_or_closed_stretches_the_deadline(running: Unit, attack: str) -> None:
    ended, seconds = running.collect(1.0, ATTACKS[attack])
    assert ended.timed_out and ended.result is None, ended
    assert seconds < 5, seconds  # a hang guard: each attack holds a per-read timeout > 10 s
    assert running.process.wait(timeout=5) == -9  # killed at its deadline


def test_a_result_in_time_is_kept_when_the_agent_runs_on(running: Unit) -> None:
    ended, seconds = running.collect(1.0, lambda sock: sock.sendall(RESULT))
    assert ended.result == RESULT[9:] and not ended.timed_out, ended
    assert seconds < 5, seconds  # no wait past the deadline for a report that never comes
    assert running.process.wait(timeout=5) == -9


def test_a_result_and_its_exit_report_end_the_wait(running: Unit) -> None:
    ended, seconds = running.collect(30.0, lambda sock: sock.sendall(RESULT + frame(b"X", b"0")))
    assert ended.result == RESULT[9:] and ended.exit_code == 0 and not ended.timed_out, ended
    assert seconds < 15, seconds


def test_a_flood_of_empty_frames_is_cut_off(running: Unit) -> None:
    """Empty frames cost the worker a read each: they count against what a unit may send."""

    def flood(sock: socket.socket) -> None:
        with_100 = frame(b"Z", b"") * 100
        while True:
            try:
                sock.sendall(with_100)
            except OSError:
                return

    ended, seconds = running.collect(30.0, flood)
    assert ended.overflow and not ended.timed_out, ended
    assert seconds < 15, seconds  # a hang guard: uncounted, the flood runs to the deadline


@pytest.mark.parametrize("deadline_s", [30.0, None])
def test_a_process_that_ended_mid_frame_is_not_waited_for(ending: Unit, deadline_s: float | None) -> None:
    """Its channel left unfinished (a header promising more) by a process that has ended: the
    runner's exit report cannot be told apart from the rest of that frame, and the pidfd is
    what says the unit is over, not the deadline (with none, nothing else would)."""
    ended, seconds = ending.collect(deadline_s, lambda sock: sock.sendall(frame(b"R", b"{" * 100)[:20]))
    assert not ended.timed_out and ended.result is None, ended
    assert seconds < 15, seconds
    assert units._outcome(ended, MAX_OUTPUT, deadline_s).error_type == "AgentProcessDied"


def test_a_half_closed_channel_of_a_process_that_ended_is_not_a_timeout(ending: Unit) -> None:
    ended, seconds = ending.collect(30.0, lambda sock: sock.shutdown(socket.SHUT_WR))
    assert not ended.timed_out and ended.result is None, ended
    assert seconds < 15, seconds


def test_the_handover_of_a_unit_has_an_absolute_deadline() -> None:
    """The runner's hand-over without a pidfd: a pid as text, read by its deadline, however
    slowly its digits come."""
    runner_end, worker_end = socket.socketpair()
    with runner_end, worker_end:
        threading.Thread(target=trickle, args=(runner_end, b"p" + b"1".rjust(20)), daemon=True).start()
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            units._started(worker_end, start + 1.0, group=False)
        assert time.monotonic() - start < 3  # a hang guard: the digits take 4 s
