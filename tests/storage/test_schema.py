"""The Parquet file schema derived from UnitRecord is the one rayeval has always written."""

from __future__ import annotations

import pyarrow as pa

from rayeval.record import PARTITION_COLUMNS, UnitRecord
from rayeval.storage.schema import FILE_SCHEMA

_TIMESTAMP = pa.timestamp("us", tz="UTC")

# the schema as it was written by hand before it was derived from the record (and the columns
# added since: n_model_calls, limit_reached)
HAND_WRITTEN = pa.schema(
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
        ("metrics", pa.map_(pa.string(), pa.float64())),
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
        ("n_model_calls", pa.int64()),
        ("limit_reached", pa.string()),
        ("refusal", pa.bool_()),
        ("started_at", _TIMESTAMP),
        ("finished_at", _TIMESTAMP),
        ("node", pa.string()),
        ("host", pa.string()),
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


def test_the_file_schema_derived_from_the_record_is_the_hand_written_one() -> None:
    assert FILE_SCHEMA.equals(HAND_WRITTEN, check_metadata=True), FILE_SCHEMA
    assert [field.nullable for field in FILE_SCHEMA] == [True] * len(HAND_WRITTEN)


def test_the_record_holds_the_partition_keys_first_then_every_file_column() -> None:
    assert list(UnitRecord.model_fields) == [*PARTITION_COLUMNS, *HAND_WRITTEN.names]
