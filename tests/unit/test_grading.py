"""rayeval.grade: one grader, or independent top-level entries averaged."""

from __future__ import annotations

import pytest

from rayeval import Eval, grade

MC = {"type": "multiple_choice", "config": {"correct_answer": "B"}}
NUM = {"type": "numeric_tolerance", "config": {"ground_truth": {"x": 1, "y": 2, "z": 3}}}


def make(**fields) -> Eval:
    return Eval.model_validate({"id": "g", "task": "t", **fields})


def test_single_grader_is_used_directly() -> None:
    result = grade(make(grader=NUM), {"x": 1, "y": 2, "z": 0})
    assert result.passed is False
    assert result.score == pytest.approx(2 / 3)
    assert result.metrics["x_pass"] is True


def test_graders_list_averages_normalized_scores_and_requires_all() -> None:
    eval_ = make(graders=[MC, NUM])
    result = grade(eval_, {"answer": "B", "x": 1, "y": 2, "z": 0})
    assert result.passed is False
    assert result.score == pytest.approx((1.0 + 2 / 3) / 2)
    assert result.score_max == 1.0
    entries = result.metrics["graders"]
    assert [e["type"] for e in entries] == ["multiple_choice", "numeric_tolerance"]
    assert [e["passed"] for e in entries] == [True, False]
    assert entries[1]["metrics"]["z_pass"] is False
    assert result.field_scores == {
        "graders[0].multiple_choice": 1.0,
        "graders[1].numeric_tolerance": pytest.approx(2 / 3),
    }
    assert grade(eval_, {"answer": "b", "x": 1, "y": 2, "z": 3}).passed is True


def test_named_entries_label_their_scores() -> None:
    result = grade(make(graders=[{**MC, "name": "choice"}, NUM]), {"answer": "A"})
    assert set(result.field_scores) == {"choice", "graders[1].numeric_tolerance"}


def test_a_broken_entry_marks_the_combined_result_as_a_configuration_error() -> None:
    broken = {"type": "multiple_choice", "config": {}}
    result = grade(make(graders=[MC, broken]), {"answer": "B"})
    assert result.passed is False
    assert "graders[1].multiple_choice" in result.metrics["configuration_error"]


def test_non_dict_answers_fail_cleanly() -> None:
    for answer in [None, "B", ["B"], 3]:
        assert grade(make(graders=[MC, NUM]), answer).passed is False
        assert grade(make(grader=MC), answer).passed is False
