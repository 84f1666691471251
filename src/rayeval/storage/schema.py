"""The Parquet side of result rows: the file schema, and rows (as JSON lines) to Arrow tables."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.json as pa_json

from .row import PARTITION_COLUMNS, ResultRow

__all__ = ["FILE_SCHEMA", "METRICS_TYPE", "PARTITION_COLUMNS", "ResultRow", "lines_to_table", "rows_to_table"]

_TIMESTAMP = pa.timestamp("us", tz="UTC")
#: ``ResultRow.metrics``: metric name → value
METRICS_TYPE = pa.map_(pa.string(), pa.float64())
# how a JSON line holds it (see ResultRow): Arrow's JSON reader has no map type
_METRIC_PAIRS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.float64())]))

FILE_SCHEMA = pa.schema(
    [
        ("unit_id", pa.string()),
        ("eval_id", pa.string()),
        ("eval_hash", pa.string()),
        ("agent", pa.string()),
        ("harness", pa.string()),
        ("seed", pa.int64()),
        ("attempt", pa.int64()),
        ("status", pa.string()),
        ("passed", pa.bool_()),
        ("score", pa.float64()),
        ("score_max", pa.float64()),
        ("normalized_score", pa.float64()),
        ("grader_type", pa.string()),
        ("metrics_json", pa.string()),
        ("metrics", METRICS_TYPE),
        ("reasoning", pa.string()),
        ("answer_json", pa.string()),
        ("answer_source", pa.string()),
        ("error_type", pa.string()),
        ("error_message", pa.string()),
        ("error_traceback", pa.string()),
        ("duration_s", pa.float64()),
        ("agent_s", pa.float64()),
        ("grade_s", pa.float64()),
        ("cost_usd", pa.float64()),
        ("agent_cost_usd", pa.float64()),
        ("judge_cost_usd", pa.float64()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("n_turns", pa.int64()),
        ("started_at", _TIMESTAMP),
        ("finished_at", _TIMESTAMP),
        ("node", pa.string()),
        ("isolation", pa.string()),
        ("task", pa.string()),
        ("kit", pa.string()),
        ("time_horizon", pa.string()),
        ("eval_type", pa.string()),
        ("metadata_json", pa.string()),
        ("artifacts_json", pa.string()),
        ("rayeval_version", pa.string()),
    ]
)


_LINE_SCHEMA = FILE_SCHEMA.set(FILE_SCHEMA.get_field_index("metrics"), pa.field("metrics", _METRIC_PAIRS))
_LINE_PARSING = pa_json.ParseOptions(explicit_schema=_LINE_SCHEMA, unexpected_field_behavior="ignore")


def _pairs_to_map(pairs: pa.ChunkedArray) -> pa.ChunkedArray:
    """list<struct<key, value>> → map<key, value>, sharing the buffers (no copy per value)."""
    chunks = []
    for chunk in pairs.chunks:
        entries = chunk.values
        mask = chunk.is_null() if chunk.null_count else None
        chunks.append(
            pa.MapArray.from_arrays(
                chunk.offsets, entries.field("key"), entries.field("value"), type=METRICS_TYPE, mask=mask
            )
        )
    return pa.chunked_array(chunks, type=METRICS_TYPE)


def lines_to_table(lines: list[bytes]) -> pa.Table:
    """The file columns of rows given as JSON lines, parsed by Arrow (in C++, no Python object
    per value); the partition keys in the lines are left out."""
    if not lines:
        return FILE_SCHEMA.empty_table()
    data = b"\n".join(lines)
    # one block: Arrow's reader cannot split a line across blocks, and a line may be large
    options = pa_json.ReadOptions(use_threads=False, block_size=len(data) + 1)
    table = pa_json.read_json(io.BytesIO(data), read_options=options, parse_options=_LINE_PARSING)
    index = table.schema.get_field_index("metrics")
    return table.set_column(index, FILE_SCHEMA.field("metrics"), _pairs_to_map(table.column(index)))


def rows_to_table(rows: list[ResultRow]) -> pa.Table:
    return lines_to_table([row.to_line() for row in rows])
