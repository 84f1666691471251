"""The Parquet side of result rows: the file schema, and rows (as JSON lines) to Arrow tables."""

from __future__ import annotations

import io
from datetime import datetime
from types import NoneType, UnionType
from typing import Any, Literal, Union, get_args, get_origin

import pyarrow as pa
import pyarrow.json as pa_json
from pydantic import BaseModel

from ..record import PARTITION_COLUMNS, UnitRecord

__all__ = [
    "FILE_SCHEMA",
    "METRICS_TYPE",
    "PARTITION_COLUMNS",
    "arrow_type",
    "lines_to_table",
    "records_schema",
    "rows_to_table",
]

_ARROW_SCALARS: dict[Any, pa.DataType] = {
    str: pa.string(),
    int: pa.int64(),
    float: pa.float64(),
    bool: pa.bool_(),
    datetime: pa.timestamp("us", tz="UTC"),
}


def arrow_type(annotation: Any) -> pa.DataType:
    """The Arrow type of a record field's Python type: ``X | None`` is X's (every column may be
    null), a Literal its values', a dict a map."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return arrow_type(type(args[0]))
    if origin in (Union, UnionType):
        (kind,) = (arg for arg in args if arg is not NoneType)
        return arrow_type(kind)
    if origin is dict:
        return pa.map_(*map(arrow_type, args))
    return _ARROW_SCALARS[annotation]


def records_schema(record: type[BaseModel]) -> pa.Schema:
    """The Parquet file schema of ``record``: its fields in order, the partition keys left out."""
    return pa.schema(
        (name, arrow_type(field.annotation))
        for name, field in record.model_fields.items()
        if name not in PARTITION_COLUMNS
    )


FILE_SCHEMA = records_schema(UnitRecord)
#: ``UnitRecord.metrics``: metric name → value
METRICS_TYPE = FILE_SCHEMA.field("metrics").type
# how a JSON line holds it (see UnitRecord): Arrow's JSON reader has no map type
_METRIC_PAIRS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.float64())]))

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


def rows_to_table(rows: list[UnitRecord]) -> pa.Table:
    return lines_to_table([row.to_line() for row in rows])
