"""Refusals: a model that declines the task, told apart from a wrong answer.

A refusal stays the model's answer (the row is ``failed``); it is recorded as such, never retried.
Detected with the semantics of the reference runner's ``detect_llm_refusal`` (latch-eval-tools
0.4.54): the providers' own signals first (Anthropic ``stop_reason: refusal``, OpenAI refusal
content and ``content_filter`` finishes), then the refusal texts the providers and programs
write (Anthropic's usage-policy message, OpenAI's cyber-policy, biological-risk and
invalid-prompt rejections), then ``refusal`` with ``policy`` or ``safety`` (provider
``unknown``), each matched within one message. Only what the model or its
provider said is searched (replies, refusal parts, error messages), never the task, tool
output or files, which may mention policies for their own reasons.

:func:`detect_refusal` reads the shapes the reference runner reads without knowing the program:
a trajectory of any shape (an event list, a ``{"messages": [...]}`` dict), an agent's output
object, its error text, and a refusal sidecar (the records a pi extension writes to
``refusal_events.jsonl``), in that runner's order: the sidecar first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..unit.workspace import REFUSAL_VERDICT_NAME as VERDICT_NAME

EXCERPT_CHARS = 2000
MESSAGE_CHARS = 500
CODE_CHARS = 100

#: Anthropic's stop reasons of a declined reply (``sensitive``: flagged by a safety filter)
ANTHROPIC_REFUSAL_STOPS = frozenset({"refusal", "sensitive"})
#: OpenAI's finish reason (and Responses ``incomplete_details.reason``) of a filtered reply
CONTENT_FILTER = "content_filter"
#: the provider of a refusal no provider's signal or words name
UNKNOWN = "unknown"
#: a sidecar record's provider, as the programs name it, by the provider the verdict names (else UNKNOWN)
SIDECAR_PROVIDERS = {
    "anthropic": "anthropic", "openai": "openai", "openai-completions": "openai", "openai-responses": "openai",
    "google": "google",
}  # fmt: skip
#: the most strings of one value searched (a huge trajectory is not walked past them)
MAX_STRINGS = 5000
#: the most bytes of a refusal sidecar read
MAX_SIDECAR_BYTES = 1024 * 1024


#: the words of Anthropic's refusal message that point to its fallback-model guide
ANTHROPIC_FALLBACK_MARKERS = ("refusals-and-fallback", "configuring a fallback model", "reduce refusals for your users")


@dataclass(frozen=True)
class RefusalVerdict:
    """What ``refusal_verdict.json`` holds."""

    provider: str  # anthropic, openai, google or UNKNOWN
    code: str  # e.g. stop_reason_refusal, content_filter, refusal_content
    message: str
    excerpt: str  # at most EXCERPT_CHARS of what the model said
    #: where it was found, as the reference runner names it: ``trajectory`` (the program's
    #: events, any trajectory), ``agent_output`` (its output object or error), ``refusal_sidecar``
    source: str = "trajectory"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def verdict(
    provider: str, code: str, message: str, said: Iterable[str] = (), *, source: str = "trajectory"
) -> RefusalVerdict:
    """A verdict with its code, message and excerpt bounded, a cut one ending with "…" (the
    excerpt: what was said, joined)."""
    excerpt = "\n".join(text for text in said if text.strip())
    bounded = _bounded(code, CODE_CHARS), _bounded(message, MESSAGE_CHARS), _bounded(excerpt, EXCERPT_CHARS)
    return RefusalVerdict(provider, *bounded, source=source)


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ----------------------------------------------------------------------------- texts
def _text_refusal(text: str) -> tuple[str, str] | None:
    """``(provider, code)`` when ``text`` is a provider's refusal message, else None; both
    halves of a marker pair must be in this one text."""
    lowered = text.lower()
    if "usage policy" in lowered and any(word in lowered for word in ("claude", "anthropic", "unable to respond")):
        return "anthropic", "usage_policy"
    if any(marker in lowered for marker in ANTHROPIC_FALLBACK_MARKERS):
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


def _generic_refusal(text: str) -> bool:
    """A refusal no provider's words name: ``refusal`` with ``policy`` or ``safety``, in one text."""
    lowered = text.lower()
    return "refusal" in lowered and ("policy" in lowered or "safety" in lowered)


def first_text_refusal(said: list[str], errors: list[str]) -> RefusalVerdict | None:
    """The first provider's refusal text among ``errors`` then ``said``, else the first text
    that is a refusal no provider's words name."""
    texts = [*errors, *said]
    for text in texts:
        found = _text_refusal(text)
        if found is not None:
            return verdict(found[0], found[1], text, said or errors)
    generic = next((text for text in texts if _generic_refusal(text)), None)
    return verdict(UNKNOWN, "refusal", generic, said or errors) if generic is not None else None


def strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


