"""Stop signals wait while a finished unit is being stored: a row is never half taken."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from rayeval.batch.stopping import StopSignals


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """As in a terminal: a suite started in the background (``cmd &``) ignores SIGINT."""
    original = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, original)


def _wait_for_signal() -> None:
    time.sleep(0.2)  # a handler runs between bytecodes of the main thread


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_inside_a_deferred_block_waits_for_its_end(ctrl_c_raises: None, number: int) -> None:
    stored = []
    with StopSignals() as stop, pytest.raises(KeyboardInterrupt), stop.deferred():
        os.kill(os.getpid(), number)
        _wait_for_signal()
        stored.append("row")  # what a stop must not cut: the WAL line and the buffer
    assert stored == ["row"] and stop.by == number


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_outside_a_deferred_block_stops_at_once(ctrl_c_raises: None, number: int) -> None:
    reached = []
    with StopSignals() as stop, pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), number)
        _wait_for_signal()
        reached.append("after")
    assert reached == [] and stop.by == number


def test_the_handlers_found_are_restored_and_an_ignored_ctrl_c_stays_ignored() -> None:
    original_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        before = signal.getsignal(signal.SIGTERM)
        with StopSignals():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not before
        assert signal.getsignal(signal.SIGTERM) is before
    finally:
        signal.signal(signal.SIGINT, original_int)
