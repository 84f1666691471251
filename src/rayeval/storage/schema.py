"""The result row: one graded unit, as stored in Parquet and read back by reports."""
from __future__ import annotations

from datetime import datetime
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from ..harness.result import Status

# Hive partition keys: encoded in the path (run_id=<id>/model=<m>/), never stored in the files.
PARTITION_COLUMNS = ("run_id", "model")


class ResultRow(BaseModel):
    """Column names follow the reports spec; JSON-valued columns end in ``_json``."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    model: str
    unit_id: str
    eval_id: str
    eval_hash: str
    agent: str
    harness: str | None = None
    seed: int
    attempt: int
    status: Status
    passed: bool
    score: float
    score_max: float
    normalized_score: float
    grader_type: str
    metrics_json: str
    reasoning: str
    answer_json: str | None = None
    answer_source: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    duration_s: float
    agent_s: float
    grade_s: float
    cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    n_turns: int | None = None
    started_at: datetime
    finished_at: datetime
    node: str
    task: str | None = None
    kit: str | None = None
    time_horizon: str | None = None
    eval_type: str | None = None
    metadata_json: str
    artifacts_json: str | None = None
    rayeval_version: str

    def file_columns(self) -> dict[str, Any]:
        """The row without its partition keys, ready for a Parquet part file."""
        return self.model_dump(exclude=set(PARTITION_COLUMNS))


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
        ("task", pa.string()),
        ("kit", pa.string()),
        ("time_horizon", pa.string()),
        ("eval_type", pa.string()),
        ("metadata_json", pa.string()),
        ("artifacts_json", pa.string()),
        ("rayeval_version", pa.string()),
    ]
)


def rows_to_table(rows: list[ResultRow]) -> pa.Table:
    return pa.Table.from_pylist([row.file_columns() for row in rows], schema=FILE_SCHEMA)
