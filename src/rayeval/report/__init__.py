"""Reports over stored results: reader, EvaluationStats, the benchmark table, pass@k,
paired comparisons, gates and a self-contained HTML report.

Typical use::

    from rayeval.report import read_units, benchmark_table, evaluation_stats
    units = read_units("s3://bucket/results", runs="run-42")
    print(benchmark_table(units))               # published columns, per model × harness
    print(evaluation_stats(units, planned_units=1000).progress)

Exports load on first use: ``rayeval run`` (whose CLI registers the report commands) does not
pay for pandas and scipy before its first unit.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # the exports (see rayeval._lazy)
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

__getattr__, __all__ = lazy_exports(__name__)
