"""all_of (alias composite) and average_of: graders whose verdict combines child graders.

Both read ``children`` the same way: labels, classification into scoring / hard_fail /
misconfigured, evaluation, system errors and hard-fail bookkeeping (including vetoes
reported by nested composites). They differ in which roles score, whether ``points``
apply, and how the verdict and score are formed.
"""

from __future__ import annotations

import math
from contextvars import ContextVar
from typing import Any

from ._common import config_error, echo_answer, is_finite_number
from .base import Grader
from .leaf import ADDITIVE, GATE, HARD_FAIL, grade_composite_leaf
from .registry import get_grader, is_registered, register_grader
from .result import GraderResult, normalize_score, result_problem

SCORING = "scoring"
"""The kind of a child that must pass (all_of's "required") or earns credit (average_of)."""

MAX_NESTING = 64
"""Composites nested deeper than this fail as a system error instead of exhausting the stack."""

_nesting: ContextVar[int] = ContextVar("rayeval_composite_nesting", default=0)


class GradedChild:
    """One child after classification and evaluation; ``problem`` marks it misconfigured."""

    __slots__ = ("kind", "label", "metrics", "passed", "problem", "score", "score_max", "system_error")

    def __init__(
        self,
        label: str,
        kind: str | None,
        passed: bool = False,
        score: float = 0.0,
        score_max: float = 0.0,
        metrics: dict | None = None,
        problem: str | None = None,
        system_error: bool = False,
    ) -> None:
        self.label = label
        self.kind = kind
        self.passed = passed
        self.score = score
        self.score_max = score_max
        self.metrics = metrics if metrics is not None else {}
        self.problem = problem
        self.system_error = system_error


def child_label(index: int, child: Any) -> str:
    """The child's name for uniqueness, failed_children and field_scores.

    A typed predicate_leaf is named by its config's ``name`` (the outer one is ignored);
    other typed children by their outer ``name``.
    """
    default = f"children[{index}]"
    if not isinstance(child, dict):
        return default
    if "predicate" in child and "type" not in child:
        name = child.get("name")
        return str(name) if name else default
    type_name, config = child.get("type"), child.get("config")
    if type_name == "predicate_leaf" and isinstance(config, dict):
        name = config.get("name")
        return str(name) if name else f"{default}.predicate_leaf"
    name = child.get("name")
    return str(name) if name else f"{default}.{type_name or 'unknown'}"


def _refuse_unhashable_name(leaf_config: dict) -> None:
    # Deliberately mirrors the reference, which keys a dict by a leaf child's raw name: an
    # array or object name crashes this composite. A parent composite records the crash as
    # a system error; at the top level Grader.evaluate_answer turns it into grader_error.
    name = leaf_config.get("name")
    if name and isinstance(name, (list, dict)):
        raise TypeError(f"leaf child name must be hashable, got {name!r}")


def _run_typed(type_name: str, config: dict, answer: Any) -> Any:
    try:
        return get_grader(type_name).evaluate_answer(answer, config)
    except Exception as exc:  # noqa: BLE001 - spec: any child exception is a system error
        return GraderResult(
            passed=False, score=0.0, score_max=1.0, metrics={"grader_error": f"{type(exc).__name__}: {exc}"}
        )


def _graded(label: str, kind: str, result: Any, points: float | None) -> GradedChild:
    """A usable child result, with its configuration and system errors read from the metrics.

    ``points`` rescale the child to ``points * clamp01(score/score_max)`` out of ``points``.
    """
    metrics, score, score_max = result.metrics, result.score, result.score_max
    if points is not None and score_max > 0:
        score, score_max = points * normalize_score(score, score_max), points
    return GradedChild(
        label,
        kind,
        passed=result.passed,
        score=score,
        score_max=score_max,
        metrics=metrics,
        problem=str(metrics["configuration_error"]) if "configuration_error" in metrics else None,
        system_error="grader_error" in metrics or metrics.get("grader_system_error") is True,
    )


