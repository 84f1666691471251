"""The model gateway: the one way a unit reaches its models.

A trusted process (a run's worker, ``rayeval run-one``) starts one :class:`Gateway`: an
aiohttp server on 127.0.0.1 in a thread of its own. For each unit it opens a
:class:`Session`: a random token, valid while the unit runs, and the provider endpoints and
keys its calls go to. The unit gets the gateway's address and its token in the variables
the providers' SDKs and the agent programs read (``OPENAI_BASE_URL``/``OPENAI_API_KEY``,
``ANTHROPIC_BASE_URL``/``ANTHROPIC_API_KEY``), never a key. The gateway relays each call as
it is (it does not translate between APIs), the response streamed back as it arrives, with
the token replaced by the provider's key in the header that carried it. What the provider
answered (usage, stop reason, refusal, failures) is read off the relayed bytes
(:mod:`.accounting`) and kept per session, priced by the one price table: the unit's row is
filled from there, whatever the unit says of itself.

Routes: ``/<route>/<path>`` where ``route`` names one of the session's upstreams
(``openai``, ``anthropic``), relayed to ``<upstream base URL>/<path>``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import json
import random
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, NamedTuple, Protocol

from pydantic import BaseModel, Field

from .._backoff import doubled_s
from .._json import object_at
from ..models.failures import (
    BILLING_ERROR_KIND,
    BILLING_MESSAGE_STARTS,
    KEY_REJECTED_STATUSES,
    MESSAGE_CHARS,
    RETRYABLE_STATUSES,
    KeyFallbackOn,
    ProviderFailure,
    provider_failure,
)
from ..models.prices import PriceTable, cost_usd, find_price, shipped_prices
from ..models.retry import retry_after_s
from ..record import LimitName
from .accounting import HiddenUsage, ResponseReader, Usage, Wire
from .pin import NAME_CHARS, ModelPin
from .room import RequestBounds, Room, parse_bytes
from .transcript import COPY_NOT_KEPT, bounded, copy_size

#: the calls a unit's session keeps the record of, of those the gateway refused itself (a limit
#: reached, a model it may not call): none costs the unit anything, so it may send them in a
#: loop; the others are counted only
MAX_REFUSED_RECORDS = 100
#: the memory its calls' request and reply copies (their transcript) a unit's session keeps,
#: about (see ``transcript.copy_size``): past it the oldest calls' copies are dropped, their
#: counts kept (``model_calls.json`` holds the newest calls, 2 MiB by default); else a long
#: session, or a unit sending calls the provider refuses in a loop, would grow its worker's
#: memory without bound. The calls of its earlier part, carried on, keep as much again at most
MAX_COPY_BYTES = 16 << 20
#: the bytes a Chat Completions stream's body may grow by when the gateway writes it again to ask
#: for its usage (``"stream_options":{"include_usage":true}``, written compact; a number may
#: be written longer than it was sent, ``1e15`` as ``1000000000000000.0``: such a body is refused)
_USAGE_ASKED_BYTES = 64
#: request headers that belong to a hop, not to the call, and the unit's credentials and their
#: scope (OpenAI's organization and project: one the key is not of has the key rejected, a
#: failure of the unit's making)
_REQUEST_HOP = frozenset(
    {"host", "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
     "content-length", "accept-encoding", "x-api-key", "authorization", "api-key", "proxy-authorization",
     "openai-organization", "openai-project"}
)  # fmt: skip
#: response headers the gateway sets itself (it streams the body decompressed)
_RESPONSE_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "trailer", "upgrade"}
)
#: the shortest wait before a call is tried again (a hint of 0 included): no tight loop
RETRY_FLOOR_S = 0.25
#: the most seconds a reply is read on after its unit hung up (for the usage at its end); a
#: program's own call timeout is of this order (Claude Code's default: 10 minutes)
READ_ON_S = 600.0
#: the most seconds a unit's report for its checkpoint waits for the calls it is relaying to settle
SETTLE_S = 5.0
#: the status of the failure a reply the provider broke off after its own status is (Bad
#: Gateway: what a relay answers for a broken reply; worth another try, as the provider's 502 is)
BROKEN_REPLY_STATUS = 502
#: where a unit's SDK puts its key, in the order looked at
_TOKEN_HEADERS = ("x-api-key", "authorization", "api-key")


@dataclass(frozen=True)
class Upstream:
    """A provider endpoint: its base URL (calls go to ``base_url + path``) and its keys, the
    first one used until ``fallback_on`` says to take the next: the provider rejects it
    (``rejected_key``), the model refuses a reply (``refusal``), or either (``both``)."""

    base_url: str
    keys: tuple[str, ...] = ()
    fallback_on: KeyFallbackOn = "rejected_key"

    def __repr__(self) -> str:  # never a key
        return f"Upstream(base_url={self.base_url!r}, keys={len(self.keys)})"


class RunBudget(Protocol):
    """A run's budget (``--max-cost``), as a process's gateway sees it."""

    def spent_out(self) -> bool: ...

    def charge(self, usd: float) -> None: ...


@dataclass(frozen=True)
class CallLimits:
    """What one unit may use; None: no limit."""

    tokens: int | None = None
    cost_usd: float | None = None
    model_calls: int | None = None


@dataclass
class CallRecord:
    """One call a unit made, as the gateway saw it."""

    route: str
    path: str
    protocol: Wire | None
    model: str | None
    streamed: bool
    started_at: float
    status: int | None = None
    latency_s: float | None = None
    first_byte_s: float | None = None
    usage: Usage = field(default_factory=Usage)
    usage_reported: bool = False
    cost_usd: float | None = None
    stop_reason: str | None = None
    refusal: str | None = None
    #: what went wrong: the provider's error message, a broken connection, a limit
    error: str | None = None
    #: who ended its reply before its end: the provider (it broke the reply off after its
    #: status: its failure, as a 5xx is), the unit (it hung up, and the rest read on did not
    #: come) or the gateway (it cut the call off when the unit's session closed)
    cut_short_by: Literal["provider", "unit", "gateway"] | None = None
    #: no reply came to its last try: the provider could not be reached (a failure of the
    #: provider's; not set where the gateway's own process was out of file descriptors, memory
    #: or ports, which a unit holding connections to it may bring about)
    unreached: bool = False
    #: the gateway answered it itself, without calling the provider (a limit was reached)
    limit: LimitName | None = None
    #: the gateway refused it itself, without calling the provider: it named a model its unit may not call
    off_model: bool = False
    #: the provider's retry hint on a failed call (``retry-after``, ``retry-after-ms``)
    retry_after_s: float | None = None
    #: the tries the gateway made again after the provider failed them, and the seconds waited
    retries: int = 0
    retried_s: float = 0.0
    key_fallbacks: int = 0
    #: its reply was a refusal, which the unit never saw: the call was sent again with the next key
    refusal_fallback: bool = False
    request: Any = None
    response: Any = None

    def cache_apart(self) -> int:
        """Of its ``input_tokens``, the cache reads and writes its provider counts apart from its
        input tokens (Anthropic's wire protocol; OpenAI's counts its cache reads among them)."""
        usage = self.usage
        if self.protocol != "anthropic" or usage.input_tokens is None:
            return 0
        return (usage.cache_read_tokens or 0) + (usage.cache_write_tokens or 0)

    def unpriced(self) -> bool:
        """Its cost is unknown: the provider's usage of it was not seen, or its model has no price."""
        return self.cost_usd is None and (not self.usage_reported or bool(self.usage.total_tokens()))

    def failed(self) -> bool:
        """It was not answered in full: a failure status, no answer, a reply broken off or an
        error in it, a limit."""
        return self.status is None or self.status >= 400 or self.error is not None

    def as_dict(self) -> dict[str, Any]:
        """Its fields by name, in their order, the usage as a dict too (the transcript's entry)."""
        return {**{column.name: getattr(self, column.name) for column in fields(self)}, "usage": self.usage.as_dict()}


