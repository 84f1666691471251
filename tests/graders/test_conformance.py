"""Every reference test vector, and rayeval's own cases beside them (disagreements found by
running the reference's tests, with the verdict the reference gives): verdict, score, score_max
and the configuration-error flag."""

from __future__ import annotations

import ast
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rayeval.graders import GRADER_REGISTRY, Grader, GraderResult, get_grader, register_grader
from tests.conftest import REPO, read_jsonl, shared_path

# NaN and Infinity are written as Python's json module writes them, and read back the same way.
VECTORS = read_jsonl(shared_path("conformance", "graders.jsonl")) + read_jsonl(
    Path(__file__).with_name("conformance_extra.jsonl")
)


class MalformedMetrics(Grader):
    """A child grader whose result carries ``metrics=None`` (the reference's own test grader):
    it overrides ``evaluate_answer`` itself, so nothing checks its result on the way out."""

    def evaluate_answer(self, answer: Any, config: Any) -> GraderResult:
        return GraderResult(passed=True, metrics=None, reasoning="synthetic malformed result", agent_answer=answer,
                            score=1.0)  # type: ignore[arg-type]  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def _test_graders() -> Iterator[None]:
    """The grader types the vectors name besides the built-ins, for this module only."""
    register_grader("malformed_metrics_for_test")(MalformedMetrics)
    yield
    GRADER_REGISTRY.unregister("malformed_metrics_for_test")


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
    if "misconfigured_children" in expected:  # the children the reference names
        assert result.metrics["misconfigured_children"] == expected["misconfigured_children"], result.metrics
    if "reasoning_contains" in expected:  # the reference's words, compared as its own tests do
        assert expected["reasoning_contains"] in result.reasoning.lower(), result.reasoning


def test_a_top_level_grader_with_malformed_metrics_is_a_configuration_error() -> None:
    """The same malformed result from an eval's own grader: a configuration error row, not a
    pass, and nothing downstream reads ``None`` as metrics."""
    from rayeval import Eval, grade

    eval_ = Eval.model_validate(
        {"id": "e", "task": "t", "grader": {"type": "malformed_metrics_for_test", "config": {}}}
    )
    result = grade(eval_, {"answer": "A"})
    assert (result.passed, result.score) == (False, 0.0) and result.is_configuration_error
    assert (
        "returned an invalid result: metrics must be an object, got NoneType" in result.metrics["configuration_error"]
    )


def test_every_grader_result_names_its_score() -> None:
    """The reference's rule for its own code, applied to rayeval's: every ``GraderResult(...)``
    passes ``score=`` by name (the default fails closed, but a verdict says its score)."""
    offenders = []
    for path in sorted((REPO / "src" / "rayeval").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "GraderResult"
                and "score" not in {keyword.arg for keyword in node.keywords}
            ):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


def test_a_grading_reply_without_a_score_is_no_verdict() -> None:
    """The verdict a grading process sends is rebuilt field by field: one without its
    score is refused, never graded 0 by the default."""
    from rayeval.unit.grading_process import GradingRefused, verdict_of

    whole = GraderResult(passed=True, score=0.75, score_max=1.0, metrics={"k": 1}, reasoning="r").to_dict()
    assert verdict_of({"result": whole}, None) == GraderResult(passed=True, score=0.75, metrics={"k": 1}, reasoning="r")
    with pytest.raises(GradingRefused, match="sent no whole verdict"):
        verdict_of({"result": {k: v for k, v in whole.items() if k != "score"}}, None)
