"""Every reference test vector, and rayeval's own cases beside them (disagreements found by
running the reference's tests, with the verdict the reference gives): verdict, score, score_max
and the configuration-error flag."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rayeval.graders import get_grader
from tests.conftest import read_jsonl, shared_path

# NaN and Infinity are written as Python's json module writes them, and read back the same way.
VECTORS = read_jsonl(shared_path("conformance", "graders.jsonl")) + read_jsonl(
    Path(__file__).with_name("conformance_extra.jsonl")
)


@pytest.mark.parametrize("vector", VECTORS, ids=[v["id"] for v in VECTORS])
def test_vector(vector: dict) -> None:
    result = get_grader(vector["type"]).evaluate_answer(vector["answer"], vector["config"])
    expected = vector["expected"]
    got = {
        "passed": result.passed,
        "score": result.score,
        "score_max": result.score_max,
        "configuration_error": "configuration_error" in result.metrics,
    }
    assert "grader_error" not in result.metrics or vector["id"].find("system-error") >= 0, result.metrics
    assert got["passed"] is expected["passed"], (got, expected, result.metrics)
    assert math.isclose(got["score"], expected["score"], rel_tol=0, abs_tol=1e-9), (got, expected, result.metrics)
    assert math.isclose(got["score_max"], expected["score_max"], rel_tol=0, abs_tol=1e-9), (got, expected)
    assert got["configuration_error"] is expected["configuration_error"], (got, expected, result.metrics)
