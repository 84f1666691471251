"""Plug-in grader types of the grading-process tests, defined where a grading process can import them."""

from __future__ import annotations

import os
import re
from typing import Any

from rayeval.graders import Grader, GraderResult, register_grader


@register_grader("test_plugin_regex")
class PatternMatch(Grader):
    """The answer's text matches the config's pattern (``(a+)+b`` takes exponential time)."""

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        matched = re.fullmatch(config["pattern"], str(answer.get("text", ""))) is not None
        return GraderResult(passed=matched, score=float(matched), reasoning=f"pid {os.getpid()}")


class RegisteredLater(Grader):
    """Registered by a call, not by importing this module."""

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        return GraderResult(passed=True, score=1.0, reasoning=f"pid {os.getpid()}")


def register_later() -> None:
    register_grader("test_plugin_later")(RegisteredLater)
