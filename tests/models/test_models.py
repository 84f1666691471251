"""rayeval.models against the loopback server: both APIs, settings, retries, errors, costs,
the response cache and the request limit."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from pathlib import Path

import pytest

from rayeval.models import PROVIDERS, ModelError, RetryPolicy, get_model
from rayeval.models.prices import Price, cost_usd
from rayeval.models.retry import retry_after_s
from rayeval.models.types import Usage
from tests.agents.fake_model_server import FakeModelServer
from tests.fixtures_s3 import S3Bucket

from .conftest import ANTHROPIC_KEY, OPENAI_KEY

FAST_RETRIES = RetryPolicy(backoff_s=0.05, max_backoff_s=0.2)


def test_openai_chat_with_settings(server: FakeModelServer) -> None:
    model = get_model(
        "openai/gpt-4o",
        base_url=f"{server.url}/v1",
        temperature=0.2,
        max_tokens=64,
        seed=7,
        stop=["END"],
    )
    output = model.generate("Say hi", top_p=0.5)
    request = server.model_requests()[-1]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert request.body == {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "Say hi"}],
        "temperature": 0.2,
        "max_tokens": 64,
        "seed": 7,
        "stop": ["END"],
        "top_p": 0.5,
    }
    assert output.text == "reply to 1 message(s)"
    assert (output.stop_reason, output.input_tokens, output.output_tokens) == (
        "stop",
        1200,
        300,
    )
    assert output.cost_usd == pytest.approx((1200 * 2.5 + 300 * 10.0) / 1e6)
    assert (output.attempts, output.cached, output.model) == (1, False, "openai/gpt-4o")


def test_anthropic_messages_with_a_system_message(server: FakeModelServer) -> None:
    model = get_model("anthropic/claude-sonnet-4-5-20250929", base_url=server.url, temperature=0.0)
    output = model.generate(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        stop=["X"],
    )
    request = server.model_requests()[-1]
    assert request.path == "/v1/messages"
    sent = request.headers.get("x-api-key") or request.headers["authorization"].removeprefix("Bearer ")
    assert sent == ANTHROPIC_KEY
    assert request.body == {
        "model": "claude-sonnet-4-5-20250929",
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 4096,
        "temperature": 0.0,  # sent although the SDK no longer names it
        "stop_sequences": ["X"],
    }
    assert (
        output.text,
        output.stop_reason,
        output.input_tokens,
        output.output_tokens,
    ) == ("reply to 1 message(s)", "end_turn", 1200, 300)
    assert output.cost_usd == pytest.approx((1200 * 3.0 + 300 * 15.0) / 1e6)  # the dated id priced as its model


def test_provider_specific_fields_are_sent_as_they_are(server: FakeModelServer) -> None:
    thinking = {"type": "enabled", "budget_tokens": 1024}
    output_config = {"format": {"type": "json_schema", "schema": {"type": "object"}}}
    model = get_model("anthropic/claude-haiku-4-5", base_url=server.url, temperature=0.5)
    model.generate("Hi", extra_body={"thinking": thinking, "output_config": output_config})
    body = server.model_requests()[-1].body
    assert (body["thinking"], body["output_config"], body["temperature"]) == (thinking, output_config, 0.5)
    response_format = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    get_model("openai/gpt-4o", base_url=f"{server.url}/v1").generate(
        "Hi", extra_body={"response_format": response_format}
    )
    assert server.model_requests()[-1].body["response_format"] == response_format


def test_base_url_from_the_sdk_variable(server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
    assert get_model("openai/gpt-4o-mini").generate("hi").text == "reply to 1 message(s)"


def test_an_installed_package_offers_a_provider_by_entry_point(
    server: FakeModelServer, install_plugin, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = (
        "from rayeval.models.providers import Provider\n"
        "plugin = Provider('together', 'openai', 'TOGETHER_API_KEY', 'TOGETHER_BASE_URL')\n"
    )
    install_plugin(PROVIDERS, "together", "my_plugin_providers", source)
    monkeypatch.setenv("TOGETHER_API_KEY", "together-key")
    monkeypatch.setenv("TOGETHER_BASE_URL", f"{server.url}/v1")
    assert get_model("together/llama-3").generate("hi").text == "reply to 1 message(s)"
    assert server.model_requests()[-1].headers["authorization"] == "Bearer together-key"


def test_429_waits_for_retry_after_then_succeeds(server: FakeModelServer) -> None:
    server.fail(429, count=2, retry_after="0.5")
    output = get_model("openai/gpt-4o", base_url=f"{server.url}/v1", retry_policy=FAST_RETRIES).generate("hi")
    times = [r.at for r in server.model_requests()]
    assert output.attempts == 3 and len(times) == 3
    # the server's 0.5 s, not the policy's 0.05 s backoff (loose: never an upper bound)
    assert times[1] - times[0] >= 0.45 and times[2] - times[1] >= 0.45


def test_500_then_success_and_anthropic_overloaded(server: FakeModelServer) -> None:
    server.fail(500)
    assert (
        get_model("openai/gpt-4o", base_url=f"{server.url}/v1", retry_policy=FAST_RETRIES).generate("hi").attempts == 2
    )
    server.fail(529)
    assert (
        get_model("anthropic/claude-haiku-4-5", base_url=server.url, retry_policy=FAST_RETRIES).generate("hi").attempts
        == 2
    )


def test_retries_are_bounded(server: FakeModelServer) -> None:
    server.fail(503, count=10)
    policy = RetryPolicy(max_attempts=3, backoff_s=0.01, max_backoff_s=0.01)
    with pytest.raises(ModelError, match=r"HTTP 503 after 3 tries") as raised:
        get_model("openai/gpt-4o", base_url=f"{server.url}/v1", retry_policy=policy).generate("hi")
    assert len(server.model_requests()) == 3
    assert raised.value.transient  # worth trying again later


@pytest.mark.parametrize("status", [400, 401])
def test_client_errors_fail_at_once_without_the_key(
    server: FakeModelServer, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    server.echo_credential = True  # the error body repeats the key the client sent
    server.fail(status)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ModelError) as raised:
        get_model("openai/gpt-4o", base_url=f"{server.url}/v1", retry_policy=FAST_RETRIES).generate("hi")
    assert len(server.model_requests()) == 1
    assert not raised.value.transient
    message = str(raised.value)
    assert f"HTTP {status}" in message and "openai/gpt-4o" in message and "***" in message
    assert OPENAI_KEY not in message and OPENAI_KEY not in caplog.text


def test_retried_errors_are_logged_without_the_key(server: FakeModelServer, caplog: pytest.LogCaptureFixture) -> None:
    server.echo_credential = True
    server.fail(429, retry_after="0")
    caplog.set_level(logging.DEBUG)
    get_model("anthropic/claude-haiku-4-5", base_url=server.url, retry_policy=FAST_RETRIES).generate("hi")
    assert "HTTP 429" in caplog.text and ANTHROPIC_KEY not in caplog.text


def test_connection_errors_are_retried_then_reported() -> None:
    policy = RetryPolicy(max_attempts=2, backoff_s=0.01)
    with FakeModelServer(script=[]) as gone:
        url = f"{gone.url}/v1"
    with pytest.raises(ModelError, match="connection failed after 2 tries") as raised:
        get_model("openai-compatible/llama", base_url=url, retry_policy=policy).generate("hi")
    assert raised.value.transient


def test_names_keys_and_settings_are_checked(keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(
        ModelError,
        match=r"unknown provider 'gemini' \(known: openai, openai-compatible, anthropic\)",
    ):
        get_model("gemini/gemini-2.5-pro")
    with pytest.raises(ModelError, match="expected provider/model"):
        get_model("gpt-4o")
    with pytest.raises(
        ModelError,
        match="generation setting temperature: Input should be less than or equal to 2",
    ):
        get_model("openai/gpt-4o", temperature=3)
    with pytest.raises(ModelError, match="needs an API key in the environment variable MY_KEY"):
        get_model("openai/gpt-4o", api_key_env="MY_KEY")
    monkeypatch.delenv("OPENAI_API_KEY")
    get_model("openai-compatible/llama", base_url="http://127.0.0.1:9/v1")  # a local server may take no key


def test_retry_after_forms() -> None:
    assert retry_after_s({"Retry-After": "3"}) == 3.0
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10.0
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({}) is None


def test_prices_from_the_table_an_override_and_unknown_models(server: FakeModelServer, tmp_path: Path) -> None:
    url = f"{server.url}/v1"
    override = {
        "openai/gpt-4o": {"input": 1.0, "output": 2.0},
        "openai-compatible/llama": {"input": 0.5, "output": 0.5},
    }
    assert get_model("openai/gpt-4o", base_url=url, prices=override).generate("a").cost_usd == pytest.approx(
        (1200 + 600) / 1e6
    )
    price_file = tmp_path / "prices.json"
    price_file.write_text(json.dumps(override))
    assert get_model("openai-compatible/llama", base_url=url, prices=price_file).generate(
        "a"
    ).cost_usd == pytest.approx(1500 * 0.5 / 1e6)
    unknown = get_model("openai-compatible/my-finetune", base_url=url).generate("a")
    assert unknown.cost_usd is None and (
        unknown.input_tokens,
        unknown.output_tokens,
    ) == (1200, 300)
    price_file.write_text(json.dumps({"openai/gpt-4o": {"input": -1, "output": 2}}))
    with pytest.raises(
        ModelError,
        match=r"price file .*prices.json: openai/gpt-4o.input: Input should be greater than or equal to 0",
    ):
        get_model("openai/gpt-4o", base_url=url, prices=price_file)


def test_cached_prompt_tokens_cost_the_cache_prices_the_table_has() -> None:
    """``input_tokens`` holds every prompt token: those read from or written to the cache are
    priced apart where the price has a cache price for them, else as any input token."""
    usage = Usage(input_tokens=1000, output_tokens=100, cache_read_tokens=600, cache_write_tokens=200)
    both = Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    assert cost_usd(both, usage) == pytest.approx((200 * 3.0 + 600 * 0.3 + 200 * 3.75 + 100 * 15.0) / 1e6)
    reads_only = Price(input=2.5, output=10.0, cache_read=1.25)
    assert cost_usd(reads_only, usage) == pytest.approx((400 * 2.5 + 600 * 1.25 + 100 * 10.0) / 1e6)
    plain = Price(input=2.5, output=10.0)
    assert cost_usd(plain, usage) == pytest.approx((1000 * 2.5 + 100 * 10.0) / 1e6)
    # cached counts a provider reported past its prompt's: no negative fresh input
    assert cost_usd(both, Usage(input_tokens=10, output_tokens=0, cache_read_tokens=50)) == pytest.approx(
        50 * 0.3 / 1e6
    )
    assert cost_usd(plain, Usage(input_tokens=None, output_tokens=5)) is None
    assert cost_usd(None, usage) is None


def _cached_twice(server: FakeModelServer, cache: str, **options: object) -> None:
    model = get_model(
        "openai/gpt-4o",
        base_url=f"{server.url}/v1",
        cache=cache,
        temperature=0,
        **options,
    )
    first = model.generate("What is 2 + 2?")
    again = model.generate("What is 2 + 2?")
    assert len(server.model_requests()) == 1
    assert first.cached is False and first.cost_usd and first.cost_usd > 0
    assert again.cached is True and again.cost_usd == 0.0 and again.attempts == 0
    assert (again.text, again.input_tokens, again.output_tokens) == (
        first.text,
        first.input_tokens,
        first.output_tokens,
    )
    model.generate("What is 2 + 2?", temperature=0.5)  # other settings: another request
    model.generate("What is 3 + 3?")
    assert len(server.model_requests()) == 3


def test_local_cache_answers_without_a_call(server: FakeModelServer, tmp_path: Path) -> None:
    _cached_twice(server, str(tmp_path / "responses"))
    entries = list((tmp_path / "responses").rglob("*.json"))
    assert len(entries) == 3 and not list((tmp_path / "responses").rglob("*.partial"))
    stored = json.loads(entries[0].read_text())
    assert stored["output"]["cost_usd"] > 0  # the original cost stays in the entry
    assert OPENAI_KEY not in entries[0].read_text() + entries[1].read_text() + entries[2].read_text()


def test_a_broken_cache_entry_is_a_miss(server: FakeModelServer, tmp_path: Path) -> None:
    model = get_model("openai/gpt-4o", base_url=f"{server.url}/v1", cache=str(tmp_path))
    model.generate("hi")
    (entry,) = tmp_path.rglob("*.json")
    entry.write_text('{"key": "garbage"')
    assert model.generate("hi").cached is False
    assert model.generate("hi").cached is True  # rewritten
    assert len(server.model_requests()) == 2


def test_s3_cache_answers_without_a_call(server: FakeModelServer, s3_bucket: S3Bucket, aws_credentials: None) -> None:
    _cached_twice(server, s3_bucket.uri("responses"), s3_endpoint_url=s3_bucket.endpoint_url)
    listed = s3_bucket.client.list_objects_v2(Bucket=s3_bucket.name, Prefix="responses/")
    assert len(listed["Contents"]) == 3


def test_requests_in_flight_stay_within_the_limit(server: FakeModelServer) -> None:
    server.delay_s = 0.2
    model = get_model("anthropic/claude-haiku-4-5", base_url=server.url, max_connections=3)
    threads = [threading.Thread(target=model.generate, args=(f"q{i}",)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(server.model_requests()) == 12
    assert server.max_in_flight == 3


def test_agenerate_calls_at_once_from_one_event_loop(server: FakeModelServer) -> None:
    server.delay_s = 0.3
    model = get_model("openai/gpt-4o", base_url=f"{server.url}/v1")

    async def ask() -> list[str]:
        outputs = await asyncio.gather(*(model.agenerate(f"q{i}") for i in range(4)))
        return [output.text for output in outputs]

    assert asyncio.run(ask()) == ["reply to 1 message(s)"] * 4
    assert server.max_in_flight == 4
