"""JSON for values that agents and graders produce: numpy scalars and arrays included."""

from __future__ import annotations

import json
import json.decoder
import math
from collections.abc import Callable
from typing import Any

from .errors import RayevalError

#: Hostile JSON text is decoded only when it may hold at most one value a this many bytes of the
#: most its reader reads: decoded, a value costs up to ~70 bytes of memory however few bytes of
#: text it took (three bytes of ``[{},{},…]`` make a 64-byte dict), so that an answer of at most
#: 10 MB holds at most ~1 M values, ~100 MB decoded rather than ~300 MB.
BYTES_PER_VALUE = 10


#: the JSON module's string scanner (C): ``(text, index after a quote) -> (string, index after its end)``
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


class TooManyValues(RayevalError, ValueError):
    """JSON text that may hold more values than its reader decodes (see :func:`loads_bounded`)."""


def values_bound(text: str | bytes) -> int:
    """An upper bound of the values JSON ``text`` holds: one per ``,``, ``:``, ``[`` or ``{``
    (those inside strings counted too), and one; counted without decoding it."""
    if isinstance(text, str):
        return 1 + sum(text.count(mark) for mark in ",:[{")
    return 1 + sum(text.count(mark) for mark in (b",", b":", b"[", b"{"))


def loads_bounded(text: str | bytes, max_bytes: int) -> Any:
    """``json.loads(text)``, for hostile ``text`` read with a limit of ``max_bytes``: refused
    (:class:`TooManyValues`) before it is decoded when it may hold more values than one a
    :data:`BYTES_PER_VALUE` bytes of that limit: counted by :func:`values_bound`, then, where
    that says more, again with its strings skipped (a CSV table in one string is one value)."""
    most = max_bytes // BYTES_PER_VALUE
    if len(text) > most and values_bound(text) > most and _more_values_than(text, most):
        raise TooManyValues(
            f"it holds more than {most:,} JSON values (texts, numbers, and the values its commas, colons, "
            f"brackets and braces outside its texts may add), the most read of {max_bytes:,} bytes"
        )
    return json.loads(text)


def _more_values_than(text: str | bytes, most: int) -> bool:
    """Whether ``text`` holds more than ``most`` values, counting each of its strings (skipped by
    the JSON scanner) as one and each ``,``, ``:``, ``[`` or ``{`` outside them: at most ``most``
    strings are scanned. Called where :func:`values_bound` says more: text that is not JSON is
    counted so."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")  # counted, not read: a bad byte makes no structure
    count, at = 1, 0
    while count <= most:
        quote = text.find('"', at)
        gap = text[at:] if quote < 0 else text[at:quote]
        count += values_bound(gap) - 1
        if quote < 0:
            break
        try:
            at = _scanstring(text, quote + 1)[1]
        except ValueError:  # a string without its end: not JSON, counted as values_bound counts it
            return True
        count += 1
    return count > most


def json_fallback(value: Any) -> Any:
    """What ``json``/pydantic cannot encode natively: numpy values as Python ones, else text."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        return item()  # numpy scalar
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()  # numpy array
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    return str(value)


def dumps(value: Any) -> str:
    return json.dumps(value, default=json_fallback, ensure_ascii=False)


def object_at(value: Any, key: str) -> dict:
    """``value[key]`` when ``value`` is a JSON object and that member is one too, else ``{}``."""
    member = value.get(key) if isinstance(value, dict) else None
    return member if isinstance(member, dict) else {}


def count_in(value: Any) -> int | None:
    """``value`` when it is a whole number >= 0 (not a bool), else None: a count as an agent's
    JSON may hold one."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def amount_in(value: Any) -> float | None:
    """``value`` as a float when it is a finite number >= 0 (not a bool, not a string), else
    None: seconds or dollars as an agent's JSON may hold them."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None
