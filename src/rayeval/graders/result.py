"""The verdict every grader returns, and the one normalisation rule everybody shares.

A plain slotted dataclass rather than a pydantic model: graders build one per grading (and
composites one per child), so construction cost is on the hot path. ``to_dict``/``to_json``
give the JSON form used at the storage boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypeGuard

from pydantic import TypeAdapter

from .._json import json_fallback


def normalize_score(score: Any, score_max: Any) -> float:
    """score/score_max clamped to [0, 1]; 0 when either is non-finite or score_max <= 0."""
    try:
        s = float(score)
        m = float(score_max)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    if not (math.isfinite(s) and math.isfinite(m)) or m <= 0:
        return 0.0
    return min(1.0, max(0.0, s / m))


class _Omitted:
    """The default of ``GraderResult(metrics=...)``: left out, the metrics are ``{}``."""

    __slots__ = ()


_OMITTED: Any = _Omitted()


@dataclass(slots=True, init=False)
class GraderResult:
    """A grader's verdict. Fails closed: score defaults to 0.0. ``metrics`` left out is ``{}``;
    given as anything but an object (``metrics=None``) it is kept as given: a malformed
    result, which a composite or the grading of an eval reports as a configuration error
    (:func:`result_problem`), as the reference does."""

    passed: bool
    metrics: dict[str, Any]
    reasoning: str
    agent_answer: Any
    score: float
    field_scores: dict[str, Any]
    score_max: float

    def __init__(
        self,
        passed: bool,
        metrics: dict[str, Any] = _OMITTED,
        reasoning: str = "",
        agent_answer: Any = None,
        score: float = 0.0,
        field_scores: dict[str, Any] | None = None,
        score_max: float = 1.0,
    ) -> None:
        # Written out rather than generated with a __post_init__: the common case (a real bool
        # and floats, as the built-in graders pass) then costs no conversion calls.
        self.passed = passed if passed.__class__ is bool else bool(passed)
        self.metrics = {} if metrics is _OMITTED else metrics
        self.reasoning = reasoning
        self.agent_answer = agent_answer
        self.score = score if score.__class__ is float else float(score)
        self.field_scores = {} if field_scores is None else field_scores
        self.score_max = score_max if score_max.__class__ is float else float(score_max)

    def normalized_score(self) -> float:
        return normalize_score(self.score, self.score_max)

    @property
    def is_configuration_error(self) -> bool:
        return "configuration_error" in self.metrics

    @property
    def judge_failure(self) -> str | None:
        """Why an LLM judge gave no verdict (its ``grader_error``), None when every judge did:
        the grading could not be done, which says nothing of the answer."""
        if "judge_error" not in self.metrics:
            return None
        return str(self.metrics.get("grader_error") or f"the judge failed ({self.metrics['judge_error']})")

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (non-finite floats become null)."""
        return _ADAPTER.dump_python(self, mode="json", fallback=json_fallback)

    def to_json(self, indent: int | None = None) -> str:
        return _ADAPTER.dump_json(self, indent=indent, fallback=json_fallback).decode()


_ADAPTER: TypeAdapter[GraderResult] = TypeAdapter(GraderResult)


def is_finite_number(value: Any) -> TypeGuard[float]:
    """JSON number (not bool) whose float value is finite; huge ints that overflow are not."""
    if value.__class__ is float:  # the common case, without a call
        return value - value == 0.0  # NaN and infinities give NaN
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def result_problem(result: Any) -> str | None:
    """Why ``result`` is not a usable verdict (None: it is): the reference's checks of a
    child grader's payload, applied to any grader's result before anything reads it."""
    if not isinstance(getattr(result, "passed", None), bool):
        return "passed must be a boolean"
    metrics = getattr(result, "metrics", None)
    if not isinstance(metrics, dict):
        return f"metrics must be an object, got {type(metrics).__name__}"
    score, score_max = getattr(result, "score", None), getattr(result, "score_max", None)
    if not is_finite_number(score):
        return f"score must be a finite number, got {score!r}"
    if not is_finite_number(score_max) or score_max < 0:
        return f"score_max must be a finite non-negative number, got {score_max!r}"
    return None
