"""Result storage: hive-partitioned Parquet under a local or S3 root.

``ResultStore(root)`` reads and writes one results root; ``store.open_writer(run_id)`` gives a
buffered, write-ahead-logged :class:`RowWriter`; :class:`RunManifest` describes a run;
``run_lease(store, run_id)`` is the :class:`RunLease` that lets one driver at a time write it.
Exports load on first use: a Ray worker that only builds rows (``rayeval.record``) needs
neither pyarrow.dataset nor pandas.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "is_s3": "..filesystem",
    "pandas_storage_options": "..filesystem",
    "resolve_root": "..filesystem",
    "LEASE_NAME": ".layout",
    "Layout": ".layout",
    "LeaseError": ".lease",
    "LeaseHeld": ".lease",
    "LeaseLapsed": ".lease",
    "LeaseLost": ".lease",
    "RunLease": ".lease",
    "run_lease": ".lease",
    "EvalFileRef": ".manifest",
    "PlanEntry": ".manifest",
    "RunManifest": ".manifest",
    "RunStatus": ".manifest",
    "FILE_SCHEMA": ".schema",
    "ERROR_STATUSES": "..record",
    "PARTITION_COLUMNS": "..record",
    "UnitRecord": "..record",
    "rows_to_table": ".schema",
    "MANIFEST_NAME": ".layout",
    "ManifestError": ".store",
    "TABLE_SCHEMA": ".store",
    "ResultStore": ".store",
    "ResultsRootUnwritable": ".store",
    "RowWriter": ".store",
    "StorageError": ".store",
    "decode_partition": ".layout",
    "encode_partition": ".layout",
    "WriterIdInUse": ".wal",
}

__all__ = [
    "ERROR_STATUSES",
    "FILE_SCHEMA",
    "LEASE_NAME",
    "MANIFEST_NAME",
    "PARTITION_COLUMNS",
    "TABLE_SCHEMA",
    "EvalFileRef",
    "Layout",
    "LeaseError",
    "LeaseHeld",
    "LeaseLapsed",
    "LeaseLost",
    "ManifestError",
    "PlanEntry",
    "ResultStore",
    "ResultsRootUnwritable",
    "RowWriter",
    "RunLease",
    "RunManifest",
    "RunStatus",
    "StorageError",
    "UnitRecord",
    "WriterIdInUse",
    "decode_partition",
    "encode_partition",
    "is_s3",
    "pandas_storage_options",
    "resolve_root",
    "rows_to_table",
    "run_lease",
]


__getattr__ = lazy_exports(__name__, _EXPORTS)
