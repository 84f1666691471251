"""A loopback provider the gateway's tests script, down to closing its connection mid-reply:
aiohttp, on a thread of its own."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Provider:
    """A loopback provider: ``routes`` maps a POST path to its handler; ``seen`` the bodies."""

    def __init__(self, routes: dict[str, Handler]):
        self.routes = routes
        self.seen: list[dict[str, Any]] = []
        self.loop = asyncio.new_event_loop()
        self.url = ""

    def __enter__(self) -> Provider:  # noqa: PYI034 - typing.Self needs Python 3.11
        app = web.Application()
        for path, handler in self.routes.items():
            app.router.add_post(path, self._recorded(handler))
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)

    def _recorded(self, handler: Handler) -> Handler:
        async def recorded(request: web.Request) -> web.StreamResponse:
            self.seen.append(await request.json())
            return await handler(request)

        return recorded


async def sse(request: web.Request, *events: dict[str, Any]) -> web.StreamResponse:
    """A streamed reply begun with ``events`` (the caller ends it, or breaks it off)."""
    reply = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await reply.prepare(request)
    for event in events:
        await reply.write(b"event: " + event["type"].encode() + b"\ndata: " + json.dumps(event).encode() + b"\n\n")
    return reply


class ChargedBudget:
    """A run's budget that is never spent out, and keeps what it was charged."""

    def __init__(self) -> None:
        self.charged: list[float] = []

    def spent_out(self) -> bool:
        return False

    def charge(self, usd: float) -> None:
        self.charged.append(usd)
