"""numeric_tolerance and numeric_range: per-field numeric checks with partial credit.

Both read each ground-truth field by dotted lookup, accept numeric strings (Python
``float()`` semantics) and treat bools as 0/1; they differ only in how a value passes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ._common import (
    InvalidConfig,
    RejectedAnswer,
    echo_answer,
    finite_or_none,
    is_finite_number,
    is_nonblank_str,
    lookup_dotted,
    parse_float,
)
from .base import Grader
from .registry import register_grader
from .result import GraderResult

TOLERANCE_TYPES = frozenset({"absolute", "relative", "min", "max"})


# --------------------------------------------------------------------------- shared


def validate_ground_truth(config: dict) -> dict:
    """The ground truth: a non-empty object of nonblank field names to finite numbers (InvalidConfig otherwise)."""
    ground_truth = config.get("ground_truth")
    if not isinstance(ground_truth, dict) or not ground_truth:
        raise InvalidConfig("ground_truth must be a non-empty object")
    for field, expected in ground_truth.items():
        if not is_nonblank_str(field):
            raise InvalidConfig(f"ground_truth field names must be non-blank strings, got {field!r}")
        if not is_finite_number(expected):
            raise InvalidConfig(f"ground_truth[{field!r}] must be a finite number, got {expected!r}")
    return ground_truth


def answer_object(answer: Any) -> dict:
    """The answer, which both graders look fields up in; RejectedAnswer unless it is an object."""
    if not isinstance(answer, dict):
        raise RejectedAnswer("Answer is not an object")
    return answer


def coerce_answer_number(raw: Any) -> tuple[bool, Any]:
    """(usable, value): strings parse with float() semantics and bools become ints.

    An unparseable string is unusable and comes back unchanged; every other value is
    usable here and may still fail the grader's own numeric check (null, list, NaN...).
    """
    if isinstance(raw, str):
        parsed = parse_float(raw)
        return (False, raw) if parsed is None else (True, parsed)
    if isinstance(raw, bool):
        return True, int(raw)
    return True, raw


def fraction_result(passes: dict[str, bool], metrics: dict, answer: Any, summary: list[str]) -> GraderResult:
    """Partial credit: the score is the fraction of ground-truth fields that passed."""
    n_passed = sum(passes.values())
    total = len(passes)
    return GraderResult(
        passed=n_passed == total,
        score=n_passed / total,
        score_max=1.0,
        field_scores={field: 1.0 if ok else 0.0 for field, ok in passes.items()},
        metrics=metrics,
        reasoning=f"{n_passed}/{total} fields passed\n" + "\n".join(summary),
        agent_answer=echo_answer(answer),
    )


# --------------------------------------------------------------------------- numeric_tolerance


class Tolerance(NamedTuple):
    """One tolerance entry, already read; ``bounds`` is (lower, upper) when both are given."""

    kind: Any
    value: Any
    bounds: tuple[Any, Any] | None


EXACT = Tolerance("absolute", 0, None)


def read_tolerance(entry: dict) -> Tolerance:
    """Read an entry without judging it (global-mode overrides are deliberately unvalidated)."""
    bounds = None
    if "lower" in entry and "upper" in entry:
        bounds = (entry["lower"], entry["upper"])
    return Tolerance(entry.get("type", "absolute"), entry.get("value", 0), bounds)


def _non_negative_finite(value: Any) -> bool:
    return is_finite_number(value) and value >= 0


def tolerance_entry_error(entry: Any) -> str | None:
    """Why a tolerance entry is unusable, or None when it is valid."""
    if not isinstance(entry, dict):
        return f"a tolerance entry must be an object, got {entry!r}"
    kind = entry.get("type", "absolute")
    if not isinstance(kind, str) or kind not in TOLERANCE_TYPES:
        return f"tolerance type must be one of absolute|relative|min|max, got {kind!r}"
    has_lower, has_upper = "lower" in entry, "upper" in entry
    if kind == "absolute":
        if has_lower != has_upper:
            return "absolute tolerance needs both lower and upper, or neither"
        if has_lower:
            if not (_non_negative_finite(entry["lower"]) and _non_negative_finite(entry["upper"])):
                return "absolute lower/upper must be finite numbers >= 0"
        elif "value" in entry and not _non_negative_finite(entry["value"]):
            return f"absolute tolerance value must be a finite number >= 0, got {entry['value']!r}"
        return None
    if has_lower or has_upper:
        return f"lower/upper are only allowed on absolute tolerances, not {kind}"
    if "value" not in entry:
        return f"{kind} tolerance needs a value"
    value = entry["value"]
    if not is_finite_number(value) or (kind == "relative" and value < 0):
        bound = " >= 0" if kind == "relative" else ""
        return f"{kind} tolerance value must be a finite number{bound}, got {value!r}"
    return None


class TolerancePlan(NamedTuple):
    """How each field's tolerance is chosen: one global entry, or a per-field table."""

    global_entry: Tolerance | None
    table: dict


def plan_tolerances(config: dict) -> TolerancePlan:
    """The validated ``tolerances`` (or, when absent, the singular ``tolerance``); InvalidConfig otherwise."""
    if "tolerances" in config:
        tolerances = config["tolerances"]
    else:
        tolerances = config.get("tolerance", {})
    if not isinstance(tolerances, dict):
        raise InvalidConfig(f"tolerances must be an object, got {tolerances!r}")
    if "type" in tolerances:
        error = tolerance_entry_error(tolerances)
        if error:
            raise InvalidConfig(f"global tolerance: {error}")
        return TolerancePlan(read_tolerance(tolerances), tolerances)
    for field, entry in tolerances.items():
        if not is_nonblank_str(field):
            raise InvalidConfig(f"tolerance field names must be non-blank strings, got {field!r}")
        error = tolerance_entry_error(entry)
        if error:
            raise InvalidConfig(f"tolerances[{field!r}]: {error}")
    return TolerancePlan(None, tolerances)


