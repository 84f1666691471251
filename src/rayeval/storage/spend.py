"""What a run spent, its retried attempts included.

A unit's attempt that the run retries itself (``--retries``) is not stored: readers keep a
unit's latest row, and one row per unit is what a run stores. Its model calls were made and
paid, though, so the unit's final row says what its earlier attempts of that run used, under
the metadata key :data:`EARLIER_ATTEMPTS` (:class:`EarlierAttempts`): written by the driver
only (a key of that name in what the agent returns is dropped), from the rows the workers
made of those attempts, whose counts are the gateway's. The row's own columns stay its
attempt's (its calls, tokens and cost go with its answer and its ``model_calls.json``); every
total of spend (:func:`run_spend`, the run's summary) adds the earlier attempts' apart.
"""

from __future__ import annotations

import json
import math
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ValidationError

from .._json import dumps
from ..record import UnitRecord

__all__ = [
    "EARLIER_ATTEMPTS",
    "EarlierAttempts",
    "RetriedAttempt",
    "earlier_attempts",
    "run_spend",
    "with_earlier_spend",
]

#: The row metadata key of the unit's earlier attempts of its run (see :class:`EarlierAttempts`).
EARLIER_ATTEMPTS = "earlier_attempts"
#: How many earlier attempts a row lists one by one (the latest); all of them are summed.
MAX_LISTED = 10
#: How much of an earlier attempt's error message its entry keeps (its first line).
MESSAGE_CHARS = 200


class RetriedAttempt(BaseModel):
    """One earlier attempt: why it was retried, and what its model calls used."""

    attempt: int
    status: str
    error_type: str | None
    error_message: str | None
    n_model_calls: int | None
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    judge_cost_usd: float | None


class EarlierAttempts(BaseModel):
    """A unit's attempts of its run before the stored one: how many, what they used in all
    (each a sum of the attempts that report it; None: none does), the latest
    :data:`MAX_LISTED` one by one."""

    attempts: int = 0
    n_model_calls: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    judge_cost_usd: float | None = None
    listed: list[RetriedAttempt] = []

    def add(self, row: UnitRecord) -> None:
        """Count retried ``row``'s attempt in."""
        message = None if row.error_message is None else row.error_message.strip().split("\n", 1)[0][:MESSAGE_CHARS]
        entry = RetriedAttempt(
            attempt=row.attempt, status=row.status, error_type=row.error_type, error_message=message,
            n_model_calls=row.n_model_calls, input_tokens=row.input_tokens, output_tokens=row.output_tokens,
            cost_usd=_finite(row.cost_usd), judge_cost_usd=_finite(row.judge_cost_usd),
        )  # fmt: skip
        self.attempts += 1
        self.listed = [*self.listed, entry][-MAX_LISTED:]
        self.n_model_calls = _plus(self.n_model_calls, entry.n_model_calls)
        self.input_tokens = _plus(self.input_tokens, entry.input_tokens)
        self.output_tokens = _plus(self.output_tokens, entry.output_tokens)
        self.cost_usd = _plus(self.cost_usd, entry.cost_usd)
        self.judge_cost_usd = _plus(self.judge_cost_usd, entry.judge_cost_usd)

    def onto(self, row: UnitRecord) -> UnitRecord:
        """``row`` (the unit's stored attempt) saying what these attempts used."""
        metadata = json.loads(row.metadata_json)
        metadata[EARLIER_ATTEMPTS] = self.model_dump(mode="json")
        return row.model_copy(update={"metadata_json": dumps(metadata)})


_Amount = TypeVar("_Amount", int, float)


def _plus(total: _Amount | None, amount: _Amount | None) -> _Amount | None:
    if amount is None:
        return total
    return amount if total is None else total + amount


def _finite(cost: float | None) -> float | None:
    return cost if cost is not None and math.isfinite(cost) else None


def earlier_attempts(metadata_json: str | None) -> EarlierAttempts | None:
    """The earlier attempts a stored row's ``metadata_json`` lists (None: none, or not readable)."""
    # most rows have none: their metadata is not parsed (a key the agent wrote is never stored)
    if metadata_json is None or f'"{EARLIER_ATTEMPTS}"' not in metadata_json:
        return None
    try:
        listed = json.loads(metadata_json).get(EARLIER_ATTEMPTS)
        return None if listed is None else EarlierAttempts.model_validate(listed)
    except (ValueError, AttributeError, ValidationError):
        return None


def with_earlier_spend(table: pa.Table) -> pa.Table:
    """Stored rows (``table``, with their ``metadata_json``) without their metadata, with what
    each one's earlier attempts cost: ``earlier_cost_usd`` and ``earlier_judge_cost_usd`` (null:
    none listed, or unpriced)."""
    metadata = table.column("metadata_json")
    # only the rows that list earlier attempts are parsed
    marked = pc.fill_null(pc.match_substring(metadata, f'"{EARLIER_ATTEMPTS}"'), False).to_numpy(zero_copy_only=False)
    cost, judge_cost = np.full(len(table), np.nan), np.full(len(table), np.nan)
    for index in np.flatnonzero(marked):
        earlier = earlier_attempts(metadata[int(index)].as_py())
        if earlier is not None:
            cost[index], judge_cost[index] = _or_nan(earlier.cost_usd), _or_nan(earlier.judge_cost_usd)
    table = table.drop_columns(["metadata_json"])
    table = table.append_column("earlier_cost_usd", pa.array(cost, from_pandas=True))
    return table.append_column("earlier_judge_cost_usd", pa.array(judge_cost, from_pandas=True))


def run_spend(table: pa.Table) -> float:
    """What stored rows (``table``: their ``cost_usd`` and ``metadata_json``) cost, with the
    earlier attempts each lists."""
    spent = with_earlier_spend(table)
    costs = (spent.column(name) for name in ("cost_usd", "earlier_cost_usd"))
    return sum(float(pc.sum(pc.filter(column, pc.is_finite(column))).as_py() or 0.0) for column in costs)


def _or_nan(amount: float | None) -> float:
    return math.nan if amount is None else amount
