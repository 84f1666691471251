"""What a unit can make its worker's gateway hold: its requests in flight and their bodies are
bounded (a request over the bound waits its turn), a body whose JSON would take too much memory
to read is refused unread, and the calls the gateway refuses itself keep a bounded number of
records, every one counted. The bounds are scaled down here (the defaults are in MiB)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import threading
from collections.abc import Iterator

import httpx
import pytest
from aiohttp import web

from rayeval.gateway import server
from rayeval.gateway.pin import ModelPin
from rayeval.gateway.room import RequestBounds, parse_bytes
from rayeval.gateway.server import MAX_REFUSED_RECORDS, CallLimits, Gateway, Upstream
from rayeval.gateway.transcript import bounded, copy_size, transcript_text
from tests.agents.fake_model_server import FakeModelServer
from tests.gateway.provider import Provider

BODY_BYTES = 60_000
BOUNDS = RequestBounds(
    max_request_bytes=64_000,
    max_parse_bytes=1_000_000,
    session_requests=8,
    session_bytes=2 * 64_000,  # two big requests of a unit at once
    gateway_bytes=4 * 64_000,
)
#: how long the provider holds each reply: the requests a gateway lets through meanwhile are with it at once
HOLD_S = 0.5


class HeldReplies:
    """A provider's Messages endpoint that holds each reply ``HOLD_S`` seconds, and keeps the
    most requests it had at once (those the gateway let through, their bodies held)."""

    def __init__(self) -> None:
        self.present = 0
        self.peak = 0

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        self.present += 1
        self.peak = max(self.peak, self.present)
        try:
            await asyncio.sleep(HOLD_S)
        finally:
            self.present -= 1
        usage = {"input_tokens": 10, "output_tokens": 1}
        content = [{"type": "text", "text": "ok"}]
        reply = {"type": "message", "model": "claude-x", "content": content, "stop_reason": "end_turn", "usage": usage}
        return web.json_response(reply)


def image_body(size: int) -> bytes:
    """An honest Anthropic request of about ``size`` bytes: one base64 image."""
    head = b'{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":'
    head += b'{"type":"base64","media_type":"image/png","data":"'
    data = base64.b64encode(os.urandom(size))[: size - len(head) - 8]
    return head + data + b'"}}]}]}'


def post(gateway: Gateway, token: str, body: bytes) -> httpx.Response:
    headers = {"x-api-key": token, "content-type": "application/json"}
    return httpx.post(gateway.base_url("anthropic") + "/v1/messages", content=body, headers=headers, timeout=60)


def posted_at_once(gateway: Gateway, token: str, bodies: list[bytes]) -> list[httpx.Response]:
    answers: list[httpx.Response] = []
    threads = [threading.Thread(target=lambda b=body: answers.append(post(gateway, token, b))) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


@pytest.fixture
def held() -> Iterator[tuple[HeldReplies, Provider]]:
    replies = HeldReplies()
    with Provider({"/v1/messages": replies}) as provider:
        yield replies, provider


def test_a_unit_sending_many_big_requests_at_once_has_no_more_than_its_share_held(
    held: tuple[HeldReplies, Provider],
) -> None:
    replies, provider = held
    with Gateway(bounds=BOUNDS) as gateway:
        session = gateway.open({"anthropic": Upstream(provider.url, ("sk-test",))}, timeout_s=120)
        answers = posted_at_once(gateway, session.token, [image_body(BODY_BYTES)] * 6)
        report = gateway.close(session)
        assert gateway.room.peak_bytes <= BOUNDS.session_bytes and gateway.room.held_bytes == 0
    assert replies.peak <= 2  # two bodies of the unit at once: the others waited for room at the gateway
    assert session.peak_bytes <= 2 * BODY_BYTES
    assert [answer.status_code for answer in answers] == [200] * 6  # each waited its turn, none failed
    assert report.counted.n_model_calls == 6


def test_an_honest_big_request_goes_through_while_another_unit_floods(held: tuple[HeldReplies, Provider]) -> None:
    replies, provider = held
    with Gateway(bounds=BOUNDS) as gateway:
        upstreams = {"anthropic": Upstream(provider.url, ("sk-test",))}
        flooding, honest = gateway.open(upstreams, timeout_s=120), gateway.open(upstreams, timeout_s=120)
        flood = threading.Thread(target=posted_at_once, args=(gateway, flooding.token, [image_body(BODY_BYTES)] * 8))
        flood.start()
        answer = post(gateway, honest.token, image_body(BOUNDS.max_request_bytes))
        flood.join()
        gateway.close(flooding)
        assert gateway.close(honest).counted.n_model_calls == 1
        assert gateway.room.peak_bytes <= BOUNDS.gateway_bytes
    assert answer.status_code == 200
    assert replies.peak <= 3  # the flooding unit's two bodies at most, and the honest one


def test_a_request_that_can_never_fit_is_refused_unread(held: tuple[HeldReplies, Provider]) -> None:
    """Over the largest body, or a body of many small JSON values whose reading would take
    more memory than one read may (the reviewer's 64 MiB of ``0,`` cost the worker +382 MiB):
    refused with 413, never sent on; an honest body of the same bytes (one base64 image) goes."""
    _, provider = held
    many_values = b'{"model":"claude-x","max_tokens":5,"messages":[],"pad":[' + b"[]," * 16_000 + b"[]]}"
    assert len(many_values) < BODY_BYTES and parse_bytes(many_values) > BOUNDS.max_parse_bytes
    with Gateway(bounds=BOUNDS) as gateway:
        session = gateway.open({"anthropic": Upstream(provider.url, ("sk-test",))}, timeout_s=120)
        too_many = post(gateway, session.token, many_values)
        too_big = post(gateway, session.token, image_body(BOUNDS.max_request_bytes + 1000))
        honest = post(gateway, session.token, image_body(len(many_values)))
        report = gateway.close(session)
    assert (too_many.status_code, too_many.json()["error"]["type"]) == (413, "request_too_large")
    assert "too many values" in too_many.json()["error"]["message"]
    assert too_big.status_code == 413
    assert honest.status_code == 200 and len(provider.seen) == 1  # only the honest one reached the provider
    assert report.counted.n_model_calls == 1


def test_a_flood_of_refused_calls_keeps_a_bounded_number_of_records_all_counted() -> None:
    """Calls naming a model the unit may not call, with a name of any length, or past its limit:
    the gateway answers them itself, for free, so a unit may send them in a loop."""
    flood = MAX_REFUSED_RECORDS + 30
    long_name = "claude-other-" + "x" * 50_000
    with Gateway() as gateway:
        upstreams = {"anthropic": Upstream("http://127.0.0.1:9", ("sk-test",))}  # never reached
        pinned = gateway.open(upstreams, pin=ModelPin(("claude-x",)))
        limited = gateway.open(upstreams, limits=CallLimits(model_calls=0))
        with httpx.Client(timeout=30) as client:
            for number in range(flood):
                for session in (pinned, limited):
                    body = {"model": long_name, "max_tokens": 5, "messages": [], "n": number}
                    headers = {"x-api-key": session.token}
                    answer = client.post(gateway.base_url("anthropic") + "/v1/messages", json=body, headers=headers)
                    assert answer.status_code == 400
        refused_model, refused_limit = gateway.close(pinned), gateway.close(limited)
    for report in (refused_model, refused_limit):
        assert len(report.calls) == MAX_REFUSED_RECORDS  # the first ones
        assert [call["request"]["n"] for call in report.calls] == list(range(MAX_REFUSED_RECORDS))
        assert all(len(call["model"]) == 200 for call in report.calls)
        assert report.counted.failed_calls == flood and report.counted.refused_calls_not_kept == 30
        assert report.counted.n_model_calls == 0
        transcript = json.loads(transcript_text(report.calls, 10 << 20, report.counted.refused_calls_not_kept))
        assert (transcript["left_out"], transcript["refused_left_out"]) == (0, 30)
    assert refused_model.counted.off_model_calls == flood
    assert refused_limit.counted.limit_reached == "model_calls"


def test_a_body_nested_too_deep_to_read_names_no_model() -> None:
    """``json.loads`` raises RecursionError on it (no ValueError): the call is refused for
    naming no model, as any body that is not JSON, and recorded."""
    with Gateway() as gateway:
        session = gateway.open({"anthropic": Upstream("http://127.0.0.1:9")}, pin=ModelPin(("claude-x",)))
        headers = {"x-api-key": session.token}
        deep = b'{"model":"claude-x","messages":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
        answer = httpx.post(gateway.base_url("anthropic") + "/v1/messages", content=deep, headers=headers)
        report = gateway.close(session)
    assert answer.status_code == 400 and "names its model once" in answer.json()["error"]["message"]
    assert report.counted.off_model_calls == 1


def test_a_unit_out_of_time_waiting_for_room_is_answered(held: tuple[HeldReplies, Provider]) -> None:
    """A request still waiting for room when its unit's time runs out gets an answer (503),
    not a hang; the requests that had room are answered."""
    _, provider = held
    bounds = RequestBounds(max_request_bytes=64_000, session_requests=1, session_bytes=64_000, gateway_bytes=64_000)
    with Gateway(bounds=bounds) as gateway:
        session = gateway.open({"anthropic": Upstream(provider.url, ("sk-test",))}, timeout_s=HOLD_S / 2)
        answers = posted_at_once(gateway, session.token, [image_body(1000)] * 2)
        gateway.close(session)
    assert sorted(answer.status_code for answer in answers) == [200, 503]


def test_a_stream_asked_for_its_usage_is_sent_on_no_bigger_than_it_came() -> None:
    """A Chat Completions stream that did not ask for its usage is written again, asking: compact,
    its text as it came (no escapes added, a lone surrogate kept escaped), so within a few bytes
    of the room its body took; a body written again bigger (``1e15`` is ``1000000000000000.0``)
    is refused."""
    text = 'héllo 日本 \\ud800 \\"quoted\\"'
    honest = b'{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"' + text.encode() + b'"}]}'
    grown = b'{"model":"gpt-4o","stream":true,"messages":[],"pad":[' + b",".join([b"1e15"] * 50) + b"]}"
    with FakeModelServer(script=[], answer=lambda body: "ok") as server, Gateway() as gateway:
        session = gateway.open({"openai": Upstream(server.url + "/v1", ("sk-test",))})
        url, headers = gateway.base_url("openai") + "/chat/completions", {"authorization": f"Bearer {session.token}"}
        answers = [httpx.post(url, content=body, headers=headers, timeout=30) for body in (honest, grown)]
        report = gateway.close(session)
    assert [answer.status_code for answer in answers] == [200, 400]
    assert "grows when written again" in answers[1].json()["error"]["message"]
    (sent,) = server.model_requests()
    assert sent.body["messages"][0]["content"] == json.loads(honest)["messages"][0]["content"]
    assert sent.body["stream_options"] == {"include_usage": True}
    assert report.counted.n_model_calls == 1 and report.counted.failed_calls == 1


def test_a_body_without_its_length_takes_the_room_of_the_largest(held: tuple[HeldReplies, Provider]) -> None:
    """A chunked body's length is known only once read: it takes the room of the largest body
    before it is read, and goes through."""
    _, provider = held
    with Gateway(bounds=BOUNDS) as gateway:
        session = gateway.open({"anthropic": Upstream(provider.url, ("sk-test",))}, timeout_s=120)
        headers = {"x-api-key": session.token, "content-type": "application/json"}
        url = gateway.base_url("anthropic") + "/v1/messages"
        answer = httpx.post(url, content=iter([image_body(1000)]), headers=headers, timeout=60)
        gateway.close(session)
    assert answer.status_code == 200 and "content-length" not in answer.request.headers
    assert session.peak_bytes == BOUNDS.max_request_bytes


@pytest.mark.parametrize("answered", [True, False], ids=["answered", "refused-by-the-provider"])
def test_a_session_keeps_its_newest_calls_copies_within_its_bound_and_counts_every_call(
    monkeypatch: pytest.MonkeyPatch, answered: bool
) -> None:
    """A long session, or a unit sending calls the provider refuses (fast, free, no limit
    counts them) in a loop: the copies of its calls' requests and replies (its transcript) stay
    within the session's bound, the oldest dropped; every call is still counted, and the
    transcript holds the newest calls whose copies were kept."""
    one_copy = copy_size(bounded(json.loads(image_body(BODY_BYTES))))  # its image cut to its head
    monkeypatch.setattr(server, "MAX_COPY_BYTES", 3 * one_copy)
    calls = 12

    async def reply(request: web.Request) -> web.StreamResponse:
        if not answered:
            return web.json_response({"type": "error", "error": {"type": "invalid_request_error"}}, status=400)
        usage = {"input_tokens": 10, "output_tokens": 1}
        message = {"type": "message", "model": "claude-x", "content": [{"type": "text", "text": "ok"}]}
        return web.json_response({**message, "stop_reason": "end_turn", "usage": usage})

    with Provider({"/v1/messages": reply}) as provider, Gateway(bounds=BOUNDS) as gateway:
        session = gateway.open({"anthropic": Upstream(provider.url, ("sk-test",))})
        for _ in range(calls):
            assert post(gateway, session.token, image_body(BODY_BYTES)).status_code == (200 if answered else 400)
        assert session.copy_bytes <= 3 * one_copy
        report = gateway.close(session)
    assert len(report.calls) == calls and report.counted.n_model_calls == (calls if answered else 0)
    assert report.counted.failed_calls == (0 if answered else calls)
    kept = [call for call in report.calls if call["request"] != server.COPY_NOT_KEPT]
    assert 2 <= len(kept) <= 3 and report.calls[-len(kept) :] == kept  # the newest
    transcript = json.loads(transcript_text(report.calls, 10 << 20))
    assert transcript["left_out"] == calls - len(kept) and len(transcript["calls"]) == len(kept)


@pytest.mark.parametrize(
    "copy",
    [
        [[[] for _ in range(200)] for _ in range(200)],  # JSON of 3 bytes a value
        {"messages": [{"role": "user", "content": f"m{i}"} for i in range(200)]},
        ["short text"] * 200,
        {"content": "x" * 20_000, "é": "é" * 5_000, "€": "€" * 5_000, "😀": "😀" * 5_000},
        [[2.5, 10**9 + index] for index in range(200)],
    ],
    ids=["empty lists", "small objects", "short texts", "long texts", "numbers"],
)
def test_a_copy_is_counted_by_the_memory_it_takes(copy: object) -> None:
    """A session's copies are bounded by their memory, which a request of many small values takes
    many times its JSON's length of: each shape is counted at least as 80 % of it, and at most twice it."""
    import tracemalloc

    text = json.dumps(copy)
    tracemalloc.start()
    held = json.loads(text)  # built apart from its text, as the gateway's copy is
    taken = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert held == copy and 0.8 * taken <= copy_size(held) <= 2 * taken, (taken, copy_size(held))


def test_the_calls_carried_from_an_earlier_part_keep_their_newest_copies_within_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A session resumed from its checkpoint carries the earlier part's transcript: its copies
    count against a bound as the session's own do, the oldest dropped and every call still listed."""
    one = {"request": {"messages": ["x" * 1000]}, "response": {"content": "y" * 1000}, "model": "m"}
    monkeypatch.setattr(server, "MAX_COPY_BYTES", 3 * (copy_size(one["request"]) + copy_size(one["response"])))
    with Gateway(bounds=BOUNDS) as gateway:
        session = gateway.open({"anthropic": Upstream("http://127.0.0.1:9", ("sk-test",))})
        earlier = gateway.close(session).counted
        resumed = gateway.open({"anthropic": Upstream("http://127.0.0.1:9", ("sk-test",))})
        resumed.carry(earlier, [dict(one, model=f"m{i}") for i in range(10)])
        carried = gateway.close(resumed).calls
    assert [call["model"] for call in carried] == [f"m{i}" for i in range(10)]
    kept = [call for call in carried if call["request"] != server.COPY_NOT_KEPT]
    assert [call["model"] for call in kept] == ["m7", "m8", "m9"]
    assert all(call["response"] == server.COPY_NOT_KEPT for call in carried[:7])
