"""From a unit's EvalResult to its stored record."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from .._json import dumps
from .._version import __version__
from ..agents.labels import row_labels
from ..evals import Eval
from ..graders.judging import Judgments
from ..record import SeenBy, UnitRecord, carried
from ..secrets import environment_secrets, redact
from ..storage.spend import EARLIER_ATTEMPTS
from ..unit.execution import unanswered_result
from ..unit.result import EvalResult
from ..unit.runner import failed_after_run, rayeval_failure
from .plan import Unit

#: the trajectory is kept in artifacts_json, not twice; the earlier attempts are the driver's
#: word on the unit's final row (:meth:`EarlierAttempts.onto`), never the agent's
_METADATA_DROPPED = ("trajectory", EARLIER_ATTEMPTS)
#: a row's error_message is a line or a few, to read in a table; the traceback has room
ERROR_MESSAGE_CHARS = 1_000
#: an error's kind is a name (the agent's exception class: any text it chose), shown in tables
ERROR_TYPE_CHARS = 200
ERROR_TRACEBACK_CHARS = 64_000

#: a unit Ray could not run: its worker or node was lost (``error_details.seen_by``)
RAY: SeenBy = "ray"


def stored_row(result: EvalResult, **fields: Any) -> UnitRecord:
    """The unit's record (``fields``: those of :func:`row_from_result`), known to encode.  A
    result that cannot be stored (text that is not Unicode, from an agent run inline: what it
    returns reaches here unchecked) makes the unit an ``UnstorableResult`` error record saying
    why, without what the agent left (what the gateway counted of its calls kept); the other
    units are not touched."""
    try:
        record = row_from_result(result, **fields)
        record.to_line()  # what cannot be encoded is found here, on the worker; the driver writes the line
        return record
    except (ValueError, RecursionError, OverflowError) as exc:  # PydanticSerializationError is a ValueError
        why = f"{type(exc).__name__}: {exc}".encode("utf-8", "backslashreplace").decode("utf-8")
    unstorable = result.trusted_part(
        status="error",
        passed=False,
        grader_result=None,
        error_type="UnstorableResult",
        error_message=f"the unit's result cannot be stored: {why}",
        error_traceback=None,
    )
    return row_from_result(unstorable, **fields)


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
    host: str | None = None,
) -> UnitRecord:
    """The stored record: the result's fields it shares (times, costs, status...), the unit's and
    run's, and the grader's and the eval's columns.  Its model and harness come from the run's
    configuration (see :func:`row_labels`), what the agent says of its harness stays in
    ``metadata_json``."""
    grader = result.grader_result
    meta = eval_.metadata or {}
    metadata = {k: v for k, v in result.metadata.items() if k not in _METADATA_DROPPED}
    artifacts = dict(result.artifacts)
    if "trajectory" in result.metadata and "trajectory.json" not in artifacts:
        artifacts["trajectory.json"] = dumps(result.metadata["trajectory"])
    model, harness = row_labels(agent, unit.model, agent_args)
    return carried(
        UnitRecord,
        result,
        run_id=run_id,
        model=model,
        unit_id=unit.unit_id,
        eval_id=unit.eval_id,
        eval_hash=eval_.content_hash(),
        agent=agent,
        harness=harness,
        seed=unit.seed,
        attempt=attempt,
        score=grader.score if grader else 0.0,
        score_max=grader.score_max if grader else 1.0,
        normalized_score=grader.normalized_score() if grader else 0.0,
        grader_type="+".join(spec.type for spec in eval_.grader_specs),
        metrics_json=dumps(grader.to_dict()["metrics"] if grader else {}),
        metrics=typed_metrics(grader.metrics) if grader else {},
        reasoning=grader.reasoning if grader else "",
        answer_json=None if result.agent_answer is None else dumps(result.agent_answer),
        error_type=_short(result.error_type, ERROR_TYPE_CHARS),
        error_message=_short(result.error_message, ERROR_MESSAGE_CHARS),
        error_traceback=_short(result.error_traceback, ERROR_TRACEBACK_CHARS, keep_end=True),
        node=node,
        host=host,
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


@dataclass(frozen=True)
class RunRows:
    """What every row carries of the run (see :func:`row_from_result`): the rows the workers
    make of their units, and those the driver makes itself."""

    evals: list[Eval]
    run_id: str
    agent: str
    agent_args: dict[str, str]
    #: the run's (:func:`rayeval.secrets.run_secrets`): masked in the errors rows are made of
    secrets: frozenset[str] = field(default=frozenset(), repr=False)

    def row(self, result: EvalResult, unit: Unit, attempt: int, node: str, host: str | None = None) -> UnitRecord:
        """The unit's stored record (see :func:`stored_row`), ``node`` and ``host`` where it ran."""
        return stored_row(
            result, unit=unit, eval_=self.evals[unit.eval_index], run_id=self.run_id, agent=self.agent,
            agent_args=self.agent_args, attempt=attempt, node=node, host=host,
        )  # fmt: skip

    def system_error(self, unit: Unit, attempt: int, exc: BaseException) -> UnitRecord:
        """The row of a unit Ray could not run even after its own retries (e.g. a node kept dying)."""
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        error = {
            "error_type": type(exc).__name__,
            "error_message": f"Ray could not run the unit: {reason}",
            "error_traceback": str(exc),
        }
        error = redact(error, environment_secrets(self.secrets))
        return self._error_row(unit, attempt, error, {"error_details": {"seen_by": RAY}}, node="unknown")

    def rayeval_failure(
        self,
        unit: Unit,
        attempt: int,
        exc: Exception,
        node: str,
        host: str | None,
        execution: EvalResult | None = None,
        judgments: Judgments | None = None,
    ) -> UnitRecord:
        """The row of a unit rayeval failed on in its worker (see
        :func:`rayeval.unit.runner.rayeval_failure`): the unit's own error, not retried. Once
        its agent has run (``execution``; its judge calls made, ``judgments``), the row keeps
        what the gateway counted of its model calls, and the run's times (see
        :func:`rayeval.unit.runner.failed_after_run`)."""
        secrets = environment_secrets(self.secrets)
        if execution is not None:
            return self.row(failed_after_run(execution, exc, judgments, secrets), unit, attempt, node, host)
        return self._error_row(unit, attempt, rayeval_failure(exc, secrets), {}, node, host)

    def _error_row(
        self,
        unit: Unit,
        attempt: int,
        error: dict[str, str],
        metadata: dict[str, Any],
        node: str,
        host: str | None = None,
    ) -> UnitRecord:
        stamp = datetime.now(timezone.utc)
        execution = EvalResult(
            eval_id=unit.eval_id,
            model=unit.model,
            seed=unit.seed,
            run_id=self.run_id,
            outcome="error",
            **error,
            metadata=metadata,
            started_at=stamp,
            finished_at=stamp,
        )
        return self.row(unanswered_result(execution), unit, attempt, node, host)
