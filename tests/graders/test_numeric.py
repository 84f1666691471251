"""numeric_tolerance and numeric_range: spec behaviours beyond the conformance vectors."""

from __future__ import annotations

import math

import pytest

from rayeval.graders import get_grader

HUGE = 10**400  # a JSON integer that overflows a double


def tolerance(answer, config):
    return get_grader("numeric_tolerance").evaluate_answer(answer, config)


def in_range(answer, config):
    return get_grader("numeric_range").evaluate_answer(answer, config)


def assert_config_error(result):
    assert result.passed is False
    assert result.score == 0.0 and result.score_max == 1.0
    assert list(result.metrics) == ["configuration_error"]
    assert result.field_scores == {}


def assert_agent_failure(result, score=0.0):
    assert result.passed is False
    assert result.score == score and result.score_max == 1.0
    assert "configuration_error" not in result.metrics
    assert "grader_error" not in result.metrics


RANGE_X = {"ground_truth": {"x": 5}, "ranges": {"x": {"min": 1, "max": 10}}}


# --------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("grade", [tolerance, in_range])
@pytest.mark.parametrize("config", [None, [], "ground_truth", 3, [{"ground_truth": {"x": 1}}]])
def test_non_object_config_is_a_configuration_error(grade, config):
    result = grade({"x": 1}, config)
    assert_config_error(result)
    assert result.agent_answer == {"x": 1}


@pytest.mark.parametrize(
    "grade,config",
    [(tolerance, {"ground_truth": {"x": 1}}), (in_range, RANGE_X)],
)
@pytest.mark.parametrize("answer", [None, [], "5", 5, [{"x": 5}]])
def test_non_object_answer_is_an_agent_failure_with_empty_metrics(grade, config, answer):
    result = grade(answer, config)
    assert_agent_failure(result)
    assert result.metrics == {}
    assert result.agent_answer is None


@pytest.mark.parametrize("grade", [tolerance, in_range])
def test_bad_config_wins_over_non_object_answer(grade):
    assert_config_error(grade(None, {"ground_truth": {"x": "1"}, "ranges": {"x": {"min": 0, "max": 2}}}))


@pytest.mark.parametrize(
    "ground_truth",
    [None, [], [1], {"": 1}, {"x": None}, {"x": HUGE}, {"x": float("nan")}, {"x": [1]}, {"x": False}],
)
@pytest.mark.parametrize("grade", [tolerance, in_range])
def test_ground_truth_validation_is_shared(grade, ground_truth):
    assert_config_error(grade({"x": 1}, {"ground_truth": ground_truth, "ranges": {"x": {"min": 0, "max": 2}}}))


# --------------------------------------------------------------------------- numeric_tolerance: answers


@pytest.mark.parametrize(
    "text,expected",
    [("1_000", 1000), ("  -.5e1 ", -5), ("+7", 7), ("1E2", 100)],
)
def test_numeric_strings_parse_with_float_semantics(text, expected):
    result = tolerance({"x": text}, {"ground_truth": {"x": expected}})
    assert result.passed is True
    assert result.metrics["x_actual"] == float(expected)
    assert isinstance(result.metrics["x_actual"], float)


@pytest.mark.parametrize("text", ["5%", "1,000", "", "about 1", "0x10"])
def test_unparseable_string_fails_the_field_without_metrics(text):
    result = tolerance({"x": text, "y": 2}, {"ground_truth": {"x": 1, "y": 2}})
    assert_agent_failure(result, score=0.5)
    assert result.field_scores == {"x": 0.0, "y": 1.0}
    assert not any(key.startswith("x_") for key in result.metrics)
    assert result.metrics["y_pass"] is True


def test_missing_field_records_no_metrics_but_null_does():
    result = tolerance({"b": None}, {"ground_truth": {"a": 1, "b": 2}})
    assert result.metrics == {"b_actual": None, "b_expected": 2, "b_error": None, "b_pass": False}
    assert result.field_scores == {"a": 0.0, "b": 0.0}


def test_bool_answer_is_recorded_as_int():
    result = tolerance({"x": True}, {"ground_truth": {"x": 1.0}})
    assert result.passed is True
    actual = result.metrics["x_actual"]
    assert actual == 1 and type(actual) is int


def test_overflowing_int_answer_fails_with_metrics_and_no_grader_error():
    result = tolerance({"x": HUGE}, {"ground_truth": {"x": 1}, "tolerances": {"x": {"type": "min", "value": 0}}})
    assert_agent_failure(result)
    assert result.metrics["x_pass"] is False
    assert result.metrics["x_error"] is None
    assert result.metrics["x_actual"] == HUGE


