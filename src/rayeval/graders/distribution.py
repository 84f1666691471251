"""distribution_comparison: cell-type percentages (and optionally the cell count) within tolerance.

Unlike the numeric graders, answer values must already be JSON numbers: strings and
bools are rejected, and percentages are compared as absolute percentage points.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ._common import (
    InvalidConfig,
    RejectedAnswer,
    echo_answer,
    is_finite_number,
    is_nonblank_str,
    required_member,
)
from .base import Grader
from .registry import register_grader
from .result import GraderResult

DEFAULT_PERCENT_TOLERANCE = 3.0
DEFAULT_TOTAL_CELLS_TOLERANCE = 0


class DistributionSpec(NamedTuple):
    """The validated config; ``total_cells`` is None when the ground truth has none."""

    distribution: dict
    total_cells: Any
    percent_tolerance: Any
    total_cells_tolerance: Any


def all_keys_nonblank(mapping: dict) -> bool:
    return all(is_nonblank_str(key) for key in mapping)


def tolerance_value(tolerances: dict, key: str, default: Any) -> Any:
    """``tolerances[key].value``: absent entry or value means the default."""
    if key not in tolerances:
        return default
    entry = tolerances[key]
    if not isinstance(entry, dict):
        raise InvalidConfig(f"tolerances.{key} must be an object, got {entry!r}")
    value = entry.get("value", default)
    if not is_finite_number(value) or value < 0:
        raise InvalidConfig(f"tolerances.{key}.value must be a finite number >= 0, got {value!r}")
    return value


def read_config(config: Any) -> DistributionSpec:
    """The spec; InvalidConfig for the first problem found. The whole config is judged before the
    answer, so config errors always win."""
    ground_truth = config.get("ground_truth")
    if not isinstance(ground_truth, dict):
        raise InvalidConfig("ground_truth must be an object")
    distribution = ground_truth.get("cell_type_distribution")
    if not isinstance(distribution, dict) or not distribution:
        raise InvalidConfig("ground_truth.cell_type_distribution must be a non-empty object")
    if not all_keys_nonblank(distribution):
        raise InvalidConfig("cell type names must be non-blank strings")
    for cell_type, pct in distribution.items():
        if not is_finite_number(pct):
            raise InvalidConfig(f"ground-truth percentage for {cell_type!r} must be a finite number, got {pct!r}")
    total_cells = ground_truth.get("total_cells")
    if total_cells is not None and not is_finite_number(total_cells):
        raise InvalidConfig(f"ground_truth.total_cells must be a finite number, got {total_cells!r}")
    tolerances = config.get("tolerances", {})
    if not isinstance(tolerances, dict):
        raise InvalidConfig(f"tolerances must be an object, got {tolerances!r}")
    return DistributionSpec(
        distribution,
        total_cells,
        tolerance_value(tolerances, "cell_type_percentages", DEFAULT_PERCENT_TOLERANCE),
        tolerance_value(tolerances, "total_cells", DEFAULT_TOTAL_CELLS_TOLERANCE),
    )


@register_grader("distribution_comparison")
class DistributionComparisonGrader(Grader):
    """Every ground-truth cell type (and total_cells, when given) within tolerance; 0/1 score."""

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        spec = read_config(config)
        reported = required_member(answer, "cell_type_distribution", "Answer is not an object")
        if not isinstance(reported, dict) or not all_keys_nonblank(reported):
            raise RejectedAnswer("cell_type_distribution must be an object keyed by non-blank cell type names")

        metrics: dict[str, Any] = {}
        failures: list[str] = []
        if spec.total_cells is not None:
            actual = answer.get("total_cells")
            if actual is not None and not is_finite_number(actual):
                raise RejectedAnswer(f"total_cells must be a number, got {actual!r}")
            diff = None if actual is None else abs(actual - spec.total_cells)
            ok = diff is not None and diff <= spec.total_cells_tolerance
            metrics["total_cells_actual"] = actual
            metrics["total_cells_expected"] = spec.total_cells
            metrics["total_cells_diff"] = diff
            metrics["total_cells_pass"] = ok
            if not ok:
                failures.append(
                    f"total_cells {actual!r} vs {spec.total_cells!r} (tolerance {spec.total_cells_tolerance!r})"
                )

        for cell_type, expected in spec.distribution.items():
            actual = reported.get(cell_type)
            diff = abs(actual - expected) if is_finite_number(actual) else None
            ok = diff is not None and diff <= spec.percent_tolerance
            metrics[f"{cell_type}_actual"] = actual
            metrics[f"{cell_type}_expected"] = expected
            metrics[f"{cell_type}_diff"] = diff
            metrics[f"{cell_type}_pass"] = ok
            if not ok:
                failures.append(f"{cell_type}: {actual!r}% vs {expected!r}%")

        extras = sorted(key for key in reported if key not in spec.distribution)
        if extras:
            metrics["extra_cell_types"] = extras
        passed = not failures
        reasoning = (
            f"All {len(spec.distribution)} cell types within ±{spec.percent_tolerance!r} points"
            if passed
            else "Outside tolerance: " + "; ".join(failures)
        )
        return GraderResult(
            passed=passed,
            score=1.0 if passed else 0.0,
            score_max=1.0,
            metrics=metrics,
            reasoning=reasoning,
            agent_answer=echo_answer(answer),
        )
