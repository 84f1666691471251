"""Replies that end before their usage would be read: a provider's stream that breaks off, a
unit that hangs up on one, an OpenAI stream that reports usage only when asked, a reply too big
to read whole, and a unit's calls after one whose usage went unseen. The official
SDKs call the gateway; a loopback provider (aiohttp, on a thread of its own) answers as the
test scripts it, down to closing its connection mid-stream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from aiohttp import web

from rayeval.cli import main
from rayeval.gateway import accounting
from rayeval.gateway.server import CallLimits, Gateway, Upstream
from tests.gateway.provider import ChargedBudget, Provider, sse

#: claude-sonnet-4-5 at 3 and 15 USD per million tokens (the shipped price table)
SONNET_IN, SONNET_OUT = 3 / 1e6, 15 / 1e6


MESSAGE_START = {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant",
                 "model": "claude-sonnet-4-5", "content": [], "usage": {"input_tokens": 100000, "output_tokens": 1}}}  # fmt: skip
TEXT = [
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x" * 1000}},
]


async def broken_after_message_start(request: web.Request) -> web.StreamResponse:
    """A provider that answers 200, streams ``message_start`` and some text, then hangs up."""
    reply = await sse(request, MESSAGE_START, *TEXT)
    await asyncio.sleep(0.2)
    assert request.transport is not None
    request.transport.close()
    return reply


def test_a_stream_the_provider_breaks_off_is_counted_with_what_was_seen_and_failed(gateway: Gateway) -> None:
    """The provider's connection breaks after ``message_start`` (100,000 input tokens): the
    call is counted and priced with them, it is a failed call, and the unit's stream breaks."""

    with Provider({"/v1/messages": broken_after_message_start}) as provider:
        session = gateway.open({"anthropic": Upstream(provider.url, ("sk-key",))})
        claude = anthropic.Anthropic(base_url=gateway.base_url("anthropic"), api_key=session.token, max_retries=0)
        with pytest.raises((httpx.HTTPError, anthropic.APIError)):
            message = [{"role": "user", "content": "hi"}]
            for _ in claude.messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=message, stream=True):
                pass
        report = gateway.close(session)
    counted = report.counted
    assert (counted.n_model_calls, counted.usage.input_tokens, counted.failed_calls) == (1, 100000, 1)
    assert counted.cost_usd == pytest.approx(100000 * SONNET_IN + 1 * SONNET_OUT)
    assert "the provider's reply ended early" in report.calls[0]["error"]


USAGE = {"prompt_tokens": 1000, "completion_tokens": 50000, "total_tokens": 51000}
#: gpt-4o at 2.50 and 10 USD per million tokens (the shipped price table)
GPT_4O_COST = (1000 * 2.5 + 50000 * 10) / 1e6


async def chat_stream(request: web.Request) -> web.StreamResponse:
    """OpenAI's way: a stream's usage comes in a last chunk of its own, only when asked for."""
    body = await request.json()
    chunk = {"id": "c", "object": "chat.completion.chunk", "model": "gpt-4o",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}]}  # fmt: skip
    reply = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await reply.prepare(request)
    await reply.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    if (body.get("stream_options") or {}).get("include_usage"):
        await reply.write(b"data: " + json.dumps({**chunk, "choices": [], "usage": USAGE}).encode() + b"\n\n")
    await reply.write(b"data: [DONE]\n\n")
    return reply


@pytest.mark.parametrize("asked", [False, True], ids=["sdk-default", "include-usage"])
def test_a_chat_stream_is_counted_and_the_unit_gets_the_chunks_it_asked_for(gateway: Gateway, asked: bool) -> None:
    """The SDK's default stream asks for no usage: the gateway asks the provider for it, counts
    it, and passes the unit the stream without it, as the provider would have sent it."""
    with Provider({"/v1/chat/completions": chat_stream}) as provider:
        session = gateway.open({"openai": Upstream(provider.url + "/v1", ("sk-key",))})
        gpt = openai.OpenAI(base_url=gateway.base_url("openai"), api_key=session.token, max_retries=0)
        options: dict[str, Any] = {"stream_options": {"include_usage": True}} if asked else {}
        message = [{"role": "user", "content": "hi"}]
        chunks = list(gpt.chat.completions.create(model="gpt-4o", messages=message, stream=True, **options))  # type: ignore[arg-type]
        report = gateway.close(session)
    assert provider.seen[0]["stream_options"] == {"include_usage": True}
    assert [chunk.usage is not None for chunk in chunks] == ([False, True] if asked else [False])
    counted = report.counted
    assert (counted.n_model_calls, counted.usage.input_tokens, counted.usage.output_tokens) == (1, 1000, 50000)
    assert counted.cost_usd == pytest.approx(GPT_4O_COST)


