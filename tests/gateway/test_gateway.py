"""The model gateway on its own: the official SDKs call it as they would a provider, with a
unit's token; it relays each call with the provider's key, and counts what the provider said."""

from __future__ import annotations

import errno
import json
import threading
import time

import aiohttp
import anthropic
import httpx
import openai
import pytest
from aiohttp import web

from rayeval.gateway.server import CallLimits, Gateway, Upstream, upstreams_from
from rayeval.gateway.unit import open_unit_access, provider_variables
from rayeval.models.failures import KeyFallbackOn, key_fallback_on
from tests.agents.fake_model_server import REFUSED_TEXT, FakeModelServer
from tests.gateway.provider import Provider, sse

KEY = "sk-provider-key-0123456789"
SPARE = "sk-spare-key-9876543210"


def upstreams(server: FakeModelServer, *keys: str) -> dict[str, Upstream]:
    return {
        "anthropic": Upstream(server.url, keys or (KEY,)),
        "openai": Upstream(server.url + "/v1", keys or (KEY,)),
    }


def credential(recorded: object) -> str | None:
    headers = recorded.headers  # type: ignore[attr-defined]
    value = headers.get("x-api-key") or headers.get("authorization") or ""
    return value.removeprefix("Bearer ")


def test_the_sdks_reach_the_provider_with_its_key_and_the_calls_are_counted(
    server: FakeModelServer, gateway: Gateway
) -> None:
    session = gateway.open(upstreams(server))
    claude = anthropic.Anthropic(base_url=gateway.base_url("anthropic"), api_key=session.token, max_retries=0)
    gpt = openai.OpenAI(base_url=gateway.base_url("openai"), api_key=session.token, max_retries=0)
    message = [{"role": "user", "content": "hi"}]
    assert claude.messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=message).content[0].text == (
        "the answer"
    )
    with claude.messages.stream(model="claude-sonnet-4-5", max_tokens=50, messages=message) as stream:
        assert stream.get_final_text() == "the answer"
    assert gpt.chat.completions.create(model="gpt-4o", messages=message).choices[0].message.content == "the answer"
    chunks = list(
        gpt.chat.completions.create(
            model="gpt-4o", messages=message, stream=True, stream_options={"include_usage": True}
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "the answer"
    with gpt.responses.stream(model="gpt-4o", input="hi") as responses:
        assert responses.get_final_response().output_text == "the answer"
    report = gateway.close(session)
    assert [credential(r) for r in server.model_requests()] == [KEY] * 5  # never the unit's token
    served_in, served_out = server.total_usage()
    assert report.counted.n_model_calls == 5
    assert (report.counted.usage.input_tokens, report.counted.usage.output_tokens) == (served_in, served_out)
    # claude-sonnet-4-5 at 3/15 USD and gpt-4o at 2.5/10 per million tokens (the shipped table)
    assert report.counted.cost_usd == pytest.approx(2 * (1000 * 3 + 50 * 15) / 1e6 + 3 * (1000 * 2.5 + 50 * 10) / 1e6)
    assert [call["streamed"] for call in report.calls] == [False, True, False, True, True]
    assert report.calls[1]["response"]["content"] == [{"type": "text", "text": "the answer"}]
    assert report.calls[0]["request"]["messages"] == message


def test_an_unknown_or_ended_token_is_refused_without_reaching_the_provider(
    server: FakeModelServer, gateway: Gateway
) -> None:
    session = gateway.open(upstreams(server))
    gateway.close(session)
    for token in (session.token, "made-up", KEY):
        reply = httpx.post(
            gateway.base_url("anthropic") + "/v1/messages", headers={"x-api-key": token}, json={"model": "m"}
        )
        assert reply.status_code == 401 and "unknown or expired" in reply.text
    assert server.model_requests() == []


def test_a_rejected_key_is_replaced_by_the_next_one_unseen_by_the_unit(
    server: FakeModelServer, gateway: Gateway
) -> None:
    server.rejected_credentials.add(KEY)
    session = gateway.open(upstreams(server, KEY, SPARE))
    claude = anthropic.Anthropic(base_url=gateway.base_url("anthropic"), api_key=session.token, max_retries=0)
    for _ in range(2):
        claude.messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=[{"role": "user", "content": "hi"}])
    report = gateway.close(session)
    assert [credential(r) for r in server.model_requests()] == [KEY, SPARE, SPARE]  # the switch is kept
    assert report.counted.key_fallbacks == 1 and report.counted.n_model_calls == 2


ECHOED = "Invalid value: 'quota exceeded, billing, credit balance'. Supported values are: 'user', 'assistant'."


@pytest.mark.parametrize(
    ("status", "error", "rejects"),
    [
        (400, {"type": "error", "error": {"type": "invalid_request_error", "message": ECHOED}}, False),
        (400, {"error": {"message": ECHOED, "type": "invalid_request_error", "code": "insufficient_quota!"}}, False),
        (
            400,
            {"type": "error", "error": {"type": "invalid_request_error", "message": "Your credit balance is too low"}},
            True,
        ),
        (400, {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota"}}, True),
    ],
    ids=["echoed words", "echoed code", "anthropic credit", "openai quota"],
)
def test_a_key_is_rejected_by_the_providers_error_never_by_words_the_request_put_in_it(
    server: FakeModelServer, gateway: Gateway, status: int, error: dict, rejects: bool
) -> None:
    """A provider's message may repeat a value of the request: words of a billing failure the
    unit had it repeat neither take the next key nor make the provider's failure of its row."""
    for keys in ((KEY, SPARE), (KEY,)):
        server.fail(status, body=error)
        session = gateway.open(upstreams(server, *keys))
        reply = httpx.post(
            gateway.base_url("anthropic") + "/v1/messages",
            headers={"x-api-key": session.token},
            json={"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
        )
        counted = gateway.close(session).counted
        if len(keys) == 2:
            assert counted.key_fallbacks == rejects and (reply.status_code == 200) == rejects
        else:
            assert reply.status_code == status and (counted.last_failure is not None) == rejects


def test_the_units_organization_and_project_are_not_sent_on(server: FakeModelServer, gateway: Gateway) -> None:
    """One the key is not of would have the provider reject the key: a failure of the unit's making."""
    session = gateway.open(upstreams(server))
    gpt = openai.OpenAI(
        base_url=gateway.base_url("openai"), api_key=session.token, organization="org-forged", project="proj-forged"
    )
    gpt.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    gateway.close(session)
    sent = server.model_requests()[0].headers
    assert "openai-organization" not in sent and "openai-project" not in sent


def test_a_unit_past_its_limit_gets_a_provider_style_refusal(server: FakeModelServer, gateway: Gateway) -> None:
    session = gateway.open(upstreams(server), CallLimits(model_calls=2))
    gpt = openai.OpenAI(base_url=gateway.base_url("openai"), api_key=session.token, max_retries=0)
    for _ in range(2):
        gpt.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="reached its limit of 2 model calls"):
        gpt.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    report = gateway.close(session)
    assert len(server.model_requests()) == 2
    assert report.counted.limit_reached == "model_calls" and report.counted.n_model_calls == 2


def _ask_claude(gateway: Gateway, token: str, streamed: bool) -> str:
    claude = anthropic.Anthropic(base_url=gateway.base_url("anthropic"), api_key=token, max_retries=0)
    request = {"model": "claude-sonnet-4-5", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    if streamed:
        with claude.messages.stream(**request) as stream:  # type: ignore[arg-type]
            return stream.get_final_text()
    return claude.messages.create(**request).content[0].text  # type: ignore[arg-type, union-attr]


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "streamed"])
@pytest.mark.parametrize("fallback_on", ["refusal", "both"])
def test_a_refused_reply_takes_the_next_key_unseen_by_the_unit(
    server: FakeModelServer, gateway: Gateway, streamed: bool, fallback_on: KeyFallbackOn
) -> None:
    """The reference runner's fallback: a refusal on one key is answered again on the next, and
    only what came after the switch is judged; the refused reply is counted, never relayed."""
    server.refused_by.add(KEY)
    session = gateway.open({"anthropic": Upstream(server.url, (KEY, SPARE), fallback_on)})
    assert _ask_claude(gateway, session.token, streamed) == "the answer"
    assert _ask_claude(gateway, session.token, streamed) == "the answer"  # the switch is kept
    report = gateway.close(session)
    assert [credential(r) for r in server.model_requests()] == [KEY, SPARE, SPARE]
    counted = report.counted
    assert (counted.refusal_fallbacks, counted.refusals, counted.key_fallbacks) == (1, [], 0)
    assert counted.n_model_calls == 3 and counted.usage.input_tokens == server.total_usage()[0]
    assert [call["refusal"] for call in report.calls] == [REFUSED_TEXT, None, None]
    assert [call["refusal_fallback"] for call in report.calls] == [True, False, False]
    assert counted.by_model["claude-sonnet-4-5"].n_model_calls == 3
    assert counted.by_model["claude-sonnet-4-5"].cost_usd == counted.cost_usd
    assert counted.last_model == "claude-sonnet-4-5"


def test_a_refusal_on_the_last_key_is_the_units_and_is_judged(server: FakeModelServer, gateway: Gateway) -> None:
    server.refused_by |= {KEY, SPARE}
    session = gateway.open({"anthropic": Upstream(server.url, (KEY, SPARE), "refusal")})
    assert _ask_claude(gateway, session.token, True) == REFUSED_TEXT
    report = gateway.close(session)
    assert [credential(r) for r in server.model_requests()] == [KEY, SPARE]
    assert (report.counted.refusal_fallbacks, report.counted.refusals) == (1, [REFUSED_TEXT])


def test_a_refusal_that_comes_after_the_unit_ended_takes_no_key(server: FakeModelServer, gateway: Gateway) -> None:
    """The unit ended while its call was in flight: closing its session waits for the reply,
    and the refused reply that comes is counted in its report, and not asked again with the
    next key for a unit that is gone."""
    server.refused_by.add(KEY)
    server.delay_s = 1.0
    session = gateway.open({"anthropic": Upstream(server.url, (KEY, SPARE), "refusal")})
    asking = threading.Thread(target=_ask_claude, args=(gateway, session.token, False), daemon=True)
    asking.start()
    time.sleep(0.3)
    report = gateway.close(session)
    asking.join(timeout=10)
    assert [credential(r) for r in server.model_requests()] == [KEY]
    assert report.calls[0]["refusal"] == REFUSED_TEXT and not report.calls[0]["refusal_fallback"]
    assert (report.counted.n_model_calls, report.counted.refusals) == (1, [REFUSED_TEXT])


def test_each_fallback_trigger_switches_on_its_own_cause_only(server: FakeModelServer, gateway: Gateway) -> None:
    """``rejected_key`` (the default) passes a refusal on; ``refusal`` passes a rejected key on."""
    server.refused_by.add(KEY)
    session = gateway.open({"anthropic": Upstream(server.url, (KEY, SPARE))})
    assert _ask_claude(gateway, session.token, False) == REFUSED_TEXT
    assert gateway.close(session).counted.refusals == [REFUSED_TEXT]
    server.refused_by.clear()
    server.rejected_credentials.add(KEY)
    session = gateway.open({"anthropic": Upstream(server.url, (KEY, SPARE), "refusal")})
    with pytest.raises(anthropic.AuthenticationError):
        _ask_claude(gateway, session.token, False)
    assert gateway.close(session).counted.key_fallbacks == 0
    assert [credential(r) for r in server.model_requests()] == [KEY, KEY]


def test_the_fallback_trigger_is_read_from_the_environment() -> None:
    environ = {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_API_KEY_FALLBACKS": json.dumps([SPARE])}
    assert upstreams_from(environ)["anthropic"].fallback_on == "rejected_key"
    both = upstreams_from({**environ, "ANTHROPIC_KEY_FALLBACK_ON": "both"})["anthropic"]
    assert (both.keys, both.fallback_on) == ((KEY, SPARE), "both")
    with pytest.raises(ValueError, match="ANTHROPIC_KEY_FALLBACK_ON must be one of rejected_key, refusal, both"):
        key_fallback_on("refusals")


@pytest.mark.parametrize(
    ("route", "stop", "expected"),
    [("anthropic", "refusal", "I can't help with that."), ("openai", "content_filter", "content_filter")],
)
def test_a_refusal_is_read_off_the_providers_reply(
    server: FakeModelServer, gateway: Gateway, route: str, stop: str, expected: str
) -> None:
    server.answer = lambda body: ("I can't help with that.", stop)
    session = gateway.open(upstreams(server))
    if route == "anthropic":
        client = anthropic.Anthropic(base_url=gateway.base_url("anthropic"), api_key=session.token)
        with client.messages.stream(
            model="claude-sonnet-4-5", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            stream.get_final_message()
    else:
        gpt = openai.OpenAI(base_url=gateway.base_url("openai"), api_key=session.token)
        gpt.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert gateway.close(session).counted.refusals == [expected]


def test_a_failed_call_is_passed_on_as_the_provider_answered_it(server: FakeModelServer, gateway: Gateway) -> None:
    server.fail(529, retry_after="7")
    session = gateway.open(upstreams(server))
    reply = httpx.post(
        gateway.base_url("anthropic") + "/v1/messages",
        headers={"x-api-key": session.token},
        json={"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert reply.status_code == 529 and reply.headers["retry-after"] == "7"
    report = gateway.close(session)
    assert report.counted.failed_calls == 1 and report.counted.n_model_calls == 0
    assert report.calls[0]["status"] == 529


def test_a_unit_gets_the_gateway_and_its_token_for_every_provider_variable(
    server: FakeModelServer, gateway: Gateway
) -> None:
    environ = {"ANTHROPIC_API_KEY": KEY, "OPENAI_API_KEY": KEY, "ANTHROPIC_BASE_URL": server.url}
    access = open_unit_access(
        gateway, {"base_url": server.url + "/v1"}, model="openai/gpt-4o", options=True, environ=environ
    )
    assert access.args == {"base_url": gateway.base_url("openai")}
    assert access.env["OPENAI_API_KEY"] == access.env["ANTHROPIC_API_KEY"] == access.session.token
    assert access.env["ANTHROPIC_BASE_URL"] == gateway.base_url("anthropic")
    assert KEY not in json.dumps(access.env) and server.url not in json.dumps(access.env)
    assert access.session.upstreams["openai"].base_url == server.url + "/v1"
    assert {"ANTHROPIC_API_KEY_FALLBACKS", "ANTHROPIC_AUTH_TOKEN", "GEMINI_API_KEY"} <= provider_variables()
    gateway.close(access.session)


def test_a_failure_worth_another_try_is_tried_again_unseen_by_the_unit(
    server: FakeModelServer, gateway: Gateway
) -> None:
    server.fail(529, 2, retry_after="0")
    session = gateway.open(upstreams(server), retry_s=30)
    gpt = openai.OpenAI(base_url=gateway.base_url("openai"), api_key=session.token, max_retries=0)
    assert gpt.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}]).choices
    report = gateway.close(session)
    assert len(server.model_requests()) == 3 and report.calls[0]["retries"] == 2
    assert report.counted.n_model_calls == 1 and report.counted.last_failure is None


@pytest.mark.parametrize(
    ("raised", "providers"),
    [
        (OSError(errno.EMFILE, "Too many open files"), False),
        (OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"), False),
        (ValueError("a fault of the gateway's own code"), False),
        (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), True),
    ],
    ids=["out of descriptors", "out of ports", "its own fault", "provider down"],
)
def test_only_a_provider_out_of_reach_is_its_failure_not_the_gateways_own(
    server: FakeModelServer, gateway: Gateway, monkeypatch: pytest.MonkeyPatch, raised: Exception, providers: bool
) -> None:
    """A unit holding thousands of connections to its gateway leaves the gateway's process no
    descriptor for the provider: that failure (and any of the gateway's own) is no provider's
    failure, which would excuse the unit's row under ``--errors exclude``."""

    async def failing(*args: object, **kwargs: object) -> None:
        if isinstance(raised, OSError):  # as aiohttp raises it: the system's error number kept
            raise aiohttp.ClientOSError(raised.errno, raised.strerror) from raised
        raise raised

    monkeypatch.setattr(gateway._client, "request", failing)
    session = gateway.open(upstreams(server))
    reply = httpx.post(
        gateway.base_url("anthropic") + "/v1/messages",
        headers={"x-api-key": session.token},
        json={"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
    )
    failure = gateway.close(session).counted.last_failure
    assert reply.status_code in (500, 502)
    assert (failure is not None and failure.code == "connection_error") is providers


@pytest.mark.parametrize(
    ("retry_s", "timeout_s", "hint"),
    [(0.0, None, "0"), (30.0, None, "3600"), (30.0, 1.0, "5")],
    ids=["no retries", "a hint past the retry time", "a hint past the unit's time"],
)
def test_a_failure_is_passed_on_at_once_where_waiting_cannot_help(
    server: FakeModelServer, gateway: Gateway, retry_s: float, timeout_s: float | None, hint: str
) -> None:
    server.fail(429, 5, retry_after=hint)
    session = gateway.open(upstreams(server), retry_s=retry_s, timeout_s=timeout_s)
    started = time.monotonic()
    reply = httpx.post(
        gateway.base_url("openai") + "/chat/completions",
        headers={"authorization": f"Bearer {session.token}"},
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert reply.status_code == 429 and time.monotonic() - started < 2
    report = gateway.close(session)
    assert report.counted.last_failure is not None and report.counted.last_failure.status == 429


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/files"),
        ("POST", "/batches"),
        ("GET", "/files"),
        ("DELETE", "/models/gpt-4o"),
        ("POST", "/fine_tuning/jobs"),
        ("POST", "/completions"),  # legacy: no agent program calls it; its replies are not read
        ("POST", "/files/chat/completions"),
        ("POST", "/messages/batches"),
        ("POST", "/chat/completions/"),
        # escapes that once read as one path and reached another: the relayed path is the one read
        ("POST", "/chat/completions%3Fx=/completions"),
        ("POST", "/chat/completions%23/completions"),
        ("POST", "/chat/completions%23/messages/count_tokens"),
        ("POST", "/chat%2Fcompletions"),
        ("GET", "/models/%2E%2E/files"),
        ("GET", "/models/../files"),
    ],
)
def test_only_model_calls_are_relayed_with_the_providers_key(
    server: FakeModelServer, gateway: Gateway, method: str, path: str
) -> None:
    """The provider's other APIs (files, batches, fine-tuning) would spend, or change, what no
    gateway counts: a unit's token opens only its model's replies and the list of models."""
    session = gateway.open(upstreams(server))
    reply = httpx.request(
        method, gateway.base_url("openai") + path, headers={"authorization": f"Bearer {session.token}"}
    )
    assert reply.status_code == 403 and "only model calls are relayed" in reply.text
    listed = httpx.get(gateway.base_url("openai") + "/models", headers={"authorization": f"Bearer {session.token}"})
    assert listed.status_code == 200
    gateway.close(session)
    assert [r.method for r in server.requests] == ["GET"]


SHELL_TOOL = {"name": "bash", "description": "Run a command", "input_schema": {"type": "object"}}


def test_cache_reads_and_writes_cost_their_own_prices(gateway: Gateway) -> None:
    """A tool-using turn whose prompt the provider read 600 tokens of from its cache and wrote
    200 to it: Anthropic reports them apart from its 1,000 fresh input tokens, OpenAI's
    Responses API counts the read ones among its 1,000 input tokens (it reports no writes).
    Each part is priced at the shipped table's price for it (claude-sonnet-4-5: 3 input, 0.30
    cache read, 3.75 cache write, 15 output; gpt-4o: 2.50 input, 1.25 cached, 10 output)."""
    message = [{"role": "user", "content": "list the folder"}]
    with FakeModelServer(script=[{"text": "done"}], cache_read_tokens=600, cache_write_tokens=200) as fake:
        session = gateway.open(upstreams(fake))
        claude = anthropic.Anthropic(base_url=gateway.base_url("anthropic"), api_key=session.token, max_retries=0)
        gpt = openai.OpenAI(base_url=gateway.base_url("openai"), api_key=session.token, max_retries=0)
        claude.messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=message, tools=[SHELL_TOOL])
        tool = {"type": "function", "name": "bash", "parameters": {"type": "object"}}
        gpt.responses.create(model="gpt-4o", input="list the folder", tools=[tool])  # type: ignore[list-item]
        report = gateway.close(session)
    sonnet, four_o = report.counted.by_model["claude-sonnet-4-5"], report.counted.by_model["gpt-4o"]
    assert (sonnet.usage.input_tokens, sonnet.usage.cache_read_tokens, sonnet.usage.cache_write_tokens) == (
        1800,
        600,
        200,
    )
    assert sonnet.cost_usd == pytest.approx((1000 * 3 + 600 * 0.3 + 200 * 3.75 + 50 * 15) / 1e6)
    assert (four_o.usage.input_tokens, four_o.usage.cache_read_tokens) == (1000, 600)
    assert four_o.cost_usd == pytest.approx((400 * 2.5 + 600 * 1.25 + 50 * 10) / 1e6)
    assert report.counted.cost_usd == pytest.approx(sonnet.cost_usd + four_o.cost_usd)
    # Anthropic's own input tokens leave its cache reads and writes out, OpenAI's do not: a
    # run summary takes those 800 out of the 2,800 again, also in a session resumed from it
    assert report.counted.cache_apart_tokens == 800
    resumed = gateway.open({})
    resumed.carry(report.counted, report.calls)
    assert gateway.close(resumed).counted.cache_apart_tokens == 800


#: a turn that wrote 1,000 prompt tokens to Anthropic's 1-hour cache and 400 to its 5-minute one
HOUR_CACHE_USAGE = {"input_tokens": 100, "output_tokens": 10, "cache_read_input_tokens": 0,
                    "cache_creation_input_tokens": 1400,
                    "cache_creation": {"ephemeral_5m_input_tokens": 400, "ephemeral_1h_input_tokens": 1000}}  # fmt: skip
HOUR_CACHE_MESSAGE = {"id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                      "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"}  # fmt: skip


async def hour_cache_reply(request: web.Request) -> web.StreamResponse:
    """The turn, as Anthropic answers it: one JSON reply, or a stream whose ``message_start``
    holds the usage (the cache writes among it) and whose ``message_delta`` the output tokens."""
    if not (await request.json()).get("stream"):
        return web.json_response({**HOUR_CACHE_MESSAGE, "usage": HOUR_CACHE_USAGE})
    start = {
        **HOUR_CACHE_MESSAGE,
        "content": [],
        "stop_reason": None,
        "usage": {**HOUR_CACHE_USAGE, "output_tokens": 1},
    }
    reply = await sse(
        request,
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "done"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 10}},
        {"type": "message_stop"},
    )
    await reply.write_eof()
    return reply


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
def test_writes_to_the_hour_long_cache_cost_twice_the_input_price(gateway: Gateway, streamed: bool) -> None:
    """Anthropic charges a 1-hour cache write twice the input price, a 5-minute one 1.25 times
    (claude-sonnet-4-5: 3 input, so 6 and 3.75): each part of the writes is priced as charged."""
    message = [{"role": "user", "content": "list the folder"}]
    with Provider({"/v1/messages": hour_cache_reply}) as provider:
        session = gateway.open({"anthropic": Upstream(provider.url, (KEY,))})
        claude = anthropic.Anthropic(base_url=gateway.base_url("anthropic"), api_key=session.token, max_retries=0)
        if streamed:
            with claude.messages.stream(model="claude-sonnet-4-5", max_tokens=50, messages=message) as stream:
                assert stream.get_final_text() == "done"
        else:
            claude.messages.create(model="claude-sonnet-4-5", max_tokens=50, messages=message)
        report = gateway.close(session)
    counted = report.counted
    assert (counted.usage.input_tokens, counted.usage.cache_write_tokens, counted.usage.output_tokens) == (
        1500,
        1400,
        10,
    )
    assert counted.cost_usd == pytest.approx((100 * 3 + 400 * 3.75 + 1000 * 6 + 10 * 15) / 1e6)
    assert report.calls[0]["cost_usd"] == pytest.approx(counted.cost_usd)


def test_a_resumed_session_keeps_its_earlier_parts_refusals_fallbacks_and_failures(
    server: FakeModelServer, gateway: Gateway
) -> None:
    """A session resumed on another node (from its checkpoint) starts from its earlier part's
    word: a refusal there, the keys it moved past, the calls that failed, stay the unit's."""
    server.rejected_credentials.add(KEY)
    server.answer = lambda body: ("I can't help with that.", "refusal")
    session = gateway.open(upstreams(server, KEY, SPARE))
    _ask_claude(gateway, session.token, True)
    server.fail(529)
    with pytest.raises(anthropic.APIStatusError):
        _ask_claude(gateway, session.token, False)
    earlier = gateway.close(session)
    assert (earlier.counted.refusals, earlier.counted.key_fallbacks, earlier.counted.failed_calls) == (
        ["I can't help with that."],
        1,
        1,
    )
    assert earlier.counted.last_failure is not None and earlier.counted.last_failure.status == 529
    resumed = gateway.open(upstreams(server, KEY, SPARE))
    resumed.carry(earlier.counted, earlier.calls)
    later = gateway.close(resumed)
    assert later.counted == earlier.counted


def test_a_report_for_a_checkpoint_holds_the_calls_being_settled() -> None:
    """A unit has a reply's last bytes before the gateway settles its call: a checkpoint it asks
    for at once (the report taken then) must count that call. The report waits for the calls
    being relayed, at most ``wait_s``, then is taken as it stands."""
    import asyncio

    with Gateway() as gateway:
        session = gateway.open({"openai": Upstream("http://127.0.0.1:9", ("sk-test",))})

        async def settling(seconds: float) -> None:
            await asyncio.sleep(seconds)
            session.model_calls += 1  # as the call's settling counts it

        async def relaying(seconds: float) -> None:  # a call being relayed: one of the session's tasks
            session.relays.add(asyncio.get_running_loop().create_task(settling(seconds)))

        loop = gateway._loop
        assert loop is not None
        for seconds in (0.3, 3.0):
            asyncio.run_coroutine_threadsafe(relaying(seconds), loop).result()
        started = time.monotonic()
        report = gateway.settled_report(session, wait_s=1.0)
        assert report.counted.n_model_calls == 1 and 1.0 <= time.monotonic() - started < 2.5
        assert gateway.close(session).counted.n_model_calls == 2


def test_a_report_for_a_checkpoint_is_taken_as_it_stands_once_the_gateway_stopped() -> None:
    """The gateway stopping with a call of the unit in flight never leaves the unit's thread
    waiting for its checkpoint's report."""
    import asyncio

    gateway = Gateway().start()
    session = gateway.open({"openai": Upstream("http://127.0.0.1:9", ("sk-test",))})

    async def relaying() -> None:
        session.relays.add(asyncio.get_running_loop().create_task(asyncio.sleep(3600)))

    loop = gateway._loop
    assert loop is not None
    asyncio.run_coroutine_threadsafe(relaying(), loop).result()
    reports: list[object] = []
    waiting = threading.Thread(target=lambda: reports.append(gateway.settled_report(session, wait_s=2.0)))
    waiting.start()
    time.sleep(0.3)
    gateway.stop()
    waiting.join(timeout=10)
    assert not waiting.is_alive() and len(reports) == 1
