"""The batch engine writing to S3 (moto's server on 127.0.0.1), including an endpoint outage."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from rayeval import batch
from rayeval.harness.sandbox import SandboxConfig
from rayeval.storage import pandas_storage_options
from tests.batch.conftest import read_invocations, write_mc_evals

REPO = Path(__file__).resolve().parents[2]
FAST = {"show_progress": False, "flush_seconds": 0.5, "flush_rows": 10, "retry_backoff_s": 0.1}


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the S3 root's WAL lives here


def test_example_evals_to_s3_read_back_with_pandas(s3_bucket) -> None:
    root = s3_bucket.uri("results")
    summary = batch.run(str(REPO / "evals"), agent="reference", output=root, run_id="s3demo", s3_endpoint_url=s3_bucket.endpoint_url, **FAST)
    assert summary.stored_rows == 10
    frame = pd.read_parquet(f"{root}/run_id=s3demo", storage_options=pandas_storage_options(root, s3_bucket.endpoint_url))
    assert len(frame) == 10 and (frame["status"] == "passed").all() and frame["unit_id"].is_unique
    keys = [o["Key"] for o in s3_bucket.client.list_objects_v2(Bucket=s3_bucket.name)["Contents"]]
    assert any(k.endswith("_manifest.json") for k in keys) and not any(k.endswith("/") for k in keys)


def test_s3_outage_mid_run_loses_no_row(s3_bucket, s3_proxy, tmp_path: Path, invocation_log: Path) -> None:
    evals = write_mc_evals(tmp_path / "evals", [f"e{i}" for i in range(10)])
    root = s3_bucket.uri("outage")

    observed = {}

    def outage() -> None:
        """Take the endpoint down once the first part is stored, while units are still running."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            listing = s3_bucket.client.list_objects_v2(Bucket=s3_bucket.name, Prefix="outage/run_id=outage/model=")
            if listing.get("KeyCount", 0):
                break
            time.sleep(0.05)
        observed["invocations_at_down"] = len(read_invocations(invocation_log))
        s3_proxy.down()
        time.sleep(4.0)
        s3_proxy.up()

    thread = threading.Thread(target=outage)
    thread.start()
    summary = batch.run(
        str(evals), agent="tests.batch.agents:counting_sleep", agent_args={"seconds": "0.5"}, seeds=[1, 2, 3, 4, 5, 6],
        output=root, run_id="outage", s3_endpoint_url=s3_proxy.endpoint_url, max_concurrency=8,
        # the agents log their invocations to the test: a side channel the sandbox blocks
        isolation="process", sandbox=SandboxConfig(env_names=("RAYEVAL_TEST_INVOCATION_LOG",)), **FAST,
    )
    thread.join()
    frame = pd.read_parquet(f"{root}/run_id=outage", storage_options=pandas_storage_options(root, s3_bucket.endpoint_url))
    assert observed["invocations_at_down"] < 60  # the outage really happened mid-run
    assert len(frame) == 60 and frame["unit_id"].is_unique and (frame["status"] == "passed").all()
    assert summary.stored_rows == 60
    assert len(invocation_log.read_text().splitlines()) == 60  # nothing re-ran because of the outage
