"""Result storage: hive-partitioned Parquet under a local or S3 root.

``ResultStore(root)`` reads and writes one results root; ``store.open_writer(run_id)`` gives a
buffered, write-ahead-logged :class:`RowWriter`; :class:`RunManifest` describes a run;
``run_lease(store, run_id)`` is the :class:`RunLease` that lets one driver at a time write it.
Exports load on first use: a Ray worker that only builds rows needs ``schema`` alone, not
pyarrow.dataset and pandas.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # the exports (see rayeval._lazy)
    from ..filesystem import is_s3, pandas_storage_options, resolve_root
    from ..record import ERROR_STATUSES, PARTITION_COLUMNS, UnitRecord
    from .layout import LEASE_NAME, MANIFEST_NAME, Layout, decode_partition, encode_partition
    from .lease import LeaseError, LeaseHeld, LeaseLapsed, LeaseLost, RunLease, run_lease
    from .manifest import EvalFileRef, PlanEntry, RunManifest, RunStatus
    from .schema import FILE_SCHEMA, rows_to_table
    from .store import TABLE_SCHEMA, ManifestError, ResultsRootUnwritable, ResultStore, RowWriter, StorageError
    from .wal import WriterIdInUse

__getattr__, __all__ = lazy_exports(__name__)
