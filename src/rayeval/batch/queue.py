"""Which unit starts next: each model's waiting units in round robin, within the run's and each
model's concurrency, errored units again after a delay. Ray places and runs them; this only
decides how many may be out at once."""

from __future__ import annotations

import heapq
import itertools
import json
import random
import time
from collections import Counter, deque
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._backoff import doubled_s
from .._json import amount_in
from ..models.failures import REQUEST_CAUSED_STATUSES, RETRYABLE_STATUSES
from ..record import PROVIDER_ERROR, SeenBy, UnitRecord
from .plan import Plan, Unit

Attempt = tuple[Unit, int]

#: the longest a provider's retry hint holds back a unit's next attempt: a hint (seen by the
#: gateway; an agent's own report of one is no hint) says when to try again, never "not today"
MAX_RETRY_HINT_S = 600.0

#: the failures a run's own retries run again, by who saw them (besides provider failures)
RETRIED: frozenset[SeenBy] = frozenset({"ray", "runner"})


def retry_delay(attempt: int, backoff_s: float) -> float:
    """Seconds before attempt ``attempt + 1`` of an errored unit: doubling from
    ``backoff_s``, each drawn between half and one and a half times that, so that units that
    failed together (an API outage, a rate limit) do not all come back at the same instant."""
    return doubled_s(backoff_s, attempt - 1) * random.uniform(0.5, 1.5)


def error_details(metadata_json: str) -> dict[str, Any]:
    """The ``error_details`` of a row's ``metadata_json`` (empty: none, or not an object)."""
    try:
        details = json.loads(metadata_json).get("error_details") or {}
    except (ValueError, AttributeError):
        return {}
    return details if isinstance(details, dict) else {}


def unit_retry_delay(row: UnitRecord, attempt: int, backoff_s: float) -> float | None:
    """Seconds before a run's own retry of errored ``row`` (:func:`retry_delay`), or None when
    no retry helps. Retries are for what may pass on a second try: a unit Ray or the runner
    could not run (``error_details.seen_by``: a lost worker or node, its data, its sandbox) and
    a ``ProviderError`` of a status worth another try (not a rejected key or a bad request,
    nor a rate limit, which the unit's own requests may bring on: a second try would be the
    agent's to buy, and the gateway held its call through a passing one already), whose hint is
    waited at least, up to ``MAX_RETRY_HINT_S``. An agent's own error (its code raised, its
    process died, its answer cannot be stored) is not run again."""
    details = error_details(row.metadata_json)
    delay = retry_delay(attempt, backoff_s)
    if row.error_type == PROVIDER_ERROR:
        status = details.get("status")
        if status not in RETRYABLE_STATUSES or status in REQUEST_CAUSED_STATUSES:
            return None
        return max(delay, min(amount_in(details.get("retry_after_s")) or 0.0, MAX_RETRY_HINT_S))
    return delay if details.get("seen_by") in RETRIED else None


def goes_on_from_any_checkpoint(metadata_json: str | None) -> bool:
    """Whether a unit's next attempt goes on from its newest checkpoint, whichever attempt saved
    it, after the attempt whose row's metadata is ``metadata_json``: that attempt lost its
    worker or node or could not run (``error_details.seen_by`` in :data:`RETRIED`), or its row
    is unknown (None: a resumed run's unit without a stored row was in flight when its driver
    stopped, its attempts not stored, or never started and saved none). Else the attempt starts
    afresh."""
    return metadata_json is None or error_details(metadata_json).get("seen_by") in RETRIED


class _ModelQueue:
    """One model's units waiting to start: retries that are due first, then its plan positions
    still to run, each made into a unit only when taken (the driver's memory stays flat in the
    size of the plan)."""

    def __init__(self, plan: Plan, earlier_attempts: np.ndarray | None) -> None:
        self.plan = plan
        self.earlier_attempts = earlier_attempts
        self.retries: deque[Attempt] = deque()
        self.positions: Iterator[int] = iter(())
        self.untaken = 0

    def add(self, positions: Iterator[int], count: int) -> None:
        self.positions = itertools.chain(self.positions, positions)
        self.untaken += count

    def __len__(self) -> int:
        return len(self.retries) + self.untaken

    def take(self) -> Attempt:
        if self.retries:
            return self.retries.popleft()
        self.untaken -= 1
        position = next(self.positions)
        earlier = 0 if self.earlier_attempts is None else int(self.earlier_attempts[position])
        return self.plan.unit(position), earlier + 1


class UnitQueue:
    """The units to run (``todo``: a bool per plan position) and the limits on how many run at
    once: ``max_concurrency`` in all, ``model_limits`` per model.  ``earlier_attempts`` (per
    position, ``--retry-errors``) numbers a unit's first attempt after those already stored."""

    def __init__(
        self,
        plan: Plan,
        todo: np.ndarray,
        *,
        max_concurrency: int,
        model_limits: dict[str, int],
        earlier_attempts: np.ndarray | None = None,
    ):
        self.queues = {model: _ModelQueue(plan, earlier_attempts) for model in dict.fromkeys(plan.models)}
        for model_index, count in enumerate(plan.model_counts(todo)):
            if count:
                self.queues[plan.models[model_index]].add(plan.model_positions(model_index, todo), count)
        self.order = deque(self.queues)
        self.delayed: list[tuple[float, int, Attempt]] = []
        self._sequence = itertools.count()
        self.running: Counter[str] = Counter()
        self.max_concurrency = max_concurrency
        self.model_limits = model_limits

    def next(self) -> Attempt | None:
        """The next unit to start (counted as running), or None while the limits allow none or
        no unit waits."""
        now = time.monotonic()
        while self.delayed and self.delayed[0][0] <= now:
            _, _, (unit, attempt) = heapq.heappop(self.delayed)
            self.queues[unit.model].retries.append((unit, attempt))
        if self.running.total() >= self.max_concurrency:
            return None
        for _ in range(len(self.order)):
            model = self.order[0]
            self.order.rotate(-1)
            if self.queues[model] and self.running[model] < self.model_limits.get(model, self.max_concurrency):
                self.running[model] += 1
                return self.queues[model].take()
        return None

    def finished(self, model: str) -> None:
        self.running[model] -= 1

    def retry_later(self, unit: Unit, attempt: int, delay_s: float) -> None:
        heapq.heappush(self.delayed, (time.monotonic() + delay_s, next(self._sequence), (unit, attempt)))

    @property
    def waiting(self) -> bool:
        """Units wait to start, now or after a retry's delay."""
        return bool(self.delayed) or any(self.queues.values())

    def left(self) -> int:
        """How many units wait to start."""
        return len(self.delayed) + sum(map(len, self.queues.values()))
