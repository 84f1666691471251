"""A run on a Ray cluster with an autoscaler grows the cluster: its units ask for real CPUs, the
head has none, and only the nodes the autoscaler starts for that demand can run them.

The autoscaler is Ray's own (``ray start --head --autoscaling-config``) with Ray's fake node
provider, which starts each "machine" as a set of Ray processes on this host (``RAY_FAKE_CLUSTER``).
Its node types cannot declare memory, so the units ask for none (``--unit-memory 0``); on AWS and
KubeRay the autoscaler knows each node type's memory.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from tests.cluster.conftest import (
    CLUSTER_ENV,
    OBJECT_STORE_BYTES,
    RAY,
    REPO,
    _spawn,
    free_port,
    kill_pids,
    session_pids,
    wait_until,
)
from tests.processes import all_pids, cmdline

pytestmark = pytest.mark.cluster

EVALS = REPO / "evals"
MAX_NODES = 2


@dataclass
class AutoscalingCluster:
    temp_root: Path
    gcs_address: str
    env: dict[str, str]
    head: subprocess.Popen

    def monitor_log(self) -> str:
        logs = sorted(self.temp_root.glob("session_*/logs/monitor.log"))
        return logs[-1].read_text(errors="replace") if logs else ""


def _config(gcs_address: str) -> dict:
    """A head without CPUs and one node type of 1 CPU, at most MAX_NODES of them, started on demand."""
    return {
        "cluster_name": "rayeval-autoscaling-test",
        "max_workers": MAX_NODES,
        "provider": {
            "type": "fake_multinode", "use_node_id_as_ip": True, "disable_node_updaters": True,
            "disable_launch_config_check": True, "gcs_address": gcs_address,
        },
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
            "units": {
                "resources": {"CPU": 1, "object_store_memory": OBJECT_STORE_BYTES}, "node_config": {},
                "min_workers": 0, "max_workers": MAX_NODES,
            },
        },
        "head_node_type": "ray.head.default", "auth": {}, "upscaling_speed": 1.0, "idle_timeout_minutes": 1,
        "docker": {}, "initialization_commands": [], "setup_commands": [], "head_setup_commands": [],
        "worker_setup_commands": [], "head_start_ray_commands": [], "worker_start_ray_commands": [],
        "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
        "rsync_exclude": [], "rsync_filter": [],
    }  # fmt: skip


def _gcs_listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def autoscaling_cluster() -> Iterator[AutoscalingCluster]:
    temp_root = Path(tempfile.mkdtemp(prefix="ra", dir="/tmp"))  # short: Unix socket paths ≤ 107 bytes
    port = free_port()
    gcs_address = f"127.0.0.1:{port}"
    config = temp_root / "autoscaling.json"
    config.write_text(json.dumps(_config(gcs_address)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    env.update(CLUSTER_ENV, RAY_FAKE_CLUSTER="1", AUTOSCALER_UPDATE_INTERVAL_S="1", PYTHONUNBUFFERED="1")
    command = [
        RAY, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port), "--num-cpus", "0",
        "--autoscaling-config", str(config), "--include-dashboard", "false",
        "--object-store-memory", str(OBJECT_STORE_BYTES), "--temp-dir", str(temp_root),
        "--disable-usage-stats", "--block",
    ]  # fmt: skip
    head = _spawn(command, env, temp_root / "head.log")
    try:
        wait_until(lambda: _gcs_listening(port) or head.poll() is not None, 90, 0.5, "the head's GCS")
        assert head.poll() is None, (temp_root / "head.log").read_text(errors="replace")[-4000:]
        yield AutoscalingCluster(temp_root, gcs_address, env, head)
    finally:
        # the nodes the autoscaler started are its processes: all carry the cluster's temp dir
        head.terminate()
        deadline = time.monotonic() + 15
        while (
            left := [pid for pid in all_pids() if pid != os.getpid() and str(temp_root) in cmdline(pid)]
            + session_pids(head.pid)
        ) and time.monotonic() < deadline:
            kill_pids(left)
            time.sleep(0.3)
        head.wait(timeout=10)
        shutil.rmtree(temp_root, ignore_errors=True)


@pytest.mark.slow  # an autoscaling cluster of its own, growing mid-run: ~25 s
def test_a_run_bigger_than_the_cluster_makes_the_autoscaler_add_nodes(
    autoscaling_cluster: AutoscalingCluster, tmp_path: Path
) -> None:
    output = tmp_path / "results"
    done = subprocess.run(
        [
            "rayeval", "run", str(EVALS), "--agent", "sleep", "--agent-arg", "seconds=1", "--seeds", "2",
            "--unit-cpus", "1", "--unit-memory", "0", "--max-concurrency", str(MAX_NODES),
            "--address", autoscaling_cluster.gcs_address, "--output", str(output), "--run-id", "grow", "--no-progress",
        ],
        cwd=tmp_path, env=autoscaling_cluster.env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    monitor = autoscaling_cluster.monitor_log()
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n--- monitor ---\n{monitor[-4000:]}"
    rows = pd.read_parquet(output / "run_id=grow")
    assert len(rows) == 20 and rows["unit_id"].is_unique and not rows["status"].isin(["error", "timeout"]).any()
    # the head has no CPU: every unit ran on a node the autoscaler started for the run's demand
    assert "Launching" in monitor and "type units" in monitor, monitor[-4000:]
    assert "{'CPU': 1.0}" in monitor  # the demand it saw: units of a CPU
