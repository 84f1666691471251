"""The Grader base class: one public entry point that never raises."""

from __future__ import annotations

from typing import Any

from ._common import InvalidConfig, RejectedAnswer, agent_failure, config_error
from .result import GraderResult


class Grader:
    """Subclasses implement ``_evaluate``; callers use ``evaluate_answer``.

    Whatever JSON a caller passes, ``evaluate_answer`` returns a GraderResult: ``_evaluate``
    raises InvalidConfig or RejectedAnswer where it finds a problem, which becomes the failed
    result for it, and an unexpected exception a failed result with a ``grader_error`` metric.
    """

    #: Every reference grader rejects a non-object config before looking at anything else.
    requires_object_config: bool = True

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        raise NotImplementedError

    def evaluate_answer(self, answer: Any, config: Any) -> GraderResult:
        if config.__class__ is not dict and self.requires_object_config and not isinstance(config, dict):
            return config_error(f"config must be an object, got {type(config).__name__}", answer)
        try:
            return self._evaluate(answer, config)
        except InvalidConfig as exc:
            return config_error(str(exc), answer)
        except RejectedAnswer as exc:
            return agent_failure(exc.reason, answer, metrics=exc.metrics)
        except Exception as exc:  # noqa: BLE001 - a grader fails closed, never raises (RecursionError included)
            error = f"{type(exc).__name__}: {exc}"
            return GraderResult(
                passed=False,
                score=0.0,
                score_max=1.0,
                metrics={"grader_error": error},
                reasoning=f"Grader error (malformed agent output or grader bug):\n{error}",
                agent_answer=answer if isinstance(answer, dict) else None,
            )

    def evaluate(self, answer: Any, config: Any) -> GraderResult:
        return self.evaluate_answer(answer, config)
