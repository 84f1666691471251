"""What the gateway holds of its units' requests at once, and its bounds.

The gateway runs in a run's worker process and serves every unit of that worker: a unit that
could make it hold requests without bound (many big bodies at once, or one whose JSON takes
many times its bytes to read) would have the worker killed for memory, and with it the other
units of the worker. So each request takes room before its body is read: a place among its
unit's requests in flight, and its body's bytes in its unit's share and in the gateway's. A
request waits for room (an honest agent's big request waits its turn; it does not fail), within
its unit's time. Its JSON is read only if the memory that takes stays within one bound; reading
is done with nothing else in between on the gateway's loop, so one request's parse is held at
a time.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Protocol

from .._json import values_bound


class Session(Protocol):
    """What room is kept for: a unit's session (``server.Session``), its requests in flight and
    their bodies' bytes, and when it ends."""

    in_flight: int
    held_bytes: int
    peak_bytes: int
    closed: bool
    deadline: float | None


MiB = 1 << 20
#: the largest request body relayed: Anthropic's Messages API takes at most 32 MB
#: (docs.anthropic.com/en/api/overview, "Request size limits"); OpenAI documents no one figure,
#: and has been seen to answer 413 above 25 MiB
MAX_REQUEST_BYTES = 32 * MiB
#: the memory reading a body takes, at most, per byte of it and per JSON value it may hold
#: (measured on CPython 3.11 for the gateway's whole read of a call, a second parse for its
#: model's name and the record's copy included: a base64 string 3 bytes a byte; 44 bytes a
#: byte for empty lists, 26 for one-key objects, 25 for short strings, at most 178 bytes a value)
_BYTES_PER_BYTE = 4
_BYTES_PER_VALUE = 200


def parse_bytes(body: bytes) -> int:
    """An upper bound of the memory the gateway's reading ``body`` as JSON takes: a few times its
    bytes, and each value it may hold (one per ``,``, ``:``, ``[`` or ``{``, those inside
    strings counted too). A base64 image costs a few times its bytes; many small values, far more."""
    return _BYTES_PER_BYTE * len(body) + _BYTES_PER_VALUE * values_bound(body)


@dataclass(frozen=True)
class RequestBounds:
    """What the requests of a gateway's units may take at once."""

    #: the largest body a request may have (a larger one is refused: 413)
    max_request_bytes: int = MAX_REQUEST_BYTES
    #: the most memory reading one body's JSON may take (see :func:`parse_bytes`; over it: 413)
    max_parse_bytes: int = 512 * MiB
    #: a unit's requests in flight at once
    session_requests: int = 16
    #: the bytes of the bodies of a unit's requests in flight, together
    session_bytes: int = 2 * MAX_REQUEST_BYTES
    #: the bytes of the bodies of the gateway's requests in flight (all its units'), together
    gateway_bytes: int = 8 * MAX_REQUEST_BYTES

    def __post_init__(self) -> None:
        if not 0 < self.max_request_bytes <= self.session_bytes <= self.gateway_bytes or self.session_requests < 1:
            raise ValueError(f"request bounds do not let the largest request through: {self}")


class Room:
    """The bodies a gateway holds, and what its units' requests wait on (on the gateway's loop)."""

    def __init__(self, bounds: RequestBounds):
        self.bounds = bounds
        #: the bytes of the bodies of the requests in flight now, and the most ever held
        self.held_bytes = 0
        self.peak_bytes = 0
        self._freed = asyncio.Event()

    def fits(self, session: Session, size: int) -> bool:
        bounds = self.bounds
        return (
            session.in_flight < bounds.session_requests
            and session.held_bytes + size <= bounds.session_bytes
            and self.held_bytes + size <= bounds.gateway_bytes
        )

    async def take(self, session: Session, size: int) -> bool:
        """Take room for a request of ``size`` bytes of ``session``, once there is some; False:
        none came before its unit's time ran out, or its session closed."""
        while not self.fits(session, size):
            if session.closed:
                return False
            wait = None if session.deadline is None else session.deadline - time.monotonic()
            if wait is not None and wait <= 0:
                return False
            freed = self._freed
            try:
                await asyncio.wait_for(freed.wait(), wait)
            except asyncio.TimeoutError:
                return False
        session.in_flight += 1
        session.held_bytes += size
        self.held_bytes += size
        self.peak_bytes = max(self.peak_bytes, self.held_bytes)
        session.peak_bytes = max(session.peak_bytes, session.held_bytes)
        return True

    def give_back(self, session: Session, size: int) -> None:
        session.in_flight -= 1
        session.held_bytes -= size
        self.held_bytes -= size
        self.changed()

    def changed(self) -> None:
        """Wake the requests waiting for room (some was freed, or a session closed)."""
        self._freed.set()
        self._freed = asyncio.Event()