def _within_copy_bytes(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``calls`` (transcript entries) with the oldest ones' copies dropped until the others'
    take at most :data:`MAX_COPY_BYTES`."""
    sizes = [copy_size(call.get("request")) + copy_size(call.get("response")) for call in calls]
    over = sum(sizes) - MAX_COPY_BYTES
    kept = []
    for call, size in zip(calls, sizes, strict=True):
        if over > 0:
            call = {**call, **{key: COPY_NOT_KEPT for key in ("request", "response") if call.get(key) is not None}}
            over -= size
        kept.append(call)
    return kept


@dataclass
class Session:
    """A unit's access to its models: its token, where its calls go, what they used."""

    token: str
    upstreams: dict[str, Upstream]
    limits: CallLimits
    prices: PriceTable
    budget: RunBudget | None = None
    #: the most seconds one call is held, tried again, after the provider fails it
    retry_s: float = 0.0
    #: when its unit ends (monotonic clock): no call is held past it
    deadline: float | None = None
    #: the models its calls may name (None: any)
    pin: ModelPin | None = None
    calls: list[CallRecord] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    #: of ``usage.input_tokens``, those its provider counts apart (see :meth:`CallRecord.cache_apart`)
    cache_apart_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0
    #: of those, the calls whose usage the gateway did not see (see :meth:`unseen_limit`)
    unseen_usage_calls: int = 0
    model_calls: int = 0
    by_model: dict[str, ModelCalls] = field(default_factory=dict)
    #: the model that answered the unit's latest call
    last_model: str | None = None
    key_index: dict[str, int] = field(default_factory=dict)
    limit_reached: LimitName | None = None
    closed: bool = False
    #: the tasks relaying its calls now, on the gateway's loop (where every call is settled)
    relays: set[asyncio.Task[Any]] = field(default_factory=set)
    #: its requests in flight, the bytes of their bodies, the most bytes they ever held (see :mod:`.room`)
    in_flight: int = 0
    held_bytes: int = 0
    peak_bytes: int = 0
    #: the calls the gateway refused itself whose records were kept, and those not kept (of
    #: which naming a model the unit may not call): see :data:`MAX_REFUSED_RECORDS`
    refused_kept: int = 0
    refused_not_kept: int = 0
    off_model_not_kept: int = 0
    #: the calls whose request or reply copies it keeps, oldest first, with their sizes (see
    #: :data:`MAX_COPY_BYTES`), and those sizes' sum
    copies: dict[int, tuple[CallRecord, int]] = field(default_factory=dict)
    copy_bytes: int = 0
    #: the transcript of the calls an earlier part of the unit's session made (see ``carry``)
    carried_calls: list[dict[str, Any]] = field(default_factory=list)
    #: that part's fallbacks, refusals and failures (its counts are in the session's own)
    carried: ModelUsage = field(default_factory=lambda: ModelUsage(n_model_calls=0, usage=Usage(), cost_usd=0.0))

    def carry(self, counted: ModelUsage, calls: list[dict[str, Any]]) -> None:
        """Start from the counts and transcript of the unit's earlier part (a session resumed
        on another node, from its checkpoint): its limits apply to the sum, and the carried
        cost is not charged to the run's budget again (it was when those calls were made)."""
        self.model_calls += counted.n_model_calls
        self.usage.add(counted.usage)
        self.cache_apart_tokens += counted.cache_apart_tokens
        self.unseen_usage_calls += counted.unseen_usage_calls
        if counted.cost_usd is None:
            self.unpriced_calls += 1
        else:
            self.cost_usd += counted.cost_usd
        for model, seen in counted.by_model.items():
            mine = self.by_model.setdefault(model, ModelCalls())
            mine.n_model_calls += seen.n_model_calls
            mine.usage.add(seen.usage)
            priced = mine.cost_usd is not None and seen.cost_usd is not None
            mine.cost_usd = round((mine.cost_usd or 0.0) + (seen.cost_usd or 0.0), 10) if priced else None
        self.last_model = self.last_model or counted.last_model
        if self.pin is not None:
            self.pin.fallback = self.pin.fallback or counted.fallback_model
        self.carried_calls = _within_copy_bytes([*self.carried_calls, *calls])
        earlier = self.carried
        self.carried = counted.model_copy(
            update={
                "key_fallbacks": earlier.key_fallbacks + counted.key_fallbacks,
                "refusal_fallbacks": earlier.refusal_fallbacks + counted.refusal_fallbacks,
                "refusals": counted.refusals if counted.refusal_fallbacks else [*earlier.refusals, *counted.refusals],
                "failed_calls": earlier.failed_calls + counted.failed_calls,
                "off_model_calls": earlier.off_model_calls + counted.off_model_calls,
                "refused_calls_not_kept": earlier.refused_calls_not_kept + counted.refused_calls_not_kept,
                "last_failure": counted.last_failure,
            }
        )

    def keep_copy(self, record: CallRecord, copy: Any) -> None:
        """Count ``copy`` (``record``'s request or reply, as kept) among the copies the session
        keeps; past :data:`MAX_COPY_BYTES`, the oldest calls' copies are dropped (the newest
        call's never)."""
        size = copy_size(copy)
        _, held = self.copies.get(id(record), (record, 0))
        self.copies[id(record)] = (record, held + size)  # a record's place is its first copy's
        self.copy_bytes += size
        while self.copy_bytes > MAX_COPY_BYTES and len(self.copies) > 1:
            oldest, dropped = self.copies.pop(next(iter(self.copies)))
            oldest.request = None if oldest.request is None else COPY_NOT_KEPT
            oldest.response = None if oldest.response is None else COPY_NOT_KEPT
            self.copy_bytes -= dropped

    def keep_refused(self, record: CallRecord) -> None:
        """A call the gateway refused itself: its record kept among the first
        :data:`MAX_REFUSED_RECORDS` such, else counted only."""
        if self.refused_kept < MAX_REFUSED_RECORDS:
            self.refused_kept += 1
            self.calls.append(record)
            self.keep_copy(record, record.request)
        else:
            self.refused_not_kept += 1
            self.off_model_not_kept += record.off_model

    def over_limit(self) -> LimitName | None:
        """The first of the unit's limits its usage has reached, or that a call of unseen usage
        may have (None: none)."""
        return self.counted_limit() or self.unseen_limit()

    def counted_limit(self) -> LimitName | None:
        """The first of the unit's limits its counted usage has reached (None: none)."""
        limits = self.limits
        if limits.model_calls is not None and self.model_calls >= limits.model_calls:
            return "model_calls"
        if limits.tokens is not None and self.usage.total_tokens() >= limits.tokens:
            return "tokens"
        if limits.cost_usd is not None and self.cost_usd >= limits.cost_usd:
            return "cost"
        if self.budget is not None and self.budget.spent_out():
            return "run_cost"
        return None

    def unseen_limit(self) -> LimitName | None:
        """The limit a call whose usage the gateway did not see (a reply the unit hung up on and
        that did not end in time, a provider that reports none, an event too big to read; not a
        reply the provider broke off) may have passed: the unit's further calls are refused, as past
        it (``cost``, ``tokens`` for a unit limited in tokens only). Under a run's budget alone
        too (``cost``: not ``run_cost``, whose units a resumed run runs again)."""
        limits = self.limits
        if not self.unseen_usage_calls:
            return None
        if limits.tokens is not None and limits.cost_usd is None:
            return "tokens"
        return "cost" if limits.cost_usd is not None or self.budget is not None else None

    def off_model(self, route: str, payload: dict[str, Any], named_twice: bool) -> str | None:
        """Why a model call of ``route`` (``payload``; ``named_twice``: its body names ``model``
        or ``models`` twice) names a model the unit may not call, None: it names none (see
        :class:`.pin.ModelPin`)."""
        if self.pin is None:
            return None
        return self.pin.refused(payload, named_twice, lambda: self.refusal_relayed(route))

    def refusal_relayed(self, route: str) -> bool:
        """Whether its unit got a refusal from ``route`` (a reply of it the gateway relayed, not one
        it asked again with the next key), in this part of its session or an earlier one."""
        earlier = self.carried_calls
        if any(c.get("route") == route and c.get("refusal") and not c.get("refusal_fallback") for c in earlier):
            return True
        return any(call.route == route and call.refusal and not call.refusal_fallback for call in self.calls)

    def report(self) -> SessionReport:
        switches = [at for at, call in enumerate(self.calls) if call.refusal_fallback]
        judged = self.calls[switches[-1] + 1 :] if switches else self.calls  # a refusal is judged after the switch
        carried = self.carried
        counted = ModelUsage(
            n_model_calls=self.model_calls,
            usage=self.usage.model_copy(),
            cache_apart_tokens=self.cache_apart_tokens,
            cost_usd=None if self.unpriced_calls else round(self.cost_usd, 10),
            unseen_usage_calls=self.unseen_usage_calls,
            limit_reached=self.limit_reached,
            key_fallbacks=carried.key_fallbacks + sum(call.key_fallbacks for call in self.calls),
            refusal_fallbacks=carried.refusal_fallbacks + len(switches),
            refusals=[*([] if switches else carried.refusals), *(call.refusal for call in judged if call.refusal)],
            by_model={model: seen.model_copy(deep=True) for model, seen in self.by_model.items()},
            last_model=self.last_model,
            failed_calls=carried.failed_calls + self.refused_not_kept + sum(1 for call in self.calls if call.failed()),
            last_failure=_last_failure(self.calls, carried.last_failure),
            off_model_calls=carried.off_model_calls
            + self.off_model_not_kept
            + sum(1 for call in self.calls if call.off_model),
            refused_calls_not_kept=carried.refused_calls_not_kept + self.refused_not_kept,
            fallback_model=self.pin.fallback if self.pin is not None else carried.fallback_model,
        )
        return SessionReport(counted, [*self.carried_calls, *(call.as_dict() for call in self.calls)], self.token)


class ModelCalls(BaseModel):
    """What the calls one model answered used, as the gateway counted them."""

    n_model_calls: int = 0
    usage: Usage = Field(default_factory=Usage)
    #: None when one of its calls used tokens of a model with no price
    cost_usd: float | None = 0.0

    def add(self, call: CallRecord) -> None:
        self.n_model_calls += 1
        self.usage.add(call.usage)
        if call.unpriced():
            self.cost_usd = None
        elif self.cost_usd is not None:
            self.cost_usd = round(self.cost_usd + (call.cost_usd or 0.0), 10)


class ModelUsage(BaseModel):
    """What a unit's model calls used, as the gateway counted them: the unit's row takes
    these, whatever the unit says of itself."""

    n_model_calls: int
    usage: Usage
    #: of ``usage.input_tokens``, the cache reads and writes of the calls on Anthropic's wire
    #: protocol, which Anthropic counts apart from its input tokens (a run summary's usage is
    #: each provider's own count: see ``rayeval.unit.run_summary``)
    cache_apart_tokens: int = 0
    #: None when a call's model has no price, or its usage was not seen
    cost_usd: float | None
    #: calls whose usage the gateway did not see (a reply cut short, or too big for its usage to be read)
    unseen_usage_calls: int = 0
    #: the limit the unit reached (its calls after it were refused), None: none
    limit_reached: LimitName | None = None
    #: the times the gateway moved to a fallback key because the provider rejected one
    key_fallbacks: int = 0
    #: the times it moved to a fallback key because the model refused a reply (the unit never
    #: saw those replies, and their refusals are not the unit's: see ``refusals``)
    refusal_fallbacks: int = 0
    #: the refusals the provider's replies held (Anthropic ``refusal``, OpenAI ``content_filter``),
    #: of the calls after the last refusal fallback
    refusals: list[str] = []
    #: each model's calls, by the name the provider answered with
    by_model: dict[str, ModelCalls] = {}
    #: the model that answered the unit's latest call (None: none was answered)
    last_model: str | None = None
    #: calls that failed (status >= 400, no answer, a reply broken off or with an error in it), as
    #: the provider or the gateway answered them
    failed_calls: int = 0
    #: the provider's failure that the unit's last model call ended in (None: it was answered,
    #: or the unit made none): the one a unit without an answer is a ``ProviderError`` for
    last_failure: ProviderFailure | None = None
    #: calls the gateway refused because they named a model the unit may not call (never sent
    #: to a provider, never billed; each in ``model_calls.json`` with ``off_model``)
    off_model_calls: int = 0
    #: calls the gateway refused itself (counted above) whose records are not in ``model_calls.json``
    #: (see :data:`MAX_REFUSED_RECORDS`)
    refused_calls_not_kept: int = 0
    #: the model its program moved to after a refusal the gateway relayed it (Claude Code's
    #: fallback model), the one other model it could call then; None: none
    fallback_model: str | None = None


@dataclass
class SessionReport:
    """A unit's calls when its session closed: the counts, and each call for its transcript."""

    counted: ModelUsage
    calls: list[dict[str, Any]]
    #: the unit's token, expired now (masked in what is kept of the unit, like any key)
    token: str


class Gateway:
    """One server for the units of a process; thread-safe. Start it with :meth:`start` (or
    use it as a context manager); :meth:`open` a session per unit, :meth:`close` it after."""

    def __init__(
        self,
        *,
        prices: PriceTable | None = None,
        connect_timeout_s: float = 30.0,
        bounds: RequestBounds | None = None,
    ):
        self.prices = prices if prices is not None else shipped_prices()
        self.connect_timeout_s = connect_timeout_s
        #: what its units' requests hold at once
        self.room = Room(bounds or RequestBounds())
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: Any = None
        self._client: Any = None
        self.port: int | None = None

    # ------------------------------------------------------------------ life
    def start(self) -> Gateway:
        if self._thread is not None:
            return self
        ready = threading.Event()
        failed: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve())
            except BaseException as exc:  # noqa: BLE001 - told to the starting thread
                failed.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._shutdown())
            loop.close()

        self._thread = threading.Thread(target=serve, name="rayeval-gateway", daemon=True)
        self._thread.start()
        ready.wait()
        if failed:
            self._thread = None
            raise failed[0]
        return self

    async def _serve(self) -> None:
        from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

        app = web.Application(client_max_size=self.room.bounds.max_request_bytes)
        app.router.add_route("*", "/{route}/{path:.*}", self._relay)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._client = ClientSession(
            connector=TCPConnector(limit=0, ttl_dns_cache=300),
            timeout=ClientTimeout(total=None, connect=self.connect_timeout_s, sock_read=None),
            auto_decompress=True,
            skip_auto_headers=("User-Agent",),
        )

    async def _shutdown(self) -> None:
        if self._client is not None:
            await self._client.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._thread = self._loop = None

    def __enter__(self) -> Gateway:  # noqa: PYI034 - typing.Self needs Python 3.11; we support 3.10
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def address(self) -> str:
        if self.port is None:
            raise RuntimeError("the gateway is not started")
        return f"http://127.0.0.1:{self.port}"

    def serve(self, listener: socket.socket) -> Callable[[], None]:
        """Answer on ``listener`` too (a socket a unit lends from its own network namespace,
        listening on this gateway's port there); returns how to stop."""
        from aiohttp import web

        loop = self._loop
        if loop is None:
            raise RuntimeError("the gateway is not started")
        site = web.SockSite(self._runner, listener)
        asyncio.run_coroutine_threadsafe(site.start(), loop).result(timeout=30)

        def stop() -> None:
            with contextlib.suppress(Exception):  # the gateway stopped meanwhile: so did the site
                asyncio.run_coroutine_threadsafe(site.stop(), loop).result(timeout=30)
            listener.close()

        return stop

    def base_url(self, route: str) -> str:
        """What a unit's SDK takes as the base URL of ``route``."""
        return f"{self.address}/{route}"

    # ------------------------------------------------------------------ sessions
    def open(
        self,
        upstreams: Mapping[str, Upstream],
        limits: CallLimits | None = None,
        prices: PriceTable | None = None,
        budget: RunBudget | None = None,
        retry_s: float = 0.0,
        timeout_s: float | None = None,
        pin: ModelPin | None = None,
    ) -> Session:
        """A unit's session: its calls go to ``upstreams``; one the provider fails with a status
        worth another try is tried again for up to ``retry_s`` seconds, within ``timeout_s``
        from now (the unit's own time); one naming a model ``pin`` does not allow is refused."""
        session = Session(
            token=f"rayeval-unit-{secrets.token_urlsafe(24)}",
            upstreams=dict(upstreams),
            limits=limits or CallLimits(),
            prices=prices if prices is not None else self.prices,
            budget=budget,
            retry_s=retry_s,
            deadline=None if timeout_s is None else time.monotonic() + timeout_s,
            pin=pin,
        )
        with self._lock:
            self._sessions[session.token] = session
        return session

    def close(self, session: Session) -> SessionReport:
        """End ``session``: its token is refused from now on, and its report is taken once its
        calls still being relayed are settled (a unit that hangs up on a reply and goes cannot
        drop the call from its row): each while it can still end, within :data:`READ_ON_S`
        and the unit's time, then cut off and settled as it stands. Done on the gateway's loop,
        where calls are settled: none is settled into the session after its report."""
        with self._lock:
            self._sessions.pop(session.token, None)
        loop = self._loop
        if loop is None:  # not serving: no call of it is being relayed
            session.closed = True
            return session.report()
        return asyncio.run_coroutine_threadsafe(_closed(session, self.room), loop).result()

    def settled_report(self, session: Session, wait_s: float = SETTLE_S) -> SessionReport:
        """``session``'s report once the calls it is relaying now are settled, waiting at most
        ``wait_s`` seconds (then as it stands): a unit has a reply's last bytes before its call
        is settled, so a checkpoint it asks for next holds that call."""
        loop = self._loop
        if loop is None:  # not serving: no call of it is being relayed
            return session.report()
        try:
            return asyncio.run_coroutine_threadsafe(_settled(session, wait_s), loop).result(timeout=wait_s + 1.0)
        except concurrent.futures.TimeoutError:  # the gateway stopped meanwhile: as it stands
            return session.report()

    def _session_of(self, headers: Mapping[str, str]) -> Session | None:
        for name in _TOKEN_HEADERS:
            value = headers.get(name)
            if not value:
                continue
            token = value[7:].strip() if value[:7].lower() == "bearer " else value.strip()
            with self._lock:
                session = self._sessions.get(token)
            if session is not None and not session.closed:
                return session
        return None

    # ------------------------------------------------------------------ one call
    async def _relay(self, request: Any) -> Any:
        from aiohttp import web

        session = self._session_of(request.headers)
        route, _, tail = request.rel_url.raw_path[1:].partition("/")  # as sent: never decoded
        path = "/" + tail
        if session is None:
            return _error(web, 401, "authentication_error", "rayeval gateway: this unit's token is unknown or expired")
        upstream = session.upstreams.get(route)
        if upstream is None:
            return _error(web, 404, "not_found_error", f"rayeval gateway: no provider is configured at /{route}")
        allowed, protocol = relayed(request.method, path)
        if not allowed:
            message = f"rayeval gateway: only model calls are relayed, not {request.method} {path}"
            return _error(web, 403, "permission_error", message)
        relay = asyncio.current_task()
        assert relay is not None
        session.relays.add(relay)
        try:
            return await self._call_in_room(request, session, route, upstream, path, protocol)
        finally:
            session.relays.discard(relay)

    async def _call_in_room(
        self, request: Any, session: Session, route: str, upstream: Upstream, path: str, protocol: Wire | None
    ) -> Any:
        """Relay one call once there is room for its body (see :mod:`.room`); its room is taken
        for the body's length as declared (the most a body may have when it declares none)."""
        from aiohttp import web

        bounds = self.room.bounds
        size = request.content_length
        if size is None:
            size = bounds.max_request_bytes if request.can_read_body else 0
        if size > bounds.max_request_bytes:
            message = f"rayeval gateway: a request is at most {bounds.max_request_bytes} bytes, this one is {size}"
            return _error(web, 413, "request_too_large", message)
        if not await self.room.take(session, size):
            message = "rayeval gateway: no room came for this request (its unit's other requests hold it) in its time"
            return _error(web, 503, "overloaded_error", message)
        try:
            return await self._call(request, session, route, upstream, path, protocol)
        finally:
            self.room.give_back(session, size)

    async def _call(
        self, request: Any, session: Session, route: str, upstream: Upstream, path: str, protocol: Wire | None
    ) -> Any:
        """Relay one call (``path``, undecoded, of the model call of ``protocol``, if it is one)."""
        from aiohttp import ClientError, web
        from yarl import URL

        body = await request.read()
        most = self.room.bounds.max_parse_bytes
        if parse_bytes(body) > most:
            message = f"rayeval gateway: this request's JSON holds too many values to read in {most} bytes of memory"
            return _error(web, 413, "request_too_large", message)
        record, body, hide_usage, model, refusal = _opened(session, route, path, protocol, body)
        if refusal is not None:
            return _error(web, 400, "invalid_request_error", refusal)
        # when the unit's call began (its tries again end within the session's retry time from
        # then), and when the provider's current try of it did
        call_began = started = time.monotonic()
        query = request.rel_url.raw_query_string
        url = URL(upstream.base_url.rstrip("/") + path + (f"?{query}" if query else ""), encoded=True)
        header = _token_header(request.headers)
        while True:
            index = session.key_index.get(route, 0)
            headers = _forwarded(request.headers, header, upstream.keys[index] if index < len(upstream.keys) else None)
            try:
                upstream_response = await self._client.request(request.method, url, data=body, headers=headers)
            except (ClientError, asyncio.TimeoutError, OSError) as exc:
                record.error = f"{type(exc).__name__}: {exc}"[:MESSAGE_CHARS]
                record.unreached = not _local_failure(exc)
                if await _waited_to_retry(record, session, call_began, None):
                    continue
                record.latency_s = round(time.monotonic() - started, 4)
                where = "the provider could not be reached" if record.unreached else _LOCAL_FAILURE
                return _error(web, 502, "api_error", f"rayeval gateway: {where}: {exc}")
            except asyncio.CancelledError:
                self._cut_off_unread(record, session, started)
                raise
            status = upstream_response.status
            spare_key = index + 1 < len(upstream.keys)
            if status < 400 and not (spare_key and upstream.fallback_on != "rejected_key" and protocol is not None):
                return await self._stream(request, record, session, upstream_response, started, hide_usage)
            if status < 400:
                reply = await self._held(record, session, upstream_response, started, hide_usage)
                if session.closed or session.over_limit() is not None:
                    return reply
                if record.cut_short_by == "provider":  # broken off unseen by the unit: tried again, as a 5xx is
                    if not await _waited_to_retry(record, session, call_began, None):
                        return reply
                elif record.refusal is not None:
                    session.key_index[route] = index + 1
                    record.refusal_fallback = True
                else:
                    return reply
                record, started = _again(record, model), time.monotonic()
                session.calls.append(record)
                session.keep_copy(record, None)  # its request's copy is the first try's
                continue
            try:
                text = await upstream_response.text(errors="replace")
            except (ClientError, asyncio.TimeoutError, OSError) as exc:  # its error cut short: its status stands
                text = f"the provider's reply ended early: {type(exc).__name__}"
            except asyncio.CancelledError:  # an error, as one read whole: no model call, nothing billed
                record.status = status
                self._cut_off(record, session, None, started)
                raise
            finally:
                upstream_response.release()
            if spare_key and upstream.fallback_on != "refusal" and _rejects_key(status, text):
                session.key_index[route] = index + 1
                record.key_fallbacks += 1
                continue
            if status in RETRYABLE_STATUSES:
                record.status, record.error = status, text[:MESSAGE_CHARS]  # as it stands if the unit goes
                if await _waited_to_retry(record, session, call_began, retry_after_s(upstream_response.headers)):
                    continue
            return self._answer_error(record, session, upstream_response, text, started)

    def _answer_error(self, record: CallRecord, session: Session, response: Any, text: str, started: float) -> Any:
        from aiohttp import web

        record.status = response.status
        record.latency_s = round(time.monotonic() - started, 4)
        record.error = text[:MESSAGE_CHARS]
        record.retry_after_s = retry_after_s(response.headers)
        record.response = bounded(_json_body(text.encode()) or text)
        session.keep_copy(record, record.response)
        return web.Response(status=response.status, headers=_reply_headers(response), body=text.encode())

    async def _held(self, record: CallRecord, session: Session, response: Any, started: float, hide_usage: bool) -> Any:
        """A reply read whole before the unit gets any of it (a refusal in it takes the next
        key, unseen by the unit): settled, and the response the unit gets if it stands. One the
        provider breaks off is settled with what was read of it (its usage so far), a failed
        call, and the unit gets a 502 if it is not tried again."""
        from aiohttp import ClientError, web

        assert record.protocol is not None
        record.status = response.status
        reader = ResponseReader(record.protocol, record.streamed)
        chunks: list[bytes] = []
        try:
            async for chunk in response.content.iter_any():
                chunks.append(chunk)
                reader.feed(chunk)
        except (ClientError, asyncio.TimeoutError, OSError) as exc:
            record.error = f"the provider's reply ended early: {type(exc).__name__}"
            record.cut_short_by = "provider"
            self._settle(record, session, reader, started)
            return _error(web, 502, "api_error", f"rayeval gateway: {record.error}")
        except asyncio.CancelledError:
            self._cut_off(record, session, reader, started)
            raise
        finally:
            response.release()
        record.first_byte_s = round(time.monotonic() - started, 4)
        body = b"".join(chunks)
        self._settle(record, session, reader, started)
        if hide_usage:
            hidden = HiddenUsage()
            body = hidden(body) + hidden.rest()
        return web.Response(status=response.status, headers=_reply_headers(response), body=body)

    async def _stream(
        self, request: Any, record: CallRecord, session: Session, response: Any, started: float, hide_usage: bool
    ) -> Any:
        """Relay a reply as it arrives. A unit that hangs up does not end the call: the rest is
        read on (within :data:`READ_ON_S` and the unit's time), so that the usage the provider
        reports at its end is seen. A reply the provider breaks off is settled with what was
        seen (its usage so far), a failed call, and the unit's connection is broken too."""
        from aiohttp import ClientError, web

        record.status = response.status
        reader = ResponseReader(record.protocol, record.streamed) if record.protocol is not None else None
        hidden = HiddenUsage() if hide_usage else None
        out = web.StreamResponse(status=response.status, headers=_reply_headers(response))
        chunks = response.content.iter_any()
        read_until: float | None = None  # the unit hung up: until when the rest is read
        try:
            try:
                await out.prepare(request)
            except ConnectionError:
                read_until = _read_on_until(session)
            while True:
                try:
                    wait = None if read_until is None else max(0.0, read_until - time.monotonic())
                    chunk = await asyncio.wait_for(anext(chunks), wait)
                except StopAsyncIteration:
                    break
                except (ClientError, asyncio.TimeoutError, OSError) as exc:
                    if read_until is not None:
                        record.error = f"its unit hung up, and the rest of the reply did not come: {type(exc).__name__}"
                        record.cut_short_by = "unit"
                    else:
                        record.error = f"the provider's reply ended early: {type(exc).__name__}"
                        record.cut_short_by = "provider"
                        if request.transport is not None:  # the unit sees its reply break off too
                            request.transport.close()
                    break
                if record.first_byte_s is None:
                    record.first_byte_s = round(time.monotonic() - started, 4)
                if read_until is None:
                    try:
                        await out.write(hidden(chunk) if hidden else chunk)  # on to the unit first: no latency added
                    except ConnectionError:
                        read_until = _read_on_until(session)
                if reader is not None:
                    reader.feed(chunk)
            if read_until is None and record.error is None:
                with contextlib.suppress(ConnectionError):
                    await out.write(hidden.rest() if hidden else b"")
                    await out.write_eof()
        except asyncio.CancelledError:
            self._cut_off(record, session, reader, started)
            raise
        finally:
            response.release()
        self._settle(record, session, reader, started)
        return out

    def _cut_off(self, record: CallRecord, session: Session, reader: ResponseReader | None, started: float) -> None:
        """The call's relay was cancelled (its session closed with it in flight): settled as it
        stands (a failure the provider answered a try before with stays its error)."""
        record.error = record.error or "cut off in flight: its unit's session closed"
        record.cut_short_by = "gateway"
        self._settle(record, session, reader, started)

    def _cut_off_unread(self, record: CallRecord, session: Session, started: float) -> None:
        """The call's relay was cancelled before it read the provider's reply (its session
        closed): the provider has the call, so it is a model call counted, its cost unknown."""
        if record.protocol is not None:
            self._cut_off(record, session, ResponseReader(record.protocol, record.streamed), started)

    def _settle(self, record: CallRecord, session: Session, reader: ResponseReader | None, started: float) -> None:
        """The call is over: its usage, cost and outcome into the record and the session."""
        record.latency_s = round(time.monotonic() - started, 4)
        if reader is None:
            return
        reader.finish()
        record.usage = reader.usage
        record.usage_reported = reader.usage_seen
        record.stop_reason = reader.stop_reason
        record.refusal = reader.refusal
        record.model = reader.model or record.model
        record.response = bounded(reader.reply)
        session.keep_copy(record, record.response)
        if reader.error is not None and record.error is None:
            record.error = str(reader.error.get("message", reader.error))[:MESSAGE_CHARS]
        price = find_price(session.prices, f"{record.route}/{record.model}") if record.model else None
        if record.usage_reported:  # else its cost is unknown, never 0
            known = {"input_tokens": record.usage.input_tokens or 0, "output_tokens": record.usage.output_tokens or 0}
            record.cost_usd = cost_usd(price, record.usage.model_copy(update=known))
        session.model_calls += 1
        session.usage.add(record.usage)
        session.cache_apart_tokens += record.cache_apart()
        session.by_model.setdefault(record.model or "unknown", ModelCalls()).add(record)
        session.last_model = record.model
        # the provider's own break-off is no doing of the unit's: its cost stays unknown, and
        # its further calls go on (see :meth:`Session.unseen_limit`)
        session.unseen_usage_calls += not record.usage_reported and record.cut_short_by != "provider"
        if record.unpriced():
            session.unpriced_calls += 1
        elif record.cost_usd is not None:
            session.cost_usd += record.cost_usd
            if session.budget is not None:
                session.budget.charge(record.cost_usd)


