"""The result row: one graded unit, as stored in Parquet and read back by reports.

Apart from the Arrow schema (:mod:`.schema`), so that a Ray worker building rows does not
import pyarrow.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, field_serializer, field_validator

from ..harness.result import Status

# Hive partition keys: encoded in the path (run_id=<id>/model=<m>/), never stored in the files.
PARTITION_COLUMNS = ("run_id", "model")

#: Statuses that are errors (no verdict): counted apart from failures by the engine and reports.
ERROR_STATUSES: frozenset[Status] = frozenset({"error", "timeout", "config_error"})


class ResultRow(BaseModel):
    """Column names follow the reports spec; JSON-valued columns end in ``_json``.

    A row's one encoding is its JSON line (:meth:`to_line`): it goes to the write-ahead log as
    it is, and Parquet parts are built from those lines (:func:`lines_to_table`).  NaN and
    infinite floats are written as JSON's ``NaN``/``Infinity`` so that both paths keep them.
    """

    model_config = ConfigDict(frozen=True, ser_json_inf_nan="constants")

    run_id: str
    model: str
    unit_id: str
    eval_id: str
    eval_hash: str
    agent: str
    harness: str | None = None
    seed: int
    attempt: int
    status: Status
    passed: bool
    score: float
    score_max: float
    normalized_score: float
    grader_type: str
    metrics_json: str
    #: the grader's numeric and yes/no metrics (yes = 1.0) by name, typed: a Parquet map
    #: (``metric.<name>`` columns through rayeval's readers); every metric is in ``metrics_json``
    metrics: dict[str, float] = {}
    reasoning: str
    answer_json: str | None = None
    answer_source: str | None = None
    error_type: str | None = None
    #: what went wrong, short (at most ERROR_MESSAGE_CHARS); the traceback is apart
    error_message: str | None = None
    error_traceback: str | None = None
    duration_s: float
    agent_s: float
    grade_s: float
    #: the unit's cost: the sum of ``agent_cost_usd`` and ``judge_cost_usd`` where known (None:
    #: neither is); rows stored before those columns hold the agent's cost alone
    cost_usd: float | None = None
    agent_cost_usd: float | None = None
    judge_cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    n_turns: int | None = None
    started_at: datetime
    finished_at: datetime
    node: str
    #: how the agent ran: sandbox, process or inline (None: rows written before it was recorded)
    isolation: str | None = None
    task: str | None = None
    kit: str | None = None
    time_horizon: str | None = None
    eval_type: str | None = None
    metadata_json: str
    artifacts_json: str | None = None
    rayeval_version: str

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
