"""The gateway pins a unit to its model: a model call naming another one is refused by the
gateway itself (never sent, never billed, counted apart), except the models the run allows
and, for a program that moves to a fallback model when its model refuses, one such model
after a refusal the gateway relayed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pandas as pd
import pytest

from rayeval.cli import main
from rayeval.gateway.pin import model_pin, names_model
from rayeval.gateway.server import Gateway, Upstream
from rayeval.gateway.unit import open_unit_access
from tests.agents.fake_model_server import REFUSED_TEXT, FakeModelServer
from tests.gateway.provider import ChargedBudget

KEY = "sk-provider-key-0123456789"
HI = [{"role": "user", "content": "hi"}]
GRADER = {"type": "numeric_tolerance", "config": {"ground_truth": {"value": 1},
          "tolerances": {"value": {"type": "absolute", "value": 0}}}}  # fmt: skip


def upstreams(server: FakeModelServer) -> dict[str, Upstream]:
    return {"anthropic": Upstream(server.url, (KEY,)), "openai": Upstream(server.url + "/v1", (KEY,))}


def claude(gateway: Gateway, token: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.base_url("anthropic"), api_key=token, max_retries=0)


def asked_models(server: FakeModelServer) -> list[str]:
    return [r.body["model"] for r in server.model_requests()]


@pytest.mark.parametrize(
    ("asked", "model"),
    [
        ("claude-sonnet-4-5", "anthropic/claude-sonnet-4-5"),
        ("claude-sonnet-4-5-20250929", "anthropic/claude-sonnet-4-5"),
        ("claude-sonnet-4-5", "anthropic/claude-sonnet-4-5-20250929"),
        ("gpt-4o-2024-08-06", "openai/gpt-4o"),
        ("gpt-5.1-codex", "gpt-5.1-codex"),
        ("moonshotai/kimi-k3", "openrouter/moonshotai/kimi-k3"),
        ("meta-llama/Llama-3.1-8B", "openai-compatible/meta-llama/Llama-3.1-8B"),
    ],
)
def test_a_model_is_named_with_or_without_its_provider_dated_or_not(asked: str, model: str) -> None:
    assert names_model(asked, model)


@pytest.mark.parametrize(
    ("asked", "model"),
    [
        ("claude-opus-4-1", "anthropic/claude-sonnet-4-5"),
        ("gpt-4o", "openai/gpt-4o-mini"),
        ("gpt-4o-mini", "openai/gpt-4o"),
        ("sonnet-4-5", "anthropic/claude-sonnet-4-5"),  # a part of a name is not a provider's prefix off
        ("other/claude-sonnet-4-5", "anthropic/claude-sonnet-4-5"),
        ("", "anthropic/claude-sonnet-4-5"),
    ],
)
def test_another_model_is_not_the_units(asked: str, model: str) -> None:
    assert not names_model(asked, model)


def test_a_call_naming_another_model_is_refused_never_sent_nor_billed(
    server: FakeModelServer, gateway: Gateway
) -> None:
    budget = ChargedBudget()
    session = gateway.open(upstreams(server), budget=budget, pin=model_pin("anthropic/claude-sonnet-4-5"))
    client = claude(gateway, session.token)
    client.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=HI)
    client.messages.create(model="claude-sonnet-4-5-20250929", max_tokens=5, messages=HI)
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model="claude-opus-4-1", max_tokens=5, messages=HI)
    message = refused.value.body["error"]["message"]  # type: ignore[index]
    assert "'claude-opus-4-1'" in message and "'anthropic/claude-sonnet-4-5'" in message
    with (  # streamed alike
        pytest.raises(anthropic.BadRequestError),
        client.messages.stream(model="claude-opus-4-1", max_tokens=5, messages=HI) as stream,
    ):
        stream.get_final_text()
    report = gateway.close(session)
    assert asked_models(server) == ["claude-sonnet-4-5", "claude-sonnet-4-5-20250929"]
    counted = report.counted
    assert (counted.n_model_calls, counted.off_model_calls, counted.last_failure) == (2, 2, None)
    assert set(counted.by_model) == {"claude-sonnet-4-5", "claude-sonnet-4-5-20250929"}
    assert counted.cost_usd == pytest.approx(2 * (1000 * 3 + 50 * 15) / 1e6) == pytest.approx(sum(budget.charged))
    assert [call["off_model"] for call in report.calls] == [False, False, True, True]
    assert [call["model"] for call in report.calls][2:] == ["claude-opus-4-1"] * 2
    assert report.calls[2]["status"] == 400 and report.calls[2]["usage"]["input_tokens"] is None


def _post(gateway: Gateway, token: str, path: str, body: bytes) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    return httpx.post(gateway.base_url("openai") + path, headers=headers, content=body)


@pytest.mark.parametrize(
    "body",
    [
        b'{"model": "gpt-5-pro", "model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}',
        b'{"mod\\u0065l": "gpt-5-pro", "model": "gpt-4o-mini", "messages": []}',
        b'{"model": "gpt-4o-mini", "models": ["gpt-4o-mini", "gpt-5-pro"], "messages": []}',
        b'{"model": ["gpt-4o-mini"], "messages": []}',
        b'{"messages": [{"role": "user", "content": "hi"}]}',
        b"not json",
    ],
    ids=["twice", "twice-escaped", "openrouter-fallbacks", "not-a-string", "none", "not-json"],
)
def test_a_call_that_may_reach_another_model_is_refused(server: FakeModelServer, gateway: Gateway, body: bytes) -> None:
    """What the provider might read as another model than the gateway does (a key given twice,
    the first or an escaped one read), or a list of fallbacks, or no model at all."""
    session = gateway.open(upstreams(server), pin=model_pin("openai/gpt-4o-mini"))
    reply = _post(gateway, session.token, "/chat/completions", body)
    assert reply.status_code == 400 and reply.json()["error"]["type"] == "invalid_request_error"
    assert gateway.close(session).counted.off_model_calls == 1
    assert server.model_requests() == []


@pytest.mark.parametrize(
    "body",
    [
        b'{"model": "gpt-4o", "stream": false, "stream": true, "messages": []}',
        b'{"model": "gpt-4o", "str\\u0065am": true, "stream": false, "messages": []}',
        b'{"model": "gpt-4o", "stream": true, "stream_options": {"include_usage": true}, "stream_options": {}}',
        b'{"model": "gpt-4o", "stream": "false", "messages": []}',
        b'{"model": "gpt-5-pro", "model": "gpt-4o", "messages": []}',
    ],
    ids=["stream-twice", "stream-twice-escaped", "stream-options-twice", "stream-not-a-boolean", "model-twice"],
)
def test_a_call_the_provider_may_read_otherwise_is_refused_unpinned_too(
    server: FakeModelServer, gateway: Gateway, body: bytes
) -> None:
    """A key that says how the reply is read for its usage (streamed or not, its usage asked for)
    or which model answers, given twice (the gateway reads the last, a provider may read the
    first), or ``stream`` not a boolean: refused in a session pinned to no model too."""
    session = gateway.open(upstreams(server))
    reply = _post(gateway, session.token, "/chat/completions", body)
    assert reply.status_code == 400 and "once at most" in reply.json()["error"]["message"]
    counted = gateway.close(session).counted
    assert (counted.failed_calls, counted.off_model_calls, counted.n_model_calls) == (1, 0, 0)
    assert server.model_requests() == []


def test_the_units_own_model_goes_through_each_api(server: FakeModelServer, gateway: Gateway) -> None:
    session = gateway.open(upstreams(server), pin=model_pin("openai/gpt-4o"))
    gpt = openai.OpenAI(base_url=gateway.base_url("openai"), api_key=session.token, max_retries=0)
    gpt.chat.completions.create(model="gpt-4o-2024-08-06", messages=HI)  # type: ignore[arg-type]
    gpt.responses.create(model="gpt-4o", input="a \u00e9 \\u escaped")
    with pytest.raises(openai.BadRequestError, match="'gpt-5'"):
        gpt.responses.create(model="gpt-5", input="hi")
    # Anthropic's token counting is free and answers nothing: not pinned
    counted = httpx.post(
        gateway.base_url("anthropic") + "/v1/messages/count_tokens",
        headers={"x-api-key": session.token},
        json={"model": "claude-opus-4-1", "messages": HI},
    )
    assert counted.status_code == 200
    assert gateway.close(session).counted.off_model_calls == 1
    assert asked_models(server) == ["gpt-4o-2024-08-06", "gpt-4o"]


def test_the_models_a_run_allows_and_any(server: FakeModelServer, gateway: Gateway) -> None:
    allowed = open_unit_access(
        gateway, {}, model="anthropic/claude-sonnet-4-5", allowed_models=("anthropic/claude-haiku-4-5",), environ={}
    )
    allowed.session.upstreams = upstreams(server)
    client = claude(gateway, allowed.session.token)
    client.messages.create(model="claude-haiku-4-5-20251001", max_tokens=5, messages=HI)
    with pytest.raises(anthropic.BadRequestError, match="'anthropic/claude-haiku-4-5'"):
        client.messages.create(model="claude-opus-4-1", max_tokens=5, messages=HI)
    assert gateway.close(allowed.session).counted.off_model_calls == 1
    for model, allow in (("claude-sonnet-4-5", ("any",)), (None, ()), ("default", ())):
        unpinned = open_unit_access(gateway, {}, model=model, allowed_models=allow, environ={})
        unpinned.session.upstreams = upstreams(server)
        claude(gateway, unpinned.session.token).messages.create(model="claude-opus-4-1", max_tokens=5, messages=HI)
        assert gateway.close(unpinned.session).counted.off_model_calls == 0
    assert asked_models(server) == ["claude-haiku-4-5-20251001"] + ["claude-opus-4-1"] * 3


def test_a_unit_reaches_its_models_at_their_providers_only(server: FakeModelServer, gateway: Gateway) -> None:
    """Its model's name at another provider's route would fail there (no such model, no key): a
    failure of the unit's making that its row would read as its provider's. A pinned unit has
    its models' routes only, an unpinned one those of the providers its run names."""
    environ = {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": server.url, "OPENAI_API_KEY": KEY,
               "OPENAI_BASE_URL": server.url + "/v1"}  # fmt: skip
    pinned = open_unit_access(gateway, {}, model="anthropic/claude-sonnet-4-5", environ=environ)
    for route in ("openai", "openrouter", "fireworks"):
        reply = httpx.post(
            gateway.base_url(route) + "/chat/completions",
            headers={"authorization": f"Bearer {pinned.session.token}"},
            json={"model": "claude-sonnet-4-5", "messages": HI},
        )
        assert reply.status_code == 404 and f"no provider is configured at /{route}" in reply.text
    claude(gateway, pinned.session.token).messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=HI)
    counted = gateway.close(pinned.session).counted
    assert counted.n_model_calls == 1 and counted.last_failure is None
    assert asked_models(server) == ["claude-sonnet-4-5"]
    routes = {
        "allowed": ("anthropic/claude-sonnet-4-5", ("openai/gpt-4o",), environ, {"anthropic", "openai"}),
        "unpinned": (None, (), environ, {"anthropic", "openai"}),
        "unknown route": ("my-model", (), environ, {"anthropic", "openai"}),
        "named by the run": (None, (), {"OPENROUTER_API_KEY": KEY}, {"openrouter"}),
    }
    for model, allowed, names, expected in routes.values():
        access = open_unit_access(gateway, {}, model=model, allowed_models=allowed, environ=names)
        assert set(access.session.upstreams) == expected
        gateway.close(access.session)


