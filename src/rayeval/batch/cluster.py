"""The run's Ray: an embedded one started on this machine, or a cluster joined as a driver."""

from __future__ import annotations

import logging
import os
import re

import ray

from ..errors import RayevalError
from .capacity import NodeResources
from .config import RayConfig

log = logging.getLogger(__name__)


class RayVersionMismatch(RayevalError):
    """The cluster runs another Ray or Python than this driver: Ray refuses the connection."""


def _stay_on_loopback() -> None:
    """An embedded, single-node Ray has no reason to listen or connect beyond 127.0.0.1.

    Ray replaces a loopback node address by the machine's routable one unless cluster mode is
    off; the environment variable carries the setting to the processes Ray starts.
    """
    from ray._private import ray_constants

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


def connect(config: RayConfig) -> bool:
    """Join the given cluster (or the job's, under ``ray job submit``), else start an embedded Ray.

    Returns True when this call started Ray and should shut it down.
    """
    if ray.is_initialized():
        return False
    if runs_embedded(config.address):
        _stay_on_loopback()
        # Ray turns token authentication on for a new local cluster and says so on stderr at every
        # start, adding how to turn it off: it stays on, unannounced (RAY_AUTH_MODE still decides)
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
        # No runtime_env: its environment variables would keep actors off the worker processes
        # Ray has already started.  Ray puts the driver's working folder on the workers'
        # sys.path itself, so module:function agents of the caller's project import there too.
        ray.init(
            address="local",
            include_dashboard=False,
            object_store_memory=config.object_store_memory,
            log_to_driver=False,
            configure_logging=False,
        )
        return True
    address = config.address or "auto"  # None: the job's cluster, named by RAY_ADDRESS
    try:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    except RuntimeError as exc:  # Ray's own check: "Version mismatch: The cluster was started with ..."
        versions = _VERSIONS.findall(str(exc))
        if not str(exc).startswith("Version mismatch") or len(versions) != 2:
            raise
        ray.shutdown()  # what ray.init set up before it refused
        where = os.environ.get("RAY_ADDRESS", address) if address == "auto" else address
        raise RayVersionMismatch(_mismatch_message(str(where), *versions)) from None
    return False


# "Ray: 2.59.0\n    Python: 3.11.7" in Ray's mismatch message, the cluster's first, then this process's
_VERSIONS = re.compile(r"Ray: (\S+)\s+Python: (\S+)")


def _mismatch_message(address: str, cluster: tuple[str, str], driver: tuple[str, str]) -> str:
    (cluster_ray, cluster_python), (driver_ray, driver_python) = cluster, driver
    return (
        f"the Ray cluster at {address} runs Ray {cluster_ray} on Python {cluster_python}, and this driver Ray "
        f"{driver_ray} on Python {driver_python}: a driver and its cluster need the same Ray and Python versions. "
        f"Install ray[default]=={cluster_ray} under Python {cluster_python} here, or submit the run to the cluster "
        "(ray job submit: its driver runs in the cluster's environment)"
    )


def shut_down_embedded_ray() -> None:
    """``ray.shutdown()`` of the Ray ``connect`` started, less the second it spends on the
    autoscaler monitor: Ray stops the GCS first, then asks the monitor to stop, whose SIGTERM
    handler reports to the gone GCS until Ray kills it a second later.  A single node has
    nothing to scale, and the monitor holds no state: it is killed outright first."""
    node = getattr(ray._private.worker, "_global_node", None)
    try:
        if node is not None:
            node.kill_monitor(check_alive=False)
    except Exception as exc:  # noqa: BLE001 - ray.shutdown ends it then, a second later
        log.debug("ending Ray's autoscaler monitor: %s", exc)
    ray.shutdown()


def runs_embedded(address: str | None) -> bool:
    """A run with this ``address`` starts its own Ray on this machine (see :func:`connect`):
    its units and judges see this process's environment."""
    return address == "local" or (address is None and not os.environ.get("RAY_ADDRESS"))


def live_nodes() -> list[NodeResources]:
    """What each node now in the Ray cluster has (Ray's totals)."""
    return [node["Resources"] for node in ray.nodes() if node["Alive"]]
