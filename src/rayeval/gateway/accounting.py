"""What a relayed model call cost and said, read off the provider's own response.

The gateway feeds each response's bytes, as they pass, to a :class:`ResponseReader` of the
call's wire protocol (Anthropic Messages, OpenAI Chat Completions, OpenAI Responses), plain
JSON or server-sent events alike. The reader keeps the usage the provider reported, the stop
reason, a refusal, and the reply itself (assembled from its stream) for the unit's transcript.
Nothing here trusts the unit: it reads only what the provider sent.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from .._json import object_at
from ..models.providers import anthropic_usage, openai_usage
from ..models.types import Usage

Wire = Literal["anthropic", "chat", "responses"]

#: the most bytes of one plain-JSON response read whole for accounting (the client gets them all)
MAX_JSON_BYTES = 64 * 1024 * 1024
#: the last bytes kept of one plain-JSON response too big to read whole: the top-level keys in
#: them are read (:data:`TAIL_KEYS`), the usage among them (OpenAI's and Anthropic's come last)
TAIL_BYTES = 1024 * 1024
TAIL_KEYS = ("model", "usage", "stop_reason")
#: the most bytes of one server-sent event kept while it is incomplete
MAX_EVENT_BYTES = 16 * 1024 * 1024
#: how many pieces of a streamed text are held apart at most before they are joined
JOINED_PIECES = 1024


@dataclass
class ResponseReader:
    """Reads one response of ``protocol`` as its bytes pass (see :meth:`feed`)."""

    protocol: Wire
    streamed: bool
    usage: Usage = field(default_factory=Usage)
    usage_seen: bool = False
    stop_reason: str | None = None
    refusal: str | None = None
    model: str | None = None
    #: the reply as the provider's non-streamed JSON would hold it (assembled from a stream)
    reply: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    _buffer: bytearray = field(default_factory=bytearray)
    _overflow: bool = False
    _blocks: list[dict[str, Any]] = field(default_factory=list)
    _choice: dict[str, Any] = field(default_factory=dict)
    #: the pieces of the stream's texts, by the object and key each text goes to (the text's parts
    #: joined so far, then the pieces since): joined whole as the stream ends (appending each
    #: piece to its text would copy the whole text every time), and every :data:`JOINED_PIECES`
    #: pieces as they come (one is held in 50 bytes however short it is)
    _pieces: dict[tuple[int, str], tuple[dict[str, Any], str, list[str], list[str]]] = field(default_factory=dict)

    def feed(self, chunk: bytes) -> None:
        if self._overflow and self.streamed:
            return
        self._buffer += chunk
        if not self.streamed:
            if len(self._buffer) > (2 * TAIL_BYTES if self._overflow else MAX_JSON_BYTES):
                self._overflow = True  # its tail kept: trimmed once per TAIL_BYTES fed
                del self._buffer[:-TAIL_BYTES]
            return
        while True:
            end = _event_end(self._buffer)
            if end is None:
                if len(self._buffer) > MAX_EVENT_BYTES:
                    self._overflow = True
                    self._buffer.clear()
                return
            event, self._buffer[:] = bytes(self._buffer[: end[0]]), self._buffer[end[1] :]
            self._event(event)

    def finish(self) -> None:
        """The response ended: read what is left (a last event without its blank line, or the
        whole JSON body, or the tail of one too big to read whole)."""
        if self._overflow and self.streamed:
            return
        rest, self._buffer = bytes(self._buffer), bytearray()
        if self.streamed:
            if rest.strip():
                self._event(rest)
            self._assemble()
            return
        if self._overflow:
            self._message(tail_pairs(rest, TAIL_KEYS))
            return
        try:
            body = json.loads(rest)
        except ValueError:
            return
        if isinstance(body, dict):
            self._message(body)
            self.reply = body

    # ------------------------------------------------------------------ one event of a stream
    def _event(self, raw: bytes) -> None:
        data = _event_data(raw)
        if data is not None:
            {"anthropic": self._anthropic_event, "chat": self._chat_chunk, "responses": self._responses_event}[
                self.protocol
            ](data)

    def _anthropic_event(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind == "message_start":
            message = object_at(data, "message")
            self.model = message.get("model") if isinstance(message.get("model"), str) else self.model
            self._note_usage(lambda: anthropic_usage(object_at(message, "usage"), self.usage))
            self.reply = {key: value for key, value in message.items() if key != "content"}
        elif kind == "content_block_start":
            self._blocks.append(dict(object_at(data, "content_block")))
        elif kind == "content_block_delta" and self._blocks:
            self._apply_delta(self._blocks[-1], object_at(data, "delta"))
        elif kind == "message_delta":
            reason = object_at(data, "delta").get("stop_reason")
            if isinstance(reason, str):
                self.stop_reason = reason
            if isinstance(data.get("usage"), dict):
                self._note_usage(lambda: anthropic_usage(data["usage"], self.usage))
        elif kind == "error":
            self.error = object_at(data, "error") or data

    def _chat_chunk(self, data: dict[str, Any]) -> None:
        if isinstance(data.get("model"), str):
            self.model = data["model"]
        if isinstance(data.get("usage"), dict):
            self._note_usage(
                lambda: openai_usage(data["usage"], self.usage, prompt="prompt_tokens", completion="completion_tokens")
            )
        if isinstance(data.get("error"), dict):
            self.error = data["error"]
        choices = data.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = object_at(choice, "delta")
            message = self._choice.setdefault("message", {"role": "assistant"})
            for key in ("content", "refusal", "reasoning_content"):
                if isinstance(delta.get(key), str):
                    self._append(message, key, delta[key])
            for call in delta.get("tool_calls") or []:
                if isinstance(call, dict):
                    self._merge_tool_call(message.setdefault("tool_calls", []), call)
            if isinstance(choice.get("finish_reason"), str):
                self._choice["finish_reason"] = choice["finish_reason"]

    def _responses_event(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind in ("response.created", "response.completed", "response.incomplete", "response.failed"):
            self._message(object_at(data, "response"))
            self.reply = object_at(data, "response")
        elif kind == "response.refusal.done" and isinstance(data.get("refusal"), str):
            self.refusal = data["refusal"]
        elif kind == "error":
            self.error = data

    def _append(self, target: dict[str, Any], key: str, piece: str) -> None:
        """``piece`` onto the text ``target[key]`` (see ``_pieces``)."""
        entry = self._pieces.get((id(target), key))
        if entry is None:
            start = target.get(key)
            entry = self._pieces[(id(target), key)] = (target, key, [start if isinstance(start, str) else ""], [])
        joined, pieces = entry[2], entry[3]
        pieces.append(piece)
        if len(pieces) == JOINED_PIECES:
            joined.append("".join(pieces))
            pieces.clear()

    def _join_pieces(self) -> None:
        """Each text of the stream whole; a tool call's input (Anthropic's ``partial_json``)
        read as the JSON it is once whole, left as text if it is not."""
        for target, key, joined, pieces in self._pieces.values():
            text = target[key] = "".join([*joined, *pieces])
            if key == "partial_json":
                try:
                    target["input"] = json.loads(text)
                except ValueError:
                    continue
                del target[key]
        self._pieces.clear()

    def _apply_delta(self, block: dict[str, Any], delta: dict[str, Any]) -> None:
        for kind, key in (("text_delta", "text"), ("thinking_delta", "thinking"), ("input_json_delta", "partial_json")):
            if delta.get("type") == kind and isinstance(delta.get(key), str):
                self._append(block, key, delta[key])

    def _merge_tool_call(self, calls: list[dict[str, Any]], delta: dict[str, Any]) -> None:
        index = delta.get("index", len(calls))
        while isinstance(index, int) and 0 <= index < 1024 and len(calls) <= index:
            calls.append({"function": {"name": "", "arguments": ""}})
        if not isinstance(index, int) or not 0 <= index < len(calls):
            return
        call = calls[index]
        for key in ("id", "type"):
            if isinstance(delta.get(key), str):
                call[key] = delta[key]
        function = object_at(delta, "function")
        for key in ("name", "arguments"):
            if isinstance(function.get(key), str):
                self._append(call["function"], key, function[key])

    def _assemble(self) -> None:
        """The reply of a stream, as the non-streamed response would hold it."""
        self._join_pieces()
        if self.protocol == "anthropic" and self.reply is not None:
            self.reply = {**self.reply, "content": self._blocks, "stop_reason": self.stop_reason}
            if self.stop_reason == "refusal":
                self.refusal = _text_of(self._blocks) or "refusal"
        elif self.protocol == "chat" and self._choice:
            self.reply = {"model": self.model, "choices": [{"index": 0, **self._choice}]}
            self._chat_outcome(self._choice)

    # ------------------------------------------------------------------ a whole response object
    def _message(self, body: dict[str, Any]) -> None:
        if isinstance(body.get("model"), str):
            self.model = body["model"]
        if isinstance(body.get("error"), dict):
            self.error = body["error"]
        usage = body.get("usage")
        if self.protocol == "anthropic":
            if isinstance(usage, dict):
                self._note_usage(lambda: anthropic_usage(usage, self.usage))
            if isinstance(body.get("stop_reason"), str):
                self.stop_reason = body["stop_reason"]
            if self.stop_reason == "refusal":
                content = body.get("content")
                self.refusal = _text_of(content if isinstance(content, list) else []) or "refusal"
        elif self.protocol == "chat":
            if isinstance(usage, dict):
                self._note_usage(
                    lambda: openai_usage(usage, self.usage, prompt="prompt_tokens", completion="completion_tokens")
                )
            choices = body.get("choices")
            if isinstance(choices, list) and choices and isinstance(choices[0], dict):
                self._chat_outcome(choices[0])
        else:
            if isinstance(usage, dict):
                self._note_usage(
                    lambda: openai_usage(usage, self.usage, prompt="input_tokens", completion="output_tokens")
                )
            self._responses_outcome(body)

    def _chat_outcome(self, choice: dict[str, Any]) -> None:
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            self.stop_reason = reason
        refusal = object_at(choice, "message").get("refusal")
        if isinstance(refusal, str) and refusal:
            self.refusal = refusal
        elif reason == "content_filter":
            self.refusal = "content_filter"

    def _responses_outcome(self, body: dict[str, Any]) -> None:
        status = body.get("status")
        reason = object_at(body, "incomplete_details").get("reason")
        if isinstance(status, str):
            self.stop_reason = reason if status == "incomplete" and isinstance(reason, str) else status
        output = body.get("output")
        for item in output if isinstance(output, list) else []:
            content = item.get("content") if isinstance(item, dict) else None
            for part in content if isinstance(content, list) else []:
                if isinstance(part, dict) and part.get("type") == "refusal":
                    self.refusal = str(part.get("refusal") or "refusal")
        if reason == "content_filter" and self.refusal is None:
            self.refusal = "content_filter"

    def _note_usage(self, read: Any) -> None:
        read()
        self.usage_seen = True


class HiddenUsage:
    """Passes a Chat Completions stream on without its usage-only last chunk: the gateway asks
    the provider for it (``stream_options.include_usage``) where the unit did not, so that the
    usage is seen and the unit gets the events it asked for. Call it with each chunk of the
    stream for the bytes to pass on, and :meth:`rest` at its end."""

    def __init__(self) -> None:
        self._pending = bytearray()

    def __call__(self, chunk: bytes) -> bytes:
        self._pending += chunk
        passed = bytearray()
        while (end := _event_end(self._pending)) is not None:
            event = bytes(self._pending[: end[1]])
            del self._pending[: end[1]]
            data = _event_data(event)
            if not (data is not None and data.get("choices") == [] and isinstance(data.get("usage"), dict)):
                passed += event
        if len(self._pending) > MAX_EVENT_BYTES:  # not an event the gateway reads: as it is
            passed += self.rest()
        return bytes(passed)

    def rest(self) -> bytes:
        rest, self._pending = bytes(self._pending), bytearray()
        return rest


#: on the bytes of a JSON text reversed: a quote with the backslashes before it, or a bracket
_BACKWARD_TOKEN = re.compile(rb'"(\\*)|[][{}]')
_COLON = re.compile(rb"\s*:\s*")


def tail_pairs(tail: bytes, keys: tuple[str, ...]) -> dict[str, Any]:
    """The values of ``keys`` in the top-level object of a JSON text whose last bytes are ``tail``
    (those whose key is in it whole). It is walked back from its end, where no string is open:
    a quote is a string's end or start unless an odd run of backslashes escapes it, and the
    brackets outside strings tell the depth; each value found is parsed alone."""
    wanted = {key.encode(): key for key in keys}
    found: dict[str, Any] = {}
    backward = tail.rstrip()[::-1]
    last = len(backward) - 1
    depth, string_end = 0, None
    if not backward.startswith(b"}"):
        return found
    for token in _BACKWARD_TOKEN.finditer(backward):
        quote, escapes = token.group(1) is not None, len(token.group(1) or b"")
        if quote and token.end() > last or len(found) == len(wanted):
            break  # a quote whose escape may begin before the tail, or all keys found
        if escapes % 2:
            continue  # an escaped quote: within a string
        if string_end is None and not quote:
            depth += 1 if token.group() in b"]}" else -1
            if depth == 0:
                break  # the object's start
        elif string_end is None:
            string_end = last - token.start()
        elif quote:
            start, end, string_end = last - token.start() + 1, string_end, None
            colon = _COLON.match(tail, end + 1)
            if depth == 1 and colon is not None and tail[start:end] in wanted:
                found.setdefault(wanted[tail[start:end]], _value_at(tail, colon.end()))
    return {key: value for key, value in found.items() if value is not None}


def _value_at(text: bytes, at: int) -> Any:
    """The JSON value ``text`` holds from ``at`` (None: none readable)."""
    try:
        return json.JSONDecoder().raw_decode(text[at:].decode("utf-8", "replace"))[0]
    except (ValueError, RecursionError):
        return None


def _event_end(buffer: bytearray) -> tuple[int, int] | None:
    """Where the first complete server-sent event ends in ``buffer``, and where the next starts."""
    for separator in (b"\n\n", b"\r\n\r\n"):
        at = buffer.find(separator)
        if at >= 0:
            return at, at + len(separator)
    return None


def _event_data(raw: bytes) -> dict[str, Any] | None:
    """The JSON object a server-sent event carries (None: none, e.g. ``[DONE]``)."""
    data_lines = []
    for line in raw.decode("utf-8", "replace").splitlines():
        if line.startswith("data:"):
            data_lines.append(line[5:].lstrip(" "))
    text = "\n".join(data_lines)
    if not data_lines or text.strip() == "[DONE]":
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _text_of(blocks: list[Any]) -> str:
    return "".join(block.get("text", "") for block in blocks if isinstance(block, dict) and block.get("type") == "text")
