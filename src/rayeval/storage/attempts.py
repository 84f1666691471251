"""Which stored row of a unit counts, and how units are counted: the one rule every reader
uses, for pandas frames and as duckdb SQL.

A unit is its ``(run_id, unit_id)`` (:data:`UNIT_KEY`; ``unit_id`` alone for rows without a
``run_id`` column, those of one run). A unit stored more than once (``--retry-errors``, a
write retried) counts once, by its latest attempt: the row with the highest ``attempt`` (null
counts as 0), of those the one that finished last (a null ``finished_at`` the earliest). Rows
alike in both are the same unit stored twice: either counts (pandas keeps the later in the
frame's order).

A unit errored when its status is one of :data:`ERROR_STATUSES` (it has no verdict); it passed
when its verdict is a pass and it did not error; it failed otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..errors import RayevalError
from ..record import ERROR_STATUSES

if TYPE_CHECKING:  # loaded where a frame is handled: `rayeval run` imports this module before its first unit
    import pandas as pd

__all__ = [
    "ATTEMPT_COLUMNS",
    "ERRORED_SQL",
    "PASSED_SQL",
    "UNIT_KEY",
    "OutcomeCounts",
    "RowsWithoutVerdict",
    "count_outcomes",
    "error_mask",
    "latest_attempts",
    "latest_attempts_sql",
    "passed_array",
    "sql_name",
]

#: The columns that name a unit.
UNIT_KEY: tuple[str, str] = ("run_id", "unit_id")
#: The columns the rule reads: a unit's name and the order of its attempts.
ATTEMPT_COLUMNS: tuple[str, ...] = (*UNIT_KEY, "attempt", "finished_at")

#: SQL: the row's unit errored, as :func:`error_mask`.
ERRORED_SQL = "status IN ({})".format(", ".join(f"'{status}'" for status in sorted(ERROR_STATUSES)))
#: SQL: the row's unit passed, as :func:`passed_array` (a null verdict is no pass, a null status no error).
PASSED_SQL = f"coalesce(passed, false) AND coalesce(NOT ({ERRORED_SQL}), true)"

_DEDUPED = "rayeval.report.units"  # frame.attrs marker: the row count when deduplicated


class RowsWithoutVerdict(RayevalError, ValueError):
    """Rows with neither a ``passed`` nor a ``status`` column: nothing says which passed."""


def sql_name(name: str) -> str:
    """A column name quoted for SQL."""
    return '"' + name.replace('"', '""') + '"'


def _codes(series: pd.Series) -> np.ndarray:
    import pandas as pd

    if isinstance(series.dtype, pd.CategoricalDtype):
        return series.cat.codes.to_numpy(dtype=np.int64)
    return pd.factorize(series, use_na_sentinel=True)[0].astype(np.int64)


def latest_attempts(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per unit: its latest attempt (see the module's rule).

    Vectorised: integer codes for the key, a hash pass to find the retried units, one
    ``np.lexsort`` over those rows only; the row order of the kept rows is preserved. A frame
    without duplicates is returned as is. The result is marked (``frame.attrs``, with its row
    count) so the report functions, which all call this first, deduplicate once; a frame whose
    length changed since (concatenated) is checked again.
    """
    import pandas as pd

    run_column, unit_column = UNIT_KEY
    if frame.empty or unit_column not in frame.columns:
        return frame
    if frame.attrs.get(_DEDUPED) == len(frame):  # already one row per unit (and not resized since)
        return frame
    unit = _codes(frame[unit_column])
    if run_column in frame.columns:
        key = _codes(frame[run_column]) * (int(unit.max()) + 2) + unit
    else:
        key = unit
    attempt = (
        frame["attempt"].fillna(0).to_numpy(dtype=np.int64)
        if "attempt" in frame.columns
        else np.zeros(len(frame), np.int64)
    )
    if "finished_at" in frame.columns:
        finished = pd.to_datetime(frame["finished_at"], utc=True)
        fin = finished.to_numpy(dtype="datetime64[ns]").view(np.int64)  # NaT is the minimum int64
    else:
        fin = np.zeros(len(frame), np.int64)
    # Hash pass first: usually few units were retried, so only those rows are sorted.
    dup = np.flatnonzero(pd.Series(key).duplicated(keep=False).to_numpy())
    if not len(dup):
        frame.attrs[_DEDUPED] = len(frame)
        return frame
    order = dup[np.lexsort((fin[dup], attempt[dup], key[dup]))]
    sorted_key = key[order]
    last = np.empty(len(order), dtype=bool)
    last[:-1] = sorted_key[1:] != sorted_key[:-1]
    last[-1] = True
    drop = np.zeros(len(frame), dtype=bool)
    drop[order[~last]] = True
    result = frame.iloc[np.flatnonzero(~drop)].reset_index(drop=True)
    result.attrs[_DEDUPED] = len(result)
    return result


