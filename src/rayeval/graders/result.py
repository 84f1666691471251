"""The verdict every grader returns, and the one normalisation rule everybody shares."""
from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


def normalize_score(score: Any, score_max: Any) -> float:
    """score/score_max clamped to [0, 1]; 0 when either is non-finite or score_max <= 0."""
    try:
        s = float(score)
        m = float(score_max)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    if not (math.isfinite(s) and math.isfinite(m)) or m <= 0:
        return 0.0
    return min(1.0, max(0.0, s / m))


class GraderResult(BaseModel):
    """A grader's verdict. Fails closed: score defaults to 0.0."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    passed: bool
    metrics: dict[str, Any] = Field(default_factory=dict)
    reasoning: str = ""
    agent_answer: Any = None
    score: float = 0.0
    field_scores: dict[str, Any] = Field(default_factory=dict)
    score_max: float = 1.0

    def normalized_score(self) -> float:
        return normalize_score(self.score, self.score_max)

    @property
    def is_configuration_error(self) -> bool:
        return "configuration_error" in self.metrics
