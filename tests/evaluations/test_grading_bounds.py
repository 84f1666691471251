"""``evaluations.run``'s evaluators are graded as any eval's graders: each log in a grading
process of its own, under the run's grade_timeout (the callable's output is hostile input)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rayeval import evaluations

from .conftest import FAST, results_root


def backtracking(question: str, **kwargs) -> str:
    """For the hostile datapoint, an output that makes its target regex `(a+)+b` backtrack for
    minutes; a plain one for the other."""
    return "a" * 32 if question == "hostile" else "fine"


def key_seen(log: dict) -> bool:
    """The caller's own evaluator reads what the caller's environment holds (its API key)."""
    import os

    return os.environ.get("MY_EVALUATOR_KEY") == "sk-mine"


@pytest.mark.slow
def test_evaluators_run_under_the_grade_timeout_with_the_callers_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hostile output against a built-in evaluator's regex is stopped at grade_timeout (a
    timeout row), not left to hold the worker; the caller's own evaluators, graded in a
    grading process too, still see the caller's environment."""
    monkeypatch.setenv("MY_EVALUATOR_KEY", "sk-mine")
    dataset = {
        "path": "qa/re",
        "datapoints": [
            {"inputs": {"question": "hostile"}, "target": "(a+)+b"},
            {"inputs": {"question": "plain"}, "target": "fi"},
        ],
    }
    output = results_root(tmp_path)
    checks = [
        {"path": "Example Evaluators/Code/Regex match"},
        {"path": "key", "return_type": "boolean", "callable": key_seen},
    ]
    evaluations.run(
        "redos", {"path": "hostile", "callable": backtracking}, checks, dataset, workers=2, output=output,
        grade_timeout=5.0, **FAST,
    )  # fmt: skip
    rows = {json.loads(row["answer_json"])["output"]: row for row in pd.read_parquet(output).to_dict("records")}
    hostile, plain = rows["a" * 32], rows["fine"]
    assert hostile["status"] == "timeout" and hostile["error_type"] == "GradingTimeout", hostile["error_message"]
    assert hostile["grade_s"] < 90  # unbounded: hours (2**32 steps); 31 s seen in CI's slow phase, on a loaded machine
    assert plain["status"] == "passed", plain["error_message"]  # the regex matched, and the key was there
