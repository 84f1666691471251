"""The model layer's tests talk to one loopback server that speaks both APIs
(``tests.agents.fake_model_server``), with fake keys: no real key, no network."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.agents.fake_model_server import FakeModelServer

OPENAI_KEY = "sk-test-OPENAI-KEY-0123456789"
ANTHROPIC_KEY = "sk-ant-test-ANTHROPIC-KEY-0123456789"
RIGHT_ANSWER = '<EVAL_ANSWER>{"answer": "B"}</EVAL_ANSWER>'


def mc_answer(body: dict) -> str:
    """Answers the example evals' FCGR3A multiple-choice eval correctly, anything else with
    its number of messages."""
    messages = body.get("messages") or []
    text = " ".join(str(m.get("content")) for m in messages if isinstance(m, dict))
    if "FCGR3A" in text:
        return f"CD14+ monocytes express it most.\n{RIGHT_ANSWER}"
    return f"reply to {len(messages)} message(s)"


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake keys in the environment, and no endpoint variables from the caller's shell."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def shared_ray(keys: None, shared_ray: None) -> None:
    """The shared Ray, started once the fake keys are set: the units' gateways, on its
    workers, read them there."""


@pytest.fixture
def server(keys: None) -> Iterator[FakeModelServer]:
    with FakeModelServer(script=[], answer=mc_answer, base_input_tokens=1200, base_output_tokens=300) as srv:
        yield srv
