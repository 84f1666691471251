"""The evaluation name index, on a local root and on S3 (no Ray needed)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from rayeval.evaluations.index import (
    EvaluationRunRecord,
    EvaluatorRecord,
    previous_run,
    read_records,
    write_record,
)
from rayeval.storage import ResultStore, RunManifest

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def record(name: str, run_id: str, minutes: int, status: str = "completed") -> EvaluationRunRecord:
    return EvaluationRunRecord(
        name=name,
        run_id=run_id,
        status=status,
        version_id="qa/answerer",
        file={"path": "qa/answerer"},
        dataset={"path": "qa"},
        evaluators=[EvaluatorRecord(path="exact", args_type="target_free", return_type="boolean")],
        created_at=T0 + timedelta(minutes=minutes),
    )


def exercise(store: ResultStore) -> None:
    assert read_records(store, "qa/nightly") == [] and previous_run(store, "qa/nightly", before="x") is None
    for run_id, minutes, status in [
        ("b", 2, "completed"),
        ("a", 1, "completed"),
        ("c", 3, "cancelled"),
        ("d", 4, "completed"),
    ]:
        write_record(store, record("qa/nightly", run_id, minutes, status))
        store.write_manifest(RunManifest(run_id=run_id))
    write_record(store, record("other", "z", 9))
    assert [r.run_id for r in read_records(store, "qa/nightly")] == ["a", "b", "c", "d"]  # oldest first
    assert previous_run(store, "qa/nightly", before="new").run_id == "d"
    assert previous_run(store, "qa/nightly", before="d").run_id == "b"  # c was cancelled
    assert previous_run(store, "other", before="new") is None  # run z has no results (no manifest, no rows)


def test_index_on_a_local_root(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results")
    exercise(store)
    assert (tmp_path / "results" / "_evaluations" / "qa%2Fnightly" / "d.json").is_file()


@pytest.mark.usefixtures("aws_credentials")
def test_index_on_s3(s3_bucket) -> None:
    exercise(ResultStore(s3_bucket.uri("results"), s3_endpoint_url=s3_bucket.endpoint_url))
