"""Result storage: hive-partitioned Parquet under a local or S3 root.

``ResultStore(root)`` reads and writes one results root; ``store.open_writer(run_id)`` gives a
buffered, write-ahead-logged :class:`RowWriter`; :class:`RunManifest` describes a run.
"""
from .filesystem import is_s3, pandas_storage_options, resolve_root
from .manifest import EvalFileRef, PlanEntry, RunManifest, RunStatus
from .schema import FILE_SCHEMA, PARTITION_COLUMNS, ResultRow, rows_to_table
from .store import (
    PARTITIONING,
    TABLE_SCHEMA,
    ResultStore,
    RowWriter,
    StorageError,
    decode_partition,
    encode_partition,
)
from .wal import WriterIdInUse

__all__ = [
    "FILE_SCHEMA",
    "PARTITIONING",
    "PARTITION_COLUMNS",
    "TABLE_SCHEMA",
    "EvalFileRef",
    "PlanEntry",
    "ResultRow",
    "ResultStore",
    "RowWriter",
    "RunManifest",
    "RunStatus",
    "StorageError",
    "WriterIdInUse",
    "decode_partition",
    "encode_partition",
    "is_s3",
    "pandas_storage_options",
    "resolve_root",
    "rows_to_table",
]
