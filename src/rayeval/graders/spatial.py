"""spatial_adjacency: are immune cells close to tumour cells, by the agent's own measurements?

The agent reports four distance/percentage statistics plus its own verdict; all must clear
the thresholds, and the agent's ``adjacency_pass`` must literally be ``true``.
"""

from __future__ import annotations

import math
from typing import Any

from ._common import RejectedAnswer, binary_result, is_finite_number, read_thresholds_at
from .base import Grader
from .registry import register_grader
from .result import GraderResult

THRESHOLDS = (
    ("max_median_ic_to_pc_um", 25.0, 0.0, math.inf),
    ("max_p90_ic_to_pc_um", 80.0, 0.0, math.inf),
    ("min_pct_ic_within_15um", 60.0, 0.0, 100.0),
    ("min_pct_ic_mixed_within_55um", 60.0, 0.0, 100.0),
)
DISTANCE_KEYS = ("median_ic_to_pc_um", "p90_ic_to_pc_um")
PERCENT_KEYS = ("pct_ic_within_15um", "pct_ic_mixed_within_55um")
NUMERIC_KEYS = (*DISTANCE_KEYS, *PERCENT_KEYS)
ANSWER_KEYS = (*NUMERIC_KEYS, "adjacency_pass")


def _check_answer(answer: Any) -> None:
    """RejectedAnswer when the reported statistics are unusable, checked in the reference's order."""
    if not isinstance(answer, dict):
        raise RejectedAnswer("Answer is not a JSON object")
    missing = [key for key in ANSWER_KEYS if key not in answer]
    if missing:
        raise RejectedAnswer(f"Agent answer missing required fields: {missing}")
    non_numeric = [key for key in NUMERIC_KEYS if not is_finite_number(answer[key])]
    if non_numeric:
        raise RejectedAnswer(f"{', '.join(non_numeric)} must be finite numbers")
    negative = [key for key in DISTANCE_KEYS if answer[key] < 0]
    if negative:
        raise RejectedAnswer(f"{', '.join(negative)} must be >= 0")
    out_of_range = [key for key in PERCENT_KEYS if not 0 <= answer[key] <= 100]
    if out_of_range:
        raise RejectedAnswer(f"{', '.join(out_of_range)} must be percentages in [0, 100]")
    if not isinstance(answer["adjacency_pass"], bool):
        raise RejectedAnswer(f"adjacency_pass must be true or false, got {answer['adjacency_pass']!r}")


@register_grader("spatial_adjacency")
class SpatialAdjacencyGrader(Grader):
    """Every statistic within its inclusive bound AND the agent's own adjacency_pass is true."""

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        max_median, max_p90, min_pct15, min_pct55 = read_thresholds_at(
            config, ("scoring", "pass_thresholds"), THRESHOLDS
        )
        _check_answer(answer)
        median_pass = answer["median_ic_to_pc_um"] <= max_median
        p90_pass = answer["p90_ic_to_pc_um"] <= max_p90
        within_15um_pass = answer["pct_ic_within_15um"] >= min_pct15
        mixed_55um_pass = answer["pct_ic_mixed_within_55um"] >= min_pct55
        adjacency_pass = answer["adjacency_pass"]
        passed = median_pass and p90_pass and within_15um_pass and mixed_55um_pass and adjacency_pass
        metrics = {
            **{key: answer[key] for key in ANSWER_KEYS},
            "max_median_threshold": max_median,
            "max_p90_threshold": max_p90,
            "min_pct_15um_threshold": min_pct15,
            "min_pct_55um_threshold": min_pct55,
            "median_pass": median_pass,
            "p90_pass": p90_pass,
            "within_15um_pass": within_15um_pass,
            "mixed_55um_pass": mixed_55um_pass,
        }
        if passed:
            return binary_result(passed, metrics, "PASS: all adjacency checks met", answer)
        checks = {
            f"median <= {max_median}": median_pass,
            f"p90 <= {max_p90}": p90_pass,
            f"% within 15um >= {min_pct15}": within_15um_pass,
            f"% mixed within 55um >= {min_pct55}": mixed_55um_pass,
            "agent adjacency_pass": adjacency_pass,
        }
        failed = [name for name, ok in checks.items() if not ok]
        return binary_result(passed, metrics, f"FAIL: {'; '.join(failed)} not met", answer)