def fields_named(value: Any, names: frozenset[str]) -> Iterator[str]:
    """The string values of the fields named ``names`` anywhere in ``value``."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in names and isinstance(item, str):
                yield item
            else:
                yield from fields_named(item, names)
    elif isinstance(value, list):
        for item in value:
            yield from fields_named(item, names)


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


# ----------------------------------------------------------------------------- any shape
_STOP_FIELDS = frozenset({"stop_reason", "stopReason"})
_FINISH_FIELDS = frozenset({"finish_reason", "finishReason"})
#: the fields whose values are what a model or its provider said
_SAID_FIELDS = frozenset({"text", "result", "content", "message", "refusal", "explanation", "errorMessage", "error"})


def value_refusal(value: Any) -> RefusalVerdict | None:
    """The refusal in a value of any shape (a trajectory, an output object, an error's JSON or
    text): a refusal stop reason or a ``content_filter`` finish in any field so named, else a
    provider's refusal text, else ``refusal`` with ``policy`` or ``safety``, each within one
    string (an ``ls`` listing and an unrelated turn never make one together). Its own ``code``
    (an error's), where it has one, is the verdict's, as the reference runner keeps it."""
    if isinstance(value, str):
        parsed = _json_value(value)
        value = parsed if isinstance(parsed, (dict, list)) else value
    texts = [text for _, text in zip(range(MAX_STRINGS), (t for t in strings_in(value) if t.strip()))]
    stop = next((reason for reason in fields_named(value, _STOP_FIELDS) if reason in ANTHROPIC_REFUSAL_STOPS), None)
    found: RefusalVerdict | None
    if stop is not None:
        found = verdict("anthropic", f"stop_reason_{stop}", _first_said(value) or f"stop_reason {stop}", texts)
    elif CONTENT_FILTER in fields_named(value, _FINISH_FIELDS):
        found = verdict("openai", CONTENT_FILTER, _first_said(value) or "finish_reason content_filter", texts)
    else:
        found = first_text_refusal(texts, [])
        said = _first_said(value)
        messages = {_bounded(text, MESSAGE_CHARS) for text in fields_named(value, _SAID_FIELDS)}
        if found is not None and said and found.message not in messages:
            # named by a field that is no message (an error's ``code``): the message is what was said
            found = replace(found, message=_bounded(said, MESSAGE_CHARS))
    code = _own_code(value)
    return replace(found, code=_bounded(code, CODE_CHARS)) if found is not None and code is not None else found


def _own_code(value: Any) -> str | None:
    """A value's own ``code``, as the reference runner takes it: the first non-empty string of a
    field so named, a mapping's own before those of the values nested in it."""
    if isinstance(value, dict):
        code = value.get("code")
        if isinstance(code, str) and code:
            return code
        nested: Iterable[Any] = value.values()
    elif isinstance(value, list):
        nested = value
    else:
        return None
    return next((code for item in nested if (code := _own_code(item)) is not None), None)


def _first_said(value: Any) -> str:
    """What a refused reply said, as far as a value of no known shape tells: its first refusal
    text, else the longest text of a field that holds what was said (never an id's or a type's
    value)."""
    said = [text for text in fields_named(value, _SAID_FIELDS) if text.strip()]
    return next((text for text in said if _text_refusal(text)), max(said, key=len, default=""))


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def sidecar_refusal(records: list[Any]) -> RefusalVerdict | None:
    """The verdict of a refusal sidecar's first record (``provider``, ``raw_reason``,
    ``explanation``); None without one."""
    record = next(iter(records), None)
    if not isinstance(record, dict):
        return None
    provider, reason, explanation = record.get("provider"), record.get("raw_reason"), record.get("explanation")
    message = (
        explanation if isinstance(explanation, str) and explanation else f"Model refusal ({reason or 'unknown reason'})"
    )
    return verdict(
        SIDECAR_PROVIDERS.get(provider, UNKNOWN) if isinstance(provider, str) else UNKNOWN,
        reason if isinstance(reason, str) and reason else "refusal",
        message,
        [json.dumps(record, ensure_ascii=False)],
        source="refusal_sidecar",
    )


def detect_refusal(
    *, trajectory: Any = None, output: Any = None, error: str | None = None, sidecar: list[Any] | None = None
) -> RefusalVerdict | None:
    """The refusal in whatever a run left, in the reference runner's order: the sidecar's
    first record, then the trajectory, the agent's output object, its error (text or JSON)."""
    if sidecar:
        return sidecar_refusal(sidecar)
    for value, source in ((trajectory, "trajectory"), (output, "agent_output"), (error, "agent_output")):
        found = value_refusal(value) if value is not None else None
        if found is not None:
            return replace(found, source=source)
    return None


def read_sidecar(path: Path) -> list[Any] | None:
    """The records of a refusal sidecar (JSON lines; a line that is none is skipped); None when
    there is no such regular file."""
    if path.is_symlink() or not path.is_file():
        return None
    with path.open("rb") as file:
        lines = file.read(MAX_SIDECAR_BYTES).decode("utf-8", "replace").splitlines()
    return [record for record in map(_json_value, lines) if isinstance(record, dict)]


def write_verdict(work_dir: Path, found: RefusalVerdict | None) -> None:
    """``refusal_verdict.json`` in the work folder (collected with the unit's artifacts): the
    verdict, or ``null`` without a refusal (a program run writes one on every run)."""
    payload = found.as_dict() if found is not None else None
    (Path(work_dir) / VERDICT_NAME).write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
