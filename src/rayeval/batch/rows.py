"""From a unit's EvalResult to the stored row."""

from __future__ import annotations

from typing import Any, NamedTuple

from .._json import dumps
from .._version import __version__
from ..agents.labels import row_labels
from ..evals import Eval
from ..harness.result import EvalResult
from ..record import JUDGE_ERROR, UnitRecord
from .plan import Unit

_METADATA_DROPPED = ("trajectory",)  # kept in artifacts_json, not twice
#: a row's error_message is a line or a few, to read in a table; the traceback has room
ERROR_MESSAGE_CHARS = 1_000
#: an error's kind is a name (the agent's exception class: any text it chose), shown in tables
ERROR_TYPE_CHARS = 200
ERROR_TRACEBACK_CHARS = 64_000


class UnitRow(NamedTuple):
    """A worker's answer for one unit: the row as its JSON line (written to the WAL and Parquet
    as it is) and the fields the driver decides on (retry, progress)."""

    status: str
    passed: bool
    line: bytes
    #: an error a run's own retries run again: the agent's or Ray's, not a judge's
    #: (``JUDGE_ERROR``: the judge calls were retried already; ``--retry-errors`` reruns them)
    retryable: bool = False


def unit_row(row: UnitRecord) -> UnitRow:
    retryable = row.status == "error" and row.error_type != JUDGE_ERROR
    return UnitRow(row.status, row.passed, row.to_line(), retryable)


def stored_row(result: EvalResult, **fields: Any) -> UnitRow:
    """The unit's row (``fields``: those of :func:`row_from_result`).  A result that cannot be
    stored (text that is not Unicode, from an agent run inline: what it returns reaches here
    unchecked) makes the unit an ``UnstorableResult`` error row saying why, without what the
    agent returned; the other units are not touched."""
    try:
        return unit_row(row_from_result(result, **fields))
    except (ValueError, RecursionError, OverflowError) as exc:  # PydanticSerializationError is a ValueError
        why = f"{type(exc).__name__}: {exc}".encode("utf-8", "backslashreplace").decode("utf-8")
    unstorable = result.model_copy(
        update={
            "status": "error",
            "passed": False,
            "grader_result": None,
            "agent_answer": None,
            "answer_source": None,
            "metadata": {},
            "artifacts": {},
            "error_type": "UnstorableResult",
            "error_message": f"the unit's result cannot be stored: {why}",
            "error_traceback": None,
        }
    )
    return unit_row(row_from_result(unstorable, **fields))


def row_from_result(
    result: EvalResult,
    *,
    unit: Unit,
    eval_: Eval,
    run_id: str,
    agent: str,
    agent_args: dict[str, str],
    attempt: int,
    node: str,
) -> UnitRecord:
    """The stored row; its model and harness come from the run's configuration (see
    :func:`row_labels`), what the agent says of its harness stays in ``metadata_json``."""
    grader = result.grader_result
    meta = eval_.metadata or {}
    metadata = {k: v for k, v in result.metadata.items() if k not in _METADATA_DROPPED}
    artifacts = dict(result.artifacts)
    if "trajectory" in result.metadata and "trajectory.json" not in artifacts:
        artifacts["trajectory.json"] = dumps(result.metadata["trajectory"])
    model, harness = row_labels(agent, unit.model, agent_args)
    return UnitRecord(
        run_id=run_id,
        model=model,
        unit_id=unit.unit_id,
        eval_id=unit.eval_id,
        eval_hash=eval_.content_hash(),
        agent=agent,
        harness=harness,
        seed=unit.seed,
        attempt=attempt,
        status=result.status,
        passed=result.passed,
        score=grader.score if grader else 0.0,
        score_max=grader.score_max if grader else 1.0,
        normalized_score=grader.normalized_score() if grader else 0.0,
        grader_type="+".join(spec.type for spec in eval_.grader_specs),
        metrics_json=dumps(grader.to_dict()["metrics"] if grader else {}),
        metrics=typed_metrics(grader.metrics) if grader else {},
        reasoning=grader.reasoning if grader else "",
        answer_json=None if result.agent_answer is None else dumps(result.agent_answer),
        answer_source=result.answer_source,
        error_type=_short(result.error_type, ERROR_TYPE_CHARS),
        error_message=_short(result.error_message, ERROR_MESSAGE_CHARS),
        error_traceback=_short(result.error_traceback, ERROR_TRACEBACK_CHARS, keep_end=True),
        duration_s=result.duration_s,
        agent_s=result.agent_s,
        grade_s=result.grade_s,
        cost_usd=result.cost_usd,
        agent_cost_usd=result.agent_cost_usd,
        judge_cost_usd=result.judge_cost_usd,
        input_tokens=result.input_tokens,
        output_tokens=result.output_tokens,
        n_turns=result.n_turns,
        started_at=result.started_at,
        finished_at=result.finished_at,
        node=node,
        isolation=result.isolation,
        task=_text(meta.get("task")),
        kit=_text(meta.get("kit")),
        time_horizon=_text(meta.get("time_horizon")),
        eval_type=_text(meta.get("eval_type")),
        metadata_json=dumps(metadata),
        artifacts_json=dumps(artifacts) if artifacts else None,
        rayeval_version=__version__,
    )


def typed_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """The numeric and yes/no metrics (yes = 1.0) among the grader's, by name: the typed
    ``metrics`` column.  Text, lists, nested values and numbers no float holds stay in
    ``metrics_json`` only."""
    typed = {}
    for name, value in metrics.items():
        if isinstance(value, (bool, int, float)) and isinstance(name, str):
            try:
                typed[name] = float(value)
            except OverflowError:
                continue
    return typed


def _short(text: str | None, limit: int, *, keep_end: bool = False) -> str | None:
    """``text`` cut to ``limit`` characters, saying how much was left out (a traceback keeps
    its end, where the exception is)."""
    if text is None or len(text) <= limit:
        return text
    cut = f"[{len(text) - limit:,} characters left out]"
    return f"{cut}\n{text[-limit:]}" if keep_end else f"{text[:limit]}… {cut}"


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
