"""The gateway's tests' fixtures: a running gateway, and the scripted model server behind it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rayeval.gateway.server import Gateway
from tests.agents.fake_model_server import FakeModelServer


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(script=[], answer=lambda body: "the answer") as fake:
        yield fake


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    with Gateway() as running:
        yield running
