"""What to do about a provider's failures: resume the session after a wait, with the next key, or stop.

Every program spec (Claude Code, Codex, mini-swe-agent, pi) turns its own error events into
:class:`rayeval.models.failures.ProviderFailure` values; the resume loop of
:class:`rayeval.agents._base.ProgramAgent` decides from them with :class:`Recovery`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from .._backoff import doubled_s
from .._json import amount_in
from ..models.failures import ProviderFailure

StopReason = Literal["wait_budget_exhausted", "run_deadline", "missing_session", "not_retryable"]


# ----------------------------------------------------------------------------- the wait policy
#: ``provider_wait_s``'s default: the most seconds a unit waits, in all, before resuming
DEFAULT_WAIT_BUDGET_S = 1800.0
#: ``provider_jitter_s``'s default: at most this many random seconds on top of a provider's hint
DEFAULT_HINT_JITTER_S = 5.0
CAPACITY_STATUSES = frozenset({429, 529})
CAPACITY_WAIT_S = (60.0, 15.0)  # no hint on a rate limit or overload: 60-75 s
OTHER_WAIT_S = (5.0, 5.0)  # no hint on another retryable status: 5-10 s
MAX_WAIT_S = 300.0
MIN_WAIT_S = 1.0  # a hint of 0 must not make a tight loop of resumes


def resume_wait_s(
    failure: ProviderFailure,
    consecutive: int,
    jitter_s: float = DEFAULT_HINT_JITTER_S,
    uniform: Callable[[float, float], float] = random.uniform,
) -> float:
    """Seconds to wait before resuming after ``failure``, the ``consecutive``-th (1, 2, ...)
    since the last completed model turn: the provider's hint plus 0..``jitter_s`` s, else
    60-75 s for a rate limit or overload and 5-10 s otherwise; doubled for each consecutive
    failure, at most :data:`MAX_WAIT_S` and at least :data:`MIN_WAIT_S`, never below the hint."""
    if failure.retry_after_s is not None:
        base = failure.retry_after_s + uniform(0.0, jitter_s)
    else:
        fixed, jitter = CAPACITY_WAIT_S if failure.status in CAPACITY_STATUSES else OTHER_WAIT_S
        base = fixed + uniform(0.0, jitter)
    delay = doubled_s(max(base, MIN_WAIT_S), min(max(consecutive, 1) - 1, 10), MAX_WAIT_S)
    return max(delay, failure.retry_after_s or 0.0)


def wait_option(name: str, value: Any) -> float:
    """An agent's ``provider_wait_s`` or ``provider_jitter_s``: a finite number >= 0 (else
    :class:`ValueError` naming the option and the value)."""
    seconds = amount_in(value)
    if seconds is None:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return seconds


@dataclass
class Recovery:
    """A unit's provider recovery so far: what it waited, resumed and switched, and when it
    must stop (the wait budget, the unit's deadline on the monotonic clock)."""

    wait_budget_s: float = DEFAULT_WAIT_BUDGET_S
    jitter_s: float = DEFAULT_HINT_JITTER_S
    deadline: float | None = None
    spare_keys: list[str] = field(default_factory=list)
    resumes: int = 0
    waited_s: float = 0.0
    consecutive: int = 0
    key_fallbacks: int = 0
    stop_reason: StopReason | None = None
    last_failure: ProviderFailure | None = None

    def out_of_time(self) -> bool:
        """Whether the unit's deadline has passed."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    def remaining_s(self) -> float | None:
        """Seconds left before the unit's deadline (None: it has none)."""
        return None if self.deadline is None else max(self.deadline - time.monotonic(), 0.001)

    def next_step(self, failure: ProviderFailure | None, progressed: bool, resumable: bool) -> Step | None:
        """After a run that ended without an answer on ``failure`` (its last, or None), with
        ``progressed`` (it completed a model turn) and ``resumable`` (its session can go on):
        resume with the next key, resume after a wait, or stop (None; ``stop_reason`` says
        why when a provider failure was the cause)."""
        self.last_failure = failure
        if progressed:
            self.consecutive = 0
        if failure is None:
            return None
        if failure.key_rejected and self.spare_keys:
            if not resumable:
                return self._stop("missing_session")
            self.key_fallbacks += 1
            return Step(wait_s=0.0, key=self.spare_keys.pop(0))
        if not failure.retryable:
            return self._stop("not_retryable")
        self.consecutive += 1
        wait = resume_wait_s(failure, self.consecutive, self.jitter_s)
        if not resumable:
            return self._stop("missing_session")
        if wait > self.wait_budget_s - self.waited_s:
            return self._stop("wait_budget_exhausted")
        if self.deadline is not None and wait >= self.deadline - time.monotonic():
            return self._stop("run_deadline")
        self.resumes += 1
        return Step(wait_s=wait)

    def ran_out_of_time(self, failure: ProviderFailure | None) -> None:
        """The unit's deadline cut off a run that was on ``failure`` (None: on none): it stays the
        unit's error, stopped by the deadline, not a plain timeout."""
        self.last_failure = failure
        if failure is not None:
            self.stop_reason = "run_deadline"

    def waited(self, seconds: float) -> None:
        self.waited_s += seconds

    def _stop(self, reason: StopReason) -> Step | None:
        """No further step, for ``reason``."""
        self.stop_reason = reason
        return None

    def metadata(self) -> dict[str, Any]:
        """What every row of a program agent reports of it."""
        return {
            "provider_retry_count": self.resumes,
            "provider_retry_wait_s": round(self.waited_s, 3),
            "key_fallback_count": self.key_fallbacks,
        }

    def error_details(self) -> dict[str, Any]:
        """The row's error details when the unit ended without an answer on :attr:`last_failure`."""
        assert self.last_failure is not None
        return {
            **self.last_failure.as_dict(),
            "provider_retry_count": self.resumes,
            "provider_retry_wait_s": round(self.waited_s, 3),
            "provider_retry_stop_reason": self.stop_reason,
        }


@dataclass(frozen=True)
class Step:
    """Resume the session after ``wait_s`` seconds (with ``key`` in the key's variable, if set)."""

    wait_s: float
    key: str | None = None