async def _closed(session: Session, room: Room) -> SessionReport:
    """Close ``session`` on the gateway's loop: no call of it starts from now on (those waiting
    for room end); those being relayed are waited for until :func:`_read_on_until`, then cut
    off; then its report."""
    session.closed = True
    room.changed()
    if session.relays:
        wait = max(0.0, _read_on_until(session) - time.monotonic())
        _, going_on = await asyncio.wait(set(session.relays), timeout=wait)
        for relay in going_on:
            relay.cancel()
        if going_on:
            await asyncio.wait(going_on)
    return session.report()


async def _settled(session: Session, wait_s: float) -> SessionReport:
    if session.relays:
        await asyncio.wait(set(session.relays), timeout=wait_s)
    return session.report()


def _read_on_until(session: Session) -> float:
    """Until when a reply its unit hung up on is read on (monotonic clock)."""
    until = time.monotonic() + READ_ON_S
    return until if session.deadline is None else min(until, session.deadline)


async def _waited_to_retry(record: CallRecord, session: Session, call_began: float, hint: float | None) -> bool:
    """After a failure worth another try (a rate limit, an overload, a server error, no
    answer): whether the call goes to the provider again, after the wait this says (the
    provider's hint, else a doubling backoff), which must end within the session's retry
    time for one call and before its deadline. The agent never sees the failures it absorbs."""
    wait = max(
        RETRY_FLOOR_S, hint if hint is not None else doubled_s(1.0, record.retries, 30.0) * random.uniform(0.5, 1.0)
    )
    until = time.monotonic() + wait
    if until - call_began > session.retry_s or (session.deadline is not None and until > session.deadline):
        return False
    record.retries += 1
    record.retried_s = round(record.retried_s + wait, 3)
    await asyncio.sleep(wait)
    return True