@pytest.mark.parametrize("value", [[1], {"v": 1}])
def test_list_or_object_answer_fails_with_metrics(value):
    result = tolerance({"x": value}, {"ground_truth": {"x": 1}})
    assert result.metrics == {"x_actual": value, "x_expected": 1, "x_error": None, "x_pass": False}


@pytest.mark.parametrize("text", ["inf", "-Infinity", "nan", "1e999"])
def test_non_finite_string_values_are_sanitised_to_null(text):
    result = tolerance({"x": text}, {"ground_truth": {"x": 1}, "tolerances": {"x": {"type": "max", "value": 1e300}}})
    assert_agent_failure(result)
    assert result.metrics == {"x_actual": None, "x_expected": 1, "x_error": None, "x_pass": False}


def test_relative_against_zero_reports_null_error_not_inf():
    result = tolerance({"x": 0.0}, {"ground_truth": {"x": 0}, "tolerances": {"x": {"type": "relative", "value": 10}}})
    assert result.passed is False
    assert result.metrics["x_error"] is None
    assert result.metrics["x_actual"] == 0.0


def test_dotted_field_does_not_match_literal_key():
    config = {"ground_truth": {"a.b": 2}}
    assert tolerance({"a.b": 2}, config).passed is False
    assert tolerance({"a.b": 2}, config).metrics == {}
    assert tolerance({"a": {"b": "2"}}, config).passed is True


def test_partial_credit_two_of_three():
    result = tolerance({"a": 1, "b": 2, "c": 99}, {"ground_truth": {"a": 1, "b": 2, "c": 3}})
    assert result.passed is False
    assert result.score == pytest.approx(2 / 3, abs=1e-12)
    assert result.field_scores == {"a": 1.0, "b": 1.0, "c": 0.0}


# --------------------------------------------------------------------------- numeric_tolerance: comparisons


def test_asymmetric_bounds_report_signed_error_and_are_inclusive():
    config = {"ground_truth": {"x": 10}, "tolerances": {"x": {"lower": 3, "upper": 0}}}
    low = tolerance({"x": 7}, config)
    assert low.passed is True and low.metrics["x_error"] == -3
    assert tolerance({"x": 10}, config).passed is True
    above = tolerance({"x": 10.5}, config)
    assert above.passed is False and above.metrics["x_error"] == 0.5


def test_min_and_max_errors_measure_the_shortfall_from_the_threshold():
    min_short = tolerance({"x": 3}, {"ground_truth": {"x": 100}, "tolerances": {"x": {"type": "min", "value": 5}}})
    assert min_short.metrics["x_error"] == 2 and min_short.passed is False
    max_over = tolerance({"x": 8}, {"ground_truth": {"x": -100}, "tolerances": {"x": {"type": "max", "value": 5}}})
    assert max_over.metrics["x_error"] == 3 and max_over.passed is False
    max_ok = tolerance({"x": -8}, {"ground_truth": {"x": 100}, "tolerances": {"x": {"type": "max", "value": -5}}})
    assert max_ok.passed is True and max_ok.metrics["x_error"] == 0


def test_relative_error_metric():
    result = tolerance({"x": 90}, {"ground_truth": {"x": -100}, "tolerances": {"x": {"type": "relative", "value": 2}}})
    assert result.passed is True
    assert result.metrics["x_error"] == pytest.approx(1.9)


def test_large_int_arithmetic_is_exact():
    big = 2**60
    result = tolerance({"x": big + 1}, {"ground_truth": {"x": big}, "tolerances": {"x": {"value": 0}}})
    assert result.passed is False
    assert result.metrics["x_error"] == 1


# --------------------------------------------------------------------------- numeric_tolerance: config


def test_tolerances_wins_over_tolerance_even_when_empty():
    config = {"ground_truth": {"x": 100}, "tolerances": {}, "tolerance": {"type": "relative", "value": 0.5}}
    assert tolerance({"x": 101}, config).passed is False


def test_singular_tolerance_is_used_when_tolerances_absent():
    config = {"ground_truth": {"x": 100, "y": 10}, "tolerance": {"type": "relative", "value": 0.05}}
    result = tolerance({"x": 104, "y": 11}, config)
    assert result.field_scores == {"x": 1.0, "y": 0.0}