RESPONSE_STARTED = {"type": "response.created", "response": {"model": "gpt-4o", "status": "in_progress", "usage": None}}
#: by wire protocol: its route, the path a unit posts, the events before it hangs up, the one
#: after that holds the output tokens, and the cost of the whole reply
HANG_UPS: dict[str, tuple[str, str, list[dict[str, Any]], dict[str, Any], float]] = {
    "anthropic": (
        "anthropic",
        "/v1/messages",
        [MESSAGE_START, *TEXT],
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 50000}},
        100000 * SONNET_IN + 50000 * SONNET_OUT,
    ),
    "responses": (
        "openai",
        "/responses",
        [RESPONSE_STARTED, {"type": "response.output_text.delta", "delta": "x" * 1000}],
        {
            "type": "response.completed",
            "response": {
                "model": "gpt-4o",
                "status": "completed",
                "usage": {"input_tokens": 1000, "output_tokens": 50000},
            },
        },
        GPT_4O_COST,
    ),
}


@pytest.mark.parametrize("protocol", HANG_UPS)
def test_a_stream_the_unit_hangs_up_on_is_read_to_its_end_for_its_usage(gateway: Gateway, protocol: str) -> None:
    """An agent that closes its stream once it has its text, before the event that holds the
    output tokens: the gateway reads the rest, and counts all 50,000 of them."""
    route, path, before, usage, cost = HANG_UPS[protocol]

    async def slow_end(request: web.Request) -> web.StreamResponse:
        reply = await sse(request, *before)
        await asyncio.sleep(0.5)  # the unit hangs up meanwhile
        for _ in range(20):  # past what one write to a closed connection takes to notice
            await reply.write(b"event: ping\ndata: " + json.dumps({"type": "ping"}).encode() + b"\n\n")
        await reply.write(b"event: " + usage["type"].encode() + b"\ndata: " + json.dumps(usage).encode() + b"\n\n")
        return reply

    base_path = "" if route == "anthropic" else "/v1"  # the upstream base URL's path
    with Provider({base_path + path: slow_end}) as provider:
        session = gateway.open({route: Upstream(provider.url + base_path, ("sk-key",))})
        request = {"model": "claude-sonnet-4-5" if route == "anthropic" else "gpt-4o", "stream": True}
        headers = {"x-api-key": session.token}
        with httpx.stream("POST", gateway.base_url(route) + path, headers=headers, json=request) as reply:
            next(reply.iter_bytes())  # the text came: the unit goes
        report = gateway.close(session)
    counted = report.counted
    assert (counted.n_model_calls, counted.usage.output_tokens, counted.failed_calls) == (1, 50000, 0)
    assert counted.cost_usd == pytest.approx(cost)


def test_a_reply_whose_usage_was_not_seen_has_an_unknown_cost(gateway: Gateway) -> None:
    """A reply without its usage is not free: its cost, and its unit's, are unknown (None)."""

    async def no_usage(request: web.Request) -> web.StreamResponse:
        return web.json_response({"id": "c", "object": "chat.completion", "model": "gpt-4o",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}]})  # fmt: skip

    with Provider({"/v1/chat/completions": no_usage}) as provider:
        session = gateway.open({"openai": Upstream(provider.url + "/v1", ("sk-key",))})
        gpt = openai.OpenAI(base_url=gateway.base_url("openai"), api_key=session.token, max_retries=0)
        gpt.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        report = gateway.close(session)
    assert (report.counted.n_model_calls, report.counted.cost_usd) == (1, None)
    assert report.counted.by_model["gpt-4o"].cost_usd is None and report.calls[0]["cost_usd"] is None


#: a reply's output log probabilities, about 1 MB, spelling a usage of their own in their text
LOGPROBS = [{"token": '"usage": {"prompt_tokens": 0}}\\', "logprob": -0.1,
             "top_logprobs": [{"token": '}]{["usage":', "logprob": -3.0}] * 20}] * 1000  # fmt: skip
