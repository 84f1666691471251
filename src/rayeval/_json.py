"""JSON for values that agents and graders produce: numpy scalars and arrays included."""

from __future__ import annotations

import json
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
