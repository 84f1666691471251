"""Reports over stored results: reader, EvaluationStats, the benchmark table, pass@k,
paired comparisons, gates and a self-contained HTML report.

Typical use::

    from rayeval.report import read_units, benchmark_table, evaluation_stats
    units = read_units("s3://bucket/results", runs="run-42")
    print(benchmark_table(units))               # published columns, per model × harness
    print(evaluation_stats(units, planned_units=1000).progress)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ..record import ERROR_STATUSES
    from ..storage.attempts import latest_attempts
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
    from .compare import PairedComparison, bootstrap_mean_ci, exact_binomial_p, paired_comparison, select
    from .gates import GateResult, accuracy_gate, error_rate_gate, gate_summary, gates_passed
    from .html_report import render_html, write_html
    from .metrics import majority_vote, pass_at_k, pass_at_k_estimate, pass_hat_k_estimate
    from .reader import (
        ALL_COLUMNS,
        REPORT_COLUMNS,
        ReportError,
        ResultsReader,
        read_results,
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

# Exports load on first use: `rayeval run` (whose CLI registers the report commands) does not
# pay for pandas and scipy before its first unit.
_EXPORTS = {
    "ACCURACY": ".benchmark",
    "ALL_COLUMNS": ".reader",
    "CI_LOWER": ".benchmark",
    "CI_UPPER": ".benchmark",
    "COST": ".benchmark",
    "DURATION": ".benchmark",
    "ERRORS": ".benchmark",
    "ERROR_STATUSES": "..record",
    "N_RUNS": ".benchmark",
    "PUBLISHED_COLUMNS": ".benchmark",
    "REPORT_COLUMNS": ".reader",
    "BooleanEvaluatorStats": ".stats",
    "EvaluationStats": ".stats",
    "EvaluatorStats": ".stats",
    "GateResult": ".gates",
    "NumberEvaluatorStats": ".stats",
    "PairedComparison": ".compare",
    "ReportError": ".reader",
    "ResultsReader": ".reader",
    "RunStats": ".stats",
    "SelectEvaluatorStats": ".stats",
    "TextEvaluatorStats": ".stats",
    "accuracy_gate": ".gates",
    "benchmark_table": ".benchmark",
    "bootstrap_mean_ci": ".compare",
    "breakdown_table": ".benchmark",
    "compute_evaluator_stats": ".stats",
    "error_policy_note": ".benchmark",
    "error_rate_gate": ".gates",
    "eval_frame": ".benchmark",
    "evaluation_stats": ".stats",
    "evaluator_stats": ".stats",
    "evaluator_stats_table": ".stats",
    "exact_binomial_p": ".compare",
    "gate_summary": ".gates",
    "gates_passed": ".gates",
    "infer_kind": ".stats",
    "judgments_from_metrics": ".stats",
    "latest_attempts": "..storage.attempts",
    "majority_vote": ".metrics",
    "paired_comparison": ".compare",
    "pass_at_k": ".metrics",
    "pass_at_k_estimate": ".metrics",
    "pass_hat_k_estimate": ".metrics",
    "read_results": ".reader",
    "read_units": ".reader",
    "render_html": ".html_report",
    "rounded": ".benchmark",
    "select": ".compare",
    "t_interval": ".benchmark",
    "to_csv": ".benchmark",
    "to_json": ".benchmark",
    "to_json_data": ".benchmark",
    "to_text": ".benchmark",
    "write_html": ".html_report",
}

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
    "read_results",
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

__getattr__ = lazy_exports(__name__, _EXPORTS)