#: by wire protocol: its route, the path a unit posts, a big reply with its usage where the
#: provider puts it (at its end, or before keys of the unit's own), and the cost of that usage
BIG_REPLIES: dict[str, tuple[str, str, dict[str, Any], float]] = {
    "chat": ("openai", "/chat/completions", {"id": "c", "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": i, "message": {"role": "assistant", "content": "x"}, "logprobs": {"content": LOGPROBS},
                     "finish_reason": "stop"} for i in range(2)],
        "usage": USAGE, "system_fingerprint": "fp"}, GPT_4O_COST),
    "anthropic": ("anthropic", "/v1/messages", {"id": "m", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": json.dumps(LOGPROBS)}],
        "stop_reason": "end_turn", "stop_sequence": None, "usage": {"input_tokens": 100000, "output_tokens": 50000}},
        100000 * SONNET_IN + 50000 * SONNET_OUT),
    "responses": ("openai", "/responses", {"id": "r", "object": "response", "status": "completed", "model": "gpt-4o",
        "output": [{"type": "message", "content": [{"type": "output_text", "text": "x", "logprobs": LOGPROBS}]}],
        "usage": {"input_tokens": 1000, "output_tokens": 50000}, "user": None, "metadata": {"usage": "{}"}},
        GPT_4O_COST),
}  # fmt: skip


@pytest.mark.parametrize("protocol", BIG_REPLIES)
def test_a_reply_too_big_to_read_whole_is_counted_from_its_tail(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch, protocol: str
) -> None:
    """A reply past what is read whole (here 256 KiB: 64 MiB as shipped; a unit makes one that big
    with ``n`` and ``logprobs``) has its usage read off its last bytes (here 64 KiB), the
    provider's own at the top level of its JSON, not one its text spells."""
    monkeypatch.setattr(accounting, "MAX_JSON_BYTES", 256 << 10)
    monkeypatch.setattr(accounting, "TAIL_BYTES", 64 << 10)
    route, path, body, cost = BIG_REPLIES[protocol]
    sent = json.dumps(body).encode()
    assert len(sent) > 3 * accounting.MAX_JSON_BYTES

    async def big(request: web.Request) -> web.StreamResponse:
        return web.Response(body=sent, content_type="application/json")

    base_path = "" if route == "anthropic" else "/v1"
    with Provider({base_path + path: big}) as provider:
        session = gateway.open({route: Upstream(provider.url + base_path, ("sk-key",))}, CallLimits(cost_usd=1.0))
        request = {"model": body["model"], "max_tokens": 10}
        headers = {"x-api-key": session.token}
        reply = httpx.post(gateway.base_url(route) + path, headers=headers, json=request)
        report = gateway.close(session)
    assert reply.status_code == 200 and reply.content == sent
    counted = report.counted
    assert (counted.n_model_calls, counted.usage.output_tokens, counted.unseen_usage_calls) == (1, 50000, 0)
    assert counted.cost_usd == pytest.approx(cost) and report.calls[0]["model"] == body["model"]


@pytest.mark.parametrize(
    ("limits", "budget", "limit"),
    [(CallLimits(cost_usd=1.0), False, "cost"), (CallLimits(tokens=10**6), False, "tokens"),
     (CallLimits(), True, "cost"), (CallLimits(model_calls=10), False, None)],
    ids=["cost", "tokens", "run-budget", "no-spend-limit"],
)  # fmt: skip
def test_after_a_call_whose_usage_was_not_seen_a_spend_limited_unit_is_refused(
    gateway: Gateway, limits: CallLimits, budget: bool, limit: str | None
) -> None:
    """Its spend is unknown: a unit with a limit on its tokens or cost, or under a run's budget,
    has its further calls refused, as past that limit (fail closed), never let through uncounted."""

    async def no_usage(request: web.Request) -> web.StreamResponse:
        return web.json_response({"id": "c", "object": "chat.completion", "model": "gpt-4o",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}]})  # fmt: skip

    with Provider({"/v1/chat/completions": no_usage}) as provider:
        upstreams = {"openai": Upstream(provider.url + "/v1", ("sk-key",))}
        session = gateway.open(upstreams, limits, budget=ChargedBudget() if budget else None)
        gpt = openai.OpenAI(base_url=gateway.base_url("openai"), api_key=session.token, max_retries=0)
        for _ in range(2):
            with contextlib.suppress(openai.BadRequestError):
                gpt.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        report = gateway.close(session)
    assert len(provider.seen) == (1 if limit else 2)
    counted = report.counted
    assert (counted.limit_reached, counted.unseen_usage_calls, counted.cost_usd) == (limit, len(provider.seen), None)
    if limit:
        assert "went uncounted" in report.calls[1]["error"] and report.calls[1]["limit"] == limit


