"""Grading whose judge calls are made apart (see ``rayeval.graders.judging``): which evals have
them, the protocol of a run's own grade function that hands them over, and the one way a judge
request becomes its outcome wherever a run makes it.

A request is plain JSON: a rubric criterion's (``rayeval.graders.rubric.JudgeRequest``) or an
LLM-as-judge evaluator's model call (a ``prompt`` request, see ``rayeval.models.calls``).
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, runtime_checkable

from ..evals import Eval
from ..graders.judging import Judgments, uses_judges
from ..graders.rubric import JudgeFailure, JudgeRequest, JudgeUsage, judge_criterion
from ..models.calls import PROMPT_REQUEST, run_prompt_request

#: what a run's agent produced (the harness's ``Execution``), and the result a grade makes of it
Execution_contra = TypeVar("Execution_contra", contravariant=True)
Result_co = TypeVar("Result_co", covariant=True)


def has_judged_graders(eval_: Eval) -> bool:
    """Whether the eval's graders (composite children included) call an LLM judge."""
    return uses_judges([spec.model_dump() for spec in eval_.grader_specs])


@runtime_checkable
class JudgedGrade(Protocol[Execution_contra, Result_co]):
    """A run's own grade function whose judge model calls the run makes apart, as for
    LLM-judged graders: ``judge_requests`` collects them (as ``graders.judging`` requests),
    and the unit is then graded with their outcomes."""

    judged: bool  # whether it has judge calls at all

    def judge_requests(self, eval_: Eval, execution: Execution_contra) -> Judgments: ...

    def __call__(self, eval_: Eval, execution: Execution_contra, judgments: Judgments | None = None) -> Result_co: ...


def judge_call(request: dict[str, Any]) -> dict[str, Any]:
    """One judge request's outcome, as JSON; never raises for a judge's failure."""
    if request.get("kind") == PROMPT_REQUEST:
        return run_prompt_request(request)
    return judge_criterion(JudgeRequest.model_validate(request)).model_dump(mode="json")


def unmade_judge_call(request: dict[str, Any], message: str) -> dict[str, Any]:
    """The outcome, as JSON, of a judge request that could not be made at all (a rubric
    criterion's is a transient failure, worth a later retry)."""
    if request.get("kind") == PROMPT_REQUEST:
        return {"error": message}
    index = request.get("criterion_index", 0)
    failure = JudgeFailure(kind="transient", index=index, message=f"criterion {index}: {message}", usage=JudgeUsage())
    return failure.model_dump(mode="json")
