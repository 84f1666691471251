"""longest_subsequence behaviours beyond the conformance vectors."""

from __future__ import annotations

import pytest

from rayeval.graders import get_grader
from rayeval.graders.sequence import lcs_length

GT = [["A", 1], ["B", 2], ["C", 3], ["D", 4]]


def grade(answer, config):
    return get_grader("longest_subsequence").evaluate_answer(answer, config)


@pytest.mark.parametrize(
    ("left", "right", "length"),
    [
        ([], [], 0),
        ([1, 2, 3], [], 0),
        ([1, 2, 3, 4], [1, 3, 4], 3),
        ([1, 2, 3, 4], [4, 3, 2, 1], 1),
        ([1, 2, 1, 2], [2, 1, 2, 1], 3),
        ("ABCBDAB", "BDCABA", 4),
    ],
)
def test_lcs_length(left, right, length) -> None:
    assert lcs_length(list(left), list(right)) == length
    assert lcs_length(list(right), list(left)) == length


@pytest.mark.parametrize(
    ("truth", "submitted", "passed"),
    [
        ([["a", 1]], [["A", True]], True),
        ([["a", 1]], [["a", 1.0]], True),
        ([["a", 1.0]], [["a", True]], True),
        ([["a", 0]], [["a", False]], True),
        ([["a", None]], [["a", None]], True),
        ([["a", 1]], [["a", "1"]], False),
        ([["a", 2]], [["a", True]], False),
        ([["a", "b"]], [["a", "b", "c"]], False),
        ([[" Mixed Case\t"]], [["mixed case"]], True),
        ([[{"K": "V"}]], [[{"K": "V"}]], True),
        ([[{"K": "V"}]], [[{"k": "v"}]], False),
    ],
)
def test_tuple_equality_is_python_equality(truth, submitted, passed) -> None:
    result = grade({"steps": submitted}, {"answer_field": "steps", "ground_truth": truth})
    assert result.passed is passed
    assert result.score == (1.0 if passed else 0.0)


def test_metrics_and_field_scores() -> None:
    answer = {"steps": [["A", 1], ["X", 9], ["C", 3], ["B", 2], ["D", 4], ["D", 4]]}
    result = grade(answer, {"answer_field": "steps", "ground_truth": GT, "scoring": {"pass_threshold": 0.5}})
    assert result.passed is True
    assert result.score == 0.5 and result.score_max == 1.0
    assert result.field_scores == {"steps": 0.5}
    assert result.metrics == {
        "lcs_length": 3,
        "gt_length": 4,
        "agent_length": 6,
        "denominator": 6,
        "pass_threshold": 0.5,
    }


def test_pass_threshold_metric_is_a_float() -> None:
    result = grade({"steps": GT}, {"answer_field": "steps", "ground_truth": GT, "scoring": {"pass_threshold": 1}})
    assert result.passed is True
    assert type(result.metrics["pass_threshold"]) is float


def test_empty_agent_list_passes_only_at_zero_threshold() -> None:
    config = {"answer_field": "steps", "ground_truth": GT, "scoring": {"pass_threshold": 0}}
    result = grade({"steps": []}, config)
    assert result.passed is True and result.score == 0.0
    assert result.metrics["denominator"] == 4


def test_dotted_answer_field_is_a_literal_key() -> None:
    config = {"answer_field": "a.b", "ground_truth": GT}
    assert grade({"a.b": GT}, config).passed is True
    assert grade({"a": {"b": GT}}, config).passed is False


@pytest.mark.parametrize(
    "answer",
    [{}, {"steps": None}, {"steps": "A,B"}, {"steps": {"0": ["A", 1]}}, {"steps": [["A", 1], "B"]}, {"steps": [None]}],
)
def test_answer_problems_report_an_error_metric(answer) -> None:
    result = grade(answer, {"answer_field": "steps", "ground_truth": GT})
    assert result.passed is False and result.score == 0.0
    assert list(result.metrics) == ["error"]


def test_non_dict_answer_is_an_agent_failure() -> None:
    result = grade([["A", 1]], {"answer_field": "steps", "ground_truth": GT})
    assert result.passed is False and result.agent_answer is None
    assert "configuration_error" not in result.metrics


@pytest.mark.parametrize(
    "config",
    [
        None,
        [GT],
        {"ground_truth": GT},
        {"answer_field": None, "ground_truth": GT},
        {"answer_field": 3, "ground_truth": GT},
        {"answer_field": "steps"},
        {"answer_field": "steps", "ground_truth": [["A"], []]},
        {"answer_field": "steps", "ground_truth": [["A"], None]},
        {"answer_field": "steps", "ground_truth": GT, "scoring": None},
        {"answer_field": "steps", "ground_truth": GT, "scoring": {"pass_threshold": None}},
        {"answer_field": "steps", "ground_truth": GT, "scoring": {"pass_threshold": -0.1}},
    ],
)
def test_config_errors_win_over_a_non_dict_answer(config) -> None:
    result = grade("not a dict", config)
    assert list(result.metrics) == ["configuration_error"]
    assert result.passed is False and result.score == 0.0
