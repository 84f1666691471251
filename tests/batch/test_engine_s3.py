"""The batch engine writing to S3 (moto's server on 127.0.0.1), including an endpoint outage."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from rayeval import batch
from rayeval.sandbox.config import SandboxConfig
from rayeval.storage import (
    ResultsRootUnwritable,
    ResultStore,
    UnitRecord,
    pandas_storage_options,
)
from tests.batch.conftest import read_invocations, write_mc_evals

REPO = Path(__file__).resolve().parents[2]
LEASE_TTL_S = 5
FAST = {"show_progress": False, "flush_seconds": 0.5, "flush_rows": 10, "retry_backoff_s": 0.1}


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the S3 root's WAL lives here


def test_example_evals_to_s3_read_back_with_pandas(s3_bucket) -> None:
    root = s3_bucket.uri("results")
    summary = batch.run(
        str(REPO / "evals"),
        agent="reference",
        output=root,
        run_id="s3demo",
        s3_endpoint_url=s3_bucket.endpoint_url,
        **FAST,
    )
    assert summary.stored_rows == 10
    frame = pd.read_parquet(
        f"{root}/run_id=s3demo", storage_options=pandas_storage_options(root, s3_bucket.endpoint_url)
    )
    assert len(frame) == 10 and (frame["status"] == "passed").all() and frame["unit_id"].is_unique
    keys = [o["Key"] for o in s3_bucket.client.list_objects_v2(Bucket=s3_bucket.name)["Contents"]]
    assert any(k.endswith("_manifest.json") for k in keys) and not any(k.endswith("/") for k in keys)


def _wait_for_first_part(s3_bucket, prefix: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if s3_bucket.client.list_objects_v2(Bucket=s3_bucket.name, Prefix=prefix).get("KeyCount", 0):
            return
        time.sleep(0.05)


@pytest.mark.slow  # an S3 outage mid-run: ~15 s
@pytest.mark.parametrize("outage", ["refused", "503"])
def test_s3_outage_mid_run_loses_no_row(s3_bucket, s3_proxy, tmp_path: Path, invocation_log: Path, outage: str) -> None:
    """An outage within the writer's retries (connections refused, or HTTP 503 answers) does
    not stop the run."""
    evals = write_mc_evals(tmp_path / "evals", [f"e{i}" for i in range(10)])
    root = s3_bucket.uri("outage")

    observed = {}

    def outage_window() -> None:
        """Take the endpoint down once the first part is stored, while units are still running."""
        _wait_for_first_part(s3_bucket, "outage/run_id=outage/model=")
        observed["invocations_at_down"] = len(read_invocations(invocation_log))
        if outage == "refused":
            s3_proxy.down()
        else:
            s3_proxy.fail(503)
        time.sleep(4.0)
        s3_proxy.up()

    thread = threading.Thread(target=outage_window)
    thread.start()
    summary = batch.run(
        str(evals),
        agent="tests.batch.agents:counting_sleep",
        agent_args={"seconds": "0.5"},
        seeds=[1, 2, 3, 4, 5, 6],
        output=root,
        run_id="outage",
        s3_endpoint_url=s3_proxy.endpoint_url,
        max_concurrency=8,
        # the agents log their invocations to the test: a side channel the sandbox blocks
        isolation="process",
        sandbox=SandboxConfig(env_names=("RAYEVAL_TEST_INVOCATION_LOG",)),
        **FAST,
    )
    thread.join()
    frame = pd.read_parquet(
        f"{root}/run_id=outage", storage_options=pandas_storage_options(root, s3_bucket.endpoint_url)
    )
    assert observed["invocations_at_down"] < 60  # the outage really happened mid-run
    assert len(frame) == 60 and frame["unit_id"].is_unique and (frame["status"] == "passed").all()
    assert summary.stored_rows == 60
    assert len(invocation_log.read_text().splitlines()) == 60  # nothing re-ran because of the outage


def _wal_units(directory: Path) -> set[str]:
    return {
        UnitRecord.model_validate_json(line).unit_id
        for path in directory.glob("*.jsonl")
        for line in path.read_bytes().splitlines()
    }


@pytest.mark.slow  # two runs and a lease expiry, ~25-45 s
def test_s3_outage_beyond_the_retries_stops_the_run_then_resume_completes(
    s3_bucket, s3_proxy, tmp_path: Path, invocation_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The endpoint answers 503 for longer than ``store_retry_s``: the run stops with an error
    naming the root and the cause, no unit more is started, the finished units' rows are stored
    or in the local WAL, the manifest (on S3 too) cannot be marked and the error says so.  Once
    the endpoint is back, --resume runs only the missing units."""
    monkeypatch.setenv("RAYEVAL_LEASE_TTL", str(LEASE_TTL_S))  # the stopped driver's lease, not released, expires soon
    evals = write_mc_evals(tmp_path / "evals", [f"e{i}" for i in range(10)])
    root = s3_bucket.uri("long")
    options = {
        "agent": "tests.batch.agents:counting_sleep", "agent_args": {"seconds": "0.5"}, "seeds": [1, 2, 3, 4, 5, 6],
        "output": root, "run_id": "long", "s3_endpoint_url": s3_proxy.endpoint_url, "max_concurrency": 4,
        "isolation": "process", "sandbox": SandboxConfig(env_names=("RAYEVAL_TEST_INVOCATION_LOG",)),
        "store_retry_s": 3.0, **FAST,
    }  # fmt: skip

    def outage() -> None:
        _wait_for_first_part(s3_bucket, "long/run_id=long/model=")
        s3_proxy.fail(503)

    thread = threading.Thread(target=outage)
    thread.start()
    try:
        with pytest.raises(ResultsRootUnwritable) as stopped:
            batch.run(str(evals), **options)
    finally:
        thread.join()
        s3_proxy.up()
    message = str(stopped.value)
    assert (
        f"cannot write the results root {root}" in message and "Service Unavailable (injected by the test)" in message
    )
    assert "manifest could not be marked failed" in message
    store = ResultStore(root, s3_endpoint_url=s3_bucket.endpoint_url)
    assert (
        json.loads(
            s3_bucket.client.get_object(Bucket=s3_bucket.name, Key="long/run_id=long/_manifest.json")["Body"].read()
        )["status"]
        == "running"
    )
    kept = store.stored_unit_ids("long") | _wal_units(stopped.value.wal_dir)
    invoked = len(read_invocations(invocation_log))
    assert 0 < len(kept) < 60 and invoked < 60, "the outage did not stop the run mid-way"

    time.sleep(LEASE_TTL_S + 0.5)  # the lease the stopped driver could not release expires
    summary = batch.run(str(evals), **options, resume=True)
    assert summary.stored_rows == 60
    frame = store.read_table("long").to_pandas()
    assert len(frame) == 60 and frame["unit_id"].is_unique and (frame["status"] == "passed").all()
    invocations = Counter((i["eval_id"], i["seed"]) for i in read_invocations(invocation_log))
    kept_rows = frame[frame["unit_id"].isin(kept)]
    assert all(invocations[unit] == 1 for unit in zip(kept_rows["eval_id"], kept_rows["seed"])), (
        "a unit kept at the stop ran again"
    )
    assert store.read_manifest("long").status == "completed"
