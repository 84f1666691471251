"""Which units run next: per-model queues in round robin, global and per-model limits,
delayed retries, and calls sized so that fast units do not each pay a Ray round trip."""

from __future__ import annotations

import heapq
import itertools
import random
import time
from collections import Counter, deque
from collections.abc import Iterator

import numpy as np

from .plan import Plan, Unit

Attempt = tuple[Unit, int]

# A call carries about this much work; slow units still go one per call.  Each call costs
# the driver and its worker about a millisecond each of Ray work (submission, encoding the
# arguments and rows): with instant units on CPUs shared by a worker's two threads, calls of
# 0.1 s made runs 6 % slower than calls of 0.25 s (A/B, 12 runs each).  Short enough to keep
# the end of a run short (its last units are spread over every call slot anyway).
TARGET_CALL_SECONDS = 0.25
# And no more units than this: a call's rows (about 1 KB a unit) come back as one object.
MAX_UNITS_PER_CALL = 256
# A call starts no unit after running this long (sizes are estimates; see UnitWorker.run_units).
CALL_BUDGET_S = 2 * TARGET_CALL_SECONDS
# Agents quicker than this answer at once (replay, cached or instant agents): their units are
# the harness's own work, which keeps a worker's core busy, so more of them at once only makes
# the worker's threads contend.  Slower agents wait (on LLM calls, on subprocess agents) and
# get the full concurrency, batched or not.
INSTANT_AGENT_S = 0.005


def retry_delay(attempt: int, backoff_s: float) -> float:
    """Seconds before attempt ``attempt + 1`` of a unit whose agent errored: doubling from
    ``backoff_s``, each drawn between half and one and a half times that, so that units that
    failed together (an API outage, a rate limit) do not all come back at the same instant."""
    return backoff_s * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)


def _average(mean: float | None, value: float) -> float:
    return value if mean is None else 0.9 * mean + 0.1 * value


class ChunkSizer:
    """Units per actor call, and whether the agent answers at once, from what the workers
    measure (moving averages).

    Calls are sized by a unit's whole wall time (the agent's own time would ignore the harness
    and grading); instant agents are told by the agent's time, which unlike the unit's does not
    grow when many threads share a worker.
    """

    def __init__(self) -> None:
        self.mean_s: float | None = None
        self.agent_mean_s: float | None = None

    def observe(self, seconds: float, agent_s: float) -> None:
        self.mean_s = _average(self.mean_s, seconds)
        self.agent_mean_s = _average(self.agent_mean_s, agent_s)

    @property
    def known(self) -> bool:
        return self.mean_s is not None

    @property
    def size(self) -> int:
        if self.mean_s is None:
            return 1
        return max(1, min(MAX_UNITS_PER_CALL, int(TARGET_CALL_SECONDS / max(self.mean_s, 1e-6))))

    @property
    def instant(self) -> bool:
        return self.agent_mean_s is not None and self.agent_mean_s < INSTANT_AGENT_S


class _ModelQueue:
    """One model's units waiting to start: those put back first (retries, units a call did not
    start), then its plan positions still to run, each made into a unit only when taken."""

    def __init__(self, plan: Plan, earlier_attempts: np.ndarray | None) -> None:
        self.plan = plan
        self.earlier_attempts = earlier_attempts
        self.front: deque[Attempt] = deque()
        self.positions: Iterator[int] = iter(())
        self.untaken = 0

    def add(self, positions: Iterator[int], count: int) -> None:
        self.positions = itertools.chain(self.positions, positions)
        self.untaken += count

    def __len__(self) -> int:
        return len(self.front) + self.untaken

    def appendleft(self, attempt: Attempt) -> None:
        self.front.appendleft(attempt)

    def popleft(self) -> Attempt:
        if self.front:
            return self.front.popleft()
        self.untaken -= 1
        position = next(self.positions)
        earlier = 0 if self.earlier_attempts is None else int(self.earlier_attempts[position])
        return self.plan.unit(position), earlier + 1


class Scheduler:
    """A call runs its units one after another, so each call in flight is one concurrent agent.

    ``todo`` says, a bool per plan position, which units to run: queues hold positions, not
    units, so that the driver's memory does not grow with the plan.  ``earlier_attempts`` (per
    position, ``--retry-errors``) numbers a unit's first attempt after those already stored.
    """

    def __init__(
        self,
        plan: Plan,
        todo: np.ndarray,
        *,
        max_concurrency: int,
        model_limits: dict[str, int],
        earlier_attempts: np.ndarray | None = None,
    ):
        self.plan = plan
        self.earlier_attempts = earlier_attempts
        self.queues: dict[str, _ModelQueue] = {}
        for model_index, count in enumerate(plan.model_counts(todo)):
            if count:
                self._queue(plan.models[model_index]).add(plan.model_positions(model_index, todo), count)
        self.delayed: list[tuple[float, int, Unit, int]] = []
        self.running: Counter[str] = Counter()
        self.limits = model_limits
        self.max_total = max_concurrency
        self._sequence = 0
        self._order = deque(self.queues)

    def _queue(self, model: str) -> _ModelQueue:
        return self.queues.setdefault(model, _ModelQueue(self.plan, self.earlier_attempts))

    def put_back(self, attempts: list[Attempt]) -> None:
        """Units a call did not start: first in line again, in their order."""
        for unit, attempt in reversed(attempts):
            self._queue(unit.model).appendleft((unit, attempt))
            if unit.model not in self._order:
                self._order.append(unit.model)

    def retry_later(self, unit: Unit, attempt: int, delay_s: float) -> None:
        self._sequence += 1
        heapq.heappush(self.delayed, (time.monotonic() + delay_s, self._sequence, unit, attempt))

    def _release_due_retries(self) -> None:
        now = time.monotonic()
        while self.delayed and self.delayed[0][0] <= now:
            _, _, unit, attempt = heapq.heappop(self.delayed)
            self.put_back([(unit, attempt)])

    def next_call(self, size: int, limit: int | None = None) -> list[Attempt]:
        """Up to ``size`` units of one model for one call, or [] when nothing may start now.

        ``limit`` lowers the number of calls in flight below the configured concurrency.
        """
        self._release_due_retries()
        if sum(self.running.values()) >= min(self.max_total, limit or self.max_total):
            return []
        for _ in range(len(self._order)):
            model = self._order[0]
            self._order.rotate(-1)
            queue = self.queues.get(model)
            if queue and self.running[model] < self.limits.get(model, self.max_total):
                self.running[model] += 1
                return [queue.popleft() for _ in range(min(size, len(queue)))]
        return []

    def call_finished(self, model: str) -> None:
        self.running[model] -= 1

    @property
    def queued(self) -> int:
        """Units waiting to start (retries included)."""
        return len(self.delayed) + sum(len(queue) for queue in self.queues.values())

    @property
    def idle(self) -> bool:
        return not self.delayed and not any(self.queues.values()) and not sum(self.running.values())