class _Tally:
    """What every composite needs to know about its evaluated children."""

    __slots__ = (
        "denominator",
        "misconfigured",
        "scoring",
        "scoring_passed",
        "system_errors",
        "total",
        "triggered",
        "unavailable",
    )

    def __init__(self, children: list[GradedChild]) -> None:
        # one pass, in child order; sums start at 0 and add left to right, as sum() does
        self.scoring: list[GradedChild] = []
        self.misconfigured: list[str] = []
        self.system_errors: list[str] = []
        self.triggered: list = []
        self.unavailable: list = []
        self.total = self.denominator = 0.0
        self.scoring_passed = 0
        for child in children:
            broken = child.problem is not None
            if broken:
                self.misconfigured.append(child.label)
            if child.system_error:
                self.system_errors.append(child.label)
                broken = True
            if child.kind == SCORING:
                if child.problem is None:
                    self.scoring.append(child)
                    self.denominator += child.score_max
                    if not child.system_error:  # system-error children earn nothing
                        self.total += child.score
                        self.scoring_passed += child.passed
            elif child.kind == HARD_FAIL and not child.passed:
                (self.unavailable if broken else self.triggered).append(child.label)
        for child in self.scoring:
            metrics = child.metrics
            if "hard_fail_triggered" not in metrics and "hard_fail_unavailable" not in metrics:
                continue
            for key, target in (("hard_fail_triggered", self.triggered), ("hard_fail_unavailable", self.unavailable)):
                nested = metrics.get(key)
                if isinstance(nested, list) and nested:
                    target.append({"child": child.label, "children": nested})

    @property
    def vetoed(self) -> bool:
        return bool(self.triggered or self.unavailable)