#: what the gateway's own process ran out of when a connection to the provider failed so
_LOCAL_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.EADDRNOTAVAIL})
_LOCAL_FAILURE = "the gateway could not open a connection (its process is out of file descriptors, memory or ports)"


def _local_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) is the gateway's own process out of a
    resource (:data:`_LOCAL_ERRNOS`), not the provider's failure."""
    seen: BaseException | None = exc
    for _ in range(8):  # an error's causes, never a loop
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno in _LOCAL_ERRNOS:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _last_failure(calls: list[CallRecord], earlier: ProviderFailure | None) -> ProviderFailure | None:
    """The provider's failure the last model call ended in: a status it may pass on later
    (429, 5xx, 529...), a rejected key (when no fallback was left), no answer at all, or a reply
    it broke off after its status (a 502: a bad reply, as a gateway calls one) (``earlier``: the
    one an earlier part of the session ended in, if these calls made none). A call the gateway
    cut off before any answer (its session closed), or that failed in the gateway's own process
    before any answer (see :attr:`CallRecord.unreached`), is no failure of the provider's."""
    made = [call for call in calls if call.protocol is not None and call.limit is None and not call.off_model]
    if not made:
        return earlier
    last = made[-1]
    if last.cut_short_by == "provider":
        return provider_failure(BROKEN_REPLY_STATUS, last.error or "")
    if last.status is not None and last.status < 400:
        return None
    if last.status is None and (not last.unreached or last.cut_short_by == "gateway"):
        return None
    failure = provider_failure(last.status, last.error or "", last.retry_after_s)
    if last.status is not None and not (failure.retryable or _rejects_key(last.status, last.error or "")):
        return None  # the provider refused the request itself (400, 404...): not its fault
    return failure


