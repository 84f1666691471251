"""When to try a failed model call again, and after how long."""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

from .._backoff import doubled_s
from .._json import amount_in
from .types import RetryPolicy

#: 408 timeout, 409 conflict (OpenAI's "retry your request"), 429 rate limit; every 5xx.
RETRYABLE_STATUSES = frozenset({408, 409, 429})


def retryable(status: int | None) -> bool:
    """Connection errors (``None``), rate limits and server errors are worth another try."""
    return status is None or status in RETRYABLE_STATUSES or status >= 500


def retry_after_s(headers: Mapping[str, Any] | None, now: float | None = None) -> float | None:
    """The wait a server asks for, in seconds: ``retry-after-ms``, or ``retry-after`` as seconds
    or an HTTP date; None when absent, negative or unreadable."""
    if not headers:
        return None
    lowered = {str(key).lower(): value for key, value in headers.items()}
    milliseconds = seconds(lowered.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000
    value = lowered.get("retry-after")
    hint = seconds(value)
    if hint is not None or not isinstance(value, str):
        return hint
    try:
        when = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    current = datetime.now(timezone.utc).timestamp() if now is None else now
    return max(0.0, when.timestamp() - current)


def seconds(value: Any) -> float | None:
    """A finite, non-negative number of seconds from a number or a numeric string, else None."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    return amount_in(value)


def delay_s(policy: RetryPolicy, retry: int, asked_s: float | None) -> float:
    """The wait before retry number ``retry`` (0-based): the server's ``retry-after`` capped
    at ``max_retry_after_s``, else exponential backoff with jitter (half fixed, half random,
    so many clients hit by one outage do not come back together)."""
    if asked_s is not None:
        return min(asked_s, policy.max_retry_after_s)
    ceiling = doubled_s(policy.backoff_s, retry, policy.max_backoff_s)
    return ceiling / 2 + random.uniform(0, ceiling / 2)


def within_budget(policy: RetryPolicy, attempt: int, started: float, wait_s: float) -> bool:
    """Whether another try fits: ``attempt`` tries made so far, ``started`` on the monotonic clock."""
    return attempt < policy.max_attempts and time.monotonic() - started + wait_s <= policy.max_total_s
