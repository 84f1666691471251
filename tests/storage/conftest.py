from __future__ import annotations

import pytest

from rayeval.storage import ResultStore


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """S3 roots keep their WAL under $XDG_CACHE_HOME: never the real ~/.cache in tests."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture
def local_store(tmp_path) -> ResultStore:
    return ResultStore(str(tmp_path / "results"))


@pytest.fixture
def s3_store(s3_bucket) -> ResultStore:
    return ResultStore(s3_bucket.uri("results"), s3_endpoint_url=s3_bucket.endpoint_url)
