"""Reports over stored results: reader, EvaluationStats, the benchmark table, pass@k,
paired comparisons, gates and a self-contained HTML report.

Typical use::

    from rayeval.report import read_units, benchmark_table, evaluation_stats
    units = read_units("s3://bucket/results", runs="run-42")
    print(benchmark_table(units))               # published columns, per model × harness
    print(evaluation_stats(units, planned_units=1000).progress)
"""

from .benchmark import (
    ACCURACY,
    CI_LOWER,
    CI_UPPER,
    COST,
    DURATION,
    ERRORS,
    N_RUNS,
    PUBLISHED_COLUMNS,
    benchmark_table,
    breakdown_table,
    error_policy_note,
    eval_frame,
    rounded,
    t_interval,
    to_csv,
    to_json,
    to_json_data,
    to_text,
)
from .compare import (
    PairedComparison,
    bootstrap_mean_ci,
    exact_binomial_p,
    paired_comparison,
    select,
)
from .gates import (
    GateResult,
    accuracy_gate,
    error_rate_gate,
    gate_summary,
    gates_passed,
)
from .metrics import majority_vote, pass_at_k, pass_at_k_estimate, pass_hat_k_estimate
from .reader import (
    ALL_COLUMNS,
    ERROR_STATUSES,
    REPORT_COLUMNS,
    ReportError,
    ResultsReader,
    latest_attempts,
    read_units,
)
from .stats import (
    BooleanEvaluatorStats,
    EvaluationStats,
    EvaluatorStats,
    NumberEvaluatorStats,
    RunStats,
    SelectEvaluatorStats,
    TextEvaluatorStats,
    compute_evaluator_stats,
    evaluation_stats,
    evaluator_stats,
    evaluator_stats_table,
    infer_kind,
    judgments_from_metrics,
)


def per_model_table(units, by=("model", "harness"), *, errors: str = "fail"):  # type: ignore[no-untyped-def]
    """Alias of :func:`benchmark_table` (one row per model × harness)."""
    return benchmark_table(units, by=by, errors=errors)


def render_html(units, **kwargs):  # type: ignore[no-untyped-def]
    """The self-contained HTML report (matplotlib imported only when called)."""
    from .html_report import render_html as _render

    return _render(units, **kwargs)


def write_html(path, units, **kwargs):  # type: ignore[no-untyped-def]
    from .html_report import write_html as _write

    return _write(path, units, **kwargs)


__all__ = [
    "ACCURACY",
    "ALL_COLUMNS",
    "CI_LOWER",
    "CI_UPPER",
    "COST",
    "DURATION",
    "ERRORS",
    "ERROR_STATUSES",
    "N_RUNS",
    "PUBLISHED_COLUMNS",
    "REPORT_COLUMNS",
    "BooleanEvaluatorStats",
    "EvaluationStats",
    "EvaluatorStats",
    "GateResult",
    "NumberEvaluatorStats",
    "PairedComparison",
    "ReportError",
    "ResultsReader",
    "RunStats",
    "SelectEvaluatorStats",
    "TextEvaluatorStats",
    "accuracy_gate",
    "benchmark_table",
    "bootstrap_mean_ci",
    "breakdown_table",
    "compute_evaluator_stats",
    "error_policy_note",
    "error_rate_gate",
    "eval_frame",
    "evaluation_stats",
    "evaluator_stats",
    "evaluator_stats_table",
    "exact_binomial_p",
    "gate_summary",
    "gates_passed",
    "infer_kind",
    "judgments_from_metrics",
    "latest_attempts",
    "majority_vote",
    "paired_comparison",
    "pass_at_k",
    "pass_at_k_estimate",
    "pass_hat_k_estimate",
    "per_model_table",
    "read_units",
    "render_html",
    "rounded",
    "select",
    "t_interval",
    "to_csv",
    "to_json",
    "to_json_data",
    "to_text",
    "write_html",
]