def tolerance_for(plan: TolerancePlan, field: str) -> Tolerance:
    """Per-field: the field's entry or exact match. Global: the global entry unless the
    field has an object with a ``value`` key, which overrides it unvalidated."""
    entry = plan.table.get(field)
    if plan.global_entry is None:
        return EXACT if entry is None else read_tolerance(entry)
    if isinstance(entry, dict) and "value" in entry:
        return read_tolerance(entry)
    if field in plan.table and not isinstance(entry, dict):
        # The reference crashes on a non-object override; the caller's safety net turns
        # this into a failed result with a grader_error metric, as the contract asks.
        raise TypeError(f"global-mode tolerance override for {field!r} is not an object: {entry!r}")
    return plan.global_entry


def compare(tol: Tolerance, actual: Any, expected: Any) -> tuple[bool, Any]:
    """(passed, error) with plain IEEE/int arithmetic, no epsilon.

    Raises TypeError/OverflowError when an unvalidated override makes the comparison
    impossible; the caller turns that into a failed field.
    """
    kind = tol.kind
    if kind == "absolute":
        if tol.bounds is not None:
            lower, upper = tol.bounds
            return expected - lower <= actual <= expected + upper, actual - expected
        error = abs(actual - expected)
        return error <= tol.value, error
    if kind == "relative":
        if expected == 0:
            return False, float("inf")
        error = abs(actual - expected) / abs(expected)
        return error <= tol.value, error
    if kind == "min":
        ok = actual >= tol.value
        return ok, 0 if ok else tol.value - actual
    if kind == "max":
        ok = actual <= tol.value
        return ok, 0 if ok else actual - tol.value
    return False, float("inf")


@register_grader("numeric_tolerance")
class NumericToleranceGrader(Grader):
    """Each ground-truth field within its tolerance; score is the fraction that are."""

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        ground_truth = validate_ground_truth(config)
        plan = plan_tolerances(config)
        answer = answer_object(answer)

        passes: dict[str, bool] = {}
        metrics: dict[str, Any] = {}
        summary: list[str] = []
        for field, expected in ground_truth.items():
            passes[field] = False
            found, raw = lookup_dotted(answer, field)
            if not found:
                summary.append(f"{field}: missing")
                continue
            usable, actual = coerce_answer_number(raw)
            if not usable:
                summary.append(f"{field}: {raw!r} is not a number")
                continue
            field_error: Any = None
            tol = tolerance_for(plan, field)
            if is_finite_number(actual):
                try:
                    passes[field], field_error = compare(tol, actual, expected)
                except (TypeError, OverflowError):
                    summary.append(f"{field}: cannot compare {actual!r} using {tuple(tol)!r}")
                else:
                    verdict = "PASS" if passes[field] else "FAIL"
                    summary.append(
                        f"{field}: {verdict} actual={actual!r} expected={expected!r} "
                        f"{tol.kind} tolerance, error={field_error!r}"
                    )
            else:
                summary.append(f"{field}: {actual!r} is not a finite number")
            metrics[f"{field}_actual"] = finite_or_none(actual)
            metrics[f"{field}_expected"] = expected
            metrics[f"{field}_error"] = finite_or_none(field_error)
            metrics[f"{field}_pass"] = passes[field]
        return fraction_result(passes, metrics, answer, summary)


# --------------------------------------------------------------------------- numeric_range


def read_ranges(config: dict, ground_truth: dict) -> dict:
    """The ``ranges``: every ground-truth value must sit strictly inside its range (InvalidConfig otherwise)."""
    ranges = config.get("ranges")
    if not isinstance(ranges, dict) or not ranges:
        raise InvalidConfig("ranges must be a non-empty object")
    for field, expected in ground_truth.items():
        entry = ranges.get(field)
        if not isinstance(entry, dict):
            raise InvalidConfig(f"ranges[{field!r}] must be an object with min and max, got {entry!r}")
        low, high = entry.get("min"), entry.get("max")
        if not (is_finite_number(low) and is_finite_number(high)):
            raise InvalidConfig(f"ranges[{field!r}] min and max must be finite numbers")
        if not low < high:
            raise InvalidConfig(f"ranges[{field!r}] needs min < max, got {low!r} >= {high!r}")
        if not low < expected < high:
            raise InvalidConfig(f"ground truth {expected!r} for {field!r} is not strictly inside ({low!r}, {high!r})")
    return ranges


@register_grader("numeric_range")
class NumericRangeGrader(Grader):
    """Each field strictly inside its open interval; score is the fraction that are."""

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        ground_truth = validate_ground_truth(config)
        ranges = read_ranges(config, ground_truth)
        answer = answer_object(answer)

        passes: dict[str, bool] = {}
        metrics: dict[str, Any] = {}
        summary: list[str] = []
        for field, expected in ground_truth.items():
            low, high = ranges[field]["min"], ranges[field]["max"]
            found, raw = lookup_dotted(answer, field)
            actual = coerce_answer_number(raw)[1] if found else None
            # Bools are already ints here; NaN and inf simply fail the comparison.
            ok = isinstance(actual, (int, float)) and low < actual < high
            passes[field] = ok
            metrics[f"{field}_expected"] = expected
            metrics[f"{field}_min"] = low
            metrics[f"{field}_max"] = high
            metrics[f"{field}_actual"] = actual
            metrics[f"{field}_pass"] = ok
            shown = "missing" if not found else repr(actual)
            summary.append(f"{field}: {'PASS' if ok else 'FAIL'} {shown} in ({low!r}, {high!r})")
        return fraction_result(passes, metrics, answer, summary)
