"""A limit on the requests in flight to one provider.

In a plain process it is a semaphore of that process. Under Ray (``ray.is_initialized()``:
a run's worker, or a driver that called ``ray.init``) it is one counter for the whole Ray job:
a named actor (not detached: it ends with the job), created by the first caller. Its slots
are leases, so a worker that dies holding one (a killed node) gives it back after
``lease_s`` instead of lowering the limit for the rest of the run. The first caller's limit
applies to every caller of the job.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_lock = threading.Lock()
_local: dict[str, threading.BoundedSemaphore] = {}
_actors: dict[str, Any] = {}


@contextmanager
def request_slot(provider: str, limit: int, lease_s: float) -> Iterator[None]:
    """Hold one of ``limit`` slots of ``provider`` while the block runs."""
    ray = sys.modules.get("ray")  # not imported: not initialized either
    if ray is None or not ray.is_initialized():
        with _semaphore(provider, limit):
            yield
        return
    token = uuid.uuid4().hex
    limiter = _acquire(provider, limit, token, lease_s)
    try:
        yield
    finally:
        limiter.release.remote(token)


def _semaphore(provider: str, limit: int) -> threading.BoundedSemaphore:
    with _lock:
        return _local.setdefault(f"{provider}:{limit}", threading.BoundedSemaphore(limit))


def _acquire(provider: str, limit: int, token: str, lease_s: float) -> Any:
    import ray

    for _ in range(2):  # once more with a new actor if the first one died with its owner
        limiter = _limiter(provider, limit)
        try:
            ray.get(limiter.acquire.remote(token, lease_s))
            return limiter
        except ray.exceptions.RayActorError:
            with _lock:
                _actors.pop(provider, None)
    raise RuntimeError(f"the request limit of provider {provider!r} is unavailable (its Ray actor keeps dying)")


def _limiter(provider: str, limit: int) -> Any:
    import ray

    with _lock:
        if provider not in _actors:
            remote = ray.remote(num_cpus=0, max_restarts=0)(RequestLimiter)
            name = f"rayeval-model-requests-{provider}"
            _actors[provider] = remote.options(name=name, get_if_exists=True).remote(limit)
        return _actors[provider]


class RequestLimiter:
    """A counting semaphore with leased slots, as an async Ray actor."""

    def __init__(self, limit: int):
        self.limit = limit
        self.held: dict[str, float] = {}  # token -> lease deadline (monotonic)
        self.changed = asyncio.Condition()

    async def acquire(self, token: str, lease_s: float) -> None:
        async with self.changed:
            while True:
                now = time.monotonic()
                for held, deadline in list(self.held.items()):
                    if deadline <= now:
                        del self.held[held]
                if len(self.held) < self.limit:
                    self.held[token] = now + lease_s
                    return
                next_expiry = min(self.held.values()) - now
                try:
                    await asyncio.wait_for(self.changed.wait(), timeout=next_expiry)
                except asyncio.TimeoutError:
                    pass

    async def release(self, token: str) -> None:
        async with self.changed:
            self.held.pop(token, None)
            self.changed.notify()