class _ChildrenGrader(Grader):
    """The shared child handling; subclasses set the roles that score and form the verdict."""

    SCORING_ROLES: tuple[str, ...] = ()
    SCORING_NEEDS_CAPACITY = False

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        children = config.get("children")
        if not isinstance(children, list):
            return config_error("children must be an array", answer)
        labels = [child_label(i, child) for i, child in enumerate(children)]
        if len(set(labels)) != len(labels):
            seen: set[str] = set()
            for label in labels:
                if label in seen:
                    return config_error(f"duplicate child label {label!r}", answer)
                seen.add(label)
        # A non-object answer is graded like any other: its leaves see plain keys as MISSING
        # (checked against the reference; composites do not reject it up front).
        depth = _nesting.get()
        if depth >= MAX_NESTING:
            raise RecursionError(f"composites nested deeper than {MAX_NESTING} levels")
        token = _nesting.set(depth + 1)
        try:
            graded = [self._grade_child(child, label, answer) for child, label in zip(children, labels)]
        finally:
            _nesting.reset(token)
        return self._conclude(config, graded, answer)

    def _conclude(self, config: dict, children: list[GradedChild], answer: Any) -> GraderResult:
        raise NotImplementedError

    def _points(self, child: dict, role: Any) -> tuple[float | None, str | None]:
        """(points, problem); only average_of reads points."""
        return None, None

    def _grade_child(self, child: Any, label: str, answer: Any) -> GradedChild:
        if not isinstance(child, dict):
            return GradedChild(label, None, problem="child must be an object")
        is_leaf = "predicate" in child and "type" not in child
        type_name, sub_config = child.get("type"), child.get("config")
        leaf_config = child if is_leaf else (sub_config if type_name == "predicate_leaf" else None)
        role = leaf_config.get("role") if isinstance(leaf_config, dict) else None
        points, problem = self._points(child, role)
        if problem:
            return GradedChild(label, None, problem=problem)

        leaf: dict = child
        if not is_leaf:
            if "role" in child:
                return GradedChild(label, None, problem="a typed child must not have an outer 'role'")
            if not isinstance(type_name, str):
                return GradedChild(label, None, problem=f"child type must be a string, got {type_name!r}")
            if not isinstance(sub_config, dict):
                return GradedChild(label, None, problem=f"config of a {type_name} child must be an object")
            if leaf_config is None:
                return self._grade_typed(label, type_name, sub_config, points, answer)
            leaf = sub_config  # a predicate_leaf child: its config is the leaf
        kind = HARD_FAIL if role == HARD_FAIL else (SCORING if role in self.SCORING_ROLES else None)
        if kind is None:
            return GradedChild(label, None, problem=f"leaf role {role!r} is not allowed here")
        _refuse_unhashable_name(leaf)
        return _graded(label, kind, grade_composite_leaf(leaf, answer), points)

    def _grade_typed(
        self, label: str, type_name: str, sub_config: dict, points: float | None, answer: Any
    ) -> GradedChild:
        """A child naming a registered grader type, run on its own config."""
        if not is_registered(type_name):
            return GradedChild(label, None, problem=f"unknown grader type {type_name!r}")
        result = _run_typed(type_name, sub_config, answer)
        problem = self._result_problem(result)
        if problem:
            return GradedChild(label, SCORING, problem=problem)
        return _graded(label, SCORING, result, points)

    def _result_problem(self, result: Any) -> str | None:
        """Why a typed child's result cannot be used (it then counts as misconfigured): a
        malformed payload (``metrics=None``, say), as the reference checks it."""
        problem = result_problem(result)
        if problem is not None:
            return f"child grader {problem}"
        if result.score_max <= 0 and self.SCORING_NEEDS_CAPACITY:
            return "scoring child has score_max 0 (no score capacity)"
        return None

    @staticmethod
    def _result(
        type_label: str,
        config: dict,
        tally: _Tally,
        passed: bool,
        score: float,
        configuration_error: str | None,
        answer: Any,
    ) -> GraderResult:
        scoring = tally.scoring
        metrics: dict[str, Any] = {
            "type": type_label,
            "pass_rule": str(config.get("pass_rule", "all")),
            "scoring_count": len(scoring),
            "scoring_passed": tally.scoring_passed,
            "scoring_total_score": tally.total,
            "score_denominator": tally.denominator,
            "failed_children": [c.label for c in scoring if not c.passed and not c.system_error],
            "hard_fail_triggered": tally.triggered,
        }
        if tally.unavailable:
            metrics["hard_fail_unavailable"] = tally.unavailable
        if configuration_error is not None:
            metrics["configuration_error"] = configuration_error
        if tally.misconfigured:
            metrics["misconfigured_children"] = tally.misconfigured
        if tally.system_errors:
            metrics["grader_system_error"] = True
            metrics["system_error_children"] = tally.system_errors
        return GraderResult(
            passed=passed,
            score=score,
            score_max=1.0,
            metrics=metrics,
            field_scores={c.label: c.score for c in scoring},
            reasoning=_reasoning(type_label, passed, score, metrics),
            agent_answer=echo_answer(answer),
        )


def _reasoning(type_label: str, passed: bool, score: float, metrics: dict) -> str:
    parts = [
        (
            f"{type_label}: {'PASS' if passed else 'FAIL'} (score {score:.4g}; "
            f"{metrics['scoring_passed']}/{metrics['scoring_count']} scoring children passed)"
        )
    ]
    for key in REASONING_KEYS:
        value = metrics.get(key)
        if value:
            parts.append(f"{key}: {value}")
    return "\n".join(parts)


REASONING_KEYS = (
    "configuration_error",
    "failed_children",
    "hard_fail_triggered",
    "hard_fail_unavailable",
    "misconfigured_children",
    "system_error_children",
)


def _misconfigured_message(tally: _Tally) -> str:
    return f"misconfigured children: {', '.join(tally.misconfigured)}"


