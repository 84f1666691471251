"""``ray start`` for a second node that stays on 127.0.0.1.

Ray refuses to add a node while cluster mode is off (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0), and
with it on, it replaces 127.0.0.1 by the machine's routable address. The tests must not use any
address but loopback, so this process allows the join and keeps the address as given; the
processes it starts inherit cluster mode off and so stay on loopback too.
Usage: python loopback_ray_start.py <ray start arguments>
"""

from __future__ import annotations

import sys

from ray._private import ray_constants, services
from ray.scripts.scripts import main

ray_constants.ENABLE_RAY_CLUSTER = True
services.resolve_ip_for_localhost = lambda host: host

if __name__ == "__main__":
    sys.argv = ["ray", "start", *sys.argv[1:]]
    main()
