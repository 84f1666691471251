"""Wording shared by error messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

MAX_LISTED = 5  # items named in a message before "... and N more"


def listed(items: Sequence[str], most: int = MAX_LISTED) -> str:
    """``a, b, c, d, e and 3 more``: a message names a few and counts the rest."""
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def pydantic_problems(exc: ValidationError, where: str) -> list[str]:
    """One line per error of a pydantic validation, after ``where``: ``where: field: message``."""
    out = []
    for error in exc.errors():
        loc = ".".join(str(part) for part in error["loc"])
        message = error["msg"]
        message = message.removeprefix("Value error, ")
        if error["type"] == "missing":
            message = "is required"
        elif error["type"] == "extra_forbidden":
            message = "is not a known field"
        elif error["type"] == "callable_type":
            message = f"must be callable, got {type(error.get('input')).__name__}"
        out.append(f"{where}: {loc}: {message}" if loc else f"{where}: {message}")
    return out
