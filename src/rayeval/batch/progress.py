"""Live progress: a rich bar on a terminal, a log line every few seconds elsewhere (CI, job logs)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``header``, printed first (a line each), says what runs and where its results go (a run
    killed outright, without a summary, is resumed by its id) and how many units run at once:
    printed whether the progress itself is shown (``enabled``) or not (a job's log has it)."""

    def __init__(
        self,
        total: int,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        log_every_s: float = 5.0,
        header: str = "",
    ):
        self.total = total
        self.done = self.passed = self.errors = 0
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.log_every_s = log_every_s
        self.start = time.monotonic()
        self._last_log = 0.0
        self._live = None
        if header:
            print("".join(f"[rayeval] {line}\n" for line in header.splitlines()), end="", file=self.stream, flush=True)
        if enabled and self.stream.isatty():
            from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self._live = RichProgress(
                TextColumn("[bold]rayeval"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TextColumn("{task.fields[detail]}"),
                TimeRemainingColumn(),
                transient=False,
            )
            self._task = self._live.add_task("run", total=total, detail="")
            self._live.start()

    def units_start(self) -> None:
        """The units start now (Ray and the workers are up): the rate, and so the ETA, counts
        from here, not from the run's start-up, which would make the first ETA far too long."""
        self.start = time.monotonic()
        if self._live is not None:
            self._live.reset(self._task, total=self.total, completed=self.done)

    def line(self) -> str:
        elapsed = time.monotonic() - self.start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = _duration((self.total - self.done) / rate) if rate > 0 else "?"
        pass_rate = f"{100 * self.passed / self.done:.1f}%" if self.done else "-"
        percent = f"{100 * self.done / self.total:.1f}%" if self.total else "100%"
        return (
            f"{self.done}/{self.total} units done ({percent}), pass rate {pass_rate}, {self.errors} errors, ETA {eta}"
        )

    def update(self, *, passed: bool, error: bool) -> None:
        self.done += 1
        self.passed += int(passed)
        self.errors += int(error)
        if not self.enabled:
            return
        if self._live is not None:
            pass_rate = f"pass {100 * self.passed / self.done:.1f}%  errors {self.errors}"
            self._live.update(self._task, completed=self.done, detail=pass_rate)
        elif time.monotonic() - self._last_log >= self.log_every_s or self.done == self.total:
            self._last_log = time.monotonic()
            print(f"[rayeval] {self.line()}", file=self.stream, flush=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
