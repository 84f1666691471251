"""One embedded Ray for the runs of one test."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def one_ray() -> Iterator[None]:
    """An embedded Ray, started as a run starts it: the test's runs (``main(["run", ...])``)
    join it instead of each starting and stopping their own. Its workers have the environment
    of now: start it once the test has set the variables its units need."""
    from rayeval.batch.cluster import connect, shut_down_embedded_ray
    from rayeval.batch.config import RayConfig

    owned = connect(RayConfig())
    try:
        yield
    finally:
        if owned:
            shut_down_embedded_ray()
