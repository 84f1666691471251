"""Which runs belong to which evaluation name: a small index beside the runs.

One JSON record per finished run at ``<root>/_evaluations/<name>/<run_id>.json`` (both
percent-encoded; the paths are :class:`rayeval.storage.layout.Layout`'s). A record is written once and never rewritten, so concurrent runs of the same
name cannot lose each other's entries, and the ``_`` prefix keeps Parquet readers (pyarrow,
pandas, ``ResultsReader``) away from it. Local and S3 roots alike (the store's filesystem).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from ..storage.store import ResultStore
from .catalog import read_json_files


class EvaluatorRecord(BaseModel):
    path: str
    args_type: str
    return_type: str
    threshold: float | None = None


class EvaluationRunRecord(BaseModel):
    """One finished run of an evaluation."""

    name: str
    run_id: str
    status: str
    version_id: str
    file: dict[str, Any]
    dataset: dict[str, Any]
    evaluators: list[EvaluatorRecord]
    created_at: datetime
    finished_at: datetime | None = None
    scores: dict[str, float | None] = {}


def write_record(store: ResultStore, record: EvaluationRunRecord) -> str:
    path = store.layout.evaluation_record(record.name, record.run_id)
    store.put_atomic(path, record.model_dump_json(indent=2).encode())
    return path


def read_records(store: ResultStore, name: str) -> list[EvaluationRunRecord]:
    """Every readable record of ``name``, oldest first (unreadable ones are skipped)."""
    found = read_json_files(store, store.layout.evaluation_index(name), EvaluationRunRecord)
    records = [record for record in found if record.name == name]
    records.sort(key=lambda r: (r.created_at, r.run_id))
    return records


def previous_run(store: ResultStore, name: str, *, before: str) -> EvaluationRunRecord | None:
    """The newest completed run of ``name`` other than ``before`` whose results still exist."""
    for record in reversed(read_records(store, name)):
        if record.run_id == before or record.status != "completed":
            continue
        if store.read_manifest(record.run_id) is None and not store.part_paths(record.run_id):
            continue  # the run's folder was removed: compare with the one before it
        return record
    return None
