"""A scripted model server for driving the real agent programs offline.

It listens on 127.0.0.1 (stdlib ``http.server`` in a background thread) and speaks just enough
of three wire protocols for the agent CLIs to run end to end:

* Anthropic Messages API (``POST /v1/messages``, streaming SSE or plain JSON) -- Claude Code, pi;
* OpenAI Responses API (``POST /v1/responses``, streaming SSE or plain JSON) -- Codex, mini-swe-agent's
  ``litellm_response`` model class;
* OpenAI Chat Completions (``POST /v1/chat/completions``) -- litellm / mini-swe-agent, pi.

The *script* is a list of turns.  Each turn is either ``{"command": "<shell>"}`` (the model
calls the program's shell tool with that command; on the Anthropic API with ``"timeout"`` too, if
given) or ``{"text": "<final message>"}``; on the Responses API also ``{"call": "<tool>",
"arguments": "<JSON>"}`` (another of its tools).  Which
turn a request gets is derived from the conversation it carries (the number of model turns
already in its history), so retries and out-of-band requests do not desynchronise it.
Requests that carry no tools (titles, summaries, warm-ups) get a short canned text reply and do
not consume the script, or, when ``answer`` is set, ``answer(body)`` (a prompt without tools,
as rayeval's model layer sends) with ``base_input_tokens``/``base_output_tokens`` of usage;
``answer`` may return ``(text, stop_reason)`` to end that reply otherwise than normally
(Anthropic ``refusal`` or ``max_tokens``, OpenAI ``length`` or ``content_filter``), as a scripted
``{"text": ..., "stop": ...}`` turn does; ``refusal`` is, on OpenAI's two APIs, the refusal
they send (the message's ``refusal`` field, a ``refusal`` content part), and ``content_filter``
on the Responses API an ``incomplete`` response.
``cache_read_tokens``/``cache_write_tokens`` make each scripted reply report that many prompt
tokens read from and written to the cache, each protocol in its own fields.
Every request is recorded in ``server.requests`` (with its arrival time) and every reply's
reported usage in ``server.replies`` so tests can compare the harness's accounting with what
the "provider" said.

On demand it answers slowly (``delay_s``) or fails: :meth:`FakeModelServer.fail` queues error
replies (429 with ``retry-after``, 500, 401 ...) for the next model requests (or the next ones
after a number of turns); ``rejected_credentials`` get a 401; an Anthropic request whose
credential or model is in ``refused_by`` gets a refusal (``stop_reason: refusal``, the text
:data:`REFUSED_TEXT`) instead of its turn; ``max_in_flight`` is the most model requests it
held at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SIDE_TEXT = "OK."
REFUSED_TEXT = "I can't help with that request."
MODEL_PATHS = ("/messages", "/responses", "/chat/completions")


@dataclass
class Reply:
    protocol: str
    turn: int | None  # None for unscripted side requests
    kind: str  # "command" | "text" | "side"
    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0  # of the prompt, read from the cache (OpenAI's: a part of input_tokens)
    cache_write_tokens: int = 0  # of the prompt, written to the cache (Anthropic's: apart from input_tokens)


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float = 0.0  # arrival, time.monotonic()


@dataclass
class Fault:
    status: int
    retry_after: str | None = None  # the header's value as sent: seconds or an HTTP date
    body: dict[str, Any] | None = None  # the error body as sent (None: the protocol's usual one)
    after_turns: int = 0  # held back until the server has given this many scripted replies


class _Server(ThreadingHTTPServer):
    request_queue_size = 512  # listen() backlog: 100+ clients connect at once
    daemon_threads = True


@dataclass
class FakeModelServer:
    script: list[dict[str, str]]
    base_input_tokens: int = 1000
    base_output_tokens: int = 50
    echo_credential: bool = False  # append the credential the client sent to every reply text
    requests: list[Recorded] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    external_attempts: list[str] = field(default_factory=list)  # CONNECT targets (HTTPS_PROXY)
    answer: Callable[[dict], str | tuple[str, str]] | None = None  # the reply to a request without tools
    delay_s: float = 0.0  # each model request is answered after this long
    faults: list[Fault] = field(default_factory=list)  # the next model requests' error replies
    max_in_flight: int = 0
    rejected_credentials: set[str] = field(default_factory=set)  # a request with one of these gets a 401
    cache_read_tokens: int = 0  # each scripted reply's prompt tokens read from the cache
    cache_write_tokens: int = 0  # each scripted reply's prompt tokens written to the cache
    refused_by: set[str] = field(default_factory=set)  # credentials and models the model refuses with

    def __post_init__(self) -> None:
        self._in_flight = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FakeModelServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeModelServer:  # noqa: PYI034 - start() returns the server
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def fail(
        self,
        status: int,
        count: int = 1,
        retry_after: str | None = None,
        *,
        body: dict[str, Any] | None = None,
        after_turns: int = 0,
    ) -> None:
        """The next ``count`` model requests get HTTP ``status`` (and ``retry-after``, and
        ``body`` instead of the usual error body); with ``after_turns`` only those that come
        once that many scripted replies were given (a failure in the middle of a session)."""
        with self._lock:
            self.faults.extend(Fault(status, retry_after, body, after_turns) for _ in range(count))

    def _next_fault(self, credential: str) -> Fault | None:
        """The fault the next model request gets: a 401 for a rejected credential, else the
        first queued fault that is due."""
        with self._lock:
            if credential in self.rejected_credentials:
                return Fault(401)
            served = sum(1 for reply in self.replies if reply.kind != "side")
            due = next((fault for fault in self.faults if fault.after_turns <= served), None)
            if due is not None:
                self.faults.remove(due)
            return due

    def model_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.method == "POST" and r.path.split("?")[0].endswith(MODEL_PATHS)]

    # ------------------------------------------------------------------ accounting helpers
    def scripted_replies(self, protocol: str | None = None) -> list[Reply]:
        return [r for r in self.replies if r.kind != "side" and (protocol is None or r.protocol == protocol)]

    def total_usage(self, protocol: str | None = None, *, include_side: bool = True) -> tuple[int, int]:
        rs = [r for r in self.replies if (protocol is None or r.protocol == protocol)]
        if not include_side:
            rs = [r for r in rs if r.kind != "side"]
        return sum(r.input_tokens for r in rs), sum(r.output_tokens for r in rs)

    def _kind(self, turn: int | None, step: dict[str, str], tools: list) -> str:
        if turn is not None:
            return "command" if "command" in step or "call" in step else "text"
        return "prompt" if self.answer and not tools else "side"

    def _usage_for(self, protocol: str, turn: int | None, kind: str) -> Reply:
        n = len(self.replies)
        if kind == "prompt":
            reply = Reply(protocol, None, kind, self.base_input_tokens, self.base_output_tokens)
        elif turn is None:
            reply = Reply(protocol, None, kind, 7 + n, 3)
        else:
            reply = Reply(
                protocol,
                turn,
                kind,
                self.base_input_tokens + 100 * turn,
                self.base_output_tokens + 10 * turn,
                self.cache_read_tokens,
                self.cache_write_tokens,
            )
        with self._lock:
            self.replies.append(reply)
        return reply

    def _turn(self, index: int) -> dict[str, str]:
        if index < len(self.script):
            return self.script[index]
        return {"text": "Done."}


class _Handler(BaseHTTPRequestHandler):
    owner: FakeModelServer
    protocol_version = "HTTP/1.1"
    # headers and body go out as two writes: with Nagle's algorithm the body waited for the
    # client's delayed ACK, 40 ms on every reply of a kept-alive connection
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # --------------------------------------------------------------- plumbing
    def _credential(self) -> str:
        auth = self.headers.get("Authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:]
        return self.headers.get("x-api-key", "")

    def _say(self, text: str) -> str:
        if self.owner.echo_credential:
            return f"{text} [client credential: {self._credential()}]"
        return text

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.headers.get("Content-Encoding", "").lower() == "zstd":
            return {"_undecodable": "zstd"}
        if self.headers.get("Content-Encoding", "").lower() in ("gzip", "deflate"):
            import zlib

            raw = zlib.decompress(raw, 16 + zlib.MAX_WBITS if "gzip" in self.headers["Content-Encoding"] else 15)
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return {"_raw": raw.decode("utf-8", "replace")}

    def _record(self, body: Any) -> None:
        rec = Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic())
        with self.owner._lock:
            self.owner.requests.append(rec)

    def _send_json(self, obj: Any, status: int = 200) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_sse(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _sse(self, event: str | None, data: Any) -> None:
        chunk = ""
        if event:
            chunk += f"event: {event}\n"
        chunk += f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"
        self.wfile.write(chunk.encode())
        self.wfile.flush()

    def do_GET(self) -> None:
        self._record(None)
        path = self.path.split("?")[0]
        if path.startswith("http://") and "127.0.0.1" not in path.split("/")[2]:
            with self.owner._lock:
                self.owner.external_attempts.append(self.path)
            self._send_json({}, 403)
            return
        if path.endswith("/models"):
            self._send_json({"object": "list", "data": [], "models": []})
        else:
            self._send_json({}, 404)

    def do_CONNECT(self) -> None:
        self._record(None)
        with self.owner._lock:
            self.owner.external_attempts.append(self.path)
        self.send_response(403)
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def do_HEAD(self) -> None:
        self._record(None)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        body = self._read_body()
        self._record(body)
        path = self.path.split("?")[0]
        if path.startswith("http://") and "127.0.0.1" not in path.split("/")[2]:
            with self.owner._lock:
                self.owner.external_attempts.append(self.path)
            self._send_json({}, 403)
            return
        try:
            if path.endswith(MODEL_PATHS):
                self._model_request(path, body or {})
            elif path.endswith("/messages/count_tokens"):
                self._send_json({"input_tokens": 42})
            else:
                self._send_json({"ok": True})
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _model_request(self, path: str, body: dict) -> None:
        """After ``delay_s``, the next queued fault or the protocol's reply; counted in flight."""
        owner = self.owner
        with owner._lock:
            owner._in_flight += 1
            owner.max_in_flight = max(owner.max_in_flight, owner._in_flight)
        try:
            if owner.delay_s:
                time.sleep(owner.delay_s)
            fault = owner._next_fault(self._credential())
            if fault is not None:
                self._fault(fault, anthropic=path.endswith("/messages"))
            elif path.endswith("/messages"):
                self._anthropic(body)
            elif path.endswith("/responses"):
                self._responses(body)
            else:
                self._chat(body)
        finally:
            with owner._lock:
                owner._in_flight -= 1

    def _fault(self, fault: Fault, *, anthropic: bool) -> None:
        message = self._say(f"scripted failure {fault.status}")
        if fault.body is not None:
            body = fault.body
        elif anthropic:
            body = {"type": "error", "error": {"type": "api_error", "message": message}}
        else:
            body = {"error": {"message": message, "type": "server_error", "code": fault.status}}
        data = json.dumps(body).encode()
        self.send_response(fault.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if fault.retry_after is not None:
            self.send_header("retry-after", fault.retry_after)
        self.end_headers()
        self.wfile.write(data)

    def _side_step(self, body: dict, tools: list) -> dict[str, str]:
        """The reply to a request outside the script: ``answer(body)`` or the canned text."""
        if not (self.owner.answer and not tools):
            return {"text": SIDE_TEXT}
        reply = self.owner.answer(body)
        if isinstance(reply, tuple):
            return {"text": reply[0], "stop": reply[1]}
        return {"text": reply}

    # --------------------------------------------------------------- Anthropic Messages
    def _anthropic(self, body: dict) -> None:
        owner = self.owner
        tools = body.get("tools") or []
        model = body.get("model", "claude-test")
        tool_names = [t.get("name") for t in tools if isinstance(t, dict)]
        shell_tool = next((n for n in ("Bash", "bash") if n in tool_names), None)  # Claude Code's, pi's
        if shell_tool is None:
            turn_index, step = None, self._side_step(body, tools)
        else:
            turn_index = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
            step = owner._turn(turn_index)
        if owner.refused_by & {model, self._credential()}:
            step = {"text": REFUSED_TEXT, "stop": "refusal"}
        kind = owner._kind(turn_index, step, tools)
        usage = owner._usage_for("anthropic", turn_index, kind)
        msg_id = f"msg_{len(owner.replies):04d}"
        if "command" in step:
            timeout = {"timeout": step["timeout"]} if "timeout" in step else {}  # the tool's unit (pi: s)
            blocks = [
                {"type": "text", "text": self._say("I will write the answer file.")},
                {
                    "type": "tool_use",
                    "id": f"toolu_{len(owner.replies):04d}",
                    "name": shell_tool,
                    "input": {"command": step["command"], "description": "Write the answer", **timeout},
                },
            ]
            stop = "tool_use"
        else:
            blocks = [{"type": "text", "text": self._say(step["text"])}]
            stop = step.get("stop", "end_turn")
        usage_obj = {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_creation_input_tokens": usage.cache_write_tokens,
            "cache_read_input_tokens": usage.cached_tokens,
        }
        if not body.get("stream"):
            self._send_json(
                {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": blocks,
                    "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": usage_obj,
                }
            )
            return
        self._start_sse()
        start_usage = dict(usage_obj, output_tokens=1)
        self._sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
        )
        for i, block in enumerate(blocks):
            if block["type"] == "text":
                self._sse(
                    "content_block_start",
                    {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
                )
                self._sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": block["text"]}},
                )
            else:
                self._sse(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}},
                    },
                )
                self._sse(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
                    },
                )
            self._sse("content_block_stop", {"type": "content_block_stop", "index": i})
        self._sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": usage.output_tokens},
            },
        )
        self._sse("message_stop", {"type": "message_stop"})

    # --------------------------------------------------------------- OpenAI Responses
    def _responses(self, body: dict) -> None:
        owner = self.owner
        tools = body.get("tools") or []
        tool_names = [t.get("name") or (t.get("function") or {}).get("name") for t in tools if isinstance(t, dict)]
        shell_tool = next((n for n in ("exec_command", "shell_command", "shell", "bash") if n in tool_names), None)
        items = body.get("input") or []
        if shell_tool is None:
            turn_index, step = None, self._side_step(body, tools)
        else:
            turn_index = sum(
                1
                for it in items
                if isinstance(it, dict)
                and (
                    it.get("type") in ("function_call", "local_shell_call", "custom_tool_call")
                    or (it.get("type") == "message" and it.get("role") == "assistant")
                )
            )
            step = owner._turn(turn_index)
        kind = owner._kind(turn_index, step, tools)
        usage = owner._usage_for("responses", turn_index, kind)
        n = len(owner.replies)
        resp_id = f"resp_{n:04d}"
        if "command" in step or "call" in step:
            name = step.get("call", shell_tool)
            if "call" in step:  # another of the program's tools, with the arguments scripted
                args = json.loads(step.get("arguments", "{}"))
            elif shell_tool == "exec_command":
                args = {"cmd": step["command"]}
            elif shell_tool in ("shell_command", "bash"):  # Codex's, mini-swe-agent's
                args = {"command": step["command"]}
            else:
                args = {"command": ["bash", "-lc", step["command"]]}
            item = {
                "type": "function_call",
                "id": f"fc_{n:04d}",
                "call_id": f"call_{n:04d}",
                "name": name,
                "arguments": json.dumps(args),
                "status": "completed",
            }
        else:
            part = (
                {"type": "refusal", "refusal": self._say(step["text"])}
                if step.get("stop") == "refusal"
                else {"type": "output_text", "text": self._say(step["text"]), "annotations": []}
            )
            item = {
                "type": "message",
                "id": f"msg_{n:04d}",
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
        usage_obj = {
            "input_tokens": usage.input_tokens,
            "input_tokens_details": {"cached_tokens": usage.cached_tokens},
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.input_tokens + usage.output_tokens,
        }
        filtered = step.get("stop") == "content_filter"  # the reply stopped by OpenAI's filter
        response = {
            "id": resp_id,
            "object": "response",
            "created_at": 0,
            "status": "incomplete" if filtered else "completed",
            "incomplete_details": {"reason": "content_filter"} if filtered else None,
            "model": body.get("model", "gpt-test"),
            "output": [item],
            "usage": usage_obj,
        }
        if not body.get("stream"):
            self._send_json(response)
            return
        self._start_sse()
        self._sse(
            "response.created",
            {
                "type": "response.created",
                "sequence_number": 0,
                "response": dict(response, status="in_progress", output=[], usage=None),
            },
        )
        self._sse(
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "sequence_number": 1,
                "output_index": 0,
                "item": dict(item, status="in_progress"),
            },
        )
        if item["type"] == "message" and "text" in item["content"][0]:
            text = item["content"][0]["text"]
            self._sse(
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "sequence_number": 2,
                    "item_id": item["id"],
                    "output_index": 0,
                    "content_index": 0,
                    "delta": text,
                },
            )
        self._sse(
            "response.output_item.done",
            {"type": "response.output_item.done", "sequence_number": 3, "output_index": 0, "item": item},
        )
        done = "response.incomplete" if filtered else "response.completed"
        self._sse(done, {"type": done, "sequence_number": 4, "response": response})

    # --------------------------------------------------------------- OpenAI Chat Completions
    def _chat(self, body: dict) -> None:
        owner = self.owner
        tools = body.get("tools") or []
        tool_names = [(t.get("function") or {}).get("name") for t in tools if isinstance(t, dict)]
        if "bash" not in tool_names:
            turn_index, step = None, self._side_step(body, tools)
        else:
            turn_index = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
            step = owner._turn(turn_index)
        kind = owner._kind(turn_index, step, tools)
        usage = owner._usage_for("chat", turn_index, kind)
        n = len(owner.replies)
        if "command" in step:
            message = {
                "role": "assistant",
                "content": self._say("Running a command."),
                "tool_calls": [
                    {
                        "id": f"call_{n:04d}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"command": step["command"]})},
                    }
                ],
            }
            finish = "tool_calls"
        elif step.get("stop") == "refusal":
            message = {"role": "assistant", "content": None, "refusal": self._say(step["text"])}
            finish = "stop"
        else:
            message = {"role": "assistant", "content": self._say(step["text"])}
            finish = step.get("stop", "stop")
        usage_obj = {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
        }
        completion = {
            "id": f"chatcmpl-{n:04d}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "gpt-test"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage_obj,
        }
        if not body.get("stream"):
            self._send_json(completion)
            return
        self._start_sse()
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if "tool_calls" in message:
            delta["tool_calls"] = [dict(tc, index=0) for tc in message["tool_calls"]]
        base = {k: completion[k] for k in ("id", "created", "model")}
        self._sse(
            None,
            dict(base, object="chat.completion.chunk", choices=[{"index": 0, "delta": delta, "finish_reason": None}]),
        )
        self._sse(
            None,
            dict(base, object="chat.completion.chunk", choices=[{"index": 0, "delta": {}, "finish_reason": finish}]),
        )
        self._sse(None, dict(base, object="chat.completion.chunk", choices=[], usage=usage_obj))
        self._sse(None, "[DONE]")


if __name__ == "__main__":  # manual exploration: python -m tests.agents.fake_model_server
    import sys
    import time

    srv = FakeModelServer(
        script=[
            {"command": "echo '{\"answer\": 42}' > eval_answer.json && echo wrote"},
            {"text": "Finished; the answer is in eval_answer.json."},
        ]
    ).start()
    print(srv.url, flush=True)
    try:
        while True:
            time.sleep(1)
            for rec in srv.requests[len(getattr(srv, "_printed", [])) :]:
                print(rec.method, rec.path, json.dumps(rec.body)[:300] if rec.body else "", file=sys.stderr, flush=True)
            srv._printed = list(srv.requests)  # type: ignore[attr-defined]
    except KeyboardInterrupt:
        srv.stop()
