"""A provider's retry hint, wherever a program's report of a failed model call keeps it.

Programs report a failed call as headers (litellm keeps the response's ``retry-after-ms`` and
``retry-after``) or as an error body, whole or inside a message (Codex: ``unexpected status 503
...: <body>, url: ...``).  Bodies carry OpenRouter's hint in ``error.metadata`` (``retry_after``,
``retry_after_seconds``, or the upstream's ``headers``) and Google's in a ``RetryInfo`` entry of
``error.details`` (``"retryDelay": "30s"``), possibly as JSON inside an outer error's message when
a gateway wraps Google.  The program specs build :class:`rayeval.agents._recovery.ProviderFailure`
values from what these functions find.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from ..models.retry import retry_after_s, seconds

GOOGLE_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
#: how deep error bodies nested in messages are looked into
MAX_NESTING = 3


def json_in_text(text: str) -> Any:
    """The JSON value that starts at the first ``{`` of ``text`` (text may follow it), or None."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return None
    return value


def _error_objects(payload: Any, depth: int = 0) -> Iterator[dict[str, Any]]:
    """The payload, its ``error`` object, and those of error bodies given as JSON in a message."""
    if not isinstance(payload, dict) or depth > MAX_NESTING:
        return
    yield payload
    error = payload.get("error")
    if isinstance(error, dict):
        yield error
        payload = error
    message = payload.get("message")
    if isinstance(message, str):
        yield from _error_objects(json_in_text(message), depth + 1)


def _openrouter_hint(metadata: Any, now: float | None) -> float | None:
    if not isinstance(metadata, dict):
        return None
    hints = [seconds(metadata.get("retry_after_seconds")), seconds(metadata.get("retry_after"))]
    headers = metadata.get("headers")
    if isinstance(headers, dict):
        hints.append(retry_after_s(headers, now))
        reset_ms = seconds({str(k).lower(): v for k, v in headers.items()}.get("x-ratelimit-reset"))
        if reset_ms is not None:  # an epoch time in milliseconds
            hints.append(max(0.0, reset_ms / 1000.0 - (time.time() if now is None else now)))
    return max((h for h in hints if h is not None), default=None)


def _google_hint(details: Any) -> float | None:
    if not isinstance(details, list):
        return None
    for detail in details:
        if isinstance(detail, dict) and detail.get("@type") == GOOGLE_RETRY_INFO:
            delay = detail.get("retryDelay")
            if isinstance(delay, str) and delay.endswith("s"):
                return seconds(delay[:-1])
    return None


def retry_after_from_body(body: Any, now: float | None = None) -> float | None:
    """The largest retry hint in an error body (a dict, or text holding one as JSON), or None."""
    payload = json_in_text(body) if isinstance(body, str) else body
    hints = []
    for error in _error_objects(payload):
        hints += [_openrouter_hint(error.get("metadata"), now), _google_hint(error.get("details"))]
    return max((h for h in hints if h is not None), default=None)
