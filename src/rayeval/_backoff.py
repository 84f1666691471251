"""The one backoff formula of every layer: a wait that doubles with each retry, up to a cap
(each caller draws its own jitter around it)."""

from __future__ import annotations

import math


def doubled_s(first_s: float, retries: int, cap_s: float = math.inf) -> float:
    """``first_s`` doubled ``retries`` times (0: ``first_s`` itself), at most ``cap_s``."""
    return min(cap_s, first_s * 2.0 ** min(max(retries, 0), 64))
