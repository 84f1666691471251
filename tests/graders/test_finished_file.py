"""finished_file behaviours beyond the conformance vectors."""

from __future__ import annotations

import pytest

from rayeval.graders import get_grader


def grade(answer, config):
    return get_grader("finished_file").evaluate_answer(answer, config)


@pytest.mark.parametrize("padding", ["\u00a0", "\u2003", "\x0b\x0c", "\u3000\n", "\r\n\t "])
def test_python_whitespace_is_trimmed_from_contents(padding) -> None:
    contents = f"{padding}finished{padding}"
    result = grade({"finished_file_contents": contents}, {})
    assert result.passed is True and result.score == 1.0
    assert result.metrics == {"finished_file_contents": contents}


@pytest.mark.parametrize("expected", [" done", "done ", "\u00a0done", "done\n"])
def test_expected_is_not_trimmed_so_padding_never_matches(expected) -> None:
    for contents in (expected, "done", f"  {expected}  "):
        assert grade({"finished_file_contents": contents}, {"expected": expected}).passed is False


def test_inner_whitespace_must_match_exactly() -> None:
    assert grade({"finished_file_contents": "all  done"}, {"expected": "all done"}).passed is False
    assert grade({"finished_file_contents": " all done\n"}, {"expected": "all done"}).passed is True


def test_failure_reports_raw_contents() -> None:
    result = grade({"finished_file_contents": " Finished\n"}, {"expected": "finished", "note": "ignored"})
    assert result.passed is False and result.score == 0.0
    assert result.metrics == {"finished_file_contents": " Finished\n"}


@pytest.mark.parametrize("answer", [{}, {"finished_file_contents": None}, {"finished_file_contents": 1}])
def test_unusable_contents_fail_with_empty_metrics(answer) -> None:
    result = grade(answer, {})
    assert result.passed is False and result.metrics == {}


@pytest.mark.parametrize("answer", [None, "finished", ["finished"]])
def test_non_dict_answer_is_an_agent_failure(answer) -> None:
    result = grade(answer, {})
    assert result.passed is False and result.metrics == {} and result.agent_answer is None


@pytest.mark.parametrize(
    "config",
    [None, "finished", ["finished"], {"expected": None}, {"expected": ["x"]}, {"expected": "\u00a0"}, {"expected": 0}],
)
def test_config_errors_win_over_a_non_dict_answer(config) -> None:
    result = grade(None, config)
    assert list(result.metrics) == ["configuration_error"]
    assert result.passed is False and result.score == 0.0 and result.score_max == 1.0
