"""A unit's calls as its transcript: each request and reply kept, bounded in size."""

from __future__ import annotations

import json
from typing import Any

#: a text longer than this keeps its head and says how much was cut
MAX_TEXT_CHARS = 20_000
#: a list longer than this keeps its last items (a conversation's newest turns)
MAX_ITEMS = 200
MAX_DEPTH = 24


#: what a call's request or reply copy is replaced by once its session dropped it (see
#: ``server.MAX_COPY_BYTES``): the transcript holds the newest calls up to the first such
COPY_NOT_KEPT = "[not kept: the gateway keeps the copies of a unit's newest calls]"


def copy_size(value: Any) -> int:
    """About how many bytes a :func:`bounded` copy takes as JSON (its texts' lengths, and a few
    bytes per value): what a session's copies of its calls are counted by."""
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, dict):
        return 2 + sum(len(str(key)) + 4 + copy_size(item) for key, item in value.items())
    if isinstance(value, list):
        return 2 + sum(copy_size(item) + 1 for item in value)
    return 8


def bounded(value: Any, depth: int = 0) -> Any:
    """``value`` (JSON) with long texts and lists cut and deep nesting replaced, so that a
    transcript of any call stays small enough to store and to show."""
    if isinstance(value, str):
        if len(value) <= MAX_TEXT_CHARS:
            return value
        return value[:MAX_TEXT_CHARS] + f"… [{len(value) - MAX_TEXT_CHARS:,} more characters]"
    if depth >= MAX_DEPTH and isinstance(value, (dict, list)):
        return "[nested too deep]"
    if isinstance(value, dict):
        return {str(key)[:200]: bounded(item, depth + 1) for key, item in list(value.items())[:MAX_ITEMS]}
    if isinstance(value, list):
        kept = value[-MAX_ITEMS:]
        items = [bounded(item, depth + 1) for item in kept]
        if len(value) > len(kept):
            items.insert(0, f"[{len(value) - len(kept)} earlier items not kept]")
        return items
    return value


#: the artifact that holds a unit's model calls, as the gateway relayed them
MODEL_CALLS_ARTIFACT = "model_calls.json"


def transcript_text(calls: list[dict[str, Any]], max_bytes: int, refused_left_out: int = 0) -> str:
    """``calls`` as the JSON of the unit's transcript artifact, at most ``max_bytes``: the
    newest calls that fit (and whose copies were kept), how many older ones were left out, and how many calls the gateway
    refused itself it kept no record of (``refused_left_out``)."""
    kept: list[str] = []
    size = 64
    for call in reversed(calls):
        if COPY_NOT_KEPT in (call.get("request"), call.get("response")):
            break
        text = json.dumps(call, ensure_ascii=False, default=str)
        size += len(text.encode()) + 2
        if size > max_bytes:
            break
        kept.append(text)
    left_out = len(calls) - len(kept)
    calls_json = ",\n".join(reversed(kept))
    return f'{{"left_out": {left_out}, "refused_left_out": {refused_left_out}, "calls": [{calls_json}]}}'
