"""A real two-node Ray cluster on this machine for the cluster tests.

``ray_cluster`` (module scope) runs two ``ray start ... --block`` processes, each as the leader of
its own session (``start_new_session=True``), so that every process of a node (GCS, raylet,
dashboard, agents, and the worker processes the raylet forks: they change process group but
not session) carries that node's session id:

* head: ``ray start --head --port P --dashboard-port D --num-cpus 2 --temp-dir /tmp/rtXXXX/c1/h``
  with the resource ``rayeval_test_head`` and the label ``rayeval-test-node=head``;
* node 2: ``ray start --address 127.0.0.1:P --num-cpus 2 --temp-dir /tmp/rtXXXX/c1/w1`` with the
  resource ``rayeval_test_node2`` and the label ``rayeval-test-node=node2``.

(``c1`` is the first attempt: a ``ray start`` that exits during startup, e.g. because a chosen
port was taken meanwhile, is retried once under ``c2`` with new ports.)

Servers and clients share ``RAY_AUTH_MODE=token`` with one random ``RAY_AUTH_TOKEN`` per test
session, and ``RAY_USAGE_STATS_ENABLED=0`` (the fixture exports them while the module runs and
hands ``cluster.env`` to subprocesses). GCS
health checks are tightened (1 s period, 3 failures) so a killed node is declared dead in
seconds. Every port is chosen free on this machine; the dashboard binds 127.0.0.1 only.

Ray resolves ``127.0.0.1`` to the machine's own primary address for node registration (as any
``ray.init()`` here does); that traffic stays inside this host.

Teardown never calls ``ray stop`` (it stops every Ray on the machine): it sends SIGTERM to each
``ray start --block`` leader (which stops its node's processes), then SIGKILLs whatever is left
in that node's session or names the cluster's temp dir on its command line, and deletes the temp
dir.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.processes import all_pids, cmdline, is_zombie, session_of

REPO = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray")) if Path(sys.executable).with_name("ray").exists() else "ray"
NODE_CPUS = 2
OBJECT_STORE_BYTES = 128 * 1024 * 1024
START_TIMEOUT_S = 90.0
STOP_GRACE_S = 10.0
NODE_LABEL = "rayeval-test-node"
LOOPBACK_RAY_START = Path(__file__).with_name("loopback_ray_start.py")

CLUSTER_ENV = {
    # Token authentication, as Ray 2.60 clusters have it by default: one token per test session
    "RAY_AUTH_MODE": "token",
    "RAY_AUTH_TOKEN": secrets.token_hex(32),
    "RAY_USAGE_STATS_ENABLED": "0",
    # Nodes, drivers and workers register 127.0.0.1, never the machine's routable address.
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    # A dead raylet is noticed after ~3 s instead of the default ~30 s.
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


# ----------------------------------------------------------------------------- processes


def free_port() -> int:
    """A TCP port free on every interface (Ray's GCS and raylets listen on all of them)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def session_pids(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid``."""
    return [pid for pid in all_pids() if session_of(pid) == sid and not is_zombie(pid)]


def kill_pids(pids: list[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def wait_until(predicate, timeout: float, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# ----------------------------------------------------------------------------- the cluster


@dataclass
class RayNode:
    name: str
    process: subprocess.Popen  # the `ray start --block` leader; its pid is the node's session id
    temp_dir: Path
    log_path: Path
    node_id: str | None = None

    @property
    def sid(self) -> int:
        return self.process.pid

    def pids(self) -> list[int]:
        return session_pids(self.sid)

    def raylet_pids(self) -> list[int]:
        return [pid for pid in self.pids() if Path(cmdline(pid).split(" ")[0]).name == "raylet"]

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class RayTestCluster:
    temp_root: Path
    gcs_port: int
    dashboard_port: int
    env: dict[str, str]
    head: RayNode
    workers: list[RayNode] = field(default_factory=list)

    @property
    def gcs_address(self) -> str:
        """For ``rayeval run --address`` / ``ray.init(address=...)``."""
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        """For ``ray job submit --address`` / ``JobSubmissionClient``."""
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def node2(self) -> RayNode:
        """The live second node (the last one started)."""
        if not self.workers:
            raise RuntimeError("the cluster has no second node")
        return self.workers[-1]

    # --- the second node -------------------------------------------------------------

    def node2_raylet_pids(self) -> list[int]:
        return self.node2.raylet_pids()

    def node2_pids(self) -> list[int]:
        return self.node2.pids()

    def kill_node2(self, *, wait_dead: bool = True, timeout: float = 30.0) -> list[int]:
        """SIGKILL the second node's raylet and every process of its ``ray start`` (workers too).

        Returns the killed pids; with ``wait_dead`` waits until the GCS reports the node DEAD.
        """
        node = self.node2
        killed: list[int] = []
        for _ in range(5):  # repeat: a process forked during the sweep is caught next round
            pids = node.pids()
            if not pids:
                break
            kill_pids(pids)
            killed.extend(pid for pid in pids if pid not in killed)
            time.sleep(0.2)
        node.process.wait(timeout=10)
        self.workers.remove(node)
        if wait_dead and node.node_id:
            wait_until(lambda: self.node_state(node.node_id) == "DEAD", timeout, 0.5, f"node {node.node_id} DEAD")
        return killed

    def start_node2(self) -> RayNode:
        """Add a (new) second node; the fixture starts one, ``kill_node2`` removes it."""
        index = len(list(self.temp_root.glob("w*"))) + 1
        temp_dir = self.temp_root / f"w{index}"
        temp_dir.mkdir()
        log_path = self.temp_root / f"node2-{index}.log"
        command = [
            sys.executable, str(LOOPBACK_RAY_START), "--address", self.gcs_address, "--node-ip-address", "127.0.0.1",
            "--num-cpus", str(NODE_CPUS), "--object-store-memory", str(OBJECT_STORE_BYTES),
            "--temp-dir", str(temp_dir),
            "--resources", json.dumps({"rayeval_test_node2": 1}),
            "--labels", json.dumps({NODE_LABEL: "node2"}),
            "--dashboard-agent-listen-port", str(free_port()),
            "--metrics-export-port", str(free_port()),
            "--disable-usage-stats", "--block",
        ]  # fmt: skip
        node = RayNode("node2", _spawn(command, self.env, log_path), temp_dir, log_path)
        self.workers.append(node)
        node.node_id = self._wait_node_alive(node, "node2")
        return node

    # --- state -----------------------------------------------------------------------

    def dashboard_get(self, path: str, timeout: float):  # type: ignore[no-untyped-def]
        """A GET on the dashboard with the cluster's token (token authentication is on)."""
        headers = {"Authorization": f"Bearer {self.env['RAY_AUTH_TOKEN']}"}
        return urllib.request.urlopen(
            urllib.request.Request(f"{self.dashboard_url}{path}", headers=headers), timeout=timeout
        )

    def nodes(self) -> list[dict]:
        """The GCS's node table through the dashboard (no driver needed)."""
        with self.dashboard_get("/nodes?view=summary", timeout=10) as response:
            payload = json.load(response)
        return payload["data"]["summary"]

    def node_state(self, node_id: str) -> str | None:
        for entry in self.nodes():
            raylet = entry.get("raylet", {})
            if raylet.get("nodeId") == node_id:
                return raylet.get("state")
        return None

    def alive_node_ids(self) -> set[str]:
        return {e["raylet"]["nodeId"] for e in self.nodes() if e.get("raylet", {}).get("state") == "ALIVE"}

    def _wait_node_alive(self, node: RayNode, label: str) -> str:
        def find() -> str | None:
            if node.process.poll() is not None:
                raise RayStartFailed(
                    f"`ray start` for {node.name} exited {node.process.returncode}:\n{node.log_tail()}"
                )
            try:
                entries = self.nodes()
            except (OSError, urllib.error.URLError, KeyError, ValueError):
                return None
            for entry in entries:
                raylet = entry.get("raylet", {})
                if raylet.get("state") == "ALIVE" and raylet.get("labels", {}).get(NODE_LABEL) == label:
                    return raylet["nodeId"]
            return None

        try:
            return wait_until(find, START_TIMEOUT_S, 0.5, f"{node.name} ALIVE")
        except TimeoutError as exc:  # a port taken by another Ray between choosing and binding it, say
            raise RayStartFailed(f"{exc}; its log ends:\n{node.log_tail()}") from None

    # --- processes of this cluster ---------------------------------------------------

    def all_nodes(self) -> list[RayNode]:
        return [self.head, *self.workers]

    def actor_pids(self, class_name: str, *, node: RayNode | None = None, busy: bool = False) -> list[int]:
        """Worker processes of this cluster running actor ``class_name`` (``ray::Class[.method]``).

        ``busy``: only those executing a method right now (title ``ray::Class.method``).
        """
        sids = {n.sid for n in ([node] if node else self.all_nodes())}
        found = []
        for pid in all_pids():
            title = cmdline(pid)
            if not title.startswith(f"ray::{class_name}"):
                continue
            if busy and not title.startswith(f"ray::{class_name}."):
                continue
            if session_of(pid) in sids and not is_zombie(pid):
                found.append(pid)
        return found

    def stop(self) -> None:
        for node in [*reversed(self.workers), self.head]:
            _stop_node(node)
        self.workers.clear()
        # anything else that still names this cluster's temp dir (nothing should)
        marker = str(self.temp_root)
        kill_pids([pid for pid in all_pids() if pid != os.getpid() and marker in cmdline(pid)])


def _spawn(command: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    log = open(log_path, "wb")  # noqa: SIM115 - the child keeps it open
    try:
        return subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    finally:
        log.close()


def _stop_node(node: RayNode) -> None:
    if node.process.poll() is None:
        node.process.send_signal(signal.SIGTERM)  # `ray start --block` then stops its node
        try:
            node.process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    deadline = time.monotonic() + STOP_GRACE_S
    while (left := node.pids()) and time.monotonic() < deadline:
        kill_pids(left)
        time.sleep(0.2)
    if node.process.poll() is None:
        node.process.kill()
        node.process.wait(timeout=5)


def _wait_head_ready(cluster: RayTestCluster) -> str:
    head = cluster.head

    def ready() -> bool:
        if head.process.poll() is not None:
            raise RayStartFailed(f"`ray start --head` exited {head.process.returncode}:\n{head.log_tail()}")
        try:  # the job API answers only once the head's dashboard agent is up
            with cluster.dashboard_get("/api/jobs/", timeout=5) as response:
                return response.status == 200
        except (OSError, urllib.error.URLError, ValueError):
            return False

    wait_until(ready, START_TIMEOUT_S, 0.5, "the head's dashboard and job API")
    return cluster._wait_node_alive(head, "head")


class RayStartFailed(RuntimeError):
    """A `ray start` exited during startup, or its node never came alive (e.g. a port another
    Ray of the machine took between choosing and binding it: the tests run Rays side by side)."""


def start_cluster(temp_root: Path, attempts: int = 2) -> RayTestCluster:
    """Start head + node 2 under ``temp_root``; a `ray start` that exits early or whose node
    does not come alive is retried once, with other ports."""
    for attempt in range(1, attempts + 1):
        root = temp_root / f"c{attempt}"
        root.mkdir()
        try:
            return _start_cluster(root)
        except RayStartFailed:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def _start_cluster(temp_root: Path) -> RayTestCluster:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS") and k != "RAY_API_SERVER_ADDRESS"}
    env.update(CLUSTER_ENV)
    env["PYTHONUNBUFFERED"] = "1"
    gcs_port, dashboard_port = free_port(), free_port()
    head_temp = temp_root / "h"
    head_temp.mkdir()
    command = [
        RAY, "start", "--head", "--node-ip-address", "127.0.0.1",
        "--port", str(gcs_port),
        "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard_port),
        "--dashboard-agent-listen-port", str(free_port()),
        "--ray-client-server-port", str(free_port()),
        "--metrics-export-port", str(free_port()),
        "--num-cpus", str(NODE_CPUS), "--object-store-memory", str(OBJECT_STORE_BYTES),
        "--temp-dir", str(head_temp),
        "--resources", json.dumps({"rayeval_test_head": 1}),
        "--labels", json.dumps({NODE_LABEL: "head"}),
        "--disable-usage-stats", "--block",
    ]  # fmt: skip
    log_path = temp_root / "head.log"
    head = RayNode("head", _spawn(command, env, log_path), head_temp, log_path)
    cluster = RayTestCluster(temp_root=temp_root, gcs_port=gcs_port, dashboard_port=dashboard_port, env=env, head=head)
    try:
        head.node_id = _wait_head_ready(cluster)
        cluster.start_node2()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cluster: starts a real multi-node Ray cluster (deselect with -m 'not cluster')")


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayTestCluster]:
    """A running two-node Ray cluster on this machine (see the module docstring)."""
    assert sys.platform == "linux", "the cluster fixture reads /proc"
    temp_root = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Unix socket paths ≤ 107 bytes
    saved = {name: os.environ.get(name) for name in CLUSTER_ENV}
    os.environ.update(CLUSTER_ENV)  # in-process clients (JobSubmissionClient) match the servers
    cluster = None
    try:
        started = time.monotonic()
        cluster = start_cluster(temp_root)
        print(
            f"\nray_cluster: two nodes up in {time.monotonic() - started:.1f} s at {cluster.gcs_address}, dashboard {cluster.dashboard_url}"
        )
        yield cluster
    finally:
        if cluster is not None:
            cluster.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(temp_root, ignore_errors=True)
