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
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..unit.workspace import REFUSAL_VERDICT_NAME as VERDICT_NAME

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


def first_text_refusal(said: list[str], errors: list[str]) -> RefusalVerdict | None:
    for text in [*errors, *said]:
        found = _text_refusal(text)
        if found is not None:
            return verdict(found[0], found[1], text, said or errors)
    return None


def strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


def mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def blocks_text(content: Any, kinds: tuple[str, ...] = ("text", "output_text")) -> list[str]:
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
    return first_text_refusal([text], [])


def choice_refusal(choice: dict[str, Any]) -> RefusalVerdict | None:
    """The refusal in one Chat Completions choice (as litellm returns it)."""
    message = mapping(choice.get("message"))
    texts = blocks_text(message.get("content"))
    refusal, finish = message.get("refusal"), choice.get("finish_reason")
    if isinstance(refusal, str) and refusal:
        return verdict("openai", "refusal_content", refusal, [refusal, *texts])
    if finish == CONTENT_FILTER:
        return verdict("openai", CONTENT_FILTER, " ".join(texts) or "finish_reason content_filter", texts)
    if finish in ANTHROPIC_REFUSAL_STOPS:  # litellm passes Anthropic's on
        return verdict("anthropic", f"stop_reason_{finish}", " ".join(texts) or f"stop_reason {finish}", texts)
    return None


def write_verdict(work_dir: Path, found: RefusalVerdict | None) -> None:
    """``refusal_verdict.json`` in the work folder (collected with the unit's artifacts): the
    verdict, or ``null`` without a refusal (a program run writes one on every run)."""
    payload = found.as_dict() if found is not None else None
    (Path(work_dir) / VERDICT_NAME).write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
