"""The predicate language leaves are written in: validation, evaluation, capacity, paths.

A predicate is a JSON tree of ``{"op": ...}`` nodes. It is validated in full before any
answer is looked at (a bad tree is a configuration error), then evaluated against one
bound answer value. Equality is Python equality on decoded JSON, so ``1 == 1.0 == true``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from ..errors import RayevalError
from ._common import is_finite_number, parse_float

MAX_DEPTH = 16
"""The root is depth 0; a node deeper than this is a configuration error."""

SCALAR_OPS = frozenset({"f1", "jaccard", "weighted_label"})
"""Ops that produce a float; every other op produces a bool."""

_PATH = re.compile(r"\$(?:\.[A-Za-z_][A-Za-z0-9_]*|\[\*\])*")
_PATH_TOKEN = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[\*\]")
WILDCARD = None
"""The token ``[*]`` in a parsed path; every other token is a member name."""


class PredicateEvaluationError(RayevalError, ValueError):
    """The bound value cannot be evaluated: an invalid answer, never a configuration error."""


# --------------------------------------------------------------------------- paths


@lru_cache(maxsize=4096)
def parse_path(path: str) -> tuple[str | None, ...] | None:
    """Tokens of a ``$``-rooted path (``.ident`` and ``[*]`` only), or None if it is invalid.

    Cached: the same few paths are parsed on every grading.
    """
    if _PATH.fullmatch(path) is None:
        return None
    return tuple(match.group(1) for match in _PATH_TOKEN.finditer(path, 1))


def valid_path_tokens(path: str) -> tuple[str | None, ...]:
    """Tokens of a path that validation already accepted; an invalid one here is a bug, not bad input."""
    tokens = parse_path(path)
    if tokens is None:
        raise ValueError(f"path {path!r} reached evaluation without being validated")
    return tokens


def resolve_path(tokens: tuple[str | None, ...], root: Any) -> list:
    """Every node the path reaches; nodes of the wrong shape drop out silently."""
    nodes = [root]
    for token in tokens:
        if token is WILDCARD:
            nodes = [item for node in nodes if isinstance(node, list) for item in node]
        else:
            nodes = [node[token] for node in nodes if isinstance(node, dict) and token in node]
    return nodes


# --------------------------------------------------------------------------- validation


def predicate_error(node: Any, depth: int = 0) -> str | None:
    """The first problem found depth-first in a predicate tree, or None when it is valid."""
    if depth > MAX_DEPTH:
        return f"predicate nested deeper than {MAX_DEPTH} levels"
    if not isinstance(node, dict):
        return f"a predicate node must be an object, got {_kind(node)}"
    op = node.get("op")
    check = _VALIDATORS.get(op) if isinstance(op, str) else None
    if check is None:
        return f"unknown predicate op {op!r}"
    return check(node, depth)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _is_hashable(value: Any) -> bool:
    """Scalars (string, number, bool, null) can be set members; arrays and objects cannot."""
    return not isinstance(value, (list, dict))


def _needs(node: dict, key: str) -> str | None:
    return None if key in node else f"op {node['op']!r} needs {key!r}"


def _nonempty_array(node: dict, key: str) -> str | None:
    value = node.get(key)
    if isinstance(value, list) and value:
        return None
    return f"op {node['op']!r}: {key!r} must be a non-empty array"


def _hashable_array(node: dict, key: str) -> str | None:
    value = node.get(key)
    if isinstance(value, list) and all(map(_is_hashable, value)):
        return None
    return f"op {node['op']!r}: {key!r} must be an array of strings, numbers, booleans or null"


def _child(node: dict, key: str, depth: int) -> str | None:
    return _needs(node, key) or predicate_error(node[key], depth + 1)


def _check_equals(node: dict, depth: int) -> str | None:
    return _needs(node, "arg")


def _check_in(node: dict, depth: int) -> str | None:
    return _nonempty_array(node, "args")


def _check_set_eq(node: dict, depth: int) -> str | None:
    return _hashable_array(node, "expected")


def _check_logic(node: dict, depth: int) -> str | None:
    error = _nonempty_array(node, "args")
    if error:
        return error
    for arg in node["args"]:
        error = predicate_error(arg, depth + 1)
        if error:
            return error
    return None


def _check_not(node: dict, depth: int) -> str | None:
    return _child(node, "arg", depth)


def _check_quantifier(node: dict, depth: int) -> str | None:
    path = node.get("path")
    if not isinstance(path, str) or parse_path(path) is None:
        return f"op {node['op']!r}: path {path!r} is not in the JSONPath subset ($, .ident, [*])"
    return _child(node, "body", depth)


def _check_field(node: dict, depth: int) -> str | None:
    name = node.get("name")
    if not isinstance(name, str) or not name:
        return "op 'field': 'name' must be a non-empty string"
    return _child(node, "body", depth)


def _check_jaccard(node: dict, depth: int) -> str | None:
    error = _nonempty_array(node, "possible_sets")
    if error:
        return error
    for candidate in node["possible_sets"]:
        if not (isinstance(candidate, str) or (isinstance(candidate, list) and all(map(_is_hashable, candidate)))):
            return f"op {node['op']!r}: each possible set must be a string or an array of scalars"
    return None


def _check_jaccard_ge(node: dict, depth: int) -> str | None:
    error = _check_jaccard(node, depth)
    if error:
        return error
    threshold = node.get("threshold")
    if not is_finite_number(threshold) or not 0 <= threshold <= 1:
        return "op 'jaccard_ge': 'threshold' must be a number in [0, 1]"
    return None


def _check_f1(node: dict, depth: int) -> str | None:
    return _hashable_array(node, "expected")


def _check_weighted_label(node: dict, depth: int) -> str | None:
    table = node.get("table")
    if not isinstance(table, dict):
        return "op 'weighted_label': 'table' must be an object"
    for label, weight in table.items():
        if not is_finite_number(weight):
            return f"op 'weighted_label': weight of {label!r} must be a finite number"
    if "default" in node and not is_finite_number(node["default"]):
        return "op 'weighted_label': 'default' must be a finite number"
    return None


_VALIDATORS: dict[str, Callable[[dict, int], str | None]] = {
    "equals": _check_equals,
    "in": _check_in,
    "unordered_set_eq": _check_set_eq,
    "and": _check_logic,
    "or": _check_logic,
    "not": _check_not,
    "any": _check_quantifier,
    "every": _check_quantifier,
    "none": _check_quantifier,
    "field": _check_field,
    "jaccard_ge": _check_jaccard_ge,
    "jaccard": _check_jaccard,
    "f1": _check_f1,
    "weighted_label": _check_weighted_label,
}


# --------------------------------------------------------------------------- capacity


def score_capacity(predicate: Any) -> float:
    """The most a leaf can score: 1.0, except for a top-level weighted_label.

    For weighted_label it is the largest strictly positive finite weight or default
    (0.0 if there is none); entries that are not finite numbers are skipped, so this
    is defined even for a table that fails validation.
    """
    if not isinstance(predicate, dict) or predicate.get("op") != "weighted_label":
        return 1.0
    table = predicate.get("table")
    weights = list(table.values()) if isinstance(table, dict) else []
    weights.append(predicate.get("default", 0))
    return float(max((w for w in weights if is_finite_number(w) and w > 0), default=0.0))


# --------------------------------------------------------------------------- evaluation


def evaluate(node: dict, value: Any) -> bool | float:
    """Evaluate a validated predicate on a bound value (never MISSING).

    Boolean ops give a bool, scalar ops a float; raises PredicateEvaluationError when the
    value has a shape the op cannot use.
    """
    return _EVALUATORS[node["op"]](node, value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite_float(text: str) -> float | None:
    """A numeric string's value (Python ``float()`` rules), or None when unparseable or infinite."""
    parsed = parse_float(text.strip())
    return parsed if parsed is not None and math.isfinite(parsed) else None


