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


@pytest.fixture(scope="module")
def shared_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One embedded Ray for a test module, started as the engine starts it (loopback only):
    runs in this process (``evaluations.run``, ``batch.run``, the CLI's ``main``) join it instead
    of each starting and stopping its own. Not for tests whose agents read environment variables
    set after it started (its workers have the environment of its start), nor for tests of the
    embedded Ray itself."""
    import ray

    from rayeval.batch.engine import BatchConfig, connect

    started = connect(BatchConfig(evals=[], agent="unused", output=str(tmp_path_factory.mktemp("unused"))))
    yield
    if started:
        ray.shutdown()


# Shared fixtures (the local S3 server, small file systems) live in their own modules.
pytest_plugins = ["tests.fixtures_s3", "tests.small_disk", "tests.plugins"]