def test_a_stream_the_provider_breaks_off_before_its_usage_leaves_a_spend_limited_unit_its_calls(
    gateway: Gateway,
) -> None:
    """The provider's break-off is no doing of the unit's: its cost is unknown, and its further
    calls go on (a unit under a budget is not ended by its provider's fault)."""

    async def broken_chat(request: web.Request) -> web.StreamResponse:
        if len(provider.seen) > 1:
            return await chat_stream(request)
        chunk = {"id": "c", "object": "chat.completion.chunk", "model": "gpt-4o",
                 "choices": [{"index": 0, "delta": {"role": "assistant", "content": "x"}}]}  # fmt: skip
        reply = await sse(request, chunk)
        await asyncio.sleep(0.2)
        assert request.transport is not None
        request.transport.close()
        return reply

    with Provider({"/v1/chat/completions": broken_chat}) as provider:
        upstreams = {"openai": Upstream(provider.url + "/v1", ("sk-key",))}
        session = gateway.open(upstreams, CallLimits(cost_usd=1.0), budget=ChargedBudget())
        gpt = openai.OpenAI(base_url=gateway.base_url("openai"), api_key=session.token, max_retries=0)
        with pytest.raises((httpx.HTTPError, openai.APIError)):
            for _ in gpt.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
            ):
                pass
        gpt.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True)
        report = gateway.close(session)
    counted = report.counted
    assert len(provider.seen) == 2 and (counted.limit_reached, counted.unseen_usage_calls) == (None, 0)
    assert counted.n_model_calls == 2 and counted.cost_usd is None


def test_a_unit_that_hangs_up_and_goes_at_once_keeps_the_call_in_its_row(gateway: Gateway) -> None:
    """An agent hangs up on a stream whose usage comes 3 s later, and ends: its session's report,
    taken when it closes, holds the call with all its tokens, and the run's budget was charged
    what the report says, nothing more after it."""

    async def late_usage(request: web.Request) -> web.StreamResponse:
        reply = await sse(request, MESSAGE_START, *TEXT)
        await asyncio.sleep(3.0)
        end = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 50000}}
        await reply.write(b"event: message_delta\ndata: " + json.dumps(end).encode() + b"\n\n")
        return reply

    budget = ChargedBudget()
    with Provider({"/v1/messages": late_usage}) as provider:
        session = gateway.open({"anthropic": Upstream(provider.url, ("sk-key",))}, budget=budget)
        request = {"model": "claude-sonnet-4-5", "stream": True}
        with httpx.stream("POST", gateway.base_url("anthropic") + "/v1/messages", headers={"x-api-key": session.token}, json=request) as reply:  # fmt: skip
            next(reply.iter_bytes())
        report = gateway.close(session)
        time.sleep(0.5)
    counted = report.counted
    assert (counted.n_model_calls, counted.usage.output_tokens, counted.failed_calls) == (1, 50000, 0)
    assert counted.cost_usd == pytest.approx(100000 * SONNET_IN + 50000 * SONNET_OUT)
    assert sum(budget.charged) == pytest.approx(counted.cost_usd)


def test_a_call_still_in_flight_at_the_units_deadline_is_cut_off_and_counted(gateway: Gateway) -> None:
    """The provider has not answered when the unit's time is up: closing its session cuts the
    call off there (not after the read-on limit), and its report counts it, its cost unknown
    (None, never 0), a failed call that is not the provider's failure."""

    async def late(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(4.0)
        return web.json_response({})

    budget = ChargedBudget()
    with Provider({"/v1/messages": late}) as provider:
        session = gateway.open({"anthropic": Upstream(provider.url, ("sk-key",))}, budget=budget, timeout_s=1.5)
        claude = anthropic.Anthropic(base_url=gateway.base_url("anthropic"), api_key=session.token, max_retries=0)
        with pytest.raises(anthropic.APITimeoutError):
            claude.messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=[{"role": "user", "content": "hi"}], timeout=0.3)  # fmt: skip
        started = time.monotonic()
        report = gateway.close(session)
        assert time.monotonic() - started < 5
    counted = report.counted
    assert (counted.n_model_calls, counted.cost_usd, counted.failed_calls, counted.last_failure) == (1, None, 1, None)
    assert "cut off" in report.calls[0]["error"] and budget.charged == []