def _as_set(value: Any) -> set:
    if isinstance(value, str):
        return {value}
    if isinstance(value, list):
        try:
            return set(value)
        except TypeError:
            raise PredicateEvaluationError("an array holding arrays or objects cannot be used as a set") from None
    raise PredicateEvaluationError(f"a {_kind(value)} value cannot be used as a set")


def _jaccard(a: set, b: set) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 1.0


def _eval_equals(node: dict, value: Any) -> bool:
    arg = node["arg"]
    if isinstance(value, str) and _is_number(arg):
        parsed = _finite_float(value)
        return parsed is not None and parsed == arg
    return value == arg


def _eval_in(node: dict, value: Any) -> bool:
    args = node["args"]
    # ``in`` matches on identity first, so a NaN would match itself (JSON parsing gives every
    # NaN the same object); ``==`` never does.
    if value in args and not (isinstance(value, float) and math.isnan(value)):
        return True
    if isinstance(value, str):
        parsed = _finite_float(value)
        if parsed is not None:
            return any(parsed == arg for arg in args if _is_number(arg))
    return False


def _eval_set_eq(node: dict, value: Any) -> bool:
    return _as_set(value) == set(node["expected"])


def _eval_and(node: dict, value: Any) -> bool:
    for arg in node["args"]:
        if not evaluate(arg, value):
            return False
    return True


