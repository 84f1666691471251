"""The numbers of ``rayeval report``'s table, csv and json output, computed by duckdb over the
readable part files: only the dozen columns they need are read, and no unit leaves duckdb.

The parts are those :meth:`ResultsReader.parts` checked (unreadable ones left out with a
warning), with their partition values as the store decodes them. duckdb reads a local root's
files itself; an S3 root's parts, and any selection duckdb
cannot read as one table (a part whose data cannot be decoded, a column no part has), are read
through the reader's Arrow path instead, with its handling of bad parts. A unit counts once, by
its latest attempt, and as passed or errored, by the SQL form of :mod:`rayeval.storage.attempts`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..storage.attempts import ERRORED_SQL, PASSED_SQL, latest_attempts_sql, sql_name
from .benchmark import EXCUSED_SQL, PAIR_COUNTS
from .reader import ReportError, ResultsReader, unicode_text

NOT_RECORDED = "not recorded"  # the isolation of a row that does not say how it ran (as isolation_note)


@dataclass(frozen=True)
class Summary:
    """What the default report shows, aggregated."""

    pairs: pd.DataFrame  # one row per group × eval: the group keys, eval_id and PAIR_COUNTS
    run_totals: dict[str, int]  # units per run
    num_errors: int
    isolation: dict[str, int]  # units per isolation level
    #: first start and last finish (ns since the epoch), read when asked (for an ETA)
    span: Callable[[], tuple[int, int] | None]

    @property
    def units(self) -> int:
        return sum(self.run_totals.values())


#: what the counts read of each selected unit, beside the group keys
_COUNTED_COLUMNS = ("eval_id", "run_id", "isolation", "passed", "status", "refusal", "cost_usd", "duration_s")


def _latest(source: str, columns: Sequence[str], filters: dict[str, list[str]]) -> str:
    """Common table expressions ending in ``units``: the selected units (latest attempt each)
    with these columns."""
    where = " AND ".join(f"list_contains(${name}, {sql_name(name)})" for name in filters) or "true"
    return latest_attempts_sql(source, columns, where)


def _counts_query(source: str, by: Sequence[str], filters: dict[str, list[str]], errors: str) -> str:
    """Counts per group × eval (``kind`` pair), per run (run) and per isolation level
    (isolation), from the selected units deduplicated once. The errors ``errors`` leaves out
    are counted only for ``"exclude"``: only then is the heavy ``metadata_json`` read."""
    pair_keys = ", ".join(sql_name(k) for k in dict.fromkeys([*by, "eval_id"]))
    columns = [*by, *_COUNTED_COLUMNS]
    if errors == "exclude":
        source = f"(SELECT *, {EXCUSED_SQL} AS excused FROM {source})"
        columns.append("excused")
    latest = _latest(source, columns, filters)
    excused = "count(*) FILTER (WHERE excused)" if errors == "exclude" else "0"
    return f"""
WITH {latest}, pairs AS (
    SELECT {pair_keys}, 'pair' AS kind, count(*) AS n_runs,
        count(*) FILTER (WHERE {PASSED_SQL}) AS n_passed, count(*) FILTER (WHERE {ERRORED_SQL}) AS n_errors,
        {excused} AS n_excused, count(*) FILTER (WHERE refusal) AS n_refusals,
        coalesce(sum(cost_usd), 0) AS cost_sum, count(cost_usd) AS cost_n,
        coalesce(sum(duration_s), 0) AS duration_sum, count(duration_s) AS duration_n
    FROM units GROUP BY {pair_keys}
), runs AS (
    SELECT run_id AS run, 'run' AS kind, count(*) AS n_runs, count(*) FILTER (WHERE {ERRORED_SQL}) AS n_errors
    FROM units GROUP BY run_id
), levels AS (
    SELECT isolation AS level, 'isolation' AS kind, count(*) AS n_runs FROM units GROUP BY isolation
)
SELECT * FROM pairs UNION ALL BY NAME SELECT * FROM runs UNION ALL BY NAME SELECT * FROM levels
"""


def _span_query(source: str, filters: dict[str, list[str]]) -> str:
    latest = _latest(source, ["started_at", "finished_at"], filters)
    return f"""