#: what a unit may POST, by its path after its upstream's base URL (``/v1`` before it or not):
#: its model's replies, each of one wire protocol and counted, and Anthropic's token counting
#: (None: free, not a model call); never the provider's other APIs (files, batches, fine-tuning,
#: keys...), whose spend and effects no gateway would count, nor the legacy ``/completions``,
#: which no agent program calls and whose replies the gateway does not read
_POSTS: dict[str, Wire | None] = {
    "/chat/completions": "chat",
    "/responses": "responses",
    "/messages": "anthropic",
    "/messages/count_tokens": None,
}
#: a model's name in ``GET /models/<name>`` (Fireworks' hold slashes): no escape, no dot segment
_MODEL_NAME = re.compile(r"[\w:@+-][\w.:@+-]*(/[\w:@+-][\w.:@+-]*)*", re.ASCII)


def relayed(method: str, raw_path: str) -> tuple[bool, Wire | None]:
    """Whether the gateway sends a call on to the provider, and the wire protocol of the model
    call it is (None: not one, e.g. the list of models). ``raw_path`` is the path as the unit
    sent it, undecoded and without its query, and the very one relayed: exact matches only, so
    that no escape (``%2F``, ``%3F``, ``%23``) makes a path read as one call and reach another."""
    tail = raw_path.removeprefix("/v1")
    if method == "POST":
        return tail in _POSTS, _POSTS.get(tail)
    listing = tail == "/models" or (tail.startswith("/models/") and _MODEL_NAME.fullmatch(tail[8:]) is not None)
    return method == "GET" and listing, None


