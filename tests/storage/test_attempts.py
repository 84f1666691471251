"""The one rule for a unit's latest attempt, and for counting units, agrees in its two forms:
pandas (:func:`latest_attempts`, :func:`count_outcomes`) and duckdb SQL
(:func:`latest_attempts_sql`, ``PASSED_SQL``, ``ERRORED_SQL``)."""

from __future__ import annotations

from datetime import timedelta

import duckdb
import pandas as pd
import pyarrow as pa
import pytest

from rayeval.storage import ResultStore
from rayeval.storage.attempts import (
    ERRORED_SQL,
    PASSED_SQL,
    OutcomeCounts,
    count_outcomes,
    latest_attempts,
    latest_attempts_sql,
)

from .helpers import T0, make_row

# (row_id, run_id, unit_id, attempt, finished after T0 (s), status, passed)
ROWS = [
    (0, "r1", "u1", 1, 9, "error", False),  # retries: the highest attempt counts, whenever it finished
    (1, "r1", "u1", 3, 1, "passed", True),
    (2, "r1", "u1", 2, 5, "failed", False),
    (3, "r1", "u2", 2, 2, "failed", False),  # a tie in attempt: the later finish counts
    (4, "r1", "u2", 2, 3, "passed", True),
    (5, "r1", "u3", None, 9, "passed", True),  # a null attempt counts as 0
    (6, "r1", "u3", 0, 4, "failed", False),
    (7, "r1", "u4", 1, None, "passed", True),  # a null finish is the earliest
    (8, "r1", "u4", 1, 6, "timeout", None),
    (9, "r1", "u5", 1, 1, "config_error", False),
    (10, "r2", "u1", 1, 1, "failed", None),  # the same unit id in another run: another unit
    (11, "r2", "u2", 1, 7, "error", True),  # the same unit stored twice: either row counts
    (12, "r2", "u2", 1, 7, "error", True),  # (an error never passes, whatever its verdict)
]
KEPT = {1, 4, 5, 8, 9, 10, 11}
SCHEMA = pa.schema(
    [
        ("row_id", pa.int64()),
        ("run_id", pa.string()),
        ("unit_id", pa.string()),
        ("attempt", pa.int64()),
        ("finished_at", pa.timestamp("us", tz="UTC")),
        ("status", pa.string()),
        ("passed", pa.bool_()),
    ]
)
COLUMNS = tuple(SCHEMA.names)
ORDERS = [list(range(len(ROWS))), list(reversed(range(len(ROWS)))), [5, 0, 12, 3, 8, 1, 10, 6, 2, 11, 4, 9, 7]]


def _table(order: list[int]) -> pa.Table:
    """The rows in this order, ``finished_at`` as a time."""
    rows = [dict(zip(COLUMNS, ROWS[i])) for i in order]
    for row in rows:
        row["finished_at"] = None if row["finished_at"] is None else T0 + timedelta(seconds=row["finished_at"])
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _sql_units(table: pa.Table) -> pd.DataFrame:
    connection = duckdb.connect()
    connection.register("stored_rows", table)
    query = f"WITH {latest_attempts_sql('stored_rows', COLUMNS)} SELECT * FROM units"
    return connection.sql(query).df()


def _kept(units: pd.DataFrame) -> set[int]:
    """The rows kept, row 12 (alike row 11) named 11."""
    return {11 if row == 12 else int(row) for row in units["row_id"]}


@pytest.mark.parametrize("order", ORDERS)
def test_pandas_and_sql_keep_the_same_rows(order: list[int]) -> None:
    table = _table(order)
    by_pandas, by_sql = latest_attempts(table.to_pandas()), _sql_units(table)
    assert len(by_pandas) == len(by_sql) == len(KEPT)
    assert _kept(by_pandas) == _kept(by_sql) == KEPT


@pytest.mark.parametrize("order", ORDERS)
def test_pandas_and_sql_count_the_same_outcomes(order: list[int]) -> None:
    table = _table(order)
    counts = count_outcomes(latest_attempts(table.to_pandas()))
    connection = duckdb.connect()
    connection.register("stored_rows", table)
    ((passed, errors, units),) = connection.sql(
        f"WITH {latest_attempts_sql('stored_rows', COLUMNS)} "
        f"SELECT count(*) FILTER (WHERE {PASSED_SQL}), count(*) FILTER (WHERE {ERRORED_SQL}), count(*) FROM units"
    ).fetchall()
    assert counts == OutcomeCounts(passed=3, failed=1, errors=3)
    assert (passed, units - passed - errors, errors) == tuple(counts)


def test_retry_errors_reruns_by_the_same_rule(local_store: ResultStore) -> None:
    """Two rows of one attempt: the one that finished later decides whether the unit is retried."""
    error = make_row("r", "m", 1, status="error", passed=False, finished_at=T0 + timedelta(seconds=2))
    passed = make_row("r", "m", 1, status="passed", passed=True, finished_at=T0 + timedelta(seconds=1))
    local_store.write_rows("r", [passed, error])
    assert local_store.units_to_run_again("r") == {error.unit_id: (1, error.metadata_json)}
    later = make_row("r2", "m", 1, status="passed", passed=True, finished_at=T0 + timedelta(seconds=3))
    local_store.write_rows("r2", [error.model_copy(update={"run_id": "r2"}), later])
    assert local_store.units_to_run_again("r2") == {}
