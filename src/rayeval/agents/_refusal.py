"""Refusals: a model that declines the task, told apart from a wrong answer.

A refusal stays the model's answer (the row is ``failed``); it is recorded as such, never retried.
Detected the way the reference runner's ``detect_llm_refusal`` does (latch-eval-tools 0.4.54):
Anthropic ``stop_reason: refusal``, OpenAI refusal content and ``content_filter`` finishes, and
each program's own events.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

EXCERPT_CHARS = 2000


@dataclass(frozen=True)
class RefusalVerdict:
    """What ``refusal_verdict.json`` holds."""

    provider: str | None  # anthropic, openai, ...
    code: str  # e.g. stop_reason_refusal, content_filter, refusal_content
    message: str
    excerpt: str  # at most EXCERPT_CHARS of what the model said

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def detect_program_refusal(harness: str, events: list[dict[str, Any]]) -> RefusalVerdict | None:
    """The refusal in a program's events (``harness`` names the program), or None."""
    return None  # per-program detection: see issue 27, part 5 (in progress)