class _Opened(NamedTuple):
    """A call as the gateway read it: its record, the body it sends on, whether the usage it asks
    the provider for is hidden from the unit, the model the call names, and why the gateway
    refused it itself (None: it did not)."""

    record: CallRecord
    body: bytes
    hide_usage: bool
    model: str | None
    refusal: str | None


def _opened(session: Session, route: str, path: str, protocol: Wire | None, body: bytes) -> _Opened:
    """Read a call's ``body``: its record (kept in ``session`` if it is a model call), unless
    the gateway refuses it (a limit reached, a model its unit may not call). Its JSON is read
    here and not kept past this: the memory it takes (many times its bytes) is held by one
    call at a time, as nothing else runs on the gateway's loop in between."""
    payload = _json_body(body)
    streamed = bool(payload.get("stream")) if protocol is not None else False
    #: OpenAI reports a stream's usage only when asked: the gateway asks, and hides it if the unit did not
    hide_usage = (
        protocol == "chat" and streamed and object_at(payload, "stream_options").get("include_usage") is not True
    )
    model = payload.get("model")
    record = CallRecord(
        route=route,
        path=path,
        protocol=protocol,
        model=model[:NAME_CHARS] if isinstance(model, str) else None,
        streamed=streamed,
        started_at=time.time(),
        request=bounded(payload) if protocol is not None else None,
    )
    refusal = _refusal(session, record, payload, body) if protocol is not None else None
    if hide_usage and refusal is None:
        asked = {**payload, "stream_options": {**object_at(payload, "stream_options"), "include_usage": True}}
        written = json.dumps(asked, separators=(",", ":"), ensure_ascii=False).encode(errors="backslashreplace")
        if len(written) > len(body) + _USAGE_ASKED_BYTES:  # its room was taken for its bytes as sent
            refusal = "rayeval gateway: this request grows when written again to ask for its usage; send it compact"
            record.status, record.error = 400, refusal
        body = written
    if refusal is not None:
        session.keep_refused(record)
    elif protocol is not None:
        session.calls.append(record)
        session.keep_copy(record, record.request)
    return _Opened(record, body, hide_usage, record.model, refusal)


