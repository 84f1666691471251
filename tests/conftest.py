from __future__ import annotations

import json
import os
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


# Shared fixtures (the local S3 server, small file systems) live in their own modules.
pytest_plugins = ["tests.fixtures_s3", "tests.small_disk", "tests.plugins"]
