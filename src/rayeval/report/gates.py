"""Threshold gates over a benchmark table: one check per row (model × harness by default).

A gate fails when any row misses its threshold; ``rayeval report`` then exits with 1. A row
without a value (no scored eval) fails a gate: it did not show it meets the bar.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
from pydantic import BaseModel, ConfigDict

from .benchmark import ACCURACY, ERRORS, N_RUNS
from .reader import ReportError

KEY_COLUMNS = ("task", "kit", "model_name", "model", "harness", "agent", "run_id")


class GateResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    gate: str  # e.g. "accuracy >= 50"
    group: str  # e.g. "gpt-5.5/mini-swe-agent"
    metric: str
    value: float | None
    threshold: float
    passed: bool

    def __str__(self) -> str:
        value = "-" if self.value is None else f"{self.value:.2f}"
        return f"{'PASS' if self.passed else 'FAIL'} {self.group}: {self.metric} {value} ({self.gate})"


def _group_label(row: pd.Series, keys: Sequence[str]) -> str:
    parts = [str(row[k]) for k in keys if str(row[k])]
    return "/".join(parts) or "all"


def _keys(table: pd.DataFrame) -> list[str]:
    return [c for c in table.columns if c in KEY_COLUMNS]


def _check(
    table: pd.DataFrame, metric: str, values: pd.Series, threshold: float, minimum: bool, gate: str
) -> list[GateResult]:
    keys = _keys(table)
    results = []
    for (_, row), value in zip(table.iterrows(), values):  # one per table row (model), not per unit
        v = None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
        ok = v is not None and (v >= threshold if minimum else v <= threshold)
        results.append(
            GateResult(gate=gate, group=_group_label(row, keys), metric=metric, value=v, threshold=threshold, passed=ok)
        )
    return results


def accuracy_gate(table: pd.DataFrame, fail_under: float) -> list[GateResult]:
    """Every row's ``Accuracy (%)`` must be at least ``fail_under`` (percent)."""
    threshold = _percent(fail_under, "--fail-under")
    return _check(table, "accuracy (%)", table[ACCURACY], threshold, True, f"accuracy >= {threshold:g}%")


def error_rate_gate(table: pd.DataFrame, max_error_rate: float) -> list[GateResult]:
    """Every row's share of errored runs must be at most ``max_error_rate`` (percent)."""
    threshold = _percent(max_error_rate, "--max-error-rate")
    rate = table[ERRORS] / table[N_RUNS].where(table[N_RUNS] > 0) * 100.0
    return _check(table, "error rate (%)", rate, threshold, False, f"error rate <= {threshold:g}%")


def _percent(value: float, name: str) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ReportError(f"{name} must be a number of percent, got {value!r}") from None
    if not (0.0 <= value <= 100.0) or math.isnan(value):
        raise ReportError(f"{name} must be between 0 and 100 (percent), got {value:g}")
    return value


def gates_passed(results: Sequence[GateResult]) -> bool:
    return all(r.passed for r in results)


def gate_summary(results: Sequence[GateResult]) -> str:
    failed = [r for r in results if not r.passed]
    if not results:
        return ""
    if not failed:
        return f"gates passed: {len(results)} check(s)"
    return "\n".join([f"gate failed: {len(failed)} of {len(results)} check(s)", *(str(r) for r in failed)])


__all__ = ["GateResult", "accuracy_gate", "error_rate_gate", "gate_summary", "gates_passed"]
