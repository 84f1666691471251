"""Round trips on a real S3 protocol server (moto standalone) through pyarrow, s3fs and boto3."""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq

from rayeval.storage import (
    FILE_SCHEMA,
    TABLE_SCHEMA,
    PlanEntry,
    ResultStore,
    RunManifest,
    pandas_storage_options,
)

from .helpers import make_rows

MODELS = ["anthropic/claude@x", "openai/gpt-5 mini", "plain"]


def _keys(bucket) -> list[str]:
    pages = bucket.client.get_paginator("list_objects_v2").paginate(Bucket=bucket.name)
    return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))


def test_s3_round_trip(s3_store: ResultStore, s3_bucket, tmp_path):
    rows = make_rows("run-s3", MODELS, 300)
    with s3_store.open_writer("run-s3", writer_id="w1", wal_dir=tmp_path / "wal") as writer:
        writer.add(rows)
    assert not (tmp_path / "wal" / "run-s3").exists()  # WAL gone once everything is stored
    keys = _keys(s3_bucket)
    assert keys == [
        "results/run_id=run-s3/model=anthropic%2Fclaude%40x/part-w1-000000.parquet",
        "results/run_id=run-s3/model=openai%2Fgpt-5%20mini/part-w1-000001.parquet",
        "results/run_id=run-s3/model=plain/part-w1-000002.parquet",
    ]
    assert not any(key.endswith("/") for key in keys)  # no "directory" objects
    assert (
        pq.read_schema(keys[0].replace("results", s3_store.base, 1), filesystem=s3_store.fs).names == FILE_SCHEMA.names
    )

    table = s3_store.read_table("run-s3")
    assert table.schema == TABLE_SCHEMA and table.num_rows == 300
    assert sorted(set(table.column("model").to_pylist())) == sorted(MODELS)
    assert s3_store.stored_unit_ids("run-s3") == {r.unit_id for r in rows}
    assert s3_store.stored_unit_ids("missing") == set()
    assert s3_store.read_table("missing").num_rows == 0

    s3_store.write_manifest(RunManifest(run_id="run-s3", plan=[PlanEntry(unit_id="u", eval_id="e", model="m", seed=0)]))
    assert s3_store.read_manifest("run-s3").total_units == 1
    assert "results/run_id=run-s3/_manifest.json" in _keys(s3_bucket)
    assert not any(key.endswith("/") for key in _keys(s3_bucket))
    assert s3_store.list_runs() == ["run-s3"]

    options = pandas_storage_options(s3_store.root, s3_bucket.endpoint_url)
    frame = pd.read_parquet(s3_store.run_uri("run-s3"), storage_options=options)
    assert len(frame) == 300 and frame["unit_id"].is_unique
    assert sorted(frame["model"].astype(str).unique()) == sorted(MODELS)


def test_s3_default_wal_location_and_bucket_root(s3_bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    store = ResultStore(s3_bucket.uri(), s3_endpoint_url=s3_bucket.endpoint_url)  # bucket root, no prefix
    writer = store.open_writer("r", flush_rows=10_000, flush_seconds=60)
    writer.add(make_rows("r", ["m"], 5))
    wal_dir = store.wal_run_dir("r")
    assert wal_dir.is_relative_to(tmp_path / "cache" / "rayeval" / "wal")
    assert any(wal_dir.glob("*.jsonl"))
    writer.close()
    assert not wal_dir.exists()
    assert _keys(s3_bucket) == [f"run_id=r/model=m/part-{writer.writer_id}-000000.parquet"]
    assert store.read_table("r").num_rows == 5
    assert store.list_runs() == ["r"]
