"""multiple_choice: the agent's choice must equal one of the correct choices as a token.

Config and answer go through the same token rule, so ``"b"`` matches ``"B"``, ``true``
matches ``"true"`` and ``6.0`` matches ``"6"``, while ``"6.0"`` stays distinct from ``6``.
"""

from __future__ import annotations

import math
from typing import Any

from ._common import InvalidConfig, RejectedAnswer, required_member
from .base import Grader
from .registry import register_grader
from .result import GraderResult

ANSWER_FIELD = "answer"


def choice_token(value: Any) -> str | None:
    """The comparable form of a choice, or None when the value cannot name a choice."""
    if isinstance(value, str):
        return value.strip().upper() or None
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        if value.is_integer():
            return str(int(value))  # 6.0 -> "6", -0.0 -> "0", 1e20 -> all its digits
        return repr(value).upper()  # 1e-07 -> "1E-07"
    return None


def _correct_tokens(config: Any) -> list[str]:
    """The correct tokens: exactly one of correct_answer / correct_answers, every entry a token
    (InvalidConfig otherwise)."""
    has_one, has_many = "correct_answer" in config, "correct_answers" in config
    if has_one == has_many:
        raise InvalidConfig("config needs exactly one of correct_answer or correct_answers")
    if has_one:
        choice = config["correct_answer"]
        token = choice_token(choice)
        if token is None:
            raise InvalidConfig(
                f"correct_answer must be a non-blank string, finite number or bool, got {_kind(choice)}"
            )
        return [token]
    choices = config["correct_answers"]
    if not isinstance(choices, list) or not choices:
        raise InvalidConfig(f"correct_answers must be a non-empty list, got {choices!r}")
    tokens = []
    for choice in choices:
        token = choice_token(choice)
        if token is None:
            raise InvalidConfig(
                f"correct_answers: each must be a non-blank string, finite number or bool, got {_kind(choice)}"
            )
        tokens.append(token)
    return tokens


def _kind(value: Any) -> str:
    """What a value that names no choice is, briefly (the answer's may be large)."""
    if isinstance(value, str):
        return "a blank string"
    if isinstance(value, float):
        return repr(value)  # nan or inf
    return "null" if value is None else type(value).__name__


@register_grader("multiple_choice")
class MultipleChoiceGrader(Grader):
    """Passes when the agent's ``answer`` token is one of the correct tokens."""

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        correct = _correct_tokens(config)
        raw = required_member(answer, ANSWER_FIELD)
        token = choice_token(raw)
        if token is None:
            raise RejectedAnswer(
                f"Answer {ANSWER_FIELD!r} must be a non-blank string, finite number or bool, got {_kind(raw)}",
                {"correct_answers": correct, "agent_answer": raw},
            )
        passed = token in correct
        return GraderResult(
            passed=passed,
            score=1.0 if passed else 0.0,
            metrics={"correct_answers": correct, "agent_answer": token},
            reasoning=f"{'PASS' if passed else 'FAIL'}: answered {token!r}, correct: {', '.join(correct)}",
            agent_answer=answer,
        )
