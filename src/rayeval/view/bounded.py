"""What an agent stored, as text for the page, at a cost bounded whatever its size, depth or shape.

Every text the page shows is a :class:`TextField`, ``{"text", "length", "note"}``: at most a limit
of characters, the length of what was stored, and a note saying what is not shown (the text
cut at the limit, levels nested deeper than :data:`MAX_DEPTH`, a stored JSON text that is not
JSON or nests too deep to read). Nested JSON is indented lazily and rendering stops at the
limit, so no value costs more than its limit to show: no recursion deeper than
:data:`MAX_DEPTH` levels, and no indentation that grows with depth times size.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, TypedDict

from ..errors import RayevalError

MAX_TEXT_CHARS = 200_000
#: levels of nested lists and objects shown; deeper ones are shown as ``[…]`` and ``{…}``
MAX_DEPTH = 50
#: a name or label (a trajectory's role or tool, a metric's name, an error kind)
MAX_LABEL_CHARS = 200
INDENT = "  "


class TextField(TypedDict):
    """A text for the page: its first characters, the stored length and what is left out."""

    text: str
    length: int
    note: str | None


class Unreadable(RayevalError, ValueError):
    """A stored JSON text that cannot be read as JSON; its message says why, for the page."""


def loads(text: str) -> Any:
    """``json.loads``, or :class:`Unreadable` for a text that is not JSON or nests deeper than
    the parser goes (its recursion limit: the parser stops there, having done bounded work)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise Unreadable("nested too deep to read as JSON: shown as stored") from None
    except ValueError:
        raise Unreadable("not JSON: shown as stored") from None


_SURROGATE = re.compile("[\ud800-\udfff]")


def unicode(text: str) -> str:
    """``text`` with each surrogate code point (a lone ``\\ud800`` escape read from JSON: not
    Unicode text, which no encoder, browser driver or strict JSON reader takes) as U+FFFD."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def _notes(*notes: str | None) -> str | None:
    return "; ".join(n for n in notes if n) or None


def text_field(text: str, limit: int = MAX_TEXT_CHARS, note: str | None = None) -> TextField:
    """A stored text, cut at ``limit`` characters."""
    cut = f"truncated: showing the first {limit:,} of {len(text):,} characters" if len(text) > limit else None
    return {"text": unicode(text[:limit]), "length": len(text), "note": _notes(note, cut)}


def json_field(value: Any, limit: int = MAX_TEXT_CHARS, stored: int | None = None) -> TextField:
    """A JSON value (a string as itself), indented, rendered up to ``limit`` characters;
    ``stored``: the length of the JSON text it was read from."""
    if isinstance(value, str):
        return text_field(value, limit)
    text, complete, deep = render_json(value, limit)
    of = f" ({stored:,} characters stored)" if stored is not None else ""
    cut = None if complete else f"truncated: showing the first {limit:,} characters of its JSON{of}"
    deeper = f"nested more than {MAX_DEPTH} levels deep: deeper levels shown as […] and {{…}}" if deep else None
    return {"text": unicode(text), "length": len(text) if stored is None else stored, "note": _notes(deeper, cut)}


def stored_json_field(text: Any, limit: int = MAX_TEXT_CHARS) -> TextField | None:
    """A stored JSON text (``*_json`` columns) indented for reading; as stored, with a note,
    when it is not JSON or nests too deep to read; None when missing."""
    if not isinstance(text, str):
        return None
    try:
        value = loads(text)
    except Unreadable as exc:
        return text_field(text, limit, str(exc))
    return json_field(value, limit, stored=len(text))


def label(value: Any, limit: int = MAX_LABEL_CHARS) -> str:
    """A short one-line text for a name or title (``""`` for None)."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else render_json(value, limit, indent=False)[0]
    return unicode(text if len(text) <= limit else text[: limit - 1] + "…")


def render_json(value: Any, limit: int, *, indent: bool = True) -> tuple[str, bool, bool]:
    """``value`` as JSON text (indented, or on one line), at most ``limit`` characters: the
    text, whether it is complete, and whether levels deeper than :data:`MAX_DEPTH` were cut."""
    deep: list[bool] = []
    pieces: list[str] = []
    size = 0
    for piece in _pieces(value, 0, deep, indent):
        pieces.append(piece)
        size += len(piece)
        if size > limit:
            return "".join(pieces)[:limit], False, bool(deep)
    return "".join(pieces), True, bool(deep)


def _pieces(value: Any, level: int, deep: list[bool], indent: bool) -> Iterator[str]:
    """The JSON text of ``value`` piece by piece (lazily: the caller stops at its limit)."""
    if isinstance(value, dict):
        items: Any = value.items()
        opening, closing = "{", "}"
    elif isinstance(value, (list, tuple)):
        items = ((None, item) for item in value)
        opening, closing = "[", "]"
    else:
        yield _scalar(value)
        return
    if not value:
        yield opening + closing
        return
    if level >= MAX_DEPTH:
        deep.append(True)
        yield f"{opening}…{closing}"
        return
    first, then = (opening + "\n" + INDENT * (level + 1), ",\n" + INDENT * (level + 1)) if indent else (opening, ", ")
    for number, (key, item) in enumerate(items):
        separator = then if number else first
        yield separator if key is None else f"{separator}{_scalar(str(key))}: "
        yield from _pieces(item, level + 1, deep, indent)
    yield ("\n" + INDENT * level if indent else "") + closing


def _scalar(value: Any) -> str:
    """A JSON scalar's text (NaN and the infinities as JavaScript writes them); anything else's as a string."""
    scalar = value is None or isinstance(value, (str, int, float))
    return json.dumps(value if scalar else str(value), ensure_ascii=False)


__all__ = [
    "MAX_DEPTH",
    "MAX_LABEL_CHARS",
    "MAX_TEXT_CHARS",
    "TextField",
    "Unreadable",
    "json_field",
    "label",
    "loads",
    "render_json",
    "stored_json_field",
    "text_field",
    "unicode",
]
