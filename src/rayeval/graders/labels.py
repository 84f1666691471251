"""label_set_jaccard: how well a predicted label set overlaps the reference set.

Labels are compared as Python ``str()`` text with no case folding or trimming, so the
reference's quirks survive (``1`` matches ``"1"``, ``1.0`` does not).
"""

from __future__ import annotations

import math
from typing import Any

from ._common import (
    InvalidConfig,
    RejectedAnswer,
    binary_result,
    cardinality_holds,
    read_answer_field,
    read_expected_count,
    read_thresholds_at,
    required_member,
)
from .base import Grader
from .registry import register_grader
from .result import GraderResult

DEFAULT_ANSWER_FIELD = "cell_types_predicted"
DEFAULT_PASS_THRESHOLD = 0.90


def _is_label(item: Any) -> bool:
    """Strings, finite numbers and bools have a stable ``str()``; null, NaN, infinities and
    containers do not count."""
    if isinstance(item, float):
        return math.isfinite(item)
    return isinstance(item, (str, int))  # bool is an int


@register_grader("label_set_jaccard", "jaccard_label_set")
class LabelSetJaccardGrader(Grader):
    """Passes when the Jaccard index reaches the threshold and any count contract holds."""

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        truth = config.get("ground_truth_labels")
        if not isinstance(truth, list) or not truth:
            raise InvalidConfig("ground_truth_labels must be a non-empty list")
        if not all(_is_label(item) for item in truth):
            raise InvalidConfig("ground_truth_labels items must be strings, finite numbers or bools")
        (pass_threshold,) = read_thresholds_at(
            config, ("scoring",), (("pass_threshold", DEFAULT_PASS_THRESHOLD, 0.0, 1.0),)
        )
        answer_field = read_answer_field(config, DEFAULT_ANSWER_FIELD)
        expected_count = read_expected_count(config)

        items = required_member(answer, answer_field)
        if not isinstance(items, list):
            raise RejectedAnswer(f"{answer_field!r} must be a list, got {type(items).__name__}")
        if not all(_is_label(item) for item in items):
            raise RejectedAnswer(f"{answer_field!r} items must be strings, finite numbers or bools")

        submitted = [str(item) for item in items]
        predicted = set(submitted)
        reference = {str(item) for item in truth}
        hits = predicted & reference
        extra = predicted - reference
        missing = reference - predicted
        jaccard = len(hits) / len(predicted | reference)
        cardinality_pass = cardinality_holds(expected_count, len(submitted), len(predicted))
        passed = jaccard >= pass_threshold and cardinality_pass
        metrics = {
            "jaccard_index": jaccard,
            "pass_threshold": pass_threshold,
            "answer_field": answer_field,
            "true_positives": sorted(hits),
            "false_positives": sorted(extra),
            "false_negatives": sorted(missing),
            "submitted_count": len(submitted),
            "unique_count": len(predicted),
            "expected_count": expected_count,
            "cardinality_pass": cardinality_pass,
            "predicted_count": len(predicted),
            "ground_truth_count": len(reference),
        }
        reasoning = (
            f"{'PASS' if passed else 'FAIL'}: label-set Jaccard {jaccard:.3f} vs threshold "
            f"{pass_threshold} ({len(hits)} shared, {len(extra)} extra, {len(missing)} missing)"
        )
        if not cardinality_pass:
            reasoning += (
                f"; expected exactly {expected_count} distinct labels, got {len(submitted)} "
                f"submitted / {len(predicted)} distinct"
            )
        return binary_result(passed, metrics, reasoning, answer)
