"""spatial_adjacency behaviours beyond the conformance vectors."""

from __future__ import annotations

import pytest

from rayeval.graders import get_grader

GOOD = {
    "median_ic_to_pc_um": 20.0,
    "p90_ic_to_pc_um": 70,
    "pct_ic_within_15um": 65.0,
    "pct_ic_mixed_within_55um": 70.0,
    "adjacency_pass": True,
}


def grade(answer, config):
    return get_grader("spatial_adjacency").evaluate_answer(answer, config)


def with_(**changes):
    return {**GOOD, **changes}


def test_metrics_echo_answer_values_thresholds_and_checks() -> None:
    result = grade(GOOD, {"scoring": {"pass_thresholds": {"max_p90_ic_to_pc_um": 70}}})
    assert result.passed is True and result.score == 1.0 and result.score_max == 1.0
    assert result.metrics == {
        **GOOD,
        "max_median_threshold": 25.0,
        "max_p90_threshold": 70,
        "min_pct_15um_threshold": 60.0,
        "min_pct_55um_threshold": 60.0,
        "median_pass": True,
        "p90_pass": True,
        "within_15um_pass": True,
        "mixed_55um_pass": True,
    }


def test_agent_verdict_false_fails_even_when_every_metric_passes() -> None:
    result = grade(with_(adjacency_pass=False), {})
    assert result.passed is False and result.score == 0.0
    assert [result.metrics[k] for k in ("median_pass", "p90_pass", "within_15um_pass", "mixed_55um_pass")] == [
        True,
        True,
        True,
        True,
    ]
    assert result.metrics["adjacency_pass"] is False


def test_fractions_instead_of_percentages_fail() -> None:
    result = grade(with_(pct_ic_within_15um=0.65, pct_ic_mixed_within_55um=0.7), {})
    assert result.passed is False
    assert result.metrics["within_15um_pass"] is False and result.metrics["mixed_55um_pass"] is False


def test_percentage_edges_are_inclusive() -> None:
    config = {"scoring": {"pass_thresholds": {"min_pct_ic_within_15um": 100, "min_pct_ic_mixed_within_55um": 0}}}
    assert grade(with_(pct_ic_within_15um=100, pct_ic_mixed_within_55um=0), config).passed is True


@pytest.mark.parametrize(
    "answer",
    [
        None,
        [GOOD],
        with_(adjacency_pass=1),
        with_(adjacency_pass="true"),
        with_(median_ic_to_pc_um="20"),
        with_(median_ic_to_pc_um=None),
        with_(p90_ic_to_pc_um=False),
        with_(p90_ic_to_pc_um=10**400),
        with_(pct_ic_within_15um=100.5),
        with_(p90_ic_to_pc_um=-0.5),
    ],
)
def test_malformed_answers_are_agent_failures(answer) -> None:
    result = grade(answer, {})
    assert result.passed is False and result.score == 0.0
    assert result.metrics == {}


@pytest.mark.parametrize(
    "config",
    [
        None,
        "strict",
        {"scoring": None},
        {"scoring": {"pass_thresholds": None}},
        {"scoring": {"pass_thresholds": {"max_median_ic_to_pc_um": None}}},
        {"scoring": {"pass_thresholds": {"max_median_ic_to_pc_um": -1}}},
        {"scoring": {"pass_thresholds": {"max_p90_ic_to_pc_um": 10**400}}},
        {"scoring": {"pass_thresholds": {"min_pct_ic_mixed_within_55um": -0.1}}},
        {"scoring": {"pass_thresholds": {"min_pct_ic_within_15um": "60"}}},
    ],
)
def test_config_errors_win_over_missing_answer(config) -> None:
    result = grade({}, config)
    assert list(result.metrics) == ["configuration_error"]
    assert result.passed is False and result.score == 0.0


def test_unknown_threshold_keys_are_ignored() -> None:
    assert grade(GOOD, {"scoring": {"pass_thresholds": {"unrelated": "x"}}, "ground_truth": None}).passed is True
