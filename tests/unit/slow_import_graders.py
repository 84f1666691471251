"""A plug-in grader type whose module takes a while to import (as one importing a large library does)."""

from __future__ import annotations

import time
from typing import Any

from rayeval.graders import Grader, GraderResult, register_grader

time.sleep(1.5)


@register_grader("test_slow_import")
class SlowToImport(Grader):
    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        return GraderResult(passed=True, score=1.0)