def test_a_unit_that_crashes_on_a_stream_its_provider_broke_off_is_the_providers_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``rayeval run-one``: the agent's SDK raises when the provider breaks its stream off after
    200, and the agent with it: the row is the provider's failure as the gateway saw it (a
    502, worth another try), the agent's own error kept beside it."""

    grader = {"type": "numeric_tolerance", "config": {"ground_truth": {"value": 1},
              "tolerances": {"value": {"type": "absolute", "value": 0}}}}  # fmt: skip
    eval_file = tmp_path / "e.json"
    eval_file.write_text(json.dumps({"id": "e", "task": "Answer.", "grader": grader}))
    with Provider({"/v1/messages": broken_after_message_start}) as provider:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", provider.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
        main(["run-one", str(eval_file), "--agent", "tests.gateway.limit_agents:stream_once"])
    row = json.loads(capsys.readouterr().out)
    assert (row["status"], row["error_type"]) == ("error", "ProviderError"), row["error_message"]
    details = row["metadata"]["error_details"]
    assert (details["status"], details["code"], details["seen_by"]) == (502, "server_error", "gateway")
    assert "the provider's reply ended early" in details["message"] and details["agent_error"]
    assert (row["n_model_calls"], row["input_tokens"]) == (1, 100000)


#: the rest of a whole Anthropic stream after ``MESSAGE_START`` and ``TEXT``: its output tokens, its end
STREAM_END = [
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 50}},
    {"type": "message_stop"},
]


