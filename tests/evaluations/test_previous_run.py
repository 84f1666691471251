"""Which run an evaluation compares with: the newest completed run of its name, found by the
engine's run manifests, on a local root and on S3 (no Ray needed)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from rayeval.evaluations.api import previous_run
from rayeval.report import ResultsReader
from rayeval.storage import ResultStore, RunManifest

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def manifest(name: str | None, run_id: str, minutes: int, status: str = "completed") -> RunManifest:
    args = {} if name is None else {"evaluation": name, "evaluators": '{"exact": "boolean"}'}
    return RunManifest(
        run_id=run_id, status=status, agent="flow", agent_args=args, created_at=T0 + timedelta(minutes=minutes)
    )


def exercise(store: ResultStore, reader: ResultsReader) -> None:
    for run_id, minutes, status in [
        ("b", 2, "completed"),
        ("a", 1, "completed"),
        ("c", 3, "cancelled"),
        ("d", 4, "completed"),
    ]:
        store.write_manifest(manifest("qa/nightly", run_id, minutes, status))
    store.write_manifest(manifest("other", "z", 9))
    store.write_manifest(manifest(None, "y", 10))  # a batch run, of no evaluation
    store.write_manifest(manifest("qa/nightly-2", "x", 11))
    found = previous_run(reader, "qa/nightly", before="new")
    assert found is not None and found["run_id"] == "d" and found["agent_args"]["evaluators"] == '{"exact": "boolean"}'
    assert previous_run(reader, "qa/nightly", before="d")["run_id"] == "b"  # c was cancelled
    assert previous_run(reader, "other", before="new")["run_id"] == "z"
    assert previous_run(reader, "other", before="z") is None
    assert previous_run(reader, "qa", before="new") is None  # names match whole


def test_previous_run_on_a_local_root(tmp_path: Path) -> None:
    root = tmp_path / "results"
    exercise(ResultStore(root), ResultsReader(str(root)))


@pytest.mark.usefixtures("aws_credentials")
def test_previous_run_on_s3(s3_bucket) -> None:
    uri = s3_bucket.uri("results")
    exercise(ResultStore(uri, s3_endpoint_url=s3_bucket.endpoint_url), ResultsReader(uri, s3_bucket.endpoint_url))
