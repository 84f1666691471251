"""Predicate leaves: the root ``predicate_leaf`` grader and the leaves composites grade.

A leaf binds one answer value, evaluates its predicate on it and maps the raw result
through its role (gate, additive or hard_fail). The root grader and the composite leaf
share that machinery but differ in allowed roles, check order, score_max and metrics.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ._common import MISSING, InvalidConfig, config_error, is_finite_number
from .base import Grader
from .predicate import (
    SCALAR_OPS,
    WILDCARD,
    PredicateEvaluationError,
    evaluate,
    parse_path,
    predicate_error,
    resolve_path,
    score_capacity,
    valid_path_tokens,
)
from .registry import register_grader
from .result import GraderResult

GATE, ADDITIVE, HARD_FAIL = "gate", "additive", "hard_fail"
COMPOSITE_ROLES = (GATE, ADDITIVE, HARD_FAIL)
ROOT_ROLES = (GATE, HARD_FAIL)
# Tuples, not sets: a role read from JSON may be an unhashable array or object.


class LeafResult(NamedTuple):
    """A composite leaf's verdict, shaped like GraderResult but cheap to build."""

    passed: bool
    score: float
    score_max: float
    metrics: dict


# --------------------------------------------------------------------------- binding


def check_answer_field(answer_field: Any) -> None:
    """Absent/null binds the whole answer; else a non-empty string, a valid path if it starts with ``$``."""
    if answer_field is None:
        return
    if not isinstance(answer_field, str) or not answer_field:
        raise InvalidConfig(f"answer_field must be a non-empty string, got {answer_field!r}")
    if answer_field.startswith("$") and parse_path(answer_field) is None:
        raise InvalidConfig(f"answer_field {answer_field!r} is not in the JSONPath subset ($, .ident, [*])")


def bind_answer_field(answer: Any, answer_field: str | None) -> Any:
    """The value a checked answer_field selects, or MISSING when the answer never supplied it.

    A path with ``[*]`` binds the (possibly empty) list of matches and is never MISSING;
    any other string is a literal top-level key, dots included.
    """
    if answer_field is None:
        return answer
    if answer_field.startswith("$"):
        tokens = valid_path_tokens(answer_field)
        matches = resolve_path(tokens, answer)
        if WILDCARD in tokens:
            return matches
        return matches[0] if matches else MISSING
    if isinstance(answer, dict):
        return answer.get(answer_field, MISSING)
    return MISSING


# --------------------------------------------------------------------------- validation


def leaf_label(config: dict) -> Any:
    """``name`` if truthy, else ``<op>-leaf``, else ``(unnamed)``; the raw name is kept as is."""
    name = config.get("name")
    if name:
        return name
    predicate = config.get("predicate")
    op = predicate.get("op") if isinstance(predicate, dict) else None
    return f"{op}-leaf" if op else "(unnamed)"


def _check_predicate(config: dict, role: Any, capacity: float) -> tuple[bool, float | None]:
    """(is_scalar, threshold) after the predicate, threshold and capacity checks, in that order."""
    predicate: Any = config.get("predicate")
    error = predicate_error(predicate)
    if error:
        raise InvalidConfig(f"invalid predicate: {error}")
    is_scalar = predicate["op"] in SCALAR_OPS
    threshold = None
    if is_scalar:
        threshold = config.get("threshold", 1.0)
        if not is_finite_number(threshold) or threshold < 0:
            raise InvalidConfig(f"threshold must be a finite non-negative number, got {threshold!r}")
        threshold = float(threshold)
    if role in (GATE, ADDITIVE) and capacity <= 0:
        raise InvalidConfig(f"no positive score capacity: a {role} leaf's predicate can never score above 0")
    return is_scalar, threshold


class Leaf:
    """A leaf whose predicate, role and threshold are valid, ready to grade bound values."""

    __slots__ = ("answer_field", "capacity", "is_scalar", "label", "op", "predicate", "role", "score_max", "threshold")

    def __init__(self, config: dict, role: str, is_scalar: bool, threshold: float | None, capacity: float) -> None:
        self.predicate = config["predicate"]
        self.op = self.predicate["op"]
        self.role = role
        self.is_scalar = is_scalar
        self.threshold = threshold
        self.capacity = capacity
        self.answer_field = config.get("answer_field")
        self.label = config.get("name") or f"{self.op}-leaf"  # leaf_label, the op being valid
        self.score_max = 0.0 if role == HARD_FAIL else capacity  # inside composites a veto has nothing to earn

    def judge(self, value: Any) -> tuple[bool, float, Any]:
        """(passed, score, raw) for a bound, non-MISSING value; raises PredicateEvaluationError.

        For hard_fail, passed=False means triggered. Scores are never clamped here.
        """
        raw = evaluate(self.predicate, value)
        if self.threshold is not None:  # scalar predicates, and only they, have a threshold
            if self.role == HARD_FAIL:
                return not raw >= self.threshold, raw, raw
            return self.role == ADDITIVE or raw >= self.threshold, raw, raw
        hit = bool(raw)
        if self.role == HARD_FAIL:
            return not hit, 0.0 if hit else 1.0, raw
        return hit, 1.0 if hit else 0.0, raw

    def grade(self, value: Any) -> LeafResult:
        """Composite semantics: a MISSING value or an evaluation error fails (so a veto fires)."""
        metrics = {
            "kind": "hard_fail" if self.role == HARD_FAIL else "scoring",
            "name": self.label,
            "op": self.op,
            "role": self.role,
        }
        if value is MISSING:
            metrics["missing_answer_field"] = True
            return LeafResult(False, 0.0, self.score_max, metrics)
        try:
            passed, score, raw = self.judge(value)
        except PredicateEvaluationError as exc:
            metrics["invalid_answer"] = str(exc)
            return LeafResult(False, 0.0, self.score_max, metrics)
        metrics["raw"] = raw
        metrics["is_scalar"] = self.is_scalar
        return LeafResult(passed, score, self.score_max, metrics)


