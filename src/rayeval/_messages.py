"""Wording shared by error messages."""

from __future__ import annotations

from collections.abc import Sequence

MAX_LISTED = 5  # items named in a message before "... and N more"


def listed(items: Sequence[str], most: int = MAX_LISTED) -> str:
    """``a, b, c, d, e and 3 more``: a message names a few and counts the rest."""
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")
