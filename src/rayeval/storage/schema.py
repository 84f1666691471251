"""The Parquet side of result rows: the file schema, and rows (as JSON lines) to Arrow tables."""
from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.json as pa_json

from .row import PARTITION_COLUMNS, ResultRow

__all__ = ["FILE_SCHEMA", "PARTITION_COLUMNS", "ResultRow", "lines_to_table", "rows_to_table"]

_TIMESTAMP = pa.timestamp("us", tz="UTC")

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


_LINE_PARSING = pa_json.ParseOptions(explicit_schema=FILE_SCHEMA, unexpected_field_behavior="ignore")


def lines_to_table(lines: list[bytes]) -> pa.Table:
    """The file columns of rows given as JSON lines, parsed by Arrow (in C++, no Python object
    per value); the partition keys in the lines are left out."""
    if not lines:
        return FILE_SCHEMA.empty_table()
    data = b"\n".join(lines)
    # one block: Arrow's reader cannot split a line across blocks, and a line may be large
    options = pa_json.ReadOptions(use_threads=False, block_size=len(data) + 1)
    return pa_json.read_json(io.BytesIO(data), read_options=options, parse_options=_LINE_PARSING)


def rows_to_table(rows: list[ResultRow]) -> pa.Table:
    return lines_to_table([row.to_line() for row in rows])