@pytest.mark.parametrize(("retry_s", "served"), [(30.0, 2), (0.0, 1)], ids=["retried", "no-retry-time"])
def test_a_held_reply_the_provider_breaks_off_is_tried_again_within_the_retry_time(
    gateway: Gateway, retry_s: float, served: int
) -> None:
    """With a spare key for refusals, a reply is read whole before the unit gets any of it:
    one the provider breaks off (after ``message_start``: 100,000 input tokens) is tried again,
    as a 5xx is, and the unit gets the whole reply of the next try. Both calls are counted as
    the gateway saw them, the broken one failed; without retry time, the unit gets a 502."""
    replies = [broken_after_message_start]

    async def broken_once(request: web.Request) -> web.StreamResponse:
        if replies:
            return await replies.pop()(request)
        reply = await sse(request, MESSAGE_START, *TEXT, *STREAM_END)
        await reply.write_eof()
        return reply

    with Provider({"/v1/messages": broken_once}) as provider:
        upstream = Upstream(provider.url, ("sk-key", "sk-spare"), "refusal")
        session = gateway.open({"anthropic": upstream}, retry_s=retry_s)
        request = {"model": "claude-sonnet-4-5", "max_tokens": 10, "stream": True,
                   "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
        reply = httpx.post(gateway.base_url("anthropic") + "/v1/messages", headers={"x-api-key": session.token}, json=request)  # fmt: skip
        report = gateway.close(session)
    assert len(provider.seen) == served
    counted = report.counted
    if served == 1:
        assert reply.status_code == 502 and "the provider's reply ended early" in reply.text
        assert (counted.n_model_calls, counted.failed_calls, counted.usage.input_tokens) == (1, 1, 100000)
        return
    assert reply.status_code == 200 and "x" * 1000 in reply.text and '"message_stop"' in reply.text
    assert (counted.n_model_calls, counted.failed_calls, counted.last_failure) == (2, 1, None)
    assert (counted.usage.input_tokens, counted.usage.output_tokens) == (200000, 1 + 50)
    assert counted.cost_usd == pytest.approx(200000 * SONNET_IN + 51 * SONNET_OUT)
    assert [call["cut_short_by"] for call in report.calls] == ["provider", None]
    assert [call["retries"] for call in report.calls] == [1, 0]


async def error_begun(request: web.Request) -> web.StreamResponse:
    """A provider that answers 500 and begins its error body, then sends no more of it."""
    reply = web.StreamResponse(status=500, headers={"content-type": "application/json", "content-length": "1000"})
    await reply.prepare(request)
    await reply.write(b'{"type": "error", "error": {"type": "api_error", "message": "')
    return reply


def test_a_call_whose_unit_hangs_up_on_its_error_reply_is_settled_with_its_status(gateway: Gateway) -> None:
    """The provider's 500 comes, its body stalls; the unit hangs up and its time runs out: its
    session's close cuts the call off as the gateway reads the error, and settles it as an
    error read whole is: no model call (the provider bills none), its failure the provider's 500."""

    closed = threading.Event()

    async def stalled(request: web.Request) -> web.StreamResponse:
        reply = await error_begun(request)
        while not closed.is_set():  # the rest of the error never comes while the gateway reads it
            await asyncio.sleep(0.05)
        return reply

    with Provider({"/v1/messages": stalled}) as provider:
        session = gateway.open({"anthropic": Upstream(provider.url, ("sk-key",))}, timeout_s=1.5)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(gateway.base_url("anthropic") + "/v1/messages", headers={"x-api-key": session.token},
                       json={"model": "claude-sonnet-4-5", "max_tokens": 10}, timeout=0.5)  # fmt: skip
        report = gateway.close(session)
        closed.set()
    counted = report.counted
    assert (counted.n_model_calls, counted.failed_calls, counted.cost_usd) == (0, 1, 0.0)
    assert counted.last_failure is not None and counted.last_failure.status == 500
    (call,) = report.calls
    assert (call["status"], call["cut_short_by"]) == (500, "gateway") and "cut off" in call["error"]


def test_an_error_reply_the_provider_breaks_off_is_passed_on_with_its_status(gateway: Gateway) -> None:
    """The provider's 500 comes, and its connection breaks before the end of its error body:
    the unit gets the 500, and the call is the provider's 500 failure, settled."""

    async def broken(request: web.Request) -> web.StreamResponse:
        reply = await error_begun(request)
        assert request.transport is not None
        request.transport.close()
        return reply

    with Provider({"/v1/messages": broken}) as provider:
        session = gateway.open({"anthropic": Upstream(provider.url, ("sk-key",))})
        reply = httpx.post(gateway.base_url("anthropic") + "/v1/messages", headers={"x-api-key": session.token},
                           json={"model": "claude-sonnet-4-5", "max_tokens": 10})  # fmt: skip
        report = gateway.close(session)
    assert reply.status_code == 500 and "the provider's reply ended early" in reply.text
    counted = report.counted
    assert counted.failed_calls == 1 and counted.last_failure is not None and counted.last_failure.status == 500
    assert report.calls[0]["status"] == 500 and report.calls[0]["latency_s"] is not None


def _events(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(event).encode() + b"\n\n" for event in events)


def test_a_stream_of_many_small_pieces_is_read_once_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model's tool call of 200 KB arrives in 10,000 deltas: the gateway's reader joins the
    pieces and reads the call's input once, as the stream ends; reading what had come so far at
    every delta took time growing with the square of its size, on the loop every unit's calls share."""
    decoded: list[int] = []
    loads = json.loads
    monkeypatch.setattr(accounting.json, "loads", lambda text, **kw: decoded.append(len(text)) or loads(text, **kw))
    argument = json.dumps({"path": "notes.txt", "content": "x" * 200_000})
    pieces = [argument[at : at + 20] for at in range(0, len(argument), 20)]
    start = {"type": "message_start", "message": {"model": "claude-x", "usage": {"input_tokens": 5}}}
    tool = {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "name": "w", "input": {}}}
    deltas = [{"type": "content_block_delta", "delta": {"type": "input_json_delta", "partial_json": p}} for p in pieces]
    text = {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}
    words = [{"type": "content_block_delta", "delta": {"type": "text_delta", "text": "ab"}}] * 1000
    end = {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}
    reader = accounting.ResponseReader("anthropic", streamed=True)
    reader.feed(_events(start, tool, *deltas, text, *words, end))
    held = [len(pieces) for *_, pieces in reader._pieces.values()]  # a short piece takes 50 bytes held alone
    assert held and max(held) < accounting.JOINED_PIECES
    reader.finish()
    assert reader.reply is not None and reader.reply["content"] == [
        {"type": "tool_use", "name": "w", "input": json.loads(argument)},
        {"type": "text", "text": "ab" * 1000},
    ]
    fed = len(_events(start, tool, *deltas, text, *words, end))
    assert sum(decoded) < 2 * fed, (sum(decoded), fed)  # each event once, the whole input once

    chunks = [{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}}]}
              for piece in pieces]  # fmt: skip
    reader = accounting.ResponseReader("chat", streamed=True)
    reader.feed(_events(*chunks))
    reader.finish()
    assert reader.reply is not None
    assert reader.reply["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == argument
