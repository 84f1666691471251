"""A unit's error in its row: a short message to read in a table, the traceback apart."""

from __future__ import annotations

from rayeval.batch.plan import plan_units
from rayeval.batch.rows import (
    ERROR_MESSAGE_CHARS,
    ERROR_TRACEBACK_CHARS,
    ERROR_TYPE_CHARS,
    RunRows,
    row_from_result,
)
from rayeval.evals import Eval
from rayeval.unit.result import EvalResult


def test_long_messages_tracebacks_and_error_kinds_are_cut_saying_so() -> None:
    """An agent names its own exception class: its kind is a name in a table, never megabytes."""
    eval_ = Eval.model_validate(
        {"id": "e", "task": "t", "grader": {"type": "multiple_choice", "config": {"correct_answer": "B"}}}
    )
    unit = plan_units([eval_], ["m"], [1], "a")[0]
    trace = "Traceback (most recent call last)\n" + "  frame\n" * 20_000 + "ValueError: the cause"
    result = EvalResult(eval_id="e", status="error", passed=False, error_type="<b>Kind</b>" * 1000, error_message="x" * 5_000,
                        error_traceback=trace, started_at="2026-01-01T00:00:00Z", finished_at="2026-01-01T00:00:00Z")  # fmt: skip
    row = row_from_result(result, unit=unit, eval_=eval_, run_id="r", agent="a", agent_args={}, attempt=1, node="n")
    assert row.error_message is not None and row.error_traceback is not None
    assert row.error_message.startswith("x" * ERROR_MESSAGE_CHARS) and row.error_message.endswith(
        "[4,000 characters left out]"
    )
    assert row.error_type is not None and row.error_type.startswith("<b>Kind</b>" * 10)
    assert row.error_type.endswith(f"[{11_000 - ERROR_TYPE_CHARS:,} characters left out]")
    assert row.error_traceback.endswith("ValueError: the cause")  # the end, where the exception is
    assert row.error_traceback.startswith(f"[{len(trace) - ERROR_TRACEBACK_CHARS:,} characters left out]")


def test_numeric_and_yes_no_metrics_become_typed_columns() -> None:
    from rayeval import grade
    from rayeval.report.reader import table_to_frame
    from rayeval.storage.schema import lines_to_table

    config = {"ground_truth": {"n": 100}, "tolerances": {"n": {"type": "absolute", "value": 5}}}
    eval_ = Eval.model_validate({"id": "e", "task": "t", "grader": {"type": "numeric_tolerance", "config": config}})
    unit = plan_units([eval_], ["m"], [1], "a")[0]
    stamp = "2026-01-01T00:00:00Z"
    rows = []
    for answer in (103, 10**400):  # the second's error no float holds: left to metrics_json
        graded = grade(eval_, {"n": answer})
        result = EvalResult(eval_id="e", status="passed" if graded.passed else "failed", passed=graded.passed,
                            grader_result=graded, started_at=stamp, finished_at=stamp)  # fmt: skip
        rows.append(
            row_from_result(result, unit=unit, eval_=eval_, run_id="r", agent="a", agent_args={}, attempt=1, node="n")
        )
    assert rows[0].metrics == {"n_actual": 103.0, "n_expected": 100.0, "n_error": 3.0, "n_pass": 1.0}
    frame = table_to_frame(lines_to_table([row.to_line() for row in rows]))
    assert frame["metric.n_pass"].tolist() == [1.0, 0.0]
    assert frame["metric.n_error"].iloc[0] == 3.0 and "metrics" not in frame.columns


def test_the_errors_rows_are_made_of_mask_the_runs_secrets() -> None:
    """What Ray or rayeval's own code says of a unit (an exception's text, its traceback) is
    masked as what the agent returns is."""
    handed = "serp-live-0123456789"
    eval_ = Eval.model_validate(
        {"id": "e", "task": "t", "grader": {"type": "multiple_choice", "config": {"correct_answer": "B"}}}
    )
    rows = RunRows([eval_], "r", "a", {}, frozenset({handed}))
    unit = plan_units([eval_], ["m"], [1], "a")[0]
    failed = rows.rayeval_failure(unit, 1, ValueError(f"bad value {handed!r}"), "n", None)
    lost = rows.system_error(unit, 1, RuntimeError(f"worker died holding {handed}"))
    for row in (failed, lost):
        assert handed.encode() not in row.to_line() and "***" in (row.error_message or ""), row.error_message
