"""A unit's error in its row: a short message to read in a table, the traceback apart."""
from __future__ import annotations

from rayeval.batch.plan import plan_units
from rayeval.batch.rows import (
    ERROR_MESSAGE_CHARS,
    ERROR_TRACEBACK_CHARS,
    row_from_result,
)
from rayeval.evals import Eval
from rayeval.harness.result import EvalResult


def test_long_messages_and_tracebacks_are_cut_saying_so() -> None:
    eval_ = Eval.model_validate({"id": "e", "task": "t", "grader": {"type": "multiple_choice", "config": {"correct_answer": "B"}}})
    unit = plan_units([eval_], ["m"], [1], "a")[0]
    trace = "Traceback (most recent call last)\n" + "  frame\n" * 20_000 + "ValueError: the cause"
    result = EvalResult(eval_id="e", status="error", passed=False, error_type="ValueError", error_message="x" * 5_000,
                        error_traceback=trace, started_at="2026-01-01T00:00:00Z", finished_at="2026-01-01T00:00:00Z")  # fmt: skip
    row = row_from_result(result, unit=unit, eval_=eval_, run_id="r", agent="a", agent_args={}, attempt=1, node="n")
    assert row.error_message is not None and row.error_traceback is not None
    assert row.error_message.startswith("x" * ERROR_MESSAGE_CHARS) and row.error_message.endswith("[4,000 characters left out]")
    assert row.error_traceback.endswith("ValueError: the cause")  # the end, where the exception is
    assert row.error_traceback.startswith(f"[{len(trace) - ERROR_TRACEBACK_CHARS:,} characters left out]")
