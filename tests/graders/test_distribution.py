"""distribution_comparison: spec behaviours beyond the conformance vectors."""

from __future__ import annotations

import pytest

from rayeval.graders import get_grader

DIST = {"T": 40.0, "B": 35.0, "NK": 25.0}


def grade(answer, config):
    return get_grader("distribution_comparison").evaluate_answer(answer, config)


def config(**extra):
    """The DIST ground truth; ``total_cells`` goes into it, other keys into the config."""
    ground_truth = {"cell_type_distribution": dict(DIST)}
    if "total_cells" in extra:
        ground_truth["total_cells"] = extra.pop("total_cells")
    return {"ground_truth": ground_truth, **extra}


def assert_config_error(result):
    assert result.passed is False
    assert result.score == 0.0 and result.score_max == 1.0
    assert list(result.metrics) == ["configuration_error"]


def assert_agent_failure(result, metrics=None):
    assert result.passed is False
    assert result.score == 0.0 and result.score_max == 1.0
    assert "configuration_error" not in result.metrics
    assert "grader_error" not in result.metrics
    if metrics is not None:
        assert result.metrics == metrics


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize("cfg", [None, [], "x", 1, [config()]])
def test_non_object_config_is_a_configuration_error(cfg):
    assert_config_error(grade({"cell_type_distribution": DIST}, cfg))


@pytest.mark.parametrize(
    "ground_truth",
    [
        None,
        {"cell_type_distribution": None},
        {"cell_type_distribution": [40, 60]},
        {"cell_type_distribution": {"": 40}},
        {"cell_type_distribution": {"  ": 40}},
        {"cell_type_distribution": {"A": None}},
        {"cell_type_distribution": {"A": 10**400}},
        {"cell_type_distribution": {"A": float("nan")}},
        {"cell_type_distribution": {"A": 50}, "total_cells": True},
        {"cell_type_distribution": {"A": 50}, "total_cells": [1000]},
        {"cell_type_distribution": {"A": 50}, "total_cells": float("inf")},
    ],
)
def test_ground_truth_configuration_errors(ground_truth):
    assert_config_error(grade({"cell_type_distribution": {"A": 50}}, {"ground_truth": ground_truth}))


@pytest.mark.parametrize(
    "tolerances",
    [
        None,
        [],
        {"cell_type_percentages": None},
        {"cell_type_percentages": 5},
        {"cell_type_percentages": {"value": None}},
        {"cell_type_percentages": {"value": True}},
        {"cell_type_percentages": {"value": "5"}},
        {"total_cells": None},
        {"total_cells": {"value": -1}},
        {"total_cells": {"value": 10**400}},
    ],
)
def test_tolerance_configuration_errors(tolerances):
    # total_cells tolerance is validated even though this ground truth has no total_cells.
    assert_config_error(grade({"cell_type_distribution": DIST}, config(tolerances=tolerances)))


def test_configuration_error_wins_over_non_object_answer():
    assert_config_error(grade(None, config(tolerances={"total_cells": {"value": -1}})))


def test_empty_percentage_tolerance_entry_means_three_points():
    cfg = config(tolerances={"cell_type_percentages": {}})
    assert grade({"cell_type_distribution": {**DIST, "T": 37.0}}, cfg).passed is True
    assert grade({"cell_type_distribution": {**DIST, "T": 36.9}}, cfg).passed is False


def test_custom_percentage_tolerance_and_zero():
    loose = config(tolerances={"cell_type_percentages": {"value": 10}})
    assert grade({"cell_type_distribution": {**DIST, "T": 50}}, loose).passed is True
    exact = config(tolerances={"cell_type_percentages": {"value": 0}})
    assert grade({"cell_type_distribution": {**DIST, "T": 40.5}}, exact).passed is False
    assert grade({"cell_type_distribution": {**DIST, "T": 40}}, exact).passed is True


def test_null_ground_truth_total_cells_means_no_total_check():
    result = grade({"cell_type_distribution": DIST, "total_cells": "garbage"}, config(total_cells=None))
    assert result.passed is True
    assert not any(key.startswith("total_cells") for key in result.metrics)