WITH {latest}
SELECT least(min(started_at), min(finished_at)) AS first_start, max(finished_at) AS last_finish FROM units
"""


class _Rows:
    """The selected parts as something duckdb reads: a local root's files themselves, else
    (S3, or files duckdb cannot read as one table) the rows the reader reads with Arrow."""

    def __init__(
        self,
        reader: ResultsReader,
        runs: list[str] | None,
        by: Sequence[str],
        filters: dict[str, list[str]],
        errors: str = "fail",
    ):
        self.reader, self.runs, self.by, self.filters = reader, runs, list(by), filters
        #: the columns read of each unit where duckdb cannot read the files (metadata_json: who saw an error)
        self.needed = [*self.by, *_COUNTED_COLUMNS, "started_at"] + (["metadata_json"] if errors == "exclude" else [])
        # a connection of the process's one duckdb database (as duckdb.sql uses), whose caches serve later reports
        self.connection = duckdb.default_connection().cursor()
        self.source: str | None = None
        self.params: dict[str, list[str]] = {}  # the partition values of the files duckdb reads

    def query(self, build: Callable[[str], str]) -> pa.Table | None:
        """``build(source)``'s result (None when no part is readable)."""
        if self.source is None:
            parts = self.reader.parts(self.runs)
            if not parts.fragments:
                return None
            if not self.reader.store.is_s3:
                # each file's partition values as the store's layout decodes them, by its index
                keys = parts.keys()
                self.params = {"part_runs": keys["run_id"].to_pylist(), "part_models": keys["model"].to_pylist()}
                files = ", ".join("'" + path.replace("'", "''") + "'" for path in parts.paths)
                source = f"""(
                    SELECT *, $part_runs[file_index::BIGINT + 1] AS run_id, $part_models[file_index::BIGINT + 1] AS model
                    FROM read_parquet([{files}], union_by_name = true))"""
                try:
                    table = self._run(build(source))
                except duckdb.Error:
                    pass  # read through the Arrow path below, which leaves out what cannot be read
                else:
                    self.source = source
                    return table
            self.params = {}
            columns = list(dict.fromkeys(self.needed))
            self.connection.register("selected_rows", self.reader.table(self.runs, columns=columns))
            self.source = "selected_rows"
        try:
            return self._run(build(self.source))
        except duckdb.Error as exc:
            raise ReportError(f"cannot summarise the results under {self.reader.root}: {exc}") from None

    def _run(self, sql: str) -> pa.Table:
        return self.connection.sql(sql, params={**self.filters, **self.params} or None).to_arrow_table()

    def span(self) -> tuple[int, int] | None:
        table = self.query(lambda source: _span_query(source, self.filters))
        if table is None:
            return None
        first, last = table.column("first_start")[0], table.column("last_finish")[0]
        if not last.is_valid or not first.is_valid:
            return None
        return _ns(first.as_py()), _ns(last.as_py())


def read_summary(
    reader: ResultsReader,
    runs: list[str] | None = None,
    models: Iterable[str] | None = None,
    evals: Iterable[str] | None = None,
    by: Sequence[str] = ("model", "harness"),
    errors: str = "fail",
) -> Summary | None:
    """The selected runs' units aggregated for the report (None when there are none), their
    errored units left out of pass rates counted by the ``errors`` policy."""
    filters = {name: list(values) for name, values in (("model", models), ("eval_id", evals)) if values is not None}
    rows = _Rows(reader, runs, by, filters, errors)
    table = rows.query(lambda source: _counts_query(source, by, filters, errors))
    if table is None or table.num_rows == 0:
        return None
    kind = table["kind"]
    pair_rows = table.filter(pc.equal(kind, "pair"))
    columns: dict[str, pa.ChunkedArray] = {}
    for name in dict.fromkeys([*by, "eval_id"]):  # the group keys as categoricals, as the reader returns them
        key = unicode_text(pair_rows[name]) if pa.types.is_string(pair_rows[name].type) else pair_rows[name]
        columns[name] = pc.dictionary_encode(key) if name in by else key
    for name in PAIR_COUNTS:
        counted = name.startswith("n_") or name.endswith("_n")
        columns[name] = pair_rows[name].cast(pa.int64()) if counted else pair_rows[name]
    pairs = pa.table(columns).to_pandas()
    for name in by:
        pairs[name] = pairs[name].cat.reorder_categories(sorted(pairs[name].cat.categories))
    run_rows = table.filter(pc.equal(kind, "run")).select(["run", "n_runs", "n_errors"]).to_pylist()
    level_rows = table.filter(pc.equal(kind, "isolation")).select(["level", "n_runs"]).to_pylist()
    return Summary(
        pairs=pairs,
        run_totals={str(row["run"]): int(row["n_runs"]) for row in run_rows},
        num_errors=sum(int(row["n_errors"]) for row in run_rows),
        isolation={
            NOT_RECORDED if row["level"] is None else str(row["level"]): int(row["n_runs"]) for row in level_rows
        },
        span=rows.span,
    )


def _ns(value: datetime) -> int:
    return int(pd.Timestamp(value).as_unit("ns").value)


__all__ = ["NOT_RECORDED", "Summary", "read_summary"]
