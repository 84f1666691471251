"""label_set_jaccard behaviours beyond the conformance vectors."""

from __future__ import annotations

import pytest

from rayeval.graders import get_grader

GT = ["B cell", "T cell", "NK cell", "Monocyte"]


def grade(answer, config):
    return get_grader("label_set_jaccard").evaluate_answer(answer, config)


def test_alias_is_the_same_grader() -> None:
    assert type(get_grader("jaccard_label_set")) is type(get_grader("label_set_jaccard"))


@pytest.mark.parametrize("config", [None, [], "ground_truth_labels", 3])
def test_non_dict_config_is_a_configuration_error_whatever_the_answer(config) -> None:
    result = grade("not even a dict", config)
    assert result.passed is False
    assert result.score == 0.0 and result.score_max == 1.0
    assert list(result.metrics) == ["configuration_error"]
    assert result.agent_answer is None


@pytest.mark.parametrize("answer", [None, ["B cell"], "B cell", 7])
def test_non_dict_answer_is_an_agent_failure(answer) -> None:
    result = grade(answer, {"ground_truth_labels": GT})
    assert result.passed is False and result.score == 0.0
    assert result.metrics == {}
    assert result.agent_answer is None


def test_float_labels_use_python_repr() -> None:
    assert grade({"cell_types_predicted": [1.0]}, {"ground_truth_labels": ["1"]}).metrics["jaccard_index"] == 0.0
    assert grade({"cell_types_predicted": [1.0]}, {"ground_truth_labels": ["1.0"]}).passed is True
    assert grade({"cell_types_predicted": ["1"]}, {"ground_truth_labels": [1]}).passed is True
    assert grade({"cell_types_predicted": [1]}, {"ground_truth_labels": [1.0]}).passed is False
    assert grade({"cell_types_predicted": [False]}, {"ground_truth_labels": ["False"]}).passed is True


def test_labels_are_neither_trimmed_nor_case_folded() -> None:
    result = grade({"cell_types_predicted": [" B cell", "t cell"]}, {"ground_truth_labels": ["B cell", "T cell"]})
    assert result.metrics["true_positives"] == []
    assert result.metrics["false_positives"] == [" B cell", "t cell"]


@pytest.mark.parametrize("expected_count", [4.0, "4", True, False, -1, [4]])
def test_expected_count_must_be_a_non_negative_int(expected_count) -> None:
    result = grade({"cell_types_predicted": GT}, {"ground_truth_labels": GT, "expected_count": expected_count})
    assert "configuration_error" in result.metrics
    assert result.passed is False


def test_explicit_null_expected_count_means_no_contract() -> None:
    result = grade({"cell_types_predicted": GT + ["B cell"]}, {"ground_truth_labels": GT, "expected_count": None})
    assert result.passed is True
    assert result.metrics["expected_count"] is None
    assert result.metrics["cardinality_pass"] is True


def test_metrics_report_normalised_counts_with_duplicates() -> None:
    result = grade(
        {"cell_types_predicted": ["A", "A", 1, "X"]},
        {"ground_truth_labels": ["A", "1", "B", "B"], "scoring": {"pass_threshold": 0.5}, "expected_count": 3},
    )
    assert result.metrics == {
        "jaccard_index": 0.5,
        "pass_threshold": 0.5,
        "answer_field": "cell_types_predicted",
        "true_positives": ["1", "A"],
        "false_positives": ["X"],
        "false_negatives": ["B"],
        "submitted_count": 4,
        "unique_count": 3,
        "expected_count": 3,
        "cardinality_pass": False,
        "predicted_count": 3,
        "ground_truth_count": 3,
    }
    assert result.passed is False and result.score == 0.0


def test_pass_threshold_metric_is_reported_as_configured() -> None:
    result = grade({"cell_types_predicted": GT}, {"ground_truth_labels": GT, "scoring": {"pass_threshold": 1}})
    assert result.passed is True and result.score == 1.0
    assert result.metrics["pass_threshold"] == 1 and type(result.metrics["pass_threshold"]) is int


@pytest.mark.parametrize(
    "config",
    [
        {"ground_truth_labels": GT, "scoring": None},
        {"ground_truth_labels": GT, "scoring": {"pass_threshold": None}},
        {"ground_truth_labels": GT, "scoring": {"pass_threshold": -0.01}},
        {"ground_truth_labels": GT, "scoring": {"pass_threshold": 1.5}},
        {"ground_truth_labels": GT, "answer_field": 5},
        {"ground_truth_labels": ["A", ["B"]]},
        {"ground_truth_labels": ["A", {"B": 1}]},
        {"labels": GT},
    ],
)
def test_config_errors_win_over_a_missing_answer(config) -> None:
    result = grade({}, config)
    assert "configuration_error" in result.metrics
    assert len(result.metrics) == 1


@pytest.mark.parametrize("item", [None, ["B cell"], {"name": "B cell"}])
def test_unusable_answer_items_fail_with_empty_metrics(item) -> None:
    result = grade({"cell_types_predicted": ["B cell", item]}, {"ground_truth_labels": GT})
    assert result.passed is False and result.score == 0.0
    assert result.metrics == {}
    assert result.agent_answer == {"cell_types_predicted": ["B cell", item]}


def test_passing_result_echoes_the_answer() -> None:
    answer = {"cell_types_predicted": GT, "other": 1}
    result = grade(answer, {"ground_truth_labels": GT})
    assert result.agent_answer == answer
    assert result.field_scores == {}
    assert result.normalized_score() == 1.0