def test_answer_total_cells_ignored_without_ground_truth_total():
    result = grade({"cell_type_distribution": DIST, "total_cells": [1, 2]}, config())
    assert result.passed is True
    assert "total_cells_actual" not in result.metrics


# --------------------------------------------------------------------------- answer shape


@pytest.mark.parametrize("answer", [None, [], "T: 40", 40])
def test_non_object_answer_is_an_agent_failure(answer):
    result = grade(answer, config())
    assert_agent_failure(result, metrics={})
    assert result.agent_answer is None


@pytest.mark.parametrize(
    "answer",
    [
        {},
        {"distribution": DIST},
        {"cell_type_distribution": None},
        {"cell_type_distribution": "T 40"},
        {"cell_type_distribution": {**DIST, "": 0}},
        {"cell_type_distribution": {**DIST, 3: 0}},
    ],
)
def test_malformed_distribution_is_an_agent_failure_with_empty_metrics(answer):
    result = grade(answer, config(total_cells=1000))
    assert_agent_failure(result, metrics={})
    assert result.agent_answer == answer


@pytest.mark.parametrize("total", ["1000", True, [1000], {"n": 1000}, 10**400])
def test_non_numeric_answer_total_cells_is_immediate_failure(total):
    result = grade({"cell_type_distribution": DIST, "total_cells": total}, config(total_cells=1000))
    assert_agent_failure(result, metrics={})


# --------------------------------------------------------------------------- checks and metrics


def test_missing_total_cells_is_a_failed_check_and_cell_types_still_evaluated():
    result = grade({"cell_type_distribution": {**DIST, "B": 20}}, config(total_cells=1000))
    assert_agent_failure(result)
    assert result.metrics["total_cells_actual"] is None
    assert result.metrics["total_cells_diff"] is None
    assert result.metrics["total_cells_expected"] == 1000
    assert result.metrics["total_cells_pass"] is False
    assert result.metrics["B_pass"] is False
    assert result.metrics["B_diff"] == 15.0
    assert result.metrics["T_pass"] is True


def test_total_cells_within_custom_tolerance():
    cfg = config(total_cells=1000, tolerances={"total_cells": {"value": 50}})
    result = grade({"cell_type_distribution": DIST, "total_cells": 950.0}, cfg)
    assert result.passed is True
    assert result.metrics["total_cells_diff"] == 50.0
    assert result.metrics["total_cells_pass"] is True


def test_full_metrics_with_extras_and_non_numeric_values():
    answer = {"cell_type_distribution": {"T": 41.5, "B": "35", "zeta": 1, "alpha": 2}, "total_cells": 10}
    result = grade(answer, config(total_cells=10))
    assert result.passed is False and result.score == 0.0
    assert result.metrics == {
        "total_cells_actual": 10,
        "total_cells_expected": 10,
        "total_cells_diff": 0,
        "total_cells_pass": True,
        "T_actual": 41.5,
        "T_expected": 40.0,
        "T_diff": 1.5,
        "T_pass": True,
        "B_actual": "35",
        "B_expected": 35.0,
        "B_diff": None,
        "B_pass": False,
        "NK_actual": None,
        "NK_expected": 25.0,
        "NK_diff": None,
        "NK_pass": False,
        "extra_cell_types": ["alpha", "zeta"],
    }
    assert result.agent_answer == answer


def test_no_extra_cell_types_key_without_extras():
    result = grade({"cell_type_distribution": DIST}, config())
    assert result.passed is True and result.score == 1.0 and result.score_max == 1.0
    assert "extra_cell_types" not in result.metrics


@pytest.mark.parametrize("value", [True, False, None, [40.0], 10**400])
def test_non_numeric_percentages_fail(value):
    result = grade({"cell_type_distribution": {**DIST, "T": value}}, config())
    assert_agent_failure(result)
    assert result.metrics["T_diff"] is None
    assert result.metrics["T_pass"] is False


def test_no_partial_credit():
    result = grade({"cell_type_distribution": {**DIST, "NK": 0}}, config())
    assert result.passed is False
    assert result.score == 0.0
    assert result.metrics["T_pass"] is True and result.metrics["B_pass"] is True
