"""``evaluations.run``'s evaluators are graded as any eval's graders: each log in a grading
process of its own, under the run's grade_timeout (the callable's output is hostile input)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rayeval import evaluations

from .conftest import FAST, qa_dataset, results_root
from .test_run import answer, evaluators


def backtracking(question: str, **kwargs) -> str:
    """An output that makes the dataset's target regex `(a+)+b` backtrack for minutes."""
    return "a" * 32


def key_seen(log: dict) -> bool:
    """The caller's own evaluator reads what the caller's environment holds (its API key)."""
    import os

    return os.environ.get("MY_EVALUATOR_KEY") == "sk-mine"


def test_evaluators_run_under_the_grade_timeout_with_the_callers_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hostile output against a built-in evaluator's regex is stopped at grade_timeout (a
    timeout row), not left to hold the worker; the caller's own evaluators, graded in a
    grading process too, still see the caller's environment."""
    monkeypatch.setenv("MY_EVALUATOR_KEY", "sk-mine")
    dataset = {"path": "qa/re", "datapoints": [{"inputs": {"question": "q"}, "target": "(a+)+b"}]}
    output = results_root(tmp_path / "regex")
    evaluations.run(
        "redos",
        {"path": "hostile", "callable": backtracking},
        [{"path": "Example Evaluators/Code/Regex match"}],
        dataset,
        workers=1,
        output=output,
        grade_timeout=3.0,
        **FAST,
    )
    (row,) = pd.read_parquet(output).to_dict("records")
    assert row["status"] == "timeout" and row["error_type"] == "GradingTimeout", row["error_message"]
    assert row["grade_s"] < 30  # unbounded: minutes

    output = results_root(tmp_path / "key")
    checks = [{"path": "key", "return_type": "boolean", "callable": key_seen}, *evaluators()[1:2]]
    evaluations.run(
        "key", {"path": "answer", "callable": answer}, checks, qa_dataset(), workers=2, output=output, **FAST
    )
    rows = pd.read_parquet(output)
    assert set(rows["status"]) == {"passed"} and len(rows) == 5, rows[["status", "error_message"]]
