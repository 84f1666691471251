"""Under Ray, the request limit of a provider holds for all of a job's processes together."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import ray

from tests.agents.fake_model_server import FakeModelServer


@pytest.fixture
def local_ray(server: FakeModelServer) -> Iterator[None]:
    ray.init(
        address="local",
        num_cpus=4,
        include_dashboard=False,
        object_store_memory=128 << 20,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        yield
    finally:
        ray.shutdown()


@ray.remote(num_cpus=1)
def _callers(base_url: str, limit: int, calls: int) -> tuple[int, int]:
    """``calls`` requests at once from this process's threads: (its pid, replies)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    from rayeval.models import get_model

    model = get_model("openai/gpt-4o", base_url=base_url, max_connections=limit)
    with ThreadPoolExecutor(calls) as pool:
        replies = list(pool.map(lambda i: model.generate(f"q{i}"), range(calls)))
    return os.getpid(), len(replies)


@pytest.mark.slow
def test_the_limit_is_shared_by_the_workers_of_a_job(server: FakeModelServer, local_ray: None) -> None:
    server.delay_s = 0.3
    results = ray.get([_callers.remote(f"{server.url}/v1", 3, 4) for _ in range(4)])
    assert len({pid for pid, _ in results}) >= 2  # several processes, each free to send 4 at once
    assert sum(replies for _, replies in results) == 16 == len(server.model_requests())
    assert server.max_in_flight == 3
