"""Refusals: a model that declines the task, told apart from a wrong answer.

A refusal stays the model's answer (the row is ``failed``); it is recorded as such, never retried.
Detected with the semantics of the reference runner's ``detect_llm_refusal`` (latch-eval-tools
0.4.54): the providers' own signals first (Anthropic ``stop_reason: refusal``, OpenAI refusal
content and ``content_filter`` finishes), then the refusal texts the providers and programs
write (Anthropic's usage-policy message, OpenAI's cyber-policy, biological-risk and
invalid-prompt rejections), each matched within one message. Only what the model or its
provider said is searched (replies, refusal parts, error messages), never the task, tool
output or files, which may mention policies for their own reasons.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..harness.workspace import REFUSAL_VERDICT_NAME as VERDICT_NAME

EXCERPT_CHARS = 2000
MESSAGE_CHARS = 500

#: Anthropic's stop reasons of a declined reply (``sensitive``: flagged by a safety filter)
ANTHROPIC_REFUSAL_STOPS = frozenset({"refusal", "sensitive"})
#: OpenAI's finish reason (and Responses ``incomplete_details.reason``) of a filtered reply
CONTENT_FILTER = "content_filter"


@dataclass(frozen=True)
class RefusalVerdict:
    """What ``refusal_verdict.json`` holds."""

    provider: str | None  # anthropic, openai, ...
    code: str  # e.g. stop_reason_refusal, content_filter, refusal_content
    message: str
    excerpt: str  # at most EXCERPT_CHARS of what the model said

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def verdict(provider: str | None, code: str, message: str, said: Iterable[str] = ()) -> RefusalVerdict:
    """A verdict with its message and excerpt bounded (the excerpt: what was said, joined)."""
    excerpt = "\n".join(text for text in said if text.strip())
    return RefusalVerdict(provider, code[:100], _bounded(message, MESSAGE_CHARS), _bounded(excerpt, EXCERPT_CHARS))


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ----------------------------------------------------------------------------- texts
def _text_refusal(text: str) -> tuple[str, str] | None:
    """``(provider, code)`` when ``text`` is a provider's refusal message, else None; both
    halves of a marker pair must be in this one text."""
    lowered = text.lower()
    if "usage policy" in lowered and any(word in lowered for word in ("claude", "anthropic", "unable to respond")):
        return "anthropic", "usage_policy"
    if "refusals-and-fallback" in lowered or "reduce refusals for your users" in lowered:
        return "anthropic", "refusal"
    if "cyber_policy" in lowered or "cyber policy" in lowered:
        return "openai", "cyber_policy"
    if "this content was flagged for possible biological risk" in lowered:
        return "openai", "biological_risk"
    if "invalid_prompt" in lowered or (
        "invalid prompt" in lowered and ("openai" in lowered or "limited access" in lowered)
    ):
        return "openai", "invalid_prompt"
    if "limited access to this content" in lowered and "safety reasons" in lowered:
        return "openai", "invalid_prompt"
    if "contentpolicyviolationerror" in lowered:  # litellm's exception for a filtered request
        return "openai", "content_policy_violation"
    return None


def _first_text_refusal(said: list[str], errors: list[str]) -> RefusalVerdict | None:
    for text in [*errors, *said]:
        found = _text_refusal(text)
        if found is not None:
            return verdict(found[0], found[1], text, said or errors)
    return None


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _blocks_text(content: Any, kinds: tuple[str, ...] = ("text", "output_text")) -> list[str]:
    """The text blocks of a message's ``content`` (a string or a list of typed blocks)."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [
        block["text"]
        for block in content
        if isinstance(block, dict) and block.get("type") in kinds and isinstance(block.get("text"), str)
    ]


def _refusal_parts(content: Any) -> list[str]:
    """OpenAI's refusal content parts (``{"type": "refusal", "refusal": "..."}``)."""
    if not isinstance(content, list):
        return []
    return [
        str(block.get("refusal") or block.get("text") or "")
        for block in content
        if isinstance(block, dict) and block.get("type") == "refusal"
    ]


# ----------------------------------------------------------------------------- model replies
def reply_refusal(
    provider: str | None, stop_reason: str | None, text: str, refusal_text: str | None = None
) -> RefusalVerdict | None:
    """The refusal in one reply of rayeval's model layer: its stop reason, OpenAI's refusal
    field, or a refusal message as its text."""
    if stop_reason in ANTHROPIC_REFUSAL_STOPS:
        return verdict("anthropic", f"stop_reason_{stop_reason}", text or f"stop_reason {stop_reason}", [text])
    if refusal_text:
        return verdict("openai", "refusal_content", refusal_text, [refusal_text, text])
    if stop_reason == CONTENT_FILTER:
        return verdict("openai", CONTENT_FILTER, text or "finish_reason content_filter", [text])
    return _first_text_refusal([text], [])


# ----------------------------------------------------------------------------- program events
def _claude_code(events: list[dict[str, Any]]) -> RefusalVerdict | None:
    said: list[str] = []
    errors: list[str] = []
    for event in events:
        kind = event.get("type")
        if kind == "assistant":
            message = _dict(event.get("message"))
            texts = _blocks_text(message.get("content"))
            said.extend(texts)
            stop = message.get("stop_reason")
            if stop in ANTHROPIC_REFUSAL_STOPS:  # the refused replies came before Claude Code's own message
                return verdict("anthropic", f"stop_reason_{stop}", " ".join(texts) or f"stop_reason {stop}", said[-3:])
        elif kind == "result":
            result = event.get("result")
            if event.get("stop_reason") in ANTHROPIC_REFUSAL_STOPS:
                stop = event["stop_reason"]
                return verdict("anthropic", f"stop_reason_{stop}", str(result or stop), said[-3:])
            if isinstance(result, str) and event.get("is_error"):
                errors.append(result)
            errors.extend(str(e) for e in event.get("errors") or [] if isinstance(e, str))
    return _first_text_refusal(said, errors)


