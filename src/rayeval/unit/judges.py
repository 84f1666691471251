"""Grading whose judge calls are made apart (see ``rayeval.graders.judging``, where a judge
request becomes its outcome wherever it is made): which evals have them, and the protocol of a
run's own grade function that hands them over."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..evals import Eval
from ..graders.judging import Judgments, uses_judges
from .result import EvalResult


def has_judged_graders(eval_: Eval) -> bool:
    """Whether the eval's graders (composite children included) call an LLM judge."""
    return uses_judges([spec.model_dump() for spec in eval_.grader_specs])


@runtime_checkable
class JudgedGrade(Protocol):
    """A run's own grade function whose judge model calls the run makes apart, as for
    LLM-judged graders: ``judge_requests`` collects them (as ``graders.judging`` requests) on
    the unit's execution (its result not graded yet), which is then graded with their outcomes."""

    judged: bool  # whether it has judge calls at all

    def judge_requests(self, eval_: Eval, execution: EvalResult) -> Judgments: ...

    def __call__(self, eval_: Eval, execution: EvalResult, judgments: Judgments | None = None) -> EvalResult: ...
