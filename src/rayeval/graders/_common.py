"""Conventions shared by the graders: the config and answer errors they raise, number rules, field lookup,
config readers, result builders."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, TypeGuard

from ..errors import ConfigError, RayevalError
from .result import GraderResult, is_finite_number


class InvalidConfig(ConfigError):
    """A configuration problem, raised where it is found; ``Grader.evaluate_answer`` turns it into
    the failed result whose ``configuration_error`` metric is the message (see :func:`config_error`)."""


class RejectedAnswer(RayevalError):
    """A wrong, missing or malformed answer under a valid config, raised where it is found as
    ``RejectedAnswer(reason)`` or ``RejectedAnswer(reason, metrics)``; ``Grader.evaluate_answer``
    turns it into the failed result :func:`agent_failure` builds. No ``__init__`` of its own: one
    would double the cost of raising, paid on every failed grading."""

    @property
    def reason(self) -> str:
        return self.args[0]

    @property
    def metrics(self) -> dict | None:
        return self.args[1] if len(self.args) > 1 else None


class _Missing:
    """Marks "the answer never supplied this field", as distinct from an explicit null."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:  # noqa: PYI034 - a singleton: always the one instance
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Any = _Missing()


def is_nonblank_str(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and bool(value.strip())


def parse_float(text: str) -> float | None:
    """Python ``float()`` semantics on a string (whitespace, ``_``, inf/nan); None if unparseable."""
    try:
        return float(text)
    except (ValueError, TypeError, OverflowError):
        return None


def is_number_in(value: Any, low: float, high: float) -> bool:
    """A finite non-bool JSON number inside the closed interval [low, high]."""
    kind = value.__class__  # plain JSON numbers first, without conversions
    if kind is float:
        return low <= value <= high and value - value == 0.0  # NaN and infinities give NaN
    if kind is int:  # within 1023 bits an int is always a finite float
        return low <= value <= high and (value.bit_length() <= 1023 or is_finite_number(value))
    return is_finite_number(value) and low <= value <= high


def read_object(config: dict, *path: str) -> dict:
    """The optional nested object at ``path`` (absent means ``{}``); null or any non-object is InvalidConfig."""
    node: Any = config
    for key in path:
        if key not in node:
            return {}
        node = node[key]
        if node.__class__ is not dict and not isinstance(node, dict):
            raise InvalidConfig(f"{'.'.join(path[: path.index(key) + 1])} must be an object, got {node!r}")
    return node


_RANGE_TEXT: dict[tuple[float, float], str] = {}  # "[low, high]" per range, formatted once


def _range_error(key: str, low: float, high: float, value: Any) -> InvalidConfig:
    text = _RANGE_TEXT.get((low, high))
    if text is None:
        text = _RANGE_TEXT[low, high] = f"[{low}, {high}]"
    return InvalidConfig(f"{key} must be a finite number in {text}, got {value!r}")


def read_thresholds(mapping: dict, specs: Iterable[tuple[str, Any, float, float]]) -> list:
    """Values for (key, default, low, high) specs; a present key (even null) out of range is InvalidConfig."""
    values = []
    for key, default, low, high in specs:
        if key not in mapping:
            values.append(default)
            continue
        value = mapping[key]
        if not is_number_in(value, low, high):
            raise _range_error(key, low, high, value)
        values.append(value)
    return values


def read_thresholds_at(config: dict, path: tuple[str, ...], specs: Iterable[tuple[str, Any, float, float]]) -> list:
    """Thresholds from an optional nested object such as ``scoring.pass_thresholds``."""
    if path[0] not in config:  # mostly absent: the defaults
        return [default for _, default, _, _ in specs]
    return read_thresholds(read_object(config, *path), specs)


def read_answer_field(config: dict, default: str | None = None) -> str:
    """The config's ``answer_field`` (``default`` when absent); InvalidConfig unless a non-blank string."""
    answer_field = config.get("answer_field", default)
    if not is_nonblank_str(answer_field):
        raise InvalidConfig(f"answer_field must be a non-blank string, got {answer_field!r}")
    return answer_field


def lookup_dotted(answer: Any, key: str) -> tuple[bool, Any]:
    """(found, value): a plain key is a top-level lookup; a dotted key walks nested objects."""
    if not isinstance(answer, dict):
        return False, None
    if "." not in key:
        if key in answer:
            return True, answer[key]
        return False, None
    node: Any = answer
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def read_expected_count(config: dict) -> int | None:
    """Absent/null means no count contract; else a non-bool int >= 0 (InvalidConfig otherwise)."""
    value = config.get("expected_count")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InvalidConfig(f"expected_count must be a non-negative integer, got {value!r}")
    return value


def cardinality_holds(expected_count: int | None, submitted: int, unique: int) -> bool:
    return expected_count is None or (submitted == expected_count and unique == expected_count)


def finite_or_none(value: Any) -> Any:
    """Replace a non-finite float by None (metrics must stay JSON-clean)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def echo_answer(answer: Any) -> Any:
    return answer if isinstance(answer, dict) else None


def config_error(reason: str, answer: Any = None, *, score_max: float = 1.0) -> GraderResult:
    """The configuration-error shape: the ``configuration_error`` metrics key is the signal."""
    # echo_answer inlined: these builders run on every failed grading
    return GraderResult(
        False,
        {"configuration_error": reason},
        f"Grader configuration error: {reason}",
        answer if isinstance(answer, dict) else None,
        score=0.0,
        score_max=score_max,
    )


def missing_field(name: str) -> str:
    """The reference's reasoning for an answer without a required field."""
    return f"Agent answer missing required field: {name}"


def required_member(answer: Any, field: str, not_an_object: str = "Answer is not a JSON object") -> Any:
    """``answer[field]``; RejectedAnswer when the answer is no object or lacks the field."""
    if not isinstance(answer, dict):
        raise RejectedAnswer(not_an_object)
    if field not in answer:
        raise RejectedAnswer(missing_field(field))
    return answer[field]


def agent_failure(reason: str, answer: Any = None, *, metrics: dict | None = None) -> GraderResult:
    """A wrong, missing or malformed answer under a valid config (never a config error)."""
    metrics = {} if metrics is None else metrics
    return GraderResult(False, metrics, reason, answer if isinstance(answer, dict) else None, score=0.0)


def binary_result(passed: bool, metrics: dict, reasoning: str, answer: Any) -> GraderResult:
    """The 0/1 verdict most graders give: no partial credit."""
    return GraderResult(passed, metrics, reasoning, answer if isinstance(answer, dict) else None, score=float(passed))