def parse_composite_leaf(config: Any) -> Leaf:
    """Validate a leaf used inside a composite; raises InvalidConfig.

    Order: answer_field shape and path, role, predicate, threshold, capacity.
    """
    if not isinstance(config, dict):
        raise InvalidConfig(f"a leaf must be an object, got {config!r}")
    answer_field = config.get("answer_field")
    if answer_field is not None:  # mostly absent: a record's leaf binds its field by name
        check_answer_field(answer_field)
    role = config.get("role")
    if role not in COMPOSITE_ROLES:
        raise InvalidConfig(f"leaf role must be gate, additive or hard_fail, got {role!r}")
    capacity = score_capacity(config.get("predicate"))
    is_scalar, threshold = _check_predicate(config, role, capacity)
    return Leaf(config, role, is_scalar, threshold, capacity)


def grade_composite_leaf(config: dict, answer: Any) -> LeafResult:
    """A leaf child of all_of/average_of: bound against the whole answer (section 3 rules)."""
    try:
        leaf = parse_composite_leaf(config)
    except InvalidConfig as exc:
        score_max = 0.0 if config.get("role") == HARD_FAIL else score_capacity(config.get("predicate"))
        return LeafResult(False, 0.0, score_max, {"configuration_error": str(exc), "name": leaf_label(config)})
    return leaf.grade(bind_answer_field(answer, leaf.answer_field))


# --------------------------------------------------------------------------- root grader


@register_grader("predicate_leaf")
class PredicateLeafGrader(Grader):
    """One predicate as the whole grade; score_max is always the predicate's capacity."""

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        capacity = score_capacity(config.get("predicate"))
        role = config.get("role")
        try:
            leaf = self._parse(config, role, capacity)
        except InvalidConfig as exc:
            return config_error(str(exc), answer, score_max=capacity)

        answer_field, name = leaf.answer_field, config.get("name")
        value = bind_answer_field(answer, answer_field)
        if value is MISSING:
            return GraderResult(
                passed=False,
                score=0.0,
                score_max=capacity,
                metrics={
                    "op": leaf.op,
                    "role": role,
                    "answer_field": answer_field,
                    "name": name,
                    "missing_answer_field": True,
                },
                reasoning=f"answer_field {answer_field!r} is missing from the answer",
                agent_answer=answer,
            )
        try:
            passed, score, raw = leaf.judge(value)
        except PredicateEvaluationError as exc:
            return GraderResult(
                passed=False,
                score=0.0,
                score_max=capacity,
                metrics={"invalid_answer": str(exc), "name": name},
                reasoning=f"Invalid answer for op {leaf.op!r}: {exc}",
                agent_answer=answer,
            )
        verdict = "passed" if passed else ("triggered" if role == HARD_FAIL else "failed")
        return GraderResult(
            passed=passed,
            score=score,
            score_max=capacity,
            metrics={
                "op": leaf.op,
                "role": role,
                "raw_result": raw,
                "is_scalar": leaf.is_scalar,
                "threshold": leaf.threshold,
                "answer_field": answer_field,
                "name": name,
                "score_max": capacity,
            },
            field_scores={answer_field or "<root>": score},
            reasoning=f"{role} {leaf.op} on {answer_field or '<root>'}: raw={raw!r} -> {verdict}",
            agent_answer=answer,
        )

    @staticmethod
    def _parse(config: dict, role: Any, capacity: float) -> Leaf:
        """The root check order: predicate, threshold, capacity, answer_field, then role."""
        is_scalar, threshold = _check_predicate(config, role, capacity)
        check_answer_field(config.get("answer_field"))
        if role == ADDITIVE:
            raise InvalidConfig("role 'additive' is only valid inside a composite")
        if role not in ROOT_ROLES:
            raise InvalidConfig(f"role must be 'gate' or 'hard_fail', got {role!r}")
        return Leaf(config, role, is_scalar, threshold, capacity)
