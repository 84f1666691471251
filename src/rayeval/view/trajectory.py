"""A stored trajectory (``trajectory.json`` in a row's artifacts) as a conversation.

The built-in harnesses store three shapes: Claude Code's stream-json events (``assistant`` /
``user`` messages whose content blocks are text, ``tool_use`` and ``tool_result``), Codex's
``--json`` events (``item.completed`` with agent messages, reasoning and command executions)
and mini-swe-agent's message list (``role`` / ``content``; OpenAI-style ``tool_calls`` too).
Each becomes a list of :class:`Step`; a shape none of them fits is shown as pretty JSON.
Everything here is text written by the agent: the page renders it as text only.
"""

from __future__ import annotations

import json
from typing import Any, Literal, NamedTuple

StepKind = Literal["text", "thinking", "tool_call", "tool_result", "event"]
TrajectoryFormat = Literal["claude-code", "codex", "messages", "json"]

MAX_STEPS = 2000
MAX_STEP_CHARS = 20_000


class Step(NamedTuple):
    """One entry of the conversation: who (role), what kind, a short title (a tool's name),
    and its text (clipped to ``MAX_STEP_CHARS``; ``length`` is the full size)."""

    role: str
    kind: StepKind
    title: str
    text: str
    length: int


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _step(role: Any, kind: StepKind, text: Any, title: Any = "") -> Step:
    full = _text(text)
    return Step(str(role or "?"), kind, str(title or ""), full[:MAX_STEP_CHARS], len(full))


def _block_steps(role: str, content: Any) -> list[Step]:
    """Anthropic-style content: a string or a list of typed blocks."""
    if not isinstance(content, list):
        return [_step(role, "text", content)]
    steps = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            steps.append(_step(role, "text", block.get("text", "")))
        elif kind == "thinking":
            steps.append(_step(role, "thinking", block.get("thinking", "")))
        elif kind == "tool_use":
            steps.append(_step(role, "tool_call", block.get("input", {}), block.get("name")))
        elif kind == "tool_result":
            steps.append(
                _step(
                    "tool",
                    "tool_result",
                    _tool_result_text(block.get("content")),
                    "error" if block.get("is_error") else "output",
                )
            )
        else:
            steps.append(_step(role, "event", block, kind or "block"))
    return steps


def _tool_result_text(content: Any) -> Any:
    if isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in content):
        return "\n".join(str(b.get("text", "")) for b in content)
    return content


def _claude_steps(events: list[dict[str, Any]]) -> list[Step]:
    steps: list[Step] = []
    for event in events:
        kind = event.get("type")
        message = event.get("message")
        if kind in ("assistant", "user") and isinstance(message, dict):
            steps += _block_steps(str(message.get("role") or kind), message.get("content"))
        elif kind == "result":
            steps.append(
                _step(
                    "harness",
                    "event",
                    event.get("result", event),
                    f"result ({event.get('subtype', '')})",
                )
            )
        elif kind == "system":
            steps.append(
                _step(
                    "harness",
                    "event",
                    {k: v for k, v in event.items() if k != "type"},
                    f"system {event.get('subtype', '')}",
                )
            )
    return steps


def _codex_steps(events: list[dict[str, Any]]) -> list[Step]:
    steps: list[Step] = []
    for event in events:
        item = event.get("item")
        if event.get("type") != "item.completed" or not isinstance(item, dict):
            if event.get("type") in ("turn.failed", "error"):
                steps.append(
                    _step(
                        "harness",
                        "event",
                        event.get("error") or event.get("message") or event,
                        event.get("type"),
                    )
                )
            continue
        kind = item.get("type")
        if kind == "agent_message":
            steps.append(_step("assistant", "text", item.get("text", "")))
        elif kind == "reasoning":
            steps.append(_step("assistant", "thinking", item.get("text", "")))
        elif kind == "command_execution":
            steps.append(_step("assistant", "tool_call", item.get("command", ""), "shell"))
            exit_code = item.get("exit_code")
            steps.append(
                _step(
                    "tool",
                    "tool_result",
                    item.get("aggregated_output", ""),
                    f"exit {exit_code}",
                )
            )
        else:
            steps.append(_step("assistant", "event", item, kind or "item"))
    return steps


def _message_steps(messages: list[dict[str, Any]]) -> list[Step]:
    steps: list[Step] = []
    for message in messages:
        role = str(message.get("role") or "?")
        if role == "tool":
            steps.append(
                _step(
                    "tool",
                    "tool_result",
                    _tool_result_text(message.get("content")),
                    message.get("name") or "output",
                )
            )
            continue
        if message.get("content") not in (None, "", []):
            steps += _block_steps(role, message.get("content"))
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                steps.append(
                    _step(
                        role,
                        "tool_call",
                        function.get("arguments", ""),
                        function.get("name"),
                    )
                )
            else:
                steps.append(_step(role, "tool_call", call, "tool call"))
    return steps


def _detect(data: Any) -> TrajectoryFormat:
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        data = data["messages"]
    if not isinstance(data, list) or not data or not all(isinstance(e, dict) for e in data):
        return "json"
    types = {e.get("type") for e in data}
    if types & {"assistant", "user"} and any(isinstance(e.get("message"), dict) for e in data):
        return "claude-code"
    if any(str(t).startswith(("item.", "thread.", "turn.")) for t in types):
        return "codex"
    if all("role" in e for e in data):
        return "messages"
    return "json"


def conversation(data: Any) -> tuple[TrajectoryFormat, list[Step], int]:
    """The trajectory's format, its steps (at most ``MAX_STEPS``) and how many there were."""
    fmt = _detect(data)
    if fmt == "claude-code":
        steps = _claude_steps(data)
    elif fmt == "codex":
        steps = _codex_steps(data)
    elif fmt == "messages":
        steps = _message_steps(data["messages"] if isinstance(data, dict) else data)
    else:
        steps = [_step("trajectory", "event", data, "JSON")]
    return fmt, steps[:MAX_STEPS], len(steps)


__all__ = ["MAX_STEPS", "MAX_STEP_CHARS", "Step", "conversation"]
