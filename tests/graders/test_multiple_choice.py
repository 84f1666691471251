"""multiple_choice token rules and result shapes beyond the conformance vectors."""

from __future__ import annotations

import pytest

from rayeval.graders import get_grader
from rayeval.graders.multiple_choice import choice_token


def grade(answer, config):
    return get_grader("multiple_choice").evaluate_answer(answer, config)


@pytest.mark.parametrize(
    ("value", "token"),
    [
        (1e20, "100000000000000000000"),
        (-0.0, "0"),
        (6.0, "6"),
        (1e-07, "1E-07"),
        (1.5, "1.5"),
        (-2.25, "-2.25"),
        ("6.0", "6.0"),
        ("  b) ", "B)"),
        ("option  a", "OPTION  A"),
        (True, "TRUE"),
        (False, "FALSE"),
        (6, "6"),
        (-3, "-3"),
        (float("inf"), None),
        (float("nan"), None),
        ("", None),
        (" \t\n", None),
        (None, None),
        (["A"], None),
        ({"A": 1}, None),
    ],
)
def test_choice_token(value, token) -> None:
    assert choice_token(value) == token


@pytest.mark.parametrize(
    ("answer", "correct", "passed"),
    [
        ("6.0", 6, False),
        (6, "6.0", False),
        (-0.0, "0", True),
        (0, -0.0, True),
        (1e20, "100000000000000000000", True),
        (1e20, "1E+20", False),
        ("1E-07", 1e-07, True),
        (True, "true", True),
        ("TRUE", True, True),
        (1, True, False),
        (True, 1, False),
        (" c ", "C", True),
    ],
)
def test_token_matching(answer, correct, passed) -> None:
    result = grade({"answer": answer}, {"correct_answer": correct})
    assert result.passed is passed
    assert result.score == (1.0 if passed else 0.0)


def test_metrics_hold_normalised_correct_list_and_agent_token() -> None:
    result = grade({"answer": " true "}, {"correct_answers": ["a", 6.0, True, "a"]})
    assert result.passed is True
    assert result.metrics == {"correct_answers": ["A", "6", "TRUE", "A"], "agent_answer": "TRUE"}


@pytest.mark.parametrize("raw", [None, "", "   ", ["B"], {"choice": "B"}])
def test_tokenless_answer_reports_raw_value(raw) -> None:
    result = grade({"answer": raw}, {"correct_answer": "b"})
    assert result.passed is False and result.score == 0.0
    assert result.metrics == {"correct_answers": ["B"], "agent_answer": raw}


def test_missing_answer_field_has_empty_metrics() -> None:
    result = grade({"choice": "B"}, {"correct_answer": "B"})
    assert result.passed is False and result.metrics == {}


@pytest.mark.parametrize("answer", [None, "B", ["B"]])
def test_non_dict_answer_is_an_agent_failure(answer) -> None:
    result = grade(answer, {"correct_answer": "B"})
    assert result.passed is False and result.metrics == {} and result.agent_answer is None


@pytest.mark.parametrize(
    "config",
    [
        None,
        ["B"],
        {},
        {"correct_answer": "B", "correct_answers": None},
        {"correct_answers": None},
        {"correct_answer": {"B": 1}},
        {"correct_answer": "   "},
        {"correct_answers": ["B", ""]},
        {"correct_answers": ["B", ["C"]]},
        {"correct_answers": ("B",)},
        {"correct_answer": float("inf")},
    ],
)
def test_config_errors_win_over_missing_answer(config) -> None:
    result = grade({}, config)
    assert list(result.metrics) == ["configuration_error"]
    assert result.passed is False and result.score == 0.0
