from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

# Every Ray the tests start stays on 127.0.0.1 (Ray would otherwise register the machine's
# routable address), and reports no usage statistics.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def shared_path(*parts: str) -> Path:
    """A file under ../shared (present beside every clone, read-only in CI)."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.fail(f"missing shared input {path}: the tests need ../shared beside the repo")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


_OWNED_RAY: list[bool] = []  # holds True while a Ray that ``shared_ray`` started runs


def _stop_shared_ray() -> None:
    if _OWNED_RAY:
        from rayeval.batch.cluster import shut_down_embedded_ray

        _OWNED_RAY.clear()
        shut_down_embedded_ray()


@pytest.fixture
def shared_ray() -> None:
    """One embedded Ray, started as the engine starts it (loopback only), for the tests of a
    module that ask for it one after the other: runs in this process (``evaluations.run``,
    ``batch.run``, the CLI's ``main``) join it instead of each starting and stopping its own.
    It stops before the next test that does not ask for it, and at the module's end. Not for
    tests whose agents read environment variables set after it started (its workers have the
    environment of its start), nor for tests of the embedded Ray itself."""
    if not _OWNED_RAY:
        from rayeval.batch.cluster import connect
        from rayeval.batch.config import RayConfig

        if connect(RayConfig()):
            _OWNED_RAY.append(True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """In each module, the tests that ask for ``shared_ray`` run first (each part in its
    written order), so that they share one Ray instead of one per stretch of them."""
    first_of: dict[str, int] = {}
    for index, item in enumerate(items):
        first_of.setdefault(item.nodeid.split("::")[0], index)
    items.sort(key=lambda item: (first_of[item.nodeid.split("::")[0]], "shared_ray" not in item.fixturenames))


@pytest.fixture(autouse=True)
def _shared_ray_only_where_asked_for(request: pytest.FixtureRequest) -> None:
    if "shared_ray" not in request.fixturenames:
        _stop_shared_ray()


@pytest.fixture(scope="module", autouse=True)
def _shared_ray_ends_with_its_module() -> Iterator[None]:
    yield
    _stop_shared_ray()


# Shared fixtures (the local S3 server, small file systems) live in their own modules.
pytest_plugins = ["tests.fixtures_s3", "tests.small_disk", "tests.plugins"]
