"""A unit's calls as its transcript: each request and reply kept, bounded in size."""

from __future__ import annotations

import json
import sys
from typing import Any

#: a text longer than this keeps its head and says how much was cut
MAX_TEXT_CHARS = 20_000
#: a list longer than this keeps its last items (a conversation's newest turns)
MAX_ITEMS = 200
MAX_DEPTH = 24


#: what a call's request or reply copy is replaced by once its session dropped it (see
#: ``server.MAX_COPY_BYTES``): the transcript holds the newest calls up to the first such
COPY_NOT_KEPT = "[not kept: the gateway keeps the copies of a unit's newest calls]"


#: what CPython 3.11 takes for an empty list and dict, for a JSON value other than a text, and
#: for a slot of a list or dict that holds a value (on 64-bit builds)
_LIST_BYTES, _DICT_BYTES, _VALUE_BYTES, _SLOT_BYTES = 56, 64, 32, 8


def copy_size(value: Any) -> int:
    """About how many bytes of memory a :func:`bounded` copy takes: what a session's copies of
    its calls are counted by. Not its JSON's length: ``[]`` is two bytes of JSON and 64 of memory,
    so a request of many small values would hold many times what it is counted by."""
    if isinstance(value, str):  # what CPython says, at once: 1, 2 or 4 bytes a character
        return sys.getsizeof(value)
    if isinstance(value, dict):
        slots = sum(copy_size(str(key)) + 2 * _SLOT_BYTES + copy_size(item) for key, item in value.items())
        return _DICT_BYTES + slots
    if isinstance(value, list):
        return _LIST_BYTES + sum(_SLOT_BYTES + copy_size(item) for item in value)
    return _VALUE_BYTES


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