def latest_attempts_sql(source: str, columns: Sequence[str], where: str = "true") -> str:
    """duckdb common table expressions ending in ``units``: the latest attempt of each unit
    among the rows of ``source`` (a table or a subquery) that match ``where``, with ``columns``.

    Only units stored more than once need ordering: they are found by a hash of the unit's key
    (integers group far cheaper than strings) and only their rows are ranked, by the exact key,
    so a hash collision costs a ranking and never a wrong row.
    """
    kept = ", ".join(sql_name(c) for c in dict.fromkeys(columns))
    key = ", ".join(sql_name(c) for c in UNIT_KEY)
    own_key = ", ".join(f"{sql_name(c)} AS {sql_name('unit_' + c)}" for c in UNIT_KEY)
    partition = ", ".join(sql_name("unit_" + c) for c in UNIT_KEY)
    return f"""
    stored AS MATERIALIZED (
        SELECT {kept}, {own_key}, coalesce(attempt, 0) AS unit_attempt,
            finished_at AS unit_finished, hash({key}) AS unit_hash
        FROM {source} WHERE {where}
    ), repeated AS (
        SELECT unit_hash FROM stored GROUP BY unit_hash HAVING count(*) > 1
    ), units AS MATERIALIZED (
        SELECT {kept} FROM stored ANTI JOIN repeated USING (unit_hash)
        UNION ALL
        SELECT {kept} FROM (
            SELECT * FROM stored SEMI JOIN repeated USING (unit_hash)
            QUALIFY row_number() OVER (
                PARTITION BY {partition} ORDER BY unit_attempt DESC, unit_finished DESC NULLS LAST) = 1)
    )"""


def error_mask(units: pd.DataFrame) -> np.ndarray:
    """True where a unit errored (status error/timeout/config_error)."""
    if "status" not in units.columns:
        return np.zeros(len(units), dtype=bool)
    return units["status"].isin(ERROR_STATUSES).to_numpy(dtype=bool)


def passed_array(units: pd.DataFrame) -> np.ndarray:
    """True where a unit passed (a null verdict is no pass; an errored unit never passes)."""
    if "passed" in units.columns:
        passed = units["passed"]
        if passed.dtype != bool:
            passed = passed.astype("boolean").fillna(False).astype(bool)
        values = passed.to_numpy(dtype=bool)
    elif "status" in units.columns:
        values = (units["status"] == "passed").to_numpy(dtype=bool)
    else:
        raise RowsWithoutVerdict("result rows have neither a 'passed' nor a 'status' column")
    return values & ~error_mask(units)


class OutcomeCounts(NamedTuple):
    passed: int
    failed: int
    errors: int


def count_outcomes(units: pd.DataFrame) -> OutcomeCounts:
    """How many of ``units`` (one row per unit) passed, failed and errored."""
    errors = int(error_mask(units).sum())
    passed = int(passed_array(units).sum())
    return OutcomeCounts(passed=passed, failed=len(units) - passed - errors, errors=errors)