def test_a_program_that_falls_back_on_a_refusal_may_call_one_other_model_after_one(
    server: FakeModelServer, gateway: Gateway
) -> None:
    """Claude Code's ``switchModelsOnFlag``: claude-fable-5 refuses, the program goes on with
    claude-opus-5; not before a refusal was relayed, on that route only, and one model only."""
    server.refused_by.add("claude-fable-5")
    session = gateway.open(upstreams(server), pin=model_pin("anthropic/claude-fable-5", falls_back=True))
    client = claude(gateway, session.token)
    with pytest.raises(anthropic.BadRequestError):  # no refusal yet
        client.messages.create(model="claude-opus-5", max_tokens=5, messages=HI)
    assert client.messages.create(model="claude-fable-5", max_tokens=5, messages=HI).stop_reason == "refusal"
    gpt = openai.OpenAI(base_url=gateway.base_url("openai"), api_key=session.token, max_retries=0)
    with pytest.raises(openai.BadRequestError):  # the refusal was Anthropic's
        gpt.chat.completions.create(model="gpt-5", messages=HI)  # type: ignore[arg-type]
    for _ in range(2):
        client.messages.create(model="claude-opus-5", max_tokens=5, messages=HI)
    with pytest.raises(anthropic.BadRequestError, match="'claude-opus-5'"):  # the one fallback is taken
        client.messages.create(model="claude-sonnet-5", max_tokens=5, messages=HI)
    report = gateway.close(session)
    counted = report.counted
    assert asked_models(server) == ["claude-fable-5", "claude-opus-5", "claude-opus-5"]
    assert (counted.fallback_model, counted.off_model_calls, counted.refusals) == ("claude-opus-5", 3, [REFUSED_TEXT])
    assert counted.last_model == "claude-opus-5"

    resumed = gateway.open(upstreams(server), pin=model_pin("anthropic/claude-fable-5", falls_back=True))
    resumed.carry(counted, report.calls)  # a chunked session goes on elsewhere: its fallback with it
    claude(gateway, resumed.token).messages.create(model="claude-opus-5", max_tokens=5, messages=HI)
    again = gateway.close(resumed).counted
    assert (again.fallback_model, again.off_model_calls, again.n_model_calls) == ("claude-opus-5", 3, 4)


