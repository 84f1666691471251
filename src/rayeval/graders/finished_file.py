"""finished_file: did the agent write the agreed completion marker?

Only the file contents are trimmed (Python whitespace, so U+00A0 too); ``expected`` is
compared as written, so an ``expected`` with surrounding whitespace can never match.
"""

from __future__ import annotations

from typing import Any

from ._common import agent_failure, config_error
from .base import Grader
from .registry import register_grader
from .result import GraderResult

DEFAULT_EXPECTED = "finished"
ANSWER_FIELD = "finished_file_contents"
NO_CONTENTS = f"agent_answer missing {ANSWER_FIELD!r}"  # the reference's words


@register_grader("finished_file")
class FinishedFileGrader(Grader):
    """Passes when the trimmed contents equal ``expected`` exactly, case included."""

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        expected = config.get("expected", DEFAULT_EXPECTED)
        if not (isinstance(expected, str) and expected.strip()):
            return config_error(f"expected must be a non-blank string, got {expected!r}", answer)

        if not isinstance(answer, dict):
            return agent_failure("Answer is not a JSON object", answer)
        contents = answer.get(ANSWER_FIELD)
        if contents is None:
            return agent_failure(NO_CONTENTS, answer)
        if not isinstance(contents, str):
            return agent_failure(f"{ANSWER_FIELD} must be a string, got {type(contents).__name__}", answer)
        trimmed = contents.strip()
        passed = trimmed == expected
        reasoning = (
            f"PASS: finished file reads {expected!r}"
            if passed
            else f"FAIL: finished file reads {trimmed!r}, expected {expected!r}"
        )
        return GraderResult(
            passed=passed,
            score=1.0 if passed else 0.0,
            metrics={ANSWER_FIELD: contents},
            reasoning=reasoning,
            agent_answer=answer,
        )