@pytest.mark.parametrize("key", ["tolerances", "tolerance"])
@pytest.mark.parametrize("bad", [None, [], "absolute", 0.1])
def test_tolerances_must_be_an_object(key, bad):
    assert_config_error(tolerance({"x": 1}, {"ground_truth": {"x": 1}, key: bad}))


def test_bad_singular_tolerance_is_ignored_when_tolerances_present():
    result = tolerance({"x": 1}, {"ground_truth": {"x": 1}, "tolerances": {}, "tolerance": None})
    assert result.passed is True


@pytest.mark.parametrize(
    "entry",
    [
        None,
        [],
        {"type": None},
        {"type": ["absolute"]},
        {"type": "ABSOLUTE"},
        {"value": None},
        {"value": "0.1"},
        {"value": float("inf")},
        {"value": HUGE},
        {"upper": 1},
        {"lower": -1, "upper": 1},
        {"lower": 1, "upper": True},
        {"type": "min", "value": 1, "upper": 2},
        {"type": "max", "lower": 0, "upper": 2, "value": 1},
        {"type": "max", "value": None},
        {"type": "relative", "value": False},
    ],
)
def test_invalid_per_field_entries(entry):
    assert_config_error(tolerance({"x": 1}, {"ground_truth": {"x": 1}, "tolerances": {"x": entry}}))


@pytest.mark.parametrize(
    "entry,answer,passed",
    [
        ({"type": "min", "value": -5}, -4, True),
        ({"type": "max", "value": -5}, -4, False),
        ({"lower": 0, "upper": 0, "value": "ignored"}, 1, True),
        ({"value": 0.5}, 1.5, True),
    ],
)
def test_valid_entry_edge_cases(entry, answer, passed):
    assert tolerance({"x": answer}, {"ground_truth": {"x": 1}, "tolerances": {"x": entry}}).passed is passed


def test_blank_tolerance_field_name_is_rejected():
    assert_config_error(tolerance({"x": 1}, {"ground_truth": {"x": 1}, "tolerances": {"  ": {"value": 1}}}))


def test_global_mode_validates_only_the_top_level_entry():
    config = {"ground_truth": {"a": 10, "b": 20}, "tolerances": {"type": "absolute", "value": 1, "z": None}}
    result = tolerance({"a": 11, "b": 19}, config)
    assert result.passed is True


def test_global_mode_non_object_override_is_a_grader_error_where_the_reference_crashes():
    config = {"ground_truth": {"a": 10, "b": 20}, "tolerances": {"type": "absolute", "value": 1, "a": "junk"}}
    crashed = tolerance({"a": 11, "b": 19}, config)
    assert crashed.passed is False and "grader_error" in crashed.metrics
    # an unparseable or missing answer field never reaches the override, as in the reference
    assert "grader_error" not in tolerance({"a": "zz", "b": 20}, config).metrics
    assert "grader_error" not in tolerance({"b": 20}, config).metrics


def test_global_asymmetric_entry_applies_to_all_fields():
    config = {"ground_truth": {"a": 10, "b": 20}, "tolerances": {"type": "absolute", "lower": 0, "upper": 2}}
    result = tolerance({"a": 12, "b": 19}, config)
    assert result.field_scores == {"a": 1.0, "b": 0.0}
    assert result.metrics["b_error"] == -1


@pytest.mark.parametrize(
    "override",
    [
        {"type": "min", "value": "3"},
        {"value": None},
        {"value": [1]},
        {"type": "absolute", "value": 5, "lower": "x", "upper": 1},
    ],
)
def test_unvalidated_global_override_that_cannot_compare_fails_only_its_field(override):
    config = {"ground_truth": {"a": 4, "b": 3}, "tolerances": {"type": "absolute", "value": 0, "a": override}}
    result = tolerance({"a": 4, "b": 3}, config)
    assert_agent_failure(result, score=0.5)
    assert result.field_scores == {"a": 0.0, "b": 1.0}
    assert result.metrics["a_error"] is None
    assert result.metrics["a_actual"] == 4


def test_unknown_override_type_records_null_error():
    config = {
        "ground_truth": {"a": 1},
        "tolerances": {"type": "absolute", "value": 0, "a": {"type": "bogus", "value": 1}},
    }
    result = tolerance({"a": 1}, config)
    assert result.passed is False
    assert result.metrics["a_error"] is None