def _codex(events: list[dict[str, Any]]) -> RefusalVerdict | None:
    """Codex drops OpenAI's refusal parts; a filtered reply is an incomplete response, which it
    retries (``Reconnecting... n/5`` errors, not the run's end) before the turn fails."""
    said: list[str] = []
    errors: list[str] = []
    for event in events:
        kind = event.get("type")
        item = _dict(event.get("item"))
        if kind == "item.completed" and item.get("type") == "agent_message":
            said.extend(_strings(item.get("text")))
        elif kind == "turn.failed" or (kind == "error" and not str(event.get("message")).startswith("Reconnecting")):
            error = event.get("error")
            errors.extend(_strings(error) if error is not None else _strings(event.get("message")))
    for text in errors:
        if CONTENT_FILTER in text.lower():
            return verdict("openai", CONTENT_FILTER, text, said[-1:] or [text])
    return _first_text_refusal(said, errors)


def _choice_refusal(choice: dict[str, Any]) -> RefusalVerdict | None:
    """The refusal in one Chat Completions choice (as litellm returns it)."""
    message = _dict(choice.get("message"))
    texts = _blocks_text(message.get("content"))
    refusal, finish = message.get("refusal"), choice.get("finish_reason")
    if isinstance(refusal, str) and refusal:
        return verdict("openai", "refusal_content", refusal, [refusal, *texts])
    if finish == CONTENT_FILTER:
        return verdict("openai", CONTENT_FILTER, " ".join(texts) or "finish_reason content_filter", texts)
    if finish in ANTHROPIC_REFUSAL_STOPS:  # litellm passes Anthropic's on
        return verdict("anthropic", f"stop_reason_{finish}", " ".join(texts) or f"stop_reason {finish}", texts)
    return None


def _mini_swe(events: list[dict[str, Any]]) -> RefusalVerdict | None:
    """mini-swe-agent's last model response decides (a reply without a tool call is recorded
    on the format-error message that answers it, so every message's response is looked at)."""
    said: list[str] = []
    errors: list[str] = []
    last: RefusalVerdict | None = None
    for event in events:
        if event.get("type") == "result" and isinstance(event.get("error"), str):
            errors.append(event["error"])
        if event.get("role") == "assistant":
            said.extend(_blocks_text(event.get("content")))
        choices = _dict(_dict(event.get("extra")).get("response")).get("choices")
        if isinstance(choices, list) and choices:
            last = _choice_refusal(_dict(choices[0]))
    return last or _first_text_refusal(said, errors)


#: what pi 0.79 says in place of Anthropic's ``stop_reason: refusal`` (when the provider gave no
#: explanation) and of OpenAI's ``content_filter`` finish (pi-ai's providers/anthropic.js and
#: openai-completions.js)
PI_ANTHROPIC_REFUSAL = "The model refused to complete the request"
PI_CONTENT_FILTER = "Provider finish_reason: content_filter"


def _pi(events: list[dict[str, Any]]) -> RefusalVerdict | None:
    """pi maps a provider's refusal to ``stopReason: error`` (its own stop reasons have no
    refusal), so its assistant messages' texts and ``errorMessage`` are what tell one."""
    said: list[str] = []
    errors: list[str] = []
    for event in events:
        message = _dict(event.get("message"))
        if event.get("type") != "message_end" or message.get("role") != "assistant":
            continue
        texts = _blocks_text(message.get("content"), ("text",))
        said.extend(texts)
        stop = message.get("stopReason")
        if stop == CONTENT_FILTER:
            return verdict("openai", CONTENT_FILTER, " ".join(texts) or f"stopReason {stop}", texts)
        if stop in ANTHROPIC_REFUSAL_STOPS:
            return verdict("anthropic", f"stop_reason_{stop}", " ".join(texts) or f"stopReason {stop}", texts)
        error = message.get("errorMessage")
        if stop == "error" and error == PI_ANTHROPIC_REFUSAL:
            return verdict("anthropic", "stop_reason_refusal", error, texts)
        if stop == "error" and error == PI_CONTENT_FILTER:
            return verdict("openai", CONTENT_FILTER, error, texts)
        if isinstance(error, str):
            errors.append(error)
    return _first_text_refusal(said, errors)


_DETECTORS: dict[str, Callable[[list[dict[str, Any]]], RefusalVerdict | None]] = {
    "claude-code": _claude_code,
    "codex": _codex,
    "mini-swe-agent": _mini_swe,
    "pi": _pi,
}


def detect_program_refusal(harness: str, events: list[dict[str, Any]]) -> RefusalVerdict | None:
    """The refusal in a program's events (``harness`` names the program), or None (also for a
    program this module does not know)."""
    detector = _DETECTORS.get(harness)
    return detector([e for e in events if isinstance(e, dict)]) if detector is not None else None


def evaluates(harness: str) -> bool:
    """Whether the events of ``harness`` are searched for refusals."""
    return harness in _DETECTORS


def write_verdict(work_dir: Path, found: RefusalVerdict) -> None:
    """``refusal_verdict.json`` in the work folder (collected with the unit's artifacts)."""
    (Path(work_dir) / VERDICT_NAME).write_text(json.dumps(found.as_dict(), ensure_ascii=False), encoding="utf-8")