def _refusal(session: Session, record: CallRecord, payload: dict[str, Any], body: bytes) -> str | None:
    """Why the gateway answers a model call (``payload``, read off ``body``) itself, into its
    ``record``: a limit its unit reached, a model it may not call; None: it goes on."""
    limit = session.over_limit()
    if limit is not None:
        session.limit_reached = session.limit_reached or limit
        record.limit, record.status = limit, 400
        record.error = _limit_message(limit, session)
        return record.error
    twice = _key_given_twice(body)
    refused = session.off_model(record.route, payload, twice in _MODEL_KEYS)
    record.off_model = refused is not None
    if refused is None and (twice is not None or not isinstance(payload.get("stream"), (bool, type(None)))):
        refused = (
            "rayeval gateway: a model call gives each of 'model', 'models', 'stream' and 'stream_options' once "
            "at most, 'stream' as true or false"
        )
    if refused is not None:
        record.status, record.error = 400, refused
    return refused


def _again(record: CallRecord, model: str | None) -> CallRecord:
    """A new record for ``record``'s request (naming ``model``), sent again (with the next key)."""
    return CallRecord(
        route=record.route,
        path=record.path,
        protocol=record.protocol,
        model=model,
        streamed=record.streamed,
        started_at=time.time(),
        request=record.request,
    )