def test_global_override_with_invalid_but_comparable_values_is_used_as_is():
    # A negative absolute value would be a configuration error per field, but overrides are not validated.
    config = {"ground_truth": {"a": 1, "b": 1}, "tolerances": {"type": "relative", "value": 0.5, "a": {"value": -1}}}
    result = tolerance({"a": 1, "b": 1.2}, config)
    assert result.field_scores == {"a": 0.0, "b": 1.0}
    assert result.metrics["a_error"] == 0


def test_global_override_defaults_to_absolute_type():
    config = {"ground_truth": {"a": 10}, "tolerances": {"type": "relative", "value": 0.01, "a": {"value": 3}}}
    assert tolerance({"a": 13}, config).passed is True


def test_global_override_with_huge_bound_is_a_failed_field_not_a_grader_error():
    config = {
        "ground_truth": {"a": 1.5},
        "tolerances": {"type": "absolute", "value": 0, "a": {"value": 0, "lower": HUGE, "upper": 1}},
    }
    result = tolerance({"a": 1.5}, config)
    assert_agent_failure(result)
    assert result.metrics["a_pass"] is False


# --------------------------------------------------------------------------- numeric_range


def test_range_metrics_are_not_sanitised():
    config = {"ground_truth": {"a": 5, "b": 5}, "ranges": {"a": {"min": 1, "max": 10}, "b": {"min": 1, "max": 10}}}
    result = in_range({"a": "nan", "b": " -inf "}, config)
    assert result.passed is False
    assert math.isnan(result.metrics["a_actual"])
    assert result.metrics["b_actual"] == float("-inf")


def test_range_metrics_for_every_field():
    config = {
        "ground_truth": {"a": 5, "b": 5, "c": 5, "d": 5},
        "ranges": {k: {"min": 1, "max": 10.5} for k in "abcd"},
    }
    result = in_range({"b": None, "c": "seven", "d": True}, config)
    assert result.metrics == {
        "a_expected": 5,
        "a_min": 1,
        "a_max": 10.5,
        "a_actual": None,
        "a_pass": False,
        "b_expected": 5,
        "b_min": 1,
        "b_max": 10.5,
        "b_actual": None,
        "b_pass": False,
        "c_expected": 5,
        "c_min": 1,
        "c_max": 10.5,
        "c_actual": "seven",
        "c_pass": False,
        "d_expected": 5,
        "d_min": 1,
        "d_max": 10.5,
        "d_actual": 1,
        "d_pass": False,
    }
    assert result.field_scores == {"a": 0.0, "b": 0.0, "c": 0.0, "d": 0.0}


@pytest.mark.parametrize("value", [HUGE, -HUGE, [5], {"v": 5}, "1e999"])
def test_range_non_comparable_or_huge_values_fail_cleanly(value):
    result = in_range({"x": value}, RANGE_X)
    assert_agent_failure(result)
    assert result.metrics["x_pass"] is False


def test_range_accepts_numeric_strings_and_dotted_paths():
    config = {"ground_truth": {"p.q": 5}, "ranges": {"p.q": {"min": 1, "max": 10}}}
    result = in_range({"p": {"q": "9_9e-1"}}, config)
    assert result.passed is True
    assert result.metrics["p.q_actual"] == 9.9
    assert in_range({"p.q": 5}, config).passed is False


def test_range_partial_credit_and_extra_answer_fields_ignored():
    config = {"ground_truth": {"a": 5, "b": 5, "c": 5}, "ranges": {k: {"min": 0, "max": 10} for k in "abc"}}
    result = in_range({"a": 1, "b": 2, "c": 10, "extra": "junk"}, config)
    assert result.score == pytest.approx(2 / 3, abs=1e-12)
    assert result.passed is False


@pytest.mark.parametrize(
    "ranges",
    [
        None,
        {},
        [],
        {"x": None},
        {"y": {"min": 1, "max": 10}},
        {"x": {"min": 1}},
        {"x": {"min": 5, "max": 5}},
        {"x": {"min": 1, "max": 5}},
        {"x": {"min": 1, "max": HUGE}},
        {"x": {"min": 1.0, "max": float("inf")}},
        {"x": {"min": None, "max": 10}},
    ],
)
def test_range_configuration_errors(ranges):
    assert_config_error(in_range({"x": 3}, {"ground_truth": {"x": 5}, "ranges": ranges}))


def test_missing_ranges_key_is_a_configuration_error():
    assert_config_error(in_range({"x": 3}, {"ground_truth": {"x": 5}}))
