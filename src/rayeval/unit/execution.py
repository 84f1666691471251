"""A unit's run graded: its :class:`~rayeval.unit.result.EvalResult` as the runner filled it in
becomes the graded one (its verdict, costs and tokens), or, for an error or a timeout, the
result that is not graded."""

from __future__ import annotations

import math
import time
from datetime import datetime, timezone
from typing import Any

from ..evals import Eval
from ..gateway.server import ModelUsage
from ..graders.judging import Judgments, judgments_cost_usd
from ..graders.result import GraderResult
from ..record import JUDGE_ERROR, SeenBy, Status
from .grading_process import DEFAULT_TIMEOUT_S, GradingError, GradingTimeout, grade_bounded, judge_requests_bounded
from .result import EvalResult
from .run_summary import refusal_column, with_run_summary

# Metadata keys an agent may report that become first-class result fields.
_LIFTED_INT_FIELDS = ("input_tokens", "output_tokens", "n_turns")


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: an LLM judge gave the unit no verdict (``error_details.seen_by`` of a :data:`JUDGE_ERROR` row)
JUDGE: SeenBy = "judge"


def _judge_failures(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The judge failures in a verdict's metrics: a rubric's ``judge_failures``, and those of
    each entry of a graders list."""
    failures = [failure for failure in metrics.get("judge_failures", ()) if isinstance(failure, dict)]
    for entry in metrics.get("graders", ()) if isinstance(metrics.get("graders"), list) else ():
        if isinstance(entry, dict) and isinstance(entry.get("metrics"), dict):
            failures += _judge_failures(entry["metrics"])
    return failures


def _judges_out_of_reach(result: GraderResult) -> bool:
    """Whether every judge that gave no verdict was out of reach (``transient``, and answered
    no try late): one that refused the request, never gave a readable verdict (``fatal``,
    ``unparseable``) or did not answer in its time read the answer, which may have brought that
    about (content the judge refuses, or that makes it write past its token limit or its time)."""
    failures = _judge_failures(result.metrics)
    return bool(failures) and all(f.get("kind") == "transient" and not f.get("timed_out") for f in failures)


def _number(value: Any, kind: type) -> Any:
    """``value`` as ``kind``, or None when it is not a number an agent could sensibly report
    (NaN or an infinity among them: no total, mean or JSON report holds one; nor a negative
    one: every cost, count and duration lifted is at least 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = kind(value)
    except (OverflowError, ValueError):  # inf/nan as a count, an int too large for a float
        return None
    if kind is float and not math.isfinite(number):
        return None
    # a count beyond int64 is garbage, and no Parquet part holding it could be written
    if kind is int and number > INT64_MAX:
        return None
    return number if number >= 0 else None


def lift_metadata(execution: EvalResult, judgments: Judgments | None = None) -> dict:
    """The execution's cost, tokens, turns and harness as typed result fields, with the cost of
    the judge calls whose outcomes are ``judgments`` (see :func:`cost_fields`). Tokens, cost
    and the number of model calls are the ones the gateway counted where the unit's calls went
    through it; only an agent run in this process (the replay of recorded runs among them)
    has its own report of them taken. Turns and harness are the agent's word (its turns no
    more than the model calls the gateway counted, where it counted them).

    The ``duration_s`` rayeval's replay agent reports is the recorded run's; any other agent's
    reported duration is ignored (the measured one is kept)."""
    metadata, counted = execution.metadata, execution.counted
    lifted: dict[str, Any] = {}
    if isinstance(metadata.get("harness"), str):
        lifted["harness"] = metadata["harness"]
    claimed = {key: _number(metadata.get(key), int) for key in _LIFTED_INT_FIELDS}
    claimed_cost = _number(metadata.get("cost_usd", metadata.get("total_cost")), float)
    if counted is None:
        lifted.update(cost_fields(claimed_cost, judgments))
        lifted.update({key: count for key, count in claimed.items() if count is not None})
    else:
        lifted.update(counted_fields(counted, judgments))
        if claimed["n_turns"] is not None:  # capped: a turn is a model call, and the gateway counted those
            lifted["n_turns"] = min(claimed["n_turns"], counted.n_model_calls)
    recorded = _number(metadata.get("duration_s"), float)
    if execution.replayed and recorded is not None:
        lifted["duration_s"] = recorded
    return lifted


def counted_fields(counted: ModelUsage, judgments: Judgments | None = None) -> dict[str, Any]:
    """A result's fields from what the gateway counted of its calls: their costs (with those of
    the judge calls whose outcomes are ``judgments``, see :func:`cost_fields`), tokens and counts."""
    return {
        **cost_fields(counted.cost_usd, judgments),
        **_counted_tokens(counted),
        "n_model_calls": counted.n_model_calls,
        "limit_reached": counted.limit_reached,
    }


def _counted_tokens(counted: ModelUsage) -> dict[str, int]:
    return {"input_tokens": counted.usage.input_tokens or 0, "output_tokens": counted.usage.output_tokens or 0}


def claims_against_counts(metadata: dict, counted: ModelUsage) -> dict[str, Any]:
    """Where what the agent reported of its model calls differs from what the gateway counted
    (its claims stay in the metadata; none is taken): a claim that is no count at all (negative,
    NaN, text) differs too."""
    counts: dict[str, float | None] = {**_counted_tokens(counted), "cost_usd": counted.cost_usd}
    differs = {}
    for key, count in counts.items():
        if metadata.get(key) is None or count is None:
            continue
        claim = _number(metadata[key], float)
        if claim is None or not math.isclose(claim, count, rel_tol=1e-6, abs_tol=1e-9):
            differs[key] = {"claimed": metadata[key], "counted": count}
    return differs


def cost_fields(agent_cost_usd: float | None, judgments: Judgments | None) -> dict[str, float | None]:
    """A result's costs: the agent's (as it reported it), its judges' (their calls' outcomes;
    None without judge calls, or with one whose cost is unknown) and ``cost_usd``, the sum of
    those known (None: neither is)."""
    judge_cost_usd = judgments_cost_usd(judgments or {})
    known = [cost for cost in (agent_cost_usd, judge_cost_usd) if cost is not None]
    return {
        "agent_cost_usd": agent_cost_usd,
        "judge_cost_usd": judge_cost_usd,
        "cost_usd": sum(known) if known else None,
    }


def reported_fields(execution: EvalResult) -> dict[str, Any]:
    """Its metadata with a valid run summary (see :func:`with_run_summary`), and its
    ``refusal``, the summary's: whether the model refused, as the gateway read it off the
    provider's replies where the unit's calls went through it (the agent's own claim stays in
    its metadata), else as the agent, run in this process, reports it."""
    metadata = with_run_summary(execution.metadata, execution.agent_s, execution.counted)
    return {"metadata": metadata, "refusal": refusal_column(metadata)}


def judge_requests(eval_: Eval, execution: EvalResult, *, grade_timeout: float | None = DEFAULT_TIMEOUT_S) -> Judgments:
    """The judge calls the LLM-judged graders of ``eval_`` (see ``rayeval.unit.judges.has_judged_graders``)
    would make on the answer of ``execution`` (none for an error or timeout): the first of a
    batch run's two grading passes (see ``rayeval.graders.judging``). A grading that fails
    here fails again, and is reported, in the second pass."""
    if execution.outcome in ("error", "timeout"):
        return {}
    try:
        return judge_requests_bounded(eval_, execution.agent_answer, grade_timeout)
    except GradingError:
        return {}


def unanswered_result(execution: EvalResult, judgments: Judgments | None = None) -> EvalResult:
    """The result of an execution that ended in an error or a timeout: nothing to grade (what its
    model calls used, as the gateway counted them, is kept, and what the judge calls whose
    outcomes are ``judgments`` cost, when they were made)."""
    status: Status = "timeout" if execution.outcome == "timeout" else "error"
    if execution.counted is not None:
        costs = counted_fields(execution.counted, judgments)
    else:
        costs = cost_fields(None, judgments) if judgments else {}
    if status == "timeout":
        costs["limit_reached"] = "time"
    return execution.model_copy(update={"status": status, "passed": False, **reported_fields(execution), **costs})


def grade_execution(
    eval_: Eval,
    execution: EvalResult,
    *,
    grade_timeout: float | None = DEFAULT_TIMEOUT_S,
    judgments: Judgments | None = None,
) -> EvalResult:
    """The graded result of ``execution`` (as the runner filled it in): errors and timeouts
    are not graded, everything else is.

    The grading runs in a grading process stopped after ``grade_timeout`` seconds (a
    ``timeout`` result, ``GradingTimeout``); a failed one gives an ``error`` result.
    ``grade_timeout=None`` grades in this process, without a limit. ``judgments``: the
    outcomes of the LLM-judged graders' judge calls (else they call their judge themselves).
    """
    if execution.outcome in ("error", "timeout"):
        return unanswered_result(execution)
    start = time.monotonic()
    status: Status
    grader_result: GraderResult | None
    error: dict[str, str] = {}  # why the unit was not graded: the grading's error, not the agent's
    try:
        grader_result = grade_bounded(eval_, execution.agent_answer, grade_timeout, judgments=judgments)
    except GradingError as exc:
        grader_result = None
        status = "timeout" if isinstance(exc, GradingTimeout) else "error"
        error = {"error_type": type(exc).__name__, "error_message": str(exc)}
    else:
        if grader_result.is_configuration_error:
            status = "config_error"
        elif grader_result.judge_failure is not None:  # not graded: an error of the run, not a failed answer
            status = "error"
            error = {"error_type": JUDGE_ERROR, "error_message": grader_result.judge_failure}
        else:
            status = "passed" if grader_result.passed else "failed"
    grade_s = time.monotonic() - start
    lifted = lift_metadata(execution, judgments)
    duration_s = lifted.pop("duration_s", round(execution.duration_s + grade_s, 6))  # a replay's: the recorded
    reported = reported_fields(execution)
    if error.get("error_type") == JUDGE_ERROR and grader_result is not None and _judges_out_of_reach(grader_result):
        details = reported["metadata"].get("error_details")  # the grading's own word: no agent writes seen_by
        reported["metadata"]["error_details"] = {**(details if isinstance(details, dict) else {}), "seen_by": JUDGE}
    return execution.model_copy(
        update={
            **error,
            **lifted,
            **reported,
            "duration_s": duration_s,
            "status": status,
            "passed": status == "passed",
            "grader_result": grader_result,
            "grade_s": round(grade_s, 6),
        }
    )


def now() -> datetime:
    return datetime.now(timezone.utc)
