"""Stopping a run from outside: Ctrl-C, or SIGTERM as ``ray job stop`` and Kubernetes send it."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class RunCancelled(KeyboardInterrupt):
    """The run was stopped by Ctrl-C or SIGTERM (``ray job stop``, a pod shutting down).

    Every unit finished by then is stored and the manifest says ``cancelled``; the same run id
    with ``resume`` runs the rest.  A KeyboardInterrupt, so code that stops on Ctrl-C still does.
    """

    def __init__(self, run_id: str, signal_number: int):
        super().__init__(f"run {run_id} stopped by {signal.Signals(signal_number).name}")
        self.run_id = run_id
        self.signal_number = signal_number


class StopSignals:
    """While a run goes on, SIGTERM ends it as Ctrl-C does: rows buffered in the driver are
    stored and the manifest says cancelled (Ray's own handler would exit at once, leaving them
    in the local WAL, which on a cluster may go with the head node).  A second SIGTERM does not
    cut that short.  Inside :meth:`deferred` either signal waits until the block is done, so a
    row is never half taken (in the WAL, not yet in the writer's buffer).  The handlers found on
    entry are restored on exit.  Main thread only.
    """

    def __enter__(self) -> StopSignals:  # noqa: PYI034 - typing.Self needs Python 3.11; we support 3.10
        self.received: int | None = None
        self._deferring = False
        self._pending: int | None = None
        self._active = threading.current_thread() is threading.main_thread()
        self._original = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
        # Ctrl-C is ours only where Python would raise on it (not in ``cmd &``, which ignores it)
        self._handled = [signal.SIGTERM]
        if self._original[signal.SIGINT] is signal.default_int_handler:
            self._handled.append(signal.SIGINT)
        self.claim()
        return self

    def claim(self) -> None:
        """(Again) handle the signals here: ``ray.init`` installs Ray's handler."""
        if self._active:
            for number in self._handled:
                signal.signal(number, self._stop)

    @property
    def by(self) -> int:
        """The signal that stopped the run (SIGINT when Ray turned it into a KeyboardInterrupt)."""
        return self.received or signal.SIGINT

    def _stop(self, signum: int, frame: object) -> None:
        # Ray's blocking calls turn whatever a signal handler raises into a plain
        # KeyboardInterrupt: ``received`` tells SIGTERM apart from Ctrl-C.
        if self.received is None:
            self.received = signum
        if signum == signal.SIGTERM:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if self._deferring:
            self._pending = signum
            return
        raise KeyboardInterrupt(signal.Signals(signum).name)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A stop signal that comes inside waits until the block is done, then stops the run."""
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self._pending is not None:
            raise KeyboardInterrupt(signal.Signals(self._pending).name)

    def __exit__(self, *exc_info: object) -> None:
        if self._active:
            for number in self._handled:
                original = self._original[number]
                signal.signal(number, signal.SIG_DFL if original is None else original)
