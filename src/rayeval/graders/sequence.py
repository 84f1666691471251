"""longest_subsequence: partial credit for reproducing an ordered list of steps.

Score is the longest-common-subsequence length over the longer of the two lists, so
missing, reordered, extra and duplicated steps all cost credit.
"""

from __future__ import annotations

from typing import Any

from ._common import InvalidConfig, RejectedAnswer, echo_answer, read_answer_field, read_thresholds_at
from .base import Grader
from .registry import register_grader
from .result import GraderResult

DEFAULT_PASS_THRESHOLD = 1.0


def _normalise_step(step: list) -> tuple:
    """Trim and lower-case string members; other members compare with Python equality."""
    return tuple(member.strip().lower() if isinstance(member, str) else member for member in step)


def lcs_length(left: list, right: list) -> int:
    """Length of the longest common (order-preserving, gapped) subsequence, O(len*len) time."""
    previous = [0] * (len(right) + 1)
    for item in left:
        current = [0]
        best = 0  # current[-1], kept in a local for speed
        for j, other in enumerate(right):
            if item == other:
                best = previous[j] + 1
            elif previous[j + 1] > best:
                best = previous[j + 1]
            current.append(best)
        previous = current
    return previous[-1]


def _rejected(reason: str) -> RejectedAnswer:
    """This grader's agent failures carry the reason as an ``error`` metric."""
    return RejectedAnswer(reason, {"error": reason})


@register_grader("longest_subsequence")
class LongestSubsequenceGrader(Grader):
    """Score = LCS / max(len(truth), len(answer), 1); passes at or above the threshold."""

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        answer_field = read_answer_field(config)
        truth = config.get("ground_truth")
        if not isinstance(truth, list) or not truth:
            raise InvalidConfig("ground_truth must be a non-empty list of steps")
        if not all(isinstance(step, list) and step for step in truth):
            raise InvalidConfig("every ground_truth step must be a non-empty list")
        thresholds = read_thresholds_at(config, ("scoring",), (("pass_threshold", DEFAULT_PASS_THRESHOLD, 0.0, 1.0),))
        pass_threshold = float(thresholds[0])

        if not isinstance(answer, dict):
            raise _rejected("Answer is not a JSON object")
        if answer_field not in answer:
            raise _rejected(f"Answer has no {answer_field!r} field")
        steps = answer[answer_field]
        if not isinstance(steps, list):
            raise _rejected(f"{answer_field!r} must be a list of steps, got {type(steps).__name__}")
        if not all(isinstance(step, list) for step in steps):
            raise _rejected(f"every step in {answer_field!r} must be a list")

        expected = [_normalise_step(step) for step in truth]
        submitted = [_normalise_step(step) for step in steps]
        common = lcs_length(expected, submitted)
        denominator = max(len(expected), len(submitted), 1)
        score = common / denominator
        passed = score >= pass_threshold
        return GraderResult(
            passed=passed,
            score=score,
            field_scores={answer_field: score},
            metrics={
                "lcs_length": common,
                "gt_length": len(expected),
                "agent_length": len(submitted),
                "denominator": denominator,
                "pass_threshold": pass_threshold,
            },
            reasoning=(
                f"{'PASS' if passed else 'FAIL'}: {common} of {denominator} steps in order "
                f"(score {score:.3f}, needs {pass_threshold})"
            ),
            agent_answer=echo_answer(answer),
        )
