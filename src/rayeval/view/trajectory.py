"""A stored trajectory (``trajectory.json`` in a row's artifacts) as a conversation.

A unit whose calls went through the model gateway has them in ``model_calls.json``: its
conversation is drawn from there, whatever its agent (requests and replies in the providers'
own shapes: Anthropic Messages, OpenAI Chat Completions and Responses). Otherwise, the
built-in harnesses store three shapes: Claude Code's stream-json events (``assistant`` /
``user`` messages whose content blocks are text, ``tool_use`` and ``tool_result``), Codex's
``--json`` events (``item.completed`` with agent messages, reasoning and command executions)
and mini-swe-agent's message list (``role`` / ``content``; OpenAI-style ``tool_calls`` too).
Each becomes a list of :class:`Step`; a shape none of them fits is shown as JSON.

Everything here is text written by the agent, of any shape: every field is read whatever its
type, the page renders it as text only, and the work is bounded: the steps are found lazily,
at most :data:`MAX_STEPS` (and :data:`MAX_TRAJECTORY_CHARS` characters in all) are rendered,
the others only counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Literal, NamedTuple

from .bounded import Unreadable, json_field, label, loads, text_field

StepKind = Literal["text", "thinking", "tool_call", "tool_result", "event"]
TrajectoryFormat = Literal["model-calls", "claude-code", "codex", "messages", "json"]

MAX_STEPS = 2000
MAX_STEP_CHARS = 20_000
MAX_TRAJECTORY_CHARS = 1_000_000


class Step(NamedTuple):
    """One entry of the conversation: who (role), what kind, a short title (a tool's name),
    its text (clipped to ``MAX_STEP_CHARS``; ``length`` is the full size) and a note saying
    what is not shown."""

    role: str
    kind: StepKind
    title: str
    text: str
    length: int
    note: str | None


class _Found(NamedTuple):
    """A step found, before its content is rendered (only the shown ones are)."""

    role: Any
    kind: StepKind
    content: Any
    title: Any = ""


def _get(value: Any, key: str, default: Any = None) -> Any:
    """``value[key]`` for a JSON object, else ``default``: a field of any shape reads safely."""
    return value.get(key, default) if isinstance(value, dict) else default


def _block_steps(role: Any, content: Any) -> Iterator[_Found]:
    """Anthropic-style content: a string or a list of typed blocks."""
    if not isinstance(content, list):
        yield _Found(role, "text", content)
        return
    for block in content:
        kind = _get(block, "type")
        if kind == "text":
            yield _Found(role, "text", _get(block, "text", ""))
        elif kind == "thinking":
            yield _Found(role, "thinking", _get(block, "thinking", ""))
        elif kind == "tool_use":
            yield _Found(role, "tool_call", _get(block, "input", {}), _get(block, "name"))
        elif kind == "tool_result":
            title = "error" if _get(block, "is_error") else "output"
            yield _Found("tool", "tool_result", _tool_result_text(_get(block, "content")), title)
        else:
            yield _Found(role, "event", block, kind or "block")


def _tool_result_text(content: Any) -> Any:
    if isinstance(content, list) and all(_get(b, "type") == "text" for b in content):
        return "\n".join(label(_get(b, "text", ""), MAX_STEP_CHARS) for b in content)
    return content


def _claude_steps(events: list[dict[str, Any]]) -> Iterator[_Found]:
    for event in events:
        kind, message = event.get("type"), event.get("message")
        if kind in ("assistant", "user") and isinstance(message, dict):
            yield from _block_steps(message.get("role") or kind, message.get("content"))
        elif kind == "result":
            yield _Found("harness", "event", event.get("result", event), f"result ({label(event.get('subtype'))})")
        elif kind == "system":
            rest = {k: v for k, v in event.items() if k != "type"}
            yield _Found("harness", "event", rest, f"system {label(event.get('subtype'))}")


def _codex_steps(events: list[dict[str, Any]]) -> Iterator[_Found]:
    for event in events:
        item, kind = event.get("item"), event.get("type")
        if kind != "item.completed" or not isinstance(item, dict):
            if kind in ("turn.failed", "error"):
                yield _Found("harness", "event", event.get("error") or event.get("message") or event, kind)
            continue
        kind = item.get("type")
        if kind == "agent_message":
            yield _Found("assistant", "text", item.get("text", ""))
        elif kind == "reasoning":
            yield _Found("assistant", "thinking", item.get("text", ""))
        elif kind == "command_execution":
            yield _Found("assistant", "tool_call", item.get("command", ""), "shell")
            yield _Found(
                "tool", "tool_result", item.get("aggregated_output", ""), f"exit {label(item.get('exit_code'))}"
            )
        else:
            yield _Found("assistant", "event", item, kind or "item")


def _message_steps(messages: list[dict[str, Any]]) -> Iterator[_Found]:
    for message in messages:
        role = message.get("role") or "?"
        if role == "tool":
            yield _Found(
                "tool", "tool_result", _tool_result_text(message.get("content")), message.get("name") or "output"
            )
            continue
        if message.get("content") not in (None, "", []):
            yield from _block_steps(role, message.get("content"))
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else [] if calls is None else [calls]:
            function = _get(call, "function")
            if isinstance(function, dict):
                yield _Found(role, "tool_call", function.get("arguments", ""), function.get("name"))
            else:
                yield _Found(role, "tool_call", call, "tool call")


def _responses_items(role: Any, items: Any) -> Iterator[_Found]:
    """OpenAI Responses API input or output items (messages, function calls and outputs)."""
    if isinstance(items, str):
        yield _Found(role, "text", items)
        return
    for item in items if isinstance(items, list) else [items]:
        kind = _get(item, "type", "message")
        if kind == "message":
            content = _get(item, "content")
            parts = content if isinstance(content, list) else [content]
            for part in parts:
                text = _get(part, "text", part) if _get(part, "type") != "refusal" else _get(part, "refusal")
                yield _Found(_get(item, "role", role), "text", text)
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            yield _Found(role, "tool_call", _get(item, "arguments", _get(item, "input", item)), _get(item, "name"))
        elif kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            yield _Found("tool", "tool_result", _get(item, "output", item), "output")
        elif kind == "reasoning":
            summary = _get(item, "summary")
            texts = [_get(part, "text", "") for part in summary] if isinstance(summary, list) else []
            yield _Found(role, "thinking", "\n".join(label(text, MAX_STEP_CHARS) for text in texts))
        else:
            yield _Found(role, "event", item, kind)


def _call_messages(protocol: Any, request: Any) -> list[Any]:
    if protocol == "responses":
        items = _get(request, "input")
        return items if isinstance(items, list) else [] if items is None else [{"role": "user", "content": items}]
    messages = _get(request, "messages")
    return messages if isinstance(messages, list) else []


def _message_of(protocol: Any, message: Any) -> Iterator[_Found]:
    if protocol == "responses":
        return _responses_items(_get(message, "role", "user"), [message])
    if protocol == "chat":
        return _message_steps([message] if isinstance(message, dict) else [])
    return _block_steps(_get(message, "role", "?"), _get(message, "content"))


def _reply_steps(protocol: Any, reply: Any) -> Iterator[_Found]:
    if protocol == "responses":
        return _responses_items("assistant", _get(reply, "output"))
    if protocol == "chat":
        choices = _get(reply, "choices")
        message = _get(choices[0], "message") if isinstance(choices, list) and choices else None
        return _message_steps([message] if isinstance(message, dict) else [])
    return _block_steps("assistant", _get(reply, "content"))


def _model_call_steps(transcript: dict[str, Any]) -> Iterator[_Found]:
    """The gateway's record of a unit's model calls (``model_calls.json``): each call's new
    messages (those its conversation did not hold at the call before) and its reply."""
    calls = transcript.get("calls")
    if transcript.get("left_out"):
        yield _Found("gateway", "event", f"{label(transcript['left_out'])} earlier calls were not kept", "left out")
    held = 0
    for number, call in enumerate(calls if isinstance(calls, list) else [], 1):
        protocol = _get(call, "protocol")
        messages = _call_messages(protocol, _get(call, "request"))
        if len(messages) < held:  # another conversation (a summary, a side request)
            held = 0
        usage = _get(call, "usage", {})
        what = {key: _get(call, key) for key in ("status", "latency_s", "stop_reason", "refusal", "error")}
        title = (
            f"call {number}: {label(_get(call, 'model'))}, {label(_get(usage, 'input_tokens'))} in / "
            f"{label(_get(usage, 'output_tokens'))} out"
        )
        yield _Found("gateway", "event", {**what, "usage": usage, "cost_usd": _get(call, "cost_usd")}, title)
        for message in messages[held:]:
            yield from _message_of(protocol, message)
        held = len(messages) + 1  # the next call holds these, this reply, then what is new
        yield from _reply_steps(protocol, _get(call, "response"))
    if transcript.get("refused_left_out"):
        refused = label(transcript["refused_left_out"])
        yield _Found("gateway", "event", f"{refused} more calls the gateway refused itself were not kept", "left out")


def _types(events: list[dict[str, Any]]) -> set[str]:
    return {kind for event in events if isinstance(kind := event.get("type"), str)}


def _detect(data: Any, gateways: bool) -> TrajectoryFormat:
    if gateways:  # the gateway's record of the calls, never a file an agent wrote in its shape
        recorded = isinstance(data, dict) and isinstance(data.get("calls"), list) and "left_out" in data
        return "model-calls" if recorded else "json"
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        data = data["messages"]
    if not isinstance(data, list) or not data or not all(isinstance(e, dict) for e in data):
        return "json"
    types = _types(data)
    if types & {"assistant", "user"} and any(isinstance(e.get("message"), dict) for e in data):
        return "claude-code"
    if any(t.startswith(("item.", "thread.", "turn.")) for t in types):
        return "codex"
    if all("role" in e for e in data):
        return "messages"
    return "json"


def _found(fmt: TrajectoryFormat, data: Any) -> Iterator[_Found]:
    if fmt == "model-calls":
        return _model_call_steps(data)
    if fmt == "claude-code":
        return _claude_steps(data)
    if fmt == "codex":
        return _codex_steps(data)
    if fmt == "messages":
        return _message_steps(data["messages"] if isinstance(data, dict) else data)
    return iter([_Found("trajectory", "event", data, "JSON")])


def _render(found: _Found, limit: int) -> Step:
    field = json_field(found.content, limit)
    return Step(label(found.role) or "?", found.kind, label(found.title), field["text"], field["length"], field["note"])


def _shown(found: Iterable[_Found]) -> tuple[list[Step], int]:
    """The first steps rendered (within the step and character budgets), and how many there are."""
    steps: list[Step] = []
    budget = MAX_TRAJECTORY_CHARS
    total = 0
    for step in found:
        total += 1
        if len(steps) < MAX_STEPS and budget > 0:
            steps.append(_render(step, min(MAX_STEP_CHARS, budget)))
            budget -= len(steps[-1].text)
    return steps, total


def conversation(data: Any, *, gateways: bool = False) -> tuple[TrajectoryFormat, list[Step], int]:
    """The trajectory's format, its steps shown and how many there were; ``gateways``: ``data``
    is the gateway's record of the unit's model calls (``model_calls.json``)."""
    fmt = _detect(data, gateways)
    steps, total = _shown(_found(fmt, data))
    return fmt, steps, total


def stored_conversation(stored: Any, *, gateways: bool = False) -> tuple[TrajectoryFormat, list[Step], int]:
    """:func:`conversation` of a stored artifact (``trajectory.json``, or ``model_calls.json``:
    ``gateways``): its text read as JSON, or shown as it is, with a note, when it is not JSON (a
    file cut to its last bytes) or nests too deep."""
    if not isinstance(stored, str):
        return conversation(stored, gateways=gateways)
    try:
        data = loads(stored)
    except Unreadable as exc:
        field = text_field(stored, MAX_STEP_CHARS, str(exc))
        return "json", [Step("trajectory", "event", "text", field["text"], field["length"], field["note"])], 1
    return conversation(data, gateways=gateways)


__all__ = [
    "MAX_STEPS",
    "MAX_STEP_CHARS",
    "MAX_TRAJECTORY_CHARS",
    "Step",
    "conversation",
    "stored_conversation",
]
