"""One unit's record: every column rayeval stores of a unit, declared once, with its type.

The plan names the unit (run, model, unit, eval, seed, attempt), the agent's run and its
grading give an :class:`~rayeval.unit.result.EvalResult`, whose fields the record shares are
carried over (:func:`carried`), and the store adds where it ran: that is the record, stored as
it is. Its JSON line goes to the write-ahead log, the Parquet schema is derived from its
fields (:mod:`rayeval.storage.schema`), and the reports' and viewer's column lists from their
marks (:func:`columns_marked`).

The bottom layer: it imports no other part of rayeval, nor pyarrow (a Ray worker building
records does not load it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, field_serializer, field_validator

Status = Literal["passed", "failed", "error", "timeout", "config_error"]
STATUSES: tuple[Status, ...] = ("passed", "failed", "error", "timeout", "config_error")
#: a unit's limit that ended it: on its model calls (``--limit-tokens``, ``--limit-cost``,
#: ``--limit-model-calls``), its run's (``--max-cost``: ``run_cost``) or its time (``--timeout``,
#: the eval's ``agent_timeout``)
LimitName = Literal["tokens", "cost", "model_calls", "run_cost", "time"]
#: Who saw a unit's failure that was not the agent's doing, in its metadata's
#: ``error_details.seen_by``: the trusted side's word, never the agent's (the harness drops one
#: an agent wrote). The model gateway (a provider's failure, but for a rate limit, which the
#: unit's own requests may bring about), the runner (the unit could not run here: its data, its
#: sandbox), Ray (its worker or node was lost) or the grading (an LLM judge was out of reach: a
#: :data:`JUDGE_ERROR`; one that refused its request, which holds the answer, gave no
#: readable verdict or did not answer in its time may be the answer's doing). ``--errors exclude`` leaves out of pass rates these errors only. A
#: run's own retries are for the runner's and Ray's only: a second try of an agent's own error
#: (its code raised, its answer unusable) would not change it.
SeenBy = Literal["gateway", "runner", "ray", "judge"]
#: Statuses that are errors (no verdict): counted apart from failures by the engine and reports.
ERROR_STATUSES: frozenset[Status] = frozenset({"error", "timeout", "config_error"})

#: the error_type of a unit whose LLM judge gave no verdict (retried by ``--retry-errors``, not
#: by a run's own retries: the judge calls were retried already, and the agent need not run again)
JUDGE_ERROR = "JudgeError"

#: the error_type of a unit an agent left without an answer because its model's provider failed
#: (as the gateway saw it)
PROVIDER_ERROR = "ProviderError"

#: the error_type of a unit rayeval itself failed on while it ran (an exception raised in its own,
#: trusted code: neither the agent's doing nor a lost worker or node): the unit's error, with its
#: model calls as the gateway counted them where they were, stored at once (a run's own retries
#: would most likely fail alike; ``--retry-errors`` runs it again)
RAYEVAL_FAILURE = "RayevalFailure"

#: the error_types the trusted side gives a unit's error (its time, memory or process, its
#: answer, its provider as the gateway saw it, its judges, its data or sandbox, rayeval's own
#: code; Ray's exceptions are named by Ray, see ``rayeval.sandbox.isolation.agents_error_type``):
#: an exception the agent raised under one of these names is stored as the agent's. Not
#: ``UnsendableResult``: the unit's own runner, in its sandbox, names a return value it cannot
#: send so, the agent's doing either way
RAYEVAL_ERROR_TYPES: frozenset[str] = frozenset(
    {
        "AgentProcessDied", "AnswerTooDeep", "AnswerTooLarge", "BadAgentResult", JUDGE_ERROR, "NoAnswer",
        "OutOfMemory", PROVIDER_ERROR, RAYEVAL_FAILURE, "SandboxError", "StagingError", "Timeout",
        "UnstorableResult",
    }
)  # fmt: skip

# Hive partition keys: encoded in the path (run_id=<id>/model=<m>/), never stored in the files.
PARTITION_COLUMNS = ("run_id", "model")

# What the readers make of a column, marked on its record field (``Annotated[type, mark]``): the
# reports' and the viewer's column lists are derived from these marks (:func:`columns_marked`).
#: a name with few distinct values, read as a pandas category
LABEL = "label"
#: text or JSON of one unit (or its eval's hash): left out of reports, read for a unit's detail
DETAIL = "detail"
#: left out of reports too, and no part of a unit's detail
UNREPORTED = "unreported"

Model = TypeVar("Model", bound=BaseModel)


def carried(kind: type[Model], source: BaseModel, /, **fields: Any) -> Model:
    """A ``kind`` made of the fields of ``source`` it has too (by name, dumped by pydantic) and
    of ``fields``, which come on top: how one stage's record becomes the next one's."""
    return kind.model_validate({**source.model_dump(include=set(kind.model_fields)), **fields})


class UnitRecord(BaseModel):
    """One unit as stored. Column names follow the reports spec; JSON-valued columns end in ``_json``.

    A record's one encoding is its JSON line (:meth:`to_line`): it goes to the write-ahead log as
    it is, and Parquet parts are built from those lines (``rayeval.storage.schema``).  NaN and
    infinite floats are written as JSON's ``NaN``/``Infinity`` so that both paths keep them.
    """

    model_config = ConfigDict(frozen=True, ser_json_inf_nan="constants")

    run_id: Annotated[str, LABEL]
    model: Annotated[str, LABEL]
    unit_id: Annotated[str, LABEL]
    eval_id: Annotated[str, LABEL]
    eval_hash: Annotated[str, DETAIL, LABEL]
    agent: Annotated[str, LABEL]
    harness: Annotated[str | None, LABEL] = None
    seed: int
    attempt: int
    status: Annotated[Status, LABEL]
    passed: bool
    score: float
    score_max: float
    normalized_score: float
    grader_type: Annotated[str, LABEL]
    metrics_json: Annotated[str, DETAIL]
    #: the grader's numeric and yes/no metrics (yes = 1.0) by name, typed: a Parquet map
    #: (``metric.<name>`` columns through rayeval's readers); every metric is in ``metrics_json``
    metrics: Annotated[dict[str, float], UNREPORTED] = {}
    reasoning: Annotated[str, DETAIL]
    answer_json: Annotated[str | None, DETAIL] = None
    answer_source: Annotated[str | None, DETAIL, LABEL] = None
    error_type: Annotated[str | None, LABEL] = None
    #: what went wrong, short (at most ERROR_MESSAGE_CHARS); the traceback is apart
    error_message: Annotated[str | None, DETAIL] = None
    error_traceback: Annotated[str | None, DETAIL] = None
    duration_s: float
    agent_s: float
    grade_s: float
    #: the unit's cost: the sum of ``agent_cost_usd`` and ``judge_cost_usd`` where known (None:
    #: neither is); rows stored before those columns hold the agent's cost alone
    cost_usd: float | None = None
    agent_cost_usd: float | None = None
    judge_cost_usd: float | None = None
    #: tokens of the unit's model calls, as the model gateway counted them (a replayed run's: as
    #: recorded); every prompt token, cached ones included
    input_tokens: int | None = None
    output_tokens: int | None = None
    n_turns: int | None = None
    #: the model calls the gateway relayed for the unit (None: its agent ran in the worker)
    n_model_calls: Annotated[int | None, UNREPORTED] = None
    #: the limit of the unit its model calls reached, None: none
    limit_reached: Annotated[LimitName | None, UNREPORTED] = None
    #: the model refused (the agent's harness reports it, as it does the cost): the row stays
    #: ``failed``; None where the run was not searched for a refusal, and in rows stored before
    refusal: bool | None = None
    started_at: datetime
    finished_at: datetime
    #: the Ray node the unit ran on (its node id: two nodes of one host are two nodes), and that
    #: node's host name (None: rows stored before it was recorded)
    node: Annotated[str, LABEL]
    host: Annotated[str | None, LABEL] = None
    #: how the agent ran: sandbox, process or inline (None: rows written before it was recorded)
    isolation: Annotated[str | None, LABEL] = None
    task: Annotated[str | None, LABEL] = None
    kit: Annotated[str | None, LABEL] = None
    time_horizon: Annotated[str | None, LABEL] = None
    eval_type: Annotated[str | None, LABEL] = None
    metadata_json: Annotated[str, DETAIL]
    artifacts_json: Annotated[str | None, DETAIL] = None
    rayeval_version: Annotated[str, UNREPORTED, LABEL]

    @field_validator("metrics", mode="before")
    @classmethod
    def _metrics_from_pairs(cls, value: Any) -> Any:
        """``[{"key": k, "value": v}, ...]`` (a line's form) or ``[(k, v), ...]`` (pyarrow's form of
        a map) → a dict; None (rows stored before the column) → no metrics."""
        if value is None:
            return {}
        if isinstance(value, list):
            return dict((item["key"], item["value"]) if isinstance(item, dict) else item for item in value)
        return value

    @field_serializer("metrics")
    def _metrics_as_pairs(self, metrics: dict[str, float]) -> list[dict[str, Any]]:
        # Arrow's JSON reader takes a list of key/value objects, never an object of unknown keys
        return [{"key": key, "value": value} for key, value in metrics.items()]

    def to_line(self) -> bytes:
        """One JSON line (UTF-8, no newline), ``run_id`` and ``model`` first."""
        return self.__pydantic_serializer__.to_json(self)

    @property
    def retryable(self) -> bool:
        """An error a run's own retries run again: the agent's or Ray's, not a judge's
        (:data:`JUDGE_ERROR`: the judge calls were retried already; ``--retry-errors`` reruns them)."""
        return self.status == "error" and self.error_type != JUDGE_ERROR


def columns_marked(mark: str) -> tuple[str, ...]:
    """The record's columns (partition keys included) marked ``mark``, in their order."""
    return tuple(name for name, field in UnitRecord.model_fields.items() if mark in field.metadata)


#: the columns the reports read unless asked for others: all but the heavy and unreported ones
REPORT_COLUMNS: tuple[str, ...] = tuple(
    name for name in UnitRecord.model_fields if name not in {*columns_marked(DETAIL), *columns_marked(UNREPORTED)}
)
