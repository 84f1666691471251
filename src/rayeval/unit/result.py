"""One agent on one eval: the unit's record in flight, filled stage by stage, which the batch
engine stores (see ``rayeval.record``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..gateway.server import ModelUsage
from ..gateway.transcript import MODEL_CALLS_ARTIFACT
from ..graders.result import GraderResult
from ..record import STATUSES, LimitName, Status

__all__ = ["STATUSES", "EvalResult", "Status"]

#: how the agent's run ended: what grading goes on from (errors and timeouts are not graded)
ExecutionOutcome = Literal["answered", "no_answer", "error", "timeout"]

_ITEM_ALIASES = {"test_id": "eval_id"}


class EvalResult(BaseModel):
    """One unit's result, filled stage by stage: the runner fills in its run (the outcome, the
    answer, times, metadata, artifacts, what the gateway counted; :meth:`EvalRunner.execute
    <rayeval.unit.runner.EvalRunner.execute>`), grading its verdict (status, passed, grader
    result, grading time, costs, tokens; :func:`~rayeval.unit.execution.grade_execution`).
    What :meth:`EvalRunner.run <rayeval.unit.runner.EvalRunner.run>`, ``run-one`` and a run's
    rows give is graded. Reads like an object and, for reference compatibility, like a dict."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    eval_id: str
    #: the verdict; None: not graded yet
    status: Status | None = None
    passed: bool = False
    grader_result: GraderResult | None = None
    agent_answer: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None
    seed: int | None = None
    run_id: str | None = None
    isolation: str | None = None
    harness: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    #: where the agent's exception came from (Python's traceback), apart from the message
    error_traceback: str | None = None
    answer_source: str | None = None
    duration_s: float = 0.0
    agent_s: float = 0.0
    grade_s: float = 0.0
    #: USD the unit cost: the sum of the agent's and its judges' costs that are known
    cost_usd: float | None = None
    #: what the agent reported it cost (None: nothing, or a model without a price)
    agent_cost_usd: float | None = None
    #: what the LLM judges' calls of its grading cost (None: no judge call, or one without a price)
    judge_cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    n_turns: int | None = None
    #: the model calls the gateway relayed for it (None: its agent ran in this process)
    n_model_calls: int | None = None
    #: the limit its model calls reached, None: none
    limit_reached: LimitName | None = None
    #: the model refused (as the agent's harness reports it; None: not searched for one)
    refusal: bool | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    artifacts: dict[str, str] = Field(default_factory=dict)
    # The run's own part, set by the runner (never by the agent) and read by grading; neither
    # dumped nor shown (the status, costs and tokens say it in the printed and stored result).
    #: how the agent's run ended (None: a result made by hand, not by rayeval's runner)
    outcome: ExecutionOutcome | None = Field(default=None, exclude=True, repr=False)
    #: the agent is rayeval's replay agent: its reported duration is the recorded run's
    replayed: bool = Field(default=False, exclude=True, repr=False)
    #: what its model calls used, as the model gateway counted them (None: the agent ran in this
    #: process, with no gateway in between)
    model_usage: ModelUsage | None = Field(default=None, exclude=True, repr=False)

    def __getitem__(self, key: str) -> Any:
        if key not in self:
            raise KeyError(key)
        return getattr(self, _ITEM_ALIASES.get(key, key))

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` names a field it dumps (the run's own part is none): the keys of the
        reference's result dict."""
        if not isinstance(key, str):
            return False
        field = type(self).model_fields.get(_ITEM_ALIASES.get(key, key))
        return field is not None and not field.exclude

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    @property
    def score(self) -> float:
        return self.grader_result.normalized_score() if self.grader_result else 0.0

    def trusted_part(self, **update: Any) -> EvalResult:
        """Itself without what its agent left (its answer, metadata and files, which trusted
        code tripped on and could trip on again), with what the trusted side saw of its run (its
        times, its model calls as the gateway counted them, their transcript), and ``update``."""
        metadata: dict[str, Any] = {}
        artifacts: dict[str, str] = {}
        if self.model_usage is not None:  # the gateway's word, written by the runner, never the agent's
            metadata["gateway"] = self.model_usage.model_dump(mode="json")
            if MODEL_CALLS_ARTIFACT in self.artifacts:
                artifacts[MODEL_CALLS_ARTIFACT] = self.artifacts[MODEL_CALLS_ARTIFACT]
        kept = {"agent_answer": None, "answer_source": None, "metadata": metadata, "artifacts": artifacts}
        return self.model_copy(update={**kept, **update})

    @property
    def counted(self) -> ModelUsage | None:
        """What the gateway counted of its calls, unless it replays recorded runs (their usage,
        cost and refusals are the recorded ones)."""
        return None if self.replayed else self.model_usage
