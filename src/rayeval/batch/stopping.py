"""Stopping a run from outside: Ctrl-C, or SIGTERM as ``ray job stop`` and Kubernetes send it."""

from __future__ import annotations

import signal
import threading


class RunCancelled(KeyboardInterrupt):
    """The run was stopped by Ctrl-C or SIGTERM (``ray job stop``, a pod shutting down).

    Every unit finished by then is stored and the manifest says ``cancelled``; the same run id
    with ``resume`` runs the rest.  A KeyboardInterrupt, so code that stops on Ctrl-C still does.
    """

    def __init__(self, run_id: str, signal_number: int):
        super().__init__(f"run {run_id} stopped by {signal.Signals(signal_number).name}")
        self.run_id = run_id
        self.signal_number = signal_number


class SigtermStopsTheRun:
    """While a run goes on, SIGTERM ends it as Ctrl-C does: rows buffered in the driver are
    stored and the manifest says cancelled (Ray's own handler would exit at once, leaving them
    in the local WAL, which on a cluster may go with the head node).  A second SIGTERM does not
    cut that short.  The handler found on entry is restored on exit.  Main thread only.
    """

    def __enter__(self) -> SigtermStopsTheRun:  # noqa: PYI034 - typing.Self needs Python 3.11; we support 3.10
        self.received = False
        self._active = threading.current_thread() is threading.main_thread()
        self._original = signal.getsignal(signal.SIGTERM) if self._active else None
        self.claim()
        return self

    def claim(self) -> None:
        """(Again) handle SIGTERM here: ``ray.init`` installs Ray's handler."""
        if self._active:
            signal.signal(signal.SIGTERM, self._stop)

    def _stop(self, signum: int, frame: object) -> None:
        # Ray's blocking calls turn whatever a signal handler raises into a plain
        # KeyboardInterrupt: ``received`` tells it apart from Ctrl-C.
        self.received = True
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt("SIGTERM")

    def __exit__(self, *exc_info: object) -> None:
        if self._active:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if self._original is None else self._original)
