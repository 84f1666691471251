"""The numbers of ``rayeval report``'s table, csv and json output, computed by duckdb over the
readable part files: only the dozen columns they need are read, and no unit leaves duckdb.

The parts are those :meth:`ResultsReader.parts` checked (unreadable ones left out with a
warning). duckdb reads a local root's files itself; an S3 root's parts, and any selection duckdb
cannot read as one table (a part whose data cannot be decoded, a column no part has), are read
through the reader's Arrow path instead, with its handling of bad parts. Rows are deduplicated as
by :func:`~rayeval.report.reader.latest_attempts`: per ``(run_id, unit_id)`` the highest
``attempt`` (null counts as 0), then the latest ``finished_at``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import duckdb
import pandas as pd
import pyarrow as pa

from ..storage.row import ERROR_STATUSES
from .benchmark import PAIR_COUNTS
from .reader import ReportError, ResultsReader

NOT_RECORDED = "not recorded"  # the isolation of a row that does not say how it ran (as isolation_note)


@dataclass(frozen=True)
class Summary:
    """What the default report shows, aggregated."""

    pairs: pd.DataFrame  # one row per group × eval: the group keys, eval_id and PAIR_COUNTS
    run_totals: dict[str, int]  # units per run
    num_errors: int
    isolation: dict[str, int]  # units per isolation level
    span: tuple[int, int] | None  # first start, last finish (ns since the epoch)

    @property
    def units(self) -> int:
        return sum(self.run_totals.values())


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _query(source: str, by: Sequence[str], filters: dict[str, list[str]]) -> str:
    errors = ", ".join(f"'{status}'" for status in sorted(ERROR_STATUSES))
    keys = list(dict.fromkeys([*by, "eval_id", "run_id", "isolation"]))
    where = " AND ".join(f"list_contains(${name}, {_quoted(name)})" for name in filters) or "true"
    pair_keys = ", ".join(_quoted(name) for name in [*dict.fromkeys([*by, "eval_id"])])
    return f"""
WITH units AS (
    SELECT {", ".join(_quoted(k) for k in keys)}, passed, status, cost_usd, duration_s, started_at, finished_at
    FROM {source}
    WHERE {where}
    QUALIFY row_number() OVER (
        PARTITION BY run_id, unit_id ORDER BY coalesce(attempt, 0) DESC, finished_at DESC NULLS LAST) = 1
)
SELECT {", ".join(_quoted(k) for k in keys)},
    grouping({pair_keys}) AS pair_set, grouping(run_id) AS run_set,
    count(*) AS n_runs,
    count(*) FILTER (WHERE coalesce(passed, false) AND coalesce(status NOT IN ({errors}), true)) AS n_passed,
    count(*) FILTER (WHERE status IN ({errors})) AS n_errors,
    coalesce(sum(cost_usd), 0) AS cost_sum, count(cost_usd) AS cost_n,
    coalesce(sum(duration_s), 0) AS duration_sum, count(duration_s) AS duration_n,
    least(min(started_at), min(finished_at)) AS first_start, max(finished_at) AS last_finish
FROM units
GROUP BY GROUPING SETS (({pair_keys}), (run_id), (isolation))
"""


def _run(connection: duckdb.DuckDBPyConnection, sql: str, filters: dict[str, list[str]]) -> pa.Table:
    return connection.sql(sql, params=filters or None).to_arrow_table()


def _aggregate(
    reader: ResultsReader, runs: list[str] | None, by: Sequence[str], filters: dict[str, list[str]]
) -> pa.Table | None:
    parts = reader.parts(runs)
    if not parts.fragments:
        return None
    connection = duckdb.connect()
    if not reader.store.is_s3:
        files = ", ".join("'" + path.replace("'", "''") + "'" for path in parts.paths)
        source = f"read_parquet([{files}], hive_partitioning = true, hive_types_autocast = false, union_by_name = true)"
        try:
            return _run(connection, _query(source, by, filters), filters)
        except duckdb.Error:
            pass  # read through the Arrow path below, which leaves out what cannot be read
    needed = [*by, "eval_id", "isolation", "passed", "status", "cost_usd", "duration_s", "started_at"]
    connection.register("selected_rows", reader.table(runs, columns=list(dict.fromkeys(needed))))
    try:
        return _run(connection, _query("selected_rows", by, filters), filters)
    except duckdb.Error as exc:
        raise ReportError(f"cannot summarise the results under {reader.root}: {exc}") from None


def read_summary(
    reader: ResultsReader,
    runs: list[str] | None = None,
    models: Iterable[str] | None = None,
    evals: Iterable[str] | None = None,
    by: Sequence[str] = ("model", "harness"),
) -> Summary | None:
    """The selected runs' units aggregated for the report (None when there are none)."""
    filters = {name: list(values) for name, values in (("model", models), ("eval_id", evals)) if values is not None}
    table = _aggregate(reader, runs, list(by), filters)
    if table is None or table.num_rows == 0:
        return None
    frame = table.to_pandas()
    pair_rows = frame[frame["pair_set"] == 0]
    pairs = pair_rows[[*dict.fromkeys([*by, "eval_id"]), *PAIR_COUNTS]].reset_index(drop=True)
    for name in by:  # the group keys as categoricals, as the reader returns them
        pairs[name] = pairs[name].astype("category")
    run_rows = frame[(frame["pair_set"] != 0) & (frame["run_set"] == 0)]
    isolation_rows = frame[(frame["pair_set"] != 0) & (frame["run_set"] != 0)]
    starts = run_rows["first_start"].dropna()
    finishes = run_rows["last_finish"].dropna()
    span = None
    if len(finishes):
        span = (_ns(starts.min() if len(starts) else finishes.min()), _ns(finishes.max()))
    return Summary(
        pairs=pairs,
        run_totals={str(run): int(n) for run, n in zip(run_rows["run_id"], run_rows["n_runs"])},
        num_errors=int(run_rows["n_errors"].sum()),
        isolation={
            NOT_RECORDED if pd.isna(level) else str(level): int(n)
            for level, n in zip(isolation_rows["isolation"], isolation_rows["n_runs"])
        },
        span=span,
    )


def _ns(value: pd.Timestamp) -> int:
    return int(pd.Timestamp(value).as_unit("ns").value)


__all__ = ["NOT_RECORDED", "Summary", "read_summary"]
