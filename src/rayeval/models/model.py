"""``get_model("provider/model")``: a model to call, with retries, a request limit per
provider, an optional response cache and the cost of every call."""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .._messages import field_problems
from ..secrets import redact_text
from . import limits, providers, retry
from .cache import CacheEntry, ResponseCache, public_base_url, request_key
from .failures import provider_failure
from .prices import cost_usd, find_price, price_table
from .providers import CallFailed, ModelError
from .types import ChatMessage, GenerateConfig, ModelOutput, RetryPolicy

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 120.0

Input = str | Sequence[ChatMessage | dict[str, str]]


class Model:
    """A model called by its ``provider/model`` name (``openai/gpt-4o``, ``anthropic/claude-sonnet-4-5``,
    ``openai-compatible/<model>`` with ``base_url``).

    ``base_url``: else ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``, else the provider's.
    ``api_key_env``: the variable holding the key (default ``OPENAI_API_KEY`` /
    ``ANTHROPIC_API_KEY``); the key is read from the environment, never passed as a value.
    ``settings``: :class:`GenerateConfig` fields (temperature, max_tokens, top_p, seed, stop).
    ``cache``: a folder or ``s3://bucket/prefix`` for the response cache. ``prices``: a dict
    or JSON file over the shipped price table. ``max_connections``: at most this many requests
    in flight to the provider, in this process or, under Ray, in the whole Ray job (None: no
    limit of its own; a ``rayeval run``'s ``--max-concurrency`` already bounds its units).
    ``retry_policy``: see :class:`RetryPolicy`; ``timeout_s``: of one request.

    Fallback keys: when the provider rejects the key (401, 403, a billing or credit error),
    the call is sent again at once with the next key its provider's ``key_fallbacks_env``
    lists (Anthropic: ``ANTHROPIC_API_KEY_FALLBACKS``, a JSON list), and the model keeps
    that key for its later calls.
    """

    def __init__(
        self,
        name: str,
        *,
        base_url: str | None = None,
        api_key_env: str | None = None,
        retry_policy: RetryPolicy | None = None,
        max_connections: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        cache: str | None = None,
        prices: dict | str | Path | None = None,
        s3_endpoint_url: str | None = None,
        **settings: Any,
    ):
        self.provider, self.model = providers.split_name(name)
        self.name = name
        if max_connections is not None and max_connections < 1:
            raise ModelError(f"model {name!r}: max_connections must be >= 1, got {max_connections}")
        self.timeout_s = timeout_s
        self._keys = providers.provider_keys(self.provider, api_key_env)
        self._secrets = [k for k in self._keys if k]
        self._key_index = 0  # the key in use: the first, until the provider rejects it
        self._key_lock = threading.Lock()
        self._relayed = False  # see through()
        self._base_url = base_url or _env(self.provider.base_url_env)
        self.base_url = public_base_url(providers.base_url_of(self._client(0)))
        self.config = generate_config(settings)
        self.retry_policy = retry_policy or RetryPolicy()
        self.max_connections = max_connections
        self.cache = ResponseCache(cache, s3_endpoint_url) if cache else None
        self.price = find_price(price_table(prices), name)

    def __repr__(self) -> str:
        return f"Model({self.name!r}, base_url={self.base_url!r})"

    def through(self, base_url: str, token: str) -> Model:
        """This model with its calls sent to a model gateway at ``base_url``, ``token`` as
        their key: the gateway holds the provider's keys, moves to a fallback key and retries
        failures within its own bounds, so each call is sent once. The cache, the prices and
        the cache's keys (the provider's endpoint, not the gateway's) stay this model's."""
        relayed = copy.copy(self)
        relayed._base_url = base_url
        relayed._keys = [token]
        relayed._secrets = [*self._secrets, token]
        relayed._key_index = 0
        relayed._key_lock = threading.Lock()
        relayed._relayed = True
        relayed.retry_policy = RetryPolicy(max_attempts=1)
        return relayed

    def generate(self, input: Input, **settings: Any) -> ModelOutput:
        """The model's reply to ``input`` (a prompt, or messages), with the model's settings
        updated by ``settings`` (:class:`GenerateConfig` fields). Raises :class:`ModelError`
        when the call fails for good."""
        messages = _messages(input)
        config = self.config.model_copy(update=generate_config(settings).model_dump(exclude_unset=True))
        request = {
            "provider": self.provider.name,
            "model": self.model,
            "base_url": self.base_url,
            "messages": [m.model_dump() for m in messages],
            "config": config.model_dump(exclude_none=True),
        }
        key = request_key(request) if self.cache else ""
        if self.cache is not None and (entry := self.cache.get(key)) is not None:
            return entry.output.model_copy(
                update={
                    "cached": True,
                    "cost_usd": 0.0,
                    "latency_s": 0.0,
                    "attempts": 0,
                }
            )
        output = self._call(messages, config)
        if self.cache is not None:
            self.cache.put(CacheEntry(key=key, request=request, output=output))
        return output

    async def agenerate(self, input: Input, **settings: Any) -> ModelOutput:
        """:meth:`generate` for asyncio code: it runs on a thread of the default executor, so
        the call, its retries and their waits never block the event loop."""
        return await asyncio.to_thread(self.generate, input, **settings)

    def _call(self, messages: list[ChatMessage], config: GenerateConfig) -> ModelOutput:
        started = time.monotonic()
        attempt = fallbacks = 0
        while True:
            attempt += 1
            key_index = self._key_index
            try:
                reply = self._send(messages, config, key_index)
            except CallFailed as failed:
                if provider_failure(failed.status, failed.message).key_rejected and self._next_key(key_index):
                    fallbacks += 1
                    log.info("%s: %s; trying the next fallback key", self.name, self._describe(failed, attempt))
                    continue
                wait = retry.delay_s(self.retry_policy, attempt - 1, retry.retry_after_s(failed.headers))
                if not retry.retryable(failed.status) or not retry.within_budget(
                    self.retry_policy, attempt, started, wait
                ):
                    message = redact_text(failed.message, self._secrets)
                    redacted = CallFailed(failed.status, message, failed.headers, timed_out=failed.timed_out)
                    raise ModelError(
                        self._describe(failed, attempt),
                        transient=retry.retryable(failed.status),
                        call=redacted,
                        attempts=attempt,
                        key_fallbacks=fallbacks,
                    ) from None
                log.info(
                    "%s: %s; try %d in %.1f s",
                    self.name,
                    self._describe(failed, attempt),
                    attempt + 1,
                    wait,
                )
                time.sleep(wait)
                continue
            return ModelOutput(
                model=self.name,
                text=reply.text,
                stop_reason=reply.stop_reason,
                refusal=reply.refusal,
                input_tokens=reply.usage.input_tokens,
                output_tokens=reply.usage.output_tokens,
                cost_usd=cost_usd(self.price, reply.usage),
                latency_s=round(time.monotonic() - started, 6),
                attempts=attempt,
                key_fallbacks=fallbacks,
            )

    def _client(self, key_index: int) -> Any:
        key = self._keys[key_index]
        if self._relayed:  # each unit's token on one pooled client: a copy that shares its connections
            return providers.client(self.provider.sdk, self._base_url, None, self.timeout_s).with_options(api_key=key)
        return providers.client(self.provider.sdk, self._base_url, key, self.timeout_s)

    def _next_key(self, rejected: int) -> bool:
        """After key ``rejected`` was refused: whether there is a next key to try (calls that
        failed together move on once: a key another call moved to is tried, not skipped)."""
        with self._key_lock:
            if self._key_index == rejected and rejected + 1 < len(self._keys):
                self._key_index += 1
            return self._key_index > rejected

    def _send(self, messages: list[ChatMessage], config: GenerateConfig, key_index: int) -> providers.Reply:
        sdk_client = self._client(key_index)
        if self.max_connections is None:
            return providers.send(self.provider.sdk, sdk_client, self.model, messages, config)
        with limits.request_slot(self.provider.name, self.max_connections, self.timeout_s + 30):
            return providers.send(self.provider.sdk, sdk_client, self.model, messages, config)

    def _describe(self, failed: CallFailed, attempt: int) -> str:
        what = f"HTTP {failed.status}" if failed.status is not None else "connection failed"
        tries = f" after {attempt} tries" if attempt > 1 else ""
        text = f"{self.name} at {self.base_url}: {what}{tries}: {failed.message}"
        return redact_text(text, self._secrets)


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def generate_config(settings: dict[str, Any]) -> GenerateConfig:
    """``settings`` as a :class:`GenerateConfig`; a bad one is a :class:`ModelError` naming it."""
    try:
        return GenerateConfig.model_validate(settings)
    except ValidationError as exc:
        raise ModelError(f"generation setting {field_problems(exc)[0]}") from None


def _messages(input: Input) -> list[ChatMessage]:
    if isinstance(input, str):
        return [ChatMessage(role="user", content=input)]
    messages = [m if isinstance(m, ChatMessage) else ChatMessage.model_validate(m) for m in input]
    if not messages:
        raise ModelError("no messages to send")
    return messages


def get_model(name: str, **options: Any) -> Model:
    """``Model(name, **options)``, as inspect_ai spells it: ``get_model("openai/gpt-4o",
    temperature=0)``."""
    return Model(name, **options)
