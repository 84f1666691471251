"""A model provider's failure as a unit reports it: status, code, message and retry hint.

Made by the agents (each program's events, the model layer's failed call) and checked again by
the trusted runner, which stores it as a ``ProviderError`` row; one place for its codes and
statuses so that both sides agree.  Codes and retryable statuses follow the reference runner
(latch-eval-tools 0.4.54).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

from .._json import amount_in

#: statuses after which the same session resumes after a wait
RETRYABLE_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 529})
#: statuses a unit's own requests may bring about: a rate limit (a request over the provider's
#: tokens-per-minute limit, a burst of calls); none of the others is the requests' doing
REQUEST_CAUSED_STATUSES = frozenset({429})
#: statuses that reject the key: the session resumes with the next fallback key, if any
KEY_REJECTED_STATUSES = frozenset({401, 403})
#: words of a billing or credit failure, which rejects the key whatever its status (as a
#: program or an SDK reports it; the gateway reads the provider's error itself, see below)
KEY_REJECTED_WORDS = ("credit balance", "billing", "insufficient_quota", "payment required", "quota exceeded")
#: the kind of error (its ``type`` or ``code``) of a key out of quota (OpenAI's)
BILLING_ERROR_KIND = "insufficient_quota"
#: how the message of a key out of credit begins, where its status does not say it (Anthropic's 400)
BILLING_MESSAGE_STARTS = ("Your credit balance is too low",)
MESSAGE_CHARS = 500
#: the variable listing Anthropic keys to use, in turn, when the provider rejects the key
ANTHROPIC_KEY_FALLBACKS = "ANTHROPIC_API_KEY_FALLBACKS"
#: the variable naming on what the gateway moves to the next of those keys: ``rejected_key``
#: (401/403, billing: rayeval's default), ``refusal`` (a reply the model refused: the reference
#: runner's) or ``both``
ANTHROPIC_KEY_FALLBACK_ON = "ANTHROPIC_KEY_FALLBACK_ON"
KeyFallbackOn = Literal["rejected_key", "refusal", "both"]
KEY_FALLBACK_TRIGGERS: tuple[KeyFallbackOn, ...] = ("rejected_key", "refusal", "both")


@dataclass(frozen=True)
class ProviderFailure:
    """One failed model call that ended (or interrupted) a program's session."""

    status: int | None  # HTTP status; None when the program gave none (a connection error)
    code: str  # rate_limit, overloaded, server_error, http_N, connection_error
    message: str  # at most MESSAGE_CHARS characters, secrets redacted by the caller
    retry_after_s: float | None = None  # the provider's hint, when it gave one

    @property
    def retryable(self) -> bool:
        return self.status in RETRYABLE_STATUSES

    @property
    def request_caused(self) -> bool:
        """Whether the unit's own requests may have brought the failure about (a rate limit)."""
        return self.status in REQUEST_CAUSED_STATUSES

    @property
    def key_rejected(self) -> bool:
        lowered = self.message.lower()
        return self.status in KEY_REJECTED_STATUSES or any(word in lowered for word in KEY_REJECTED_WORDS)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def failure_code(status: int | None) -> str:
    """``rate_limit`` (429), ``overloaded`` (529), ``server_error`` (other 5xx), ``http_N``."""
    if status is None:
        return "connection_error"
    if status == 429:
        return "rate_limit"
    if status == 529:
        return "overloaded"
    if 500 <= status < 600:
        return "server_error"
    return f"http_{status}"


def provider_failure(status: Any, message: Any, retry_after_s: Any = None) -> ProviderFailure:
    """A failure from whatever a program's event held: a status that is not a whole number in
    100..599 is None, the message is cut to MESSAGE_CHARS, a hint that is not a finite
    non-negative number is dropped."""
    number = status if isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 599 else None
    if isinstance(status, str) and status.strip().isdigit() and 100 <= int(status) <= 599:
        number = int(status)
    text = message if isinstance(message, str) else ("" if message is None else str(message))
    return ProviderFailure(number, failure_code(number), text[:MESSAGE_CHARS], amount_in(retry_after_s))


def fallback_keys(name: str, raw: str | None) -> list[str]:
    """The keys listed in variable ``name`` (``raw``, its value): a JSON list of non-empty
    strings. Anything else is a :class:`ValueError` that names the variable, never a key."""
    if raw is None or not raw.strip():
        return []
    try:
        keys = json.loads(raw)
    except ValueError:
        keys = None
    if not isinstance(keys, list) or not all(isinstance(key, str) and key.strip() for key in keys):
        raise ValueError(f"{name} must be a JSON list of non-empty strings (its value is not shown: it holds keys)")
    return keys


def key_fallback_on(raw: str | None) -> KeyFallbackOn:
    """On what the next fallback key is taken, as ``ANTHROPIC_KEY_FALLBACK_ON`` (``raw``) says:
    unset or empty is ``rejected_key``; anything but the three names is a :class:`ValueError`."""
    value = (raw or "").strip() or "rejected_key"
    for trigger in KEY_FALLBACK_TRIGGERS:
        if value == trigger:
            return trigger
    raise ValueError(f"{ANTHROPIC_KEY_FALLBACK_ON} must be one of {', '.join(KEY_FALLBACK_TRIGGERS)}, got {raw!r}")