@register_grader("all_of", "composite")
class AllOfGrader(_ChildrenGrader):
    """Strict AND: every required child passes and no veto fires. Child scores never matter."""

    SCORING_ROLES = (GATE,)

    def _conclude(self, config: dict, children: list[GradedChild], answer: Any) -> GraderResult:
        tally = _Tally(children)
        scoring = tally.scoring
        rule_error = _all_of_rule_error(config)
        reason: str | None
        if tally.misconfigured:
            reason = _misconfigured_message(tally)
        elif not scoring:
            reason = "no positive required children"
        else:
            reason = rule_error
        passed = (
            bool(scoring)
            and all(c.passed for c in scoring)
            and not tally.vetoed
            and not tally.misconfigured
            and not tally.system_errors
            and rule_error is None
        )
        return self._result("all_of", config, tally, passed, 1.0 if passed else 0.0, reason, answer)


def _all_of_rule_error(config: dict) -> str | None:
    if "pass_rule" in config and config["pass_rule"] != "all":
        return f"all_of supports only pass_rule 'all', got {config['pass_rule']!r}"
    for key in ("min_passing_children", "score_threshold"):
        if key in config:
            return f"all_of does not accept {key!r}"
    return None


@register_grader("average_of")
class AverageOfGrader(_ChildrenGrader):
    """Partial credit: the normalized sum of scoring children, with a separate pass rule.

    Any veto (direct or nested), misconfiguration or system error zeroes the score.
    """

    SCORING_ROLES = (GATE, ADDITIVE)
    SCORING_NEEDS_CAPACITY = True

    def _points(self, child: dict, role: Any) -> tuple[float | None, str | None]:
        if "points" not in child:
            return None, None
        points = child["points"]
        if not is_finite_number(points) or points <= 0:
            return None, f"points must be a finite number > 0, got {points!r}"
        if role == HARD_FAIL:
            return None, "points are not allowed on a hard_fail child"
        return float(points), None

    def _conclude(self, config: dict, children: list[GradedChild], answer: Any) -> GraderResult:
        tally = _Tally(children)
        scoring = tally.scoring
        total, denominator = tally.total, tally.denominator
        holds, rule_error = _average_rule(config, scoring, tally.scoring_passed, total)
        invalid_scores = not (math.isfinite(total) and math.isfinite(denominator) and denominator > 0)

        reason: str | None
        if tally.misconfigured:
            reason = _misconfigured_message(tally)
        elif not scoring:
            reason = "no scoring children"
        elif invalid_scores:
            reason = f"invalid score values (total {total!r}, denominator {denominator!r})"
        else:
            reason = rule_error
        blocked = reason is not None or tally.vetoed or bool(tally.system_errors)
        score = 0.0 if blocked else normalize_score(total, denominator)
        passed = not blocked and holds
        return self._result("average_of", config, tally, passed, score, reason, answer)


def _average_rule(
    config: dict, scoring: list[GradedChild], scoring_passed: int, total: float
) -> tuple[bool, str | None]:
    """(rule holds, pass-rule configuration error) for all / min_passing / score_threshold."""
    rule = config.get("pass_rule", "all")
    has_min = "min_passing_children" in config
    has_threshold = "score_threshold" in config
    if rule == "all":
        if has_min or has_threshold:
            return False, "pass_rule 'all' takes neither min_passing_children nor score_threshold"
        return all(c.passed for c in scoring), None
    if rule == "min_passing":
        if has_threshold:
            return False, "pass_rule 'min_passing' does not take score_threshold"
        minimum = config.get("min_passing_children")
        if isinstance(minimum, bool) or not isinstance(minimum, int) or not 0 <= minimum <= len(scoring):
            return False, (
                f"min_passing_children must be an integer in [0, {len(scoring)}] "
                f"(the number of scoring children), got {minimum!r}"
            )
        return scoring_passed >= minimum, None
    if rule == "score_threshold":
        if has_min:
            return False, "pass_rule 'score_threshold' does not take min_passing_children"
        threshold = config.get("score_threshold")
        if not is_finite_number(threshold) or threshold < 0:
            return False, f"score_threshold must be a finite number >= 0, got {threshold!r}"
        return total >= threshold, None
    return False, f"unknown pass_rule {rule!r} (expected 'all', 'min_passing' or 'score_threshold')"