def test_a_program_that_does_not_fall_back_gets_no_other_model_after_a_refusal(
    server: FakeModelServer, gateway: Gateway
) -> None:
    server.refused_by.add("claude-fable-5")
    session = gateway.open(upstreams(server), pin=model_pin("anthropic/claude-fable-5"))
    client = claude(gateway, session.token)
    assert client.messages.create(model="claude-fable-5", max_tokens=5, messages=HI).stop_reason == "refusal"
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="claude-opus-5", max_tokens=5, messages=HI)
    assert gateway.close(session).counted.fallback_model is None
    assert asked_models(server) == ["claude-fable-5"]


@pytest.fixture
def eval_file(tmp_path: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An eval, and the scripted server as this process's Anthropic."""
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
    path = tmp_path / "evals" / "e.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"id": "e", "task": "Answer.", "grader": GRADER}))
    return path


AGENT = "tests.gateway.limit_agents:call_a_stronger_model"


def test_run_one_takes_the_models_a_unit_may_call(
    eval_file: Path, server: FakeModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["run-one", str(eval_file), "--agent", AGENT, "--model", "anthropic/claude-sonnet-4-5",
          "--allow-model", "claude-opus-4-1"])  # fmt: skip
    result = json.loads(capsys.readouterr().out)
    assert result["metadata"]["asked"] == {"claude-opus-4-1": "answered", "claude-sonnet-4-5": "answered"}
    assert result["metadata"]["gateway"]["off_model_calls"] == 0
    assert asked_models(server) == ["claude-opus-4-1", "claude-sonnet-4-5"]


def _run(evals: Path, out: Path, *options: str) -> dict[str, Any]:
    code = main(["run", str(evals), "--agent", AGENT, "--models", "anthropic/claude-sonnet-4-5", "--output", str(out),
                 "--retries", "0", "--no-progress", *options])  # fmt: skip
    assert code == 0
    (row,) = pd.read_parquet(out).to_dict("records")
    return row


@pytest.mark.slow  # through rayeval run in the sandbox: ~15 s; the gateway-level tests above run by default
def test_a_sandboxed_agent_that_calls_a_stronger_model_through_a_run_is_refused(
    eval_file: Path, server: FakeModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    row = _run(eval_file.parent, tmp_path / "out")
    metadata: dict[str, Any] = json.loads(row["metadata_json"])
    assert row["isolation"] == "sandbox" and row["passed"] and row["model"] == "anthropic/claude-sonnet-4-5"
    assert asked_models(server) == ["claude-sonnet-4-5"]  # the provider never saw the other call
    refusal = metadata["asked"]["claude-opus-4-1"]
    assert refusal.startswith("400: ") and "may call 'anthropic/claude-sonnet-4-5' only" in refusal
    seen = metadata["gateway"]
    assert (seen["off_model_calls"], seen["n_model_calls"], set(seen["by_model"])) == (1, 1, {"claude-sonnet-4-5"})
    assert seen["last_failure"] is None and row["error_type"] is None
    assert row["n_model_calls"] == 1 and row["agent_cost_usd"] == pytest.approx((1000 * 3 + 50 * 15) / 1e6)
    calls = json.loads(json.loads(row["artifacts_json"])["model_calls.json"])["calls"]
    assert [(call["model"], call["off_model"]) for call in calls] == [
        ("claude-opus-4-1", True), ("claude-sonnet-4-5", False)
    ]  # fmt: skip


@pytest.mark.slow  # end to end through rayeval run: CI runs it in its slow phase
def test_a_run_that_allows_another_model_lets_its_units_call_it(
    eval_file: Path, server: FakeModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    row = _run(eval_file.parent, tmp_path / "out", "--allow-model", "anthropic/claude-opus-4-1")
    assert json.loads(row["metadata_json"])["gateway"]["off_model_calls"] == 0
    assert asked_models(server) == ["claude-opus-4-1", "claude-sonnet-4-5"]
    manifest = json.loads(next((tmp_path / "out").rglob("_manifest.json")).read_text())
    assert manifest["allow_models"] == ["anthropic/claude-opus-4-1"]