def _eval_or(node: dict, value: Any) -> bool:
    for arg in node["args"]:
        if evaluate(arg, value):
            return True
    return False


def _eval_not(node: dict, value: Any) -> bool:
    return not evaluate(node["arg"], value)


def _matches(node: dict, value: Any) -> list:
    return resolve_path(valid_path_tokens(node["path"]), value)


def _eval_any(node: dict, value: Any) -> bool:
    body = node["body"]
    return any(evaluate(body, match) for match in _matches(node, value))


def _eval_every(node: dict, value: Any) -> bool:
    body = node["body"]
    matches = _matches(node, value)
    return bool(matches) and all(evaluate(body, match) for match in matches)


def _eval_none(node: dict, value: Any) -> bool:
    body = node["body"]
    matches = _matches(node, value)
    return bool(matches) and not any(evaluate(body, match) for match in matches)


def _eval_field(node: dict, value: Any) -> bool | float:
    name = node["name"]
    if isinstance(value, dict) and name in value:
        return evaluate(node["body"], value[name])
    return False


def _eval_jaccard(node: dict, value: Any) -> float:
    answer = _as_set(value)
    return max(
        _jaccard(answer, {candidate} if isinstance(candidate, str) else set(candidate))
        for candidate in node["possible_sets"]
    )


def _eval_jaccard_ge(node: dict, value: Any) -> bool:
    return _eval_jaccard(node, value) >= node["threshold"]


def _eval_f1(node: dict, value: Any) -> float:
    predicted = _as_set(value)
    expected = set(node["expected"])
    if not predicted and not expected:
        return 1.0
    overlap = len(predicted & expected)
    if overlap == 0:
        return 0.0
    precision = overlap / len(predicted)
    recall = overlap / len(expected)
    return 2 * precision * recall / (precision + recall)


def _eval_weighted_label(node: dict, value: Any) -> float:
    if isinstance(value, (list, dict)):
        raise PredicateEvaluationError(f"weighted_label cannot look up a {_kind(value)} value")
    table = node["table"]
    if value in table:
        return float(table[value])
    return float(node.get("default", 0))


_EVALUATORS: dict[str, Callable[[dict, Any], bool | float]] = {
    "equals": _eval_equals,
    "in": _eval_in,
    "unordered_set_eq": _eval_set_eq,
    "and": _eval_and,
    "or": _eval_or,
    "not": _eval_not,
    "any": _eval_any,
    "every": _eval_every,
    "none": _eval_none,
    "field": _eval_field,
    "jaccard_ge": _eval_jaccard_ge,
    "jaccard": _eval_jaccard,
    "f1": _eval_f1,
    "weighted_label": _eval_weighted_label,
}