def _reply_headers(response: Any) -> dict[str, str]:
    """The provider's response headers the unit gets (the gateway sets the hop's own)."""
    return {k: v for k, v in response.headers.items() if k.lower() not in _RESPONSE_HOP}


def _json_body(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body) if body else {}
    except (ValueError, RecursionError):  # not JSON, or nested too deep to read: names no model
        return {}
    return value if isinstance(value, dict) else {}


#: the keys of a model call's body that say which model answers it (see :mod:`.pin`) and how its
#: reply is read for its usage: one given twice is refused (the gateway reads the last, a
#: provider may read the first)
_MODEL_KEYS = ("model", "models")
_READ_ONCE = (*_MODEL_KEYS, "stream", "stream_options")


def _key_given_twice(body: bytes) -> str | None:
    """The first of :data:`_READ_ONCE` the object ``body`` is holds twice, None: none. Only a
    body whose bytes could spell such a key twice (one of them quoted twice, or a ``\\u``
    escape, which may spell a letter of one) is parsed again, its top-level pairs kept, to see."""
    if b"\\u" not in body and all(body.count(b'"%s"' % key.encode()) < 2 for key in _READ_ONCE):
        return None
    top: list[Any] = []

    def pairs_of(pairs: list[tuple[str, Any]]) -> None:
        top[:] = pairs  # the top-level object's come last

    try:
        json.loads(body, object_pairs_hook=pairs_of)
    except (ValueError, RecursionError):
        return None  # not read as JSON: it names no model, and is refused for that where pinned
    keys = [key for key, _ in top]
    return next((key for key in _READ_ONCE if keys.count(key) > 1), None)


def _token_header(headers: Mapping[str, str]) -> str:
    """The header the unit's SDK put its token in (the provider's key goes in the same one)."""
    for name in _TOKEN_HEADERS:
        if headers.get(name):
            return name
    return "authorization"


def _forwarded(headers: Mapping[str, str], key_header: str, key: str | None) -> dict[str, str]:
    out = {name: value for name, value in headers.items() if name.lower() not in _REQUEST_HOP}
    out["Accept-Encoding"] = "identity"
    if key:
        out[key_header] = f"Bearer {key}" if key_header == "authorization" else key
    return out


def _rejects_key(status: int, text: str) -> bool:
    """Whether the provider's error reply (``text``) rejects the key: by its status, or by the
    kind or the start of the error it names (OpenAI's ``insufficient_quota``, Anthropic's 400 of
    a spent credit balance), never by words anywhere in it: a message may repeat what the
    request said (``Invalid value: 'quota exceeded'``), and the unit wrote the request."""
    if status in KEY_REJECTED_STATUSES or status == 402:
        return True
    error = _json_body(text.encode()).get("error")
    if not isinstance(error, dict):
        return False
    message = error.get("message")
    return BILLING_ERROR_KIND in (error.get("type"), error.get("code")) or (
        isinstance(message, str) and message.startswith(BILLING_MESSAGE_STARTS)
    )


def _limit_message(limit: LimitName, session: Session) -> str:
    limits = session.limits
    if session.counted_limit() is None:  # reached by a call of unseen usage
        return (
            "rayeval gateway: a model call of this unit went uncounted (its usage was not seen: its reply was cut "
            "short or too big to read), so its spend is unknown against its limits; no further model calls are made"
        )
    if limit == "run_cost":
        return "rayeval gateway: the run's budget (--max-cost) is spent; no further model calls are made"
    value = {"tokens": limits.tokens, "cost": limits.cost_usd, "model_calls": limits.model_calls}.get(limit)
    what = {"tokens": "tokens", "cost": "USD of model cost", "model_calls": "model calls"}.get(limit, limit)
    return f"rayeval gateway: this unit reached its limit of {value} {what}; no further model calls are made"


def _error(web: Any, status: int, kind: str, message: str) -> Any:
    """An error both providers' SDKs read: Anthropic's shape, with OpenAI's ``message`` too."""
    return web.json_response({"type": "error", "error": {"type": kind, "message": message}}, status=status)


#: The providers a unit reaches through the gateway, by route: (the variable of their endpoint,
#: its default, the variable of their key). OpenRouter and Fireworks speak OpenAI's API.
PROVIDER_ROUTES: dict[str, tuple[str | None, str, str]] = {
    "openai": ("OPENAI_BASE_URL", "https://api.openai.com/v1", "OPENAI_API_KEY"),
    "anthropic": ("ANTHROPIC_BASE_URL", "https://api.anthropic.com", "ANTHROPIC_API_KEY"),
    "openrouter": (None, "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "fireworks": (None, "https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY"),
}


def upstreams_from(environ: Mapping[str, str]) -> dict[str, Upstream]:
    """The providers' endpoints and keys as this process's environment names them (Anthropic's
    fallback keys after its key, taken on what ``ANTHROPIC_KEY_FALLBACK_ON`` says): only those
    it names a key or an endpoint of. A provider it names neither of is no route of the gateway:
    a unit's call there would fail for want of a key, a failure of the unit's making."""
    from ..models.failures import ANTHROPIC_KEY_FALLBACK_ON, ANTHROPIC_KEY_FALLBACKS, fallback_keys, key_fallback_on

    found: dict[str, Upstream] = {}
    for route, (base_variable, default, key_variable) in PROVIDER_ROUTES.items():
        keys = [environ[key_variable]] if environ.get(key_variable) else []
        fallback_on: KeyFallbackOn = "rejected_key"
        if route == "anthropic":
            with contextlib.suppress(ValueError):  # checked, with its message, when the run starts
                keys += fallback_keys(ANTHROPIC_KEY_FALLBACKS, environ.get(ANTHROPIC_KEY_FALLBACKS))
                fallback_on = key_fallback_on(environ.get(ANTHROPIC_KEY_FALLBACK_ON))
        base = environ.get(base_variable) if base_variable else None
        if keys or base:
            found[route] = Upstream(base or default, tuple(keys), fallback_on)
    return found
