"""JSON for values that agents and graders produce: numpy scalars and arrays included."""

from __future__ import annotations

import json
import math
from typing import Any


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
