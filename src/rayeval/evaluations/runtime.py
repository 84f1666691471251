"""What runs on the Ray workers: the file callable as an agent, the evaluators as the grader.

Both objects travel to the workers with Ray's serialisation (cloudpickle), so the user's
callables may be lambdas or closures. This module stays light (no pandas, no Ray): the
workers import it to rebuild the objects.

The log every evaluator receives is a plain dict (a fresh copy per evaluator)::

    {
      "output": str,                 # what the file callable returned (non-strings as JSON text)
      "inputs": dict,                # the datapoint's inputs
      "messages": list | None,       # the datapoint's messages (None when it has none)
      "error": None,                 # evaluators only see logs whose callable succeeded
      "datapoint_id": str,           # the stable datapoint id (the rows' eval_id)
      "source_datapoint_id": str,    # the same, under Humanloop's name
      "run_id": str, "evaluation": str,
      "file": {"path", "type", "version"}, "version_id": str,   # version_id: the rows' model
      "start_time": str, "end_time": str,   # ISO 8601, UTC, of the callable's run
      "duration_s": float,
      "cost_usd": float | None,      # the callable's model calls, as the gateway counted them
                                     # (a prompt file's call: its cost, None without a price)
      "input_tokens": int | None, "output_tokens": int | None,   # counted the same way
    }

and a ``target_required`` evaluator also gets the datapoint:
``{"id", "inputs", "messages", "target"}``. One named by path (``without_target =
"not_applicable"``, as Humanloop's hosted evaluators judge what they can) is not called for a
datapoint without a target: its judgment is ``{"not_applicable": "no target"}``, a null in the
stats (counted in ``num_not_applicable``) that no check passes or fails.
"""

from __future__ import annotations

import copy
import json
import math
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .._json import dumps
from ..errors import RayevalError
from ..evals import Eval
from ..evals.model import GraderSpec
from ..graders._common import InvalidConfig
from ..graders.base import Grader
from ..graders.judging import Judgments
from ..graders.registry import register_grader
from ..graders.result import GraderResult
from ..unit.execution import grade_execution, judge_requests, lift_metadata
from ..unit.grading_process import DEFAULT_TIMEOUT_S as DEFAULT_GRADE_TIMEOUT_S
from ..unit.prompt import task_of
from ..unit.result import EvalResult

MAX_ERROR_CHARS = 2000
EVALUATORS_KEY = "evaluators"  # metrics_json["evaluators"][path] holds each judgment
EVALUATIONS_GRADER = "evaluations"  # the grader type of an evaluation's units (the rows' grader_type)
NOT_APPLICABLE = {"not_applicable": "no target"}  # the judgment of an evaluator that needs a target the datapoint lacks
WithoutTarget = Literal["refuse", "not_applicable"]


def has_target(target: Any) -> bool:
    """A datapoint's target is there: not None, nor an empty string, object or list."""
    return target is not None and target not in ("", {}, [])


def is_not_applicable(judgment: Any) -> bool:
    return isinstance(judgment, dict) and "not_applicable" in judgment


class OutputError(RayevalError, TypeError):
    """The file callable returned something that is neither a string nor JSON."""


def output_text(value: Any) -> str:
    """The log's output: a string as returned; anything else as JSON text (as Humanloop does)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise OutputError(
            f"the file callable must return a string or a JSON-serialisable value, got {type(value).__name__}: {exc}"
        ) from None


class DatapointCaller:
    """The engine's agent: ``callable(**inputs, messages=messages)`` for the unit's datapoint.

    The datapoint (inputs and messages, never the target) is the unit's task, as JSON: the
    caller holds no other datapoint, so a sandboxed unit sees its own only. ``messages`` is
    passed only when the datapoint has messages. The output goes back in an answer envelope,
    so the harness stores it verbatim in ``answer_json``.
    """

    needs_data = False  # nothing to stage

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn

    def __call__(self, task_prompt: str, work_dir: Path) -> dict[str, Any]:
        point = json.loads(task_of(task_prompt))
        kwargs = point["inputs"]
        if point.get("messages") is not None:
            kwargs["messages"] = point["messages"]
        return {"answer": {"output": output_text(self.fn(**kwargs))}, "metadata": {}}


@dataclass(eq=False)  # evaluators are told apart by identity, as any callable
class LocalEvaluator:
    """One evaluator as the worker needs it (the validated config, minus pydantic)."""

    path: str
    args_type: str
    return_type: str
    threshold: float | None
    fn: Callable[..., Any]
    without_target: WithoutTarget = "refuse"

    def judge(self, log: dict[str, Any], datapoint: dict[str, Any]) -> Any:
        """The judgment (None is a null), ``{"error": ...}`` when the evaluator raised or
        returned a value that does not fit its return type, or :data:`NOT_APPLICABLE` (not
        called) when it needs a target the datapoint lacks."""
        if (
            self.args_type == "target_required"
            and self.without_target == "not_applicable"
            and not has_target(datapoint.get("target"))
        ):
            return dict(NOT_APPLICABLE)
        try:
            if self.args_type == "target_required":
                value = self.fn(copy.deepcopy(log), copy.deepcopy(datapoint))
            else:
                value = self.fn(copy.deepcopy(log))
        except Exception as exc:  # noqa: BLE001 - a failing evaluator is that judgment's error, not the run's
            tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-MAX_ERROR_CHARS:]
            return {"error": f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS], "traceback": tail}
        try:
            return coerce_judgment(value, self.return_type)
        except (TypeError, ValueError, OverflowError) as exc:  # also a number too large to store or show
            return {"error": f"{self.path}: {exc}"[:MAX_ERROR_CHARS]}


def _plain_number(value: Any) -> Any:
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item) and getattr(value, "shape", None) == ():
        return item()
    return value


def coerce_judgment(value: Any, return_type: str) -> Any:
    """The judgment as stored: JSON of the return type, or TypeError naming what was returned."""
    if value is None:
        return None
    value = _plain_number(value)
    got = f"returned {value!r} ({type(value).__name__})"
    if return_type == "boolean":
        if isinstance(value, bool):
            return value
        raise TypeError(f"{got}; a boolean evaluator returns True, False or None")
    if return_type == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{got}; a number evaluator returns an int, a float or None")
        if not math.isfinite(value):
            raise TypeError(f"{got}; a number evaluator's judgment must be finite")
        return value
    if return_type == "select":
        if isinstance(value, str):
            return value
        raise TypeError(f"{got}; a select evaluator returns one option (a string) or None")
    if return_type == "multi_select":
        if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in value):
            return sorted(set(value)) if isinstance(value, (set, frozenset)) else list(dict.fromkeys(value))
        raise TypeError(f"{got}; a multi_select evaluator returns a list of options (strings) or None")
    if isinstance(value, str):  # text
        return value
    raise TypeError(f"{got}; a text evaluator returns a string or None")


def log_checks(evaluators: list[LocalEvaluator], judgments: dict[str, Any]) -> dict[str, bool]:
    """The per-log checks: each boolean evaluator (passes when True) and each number evaluator
    with a threshold (passes when the judgment is >= the threshold). An error or a null fails."""
    checks: dict[str, bool] = {}
    for evaluator in evaluators:
        value = judgments.get(evaluator.path)
        if is_not_applicable(value):  # nothing was judged: no check passes or fails
            continue
        if evaluator.return_type == "boolean":
            checks[evaluator.path] = value is True
        elif evaluator.return_type == "number" and evaluator.threshold is not None:
            checks[evaluator.path] = bool(
                isinstance(value, (int, float)) and not isinstance(value, bool) and value >= evaluator.threshold
            )
    return checks


def _describe(value: Any) -> str:
    if isinstance(value, dict) and "error" in value:
        return f"error ({str(value['error']).splitlines()[0][:200]})"
    if is_not_applicable(value):
        return f"not applicable ({value['not_applicable']})"
    return dumps(value)[:200]


@register_grader(EVALUATIONS_GRADER)
class EvaluatorsGrader(Grader):
    """The ``evaluations`` grader: runs every evaluator on the unit's log, never raises for them.

    Its config is made per unit by :class:`EvaluationGrade`, in the process that grades:
    ``{"evaluators": [LocalEvaluator], "log": {...}, "datapoint": {...}}`` (an eval file's JSON
    config names no evaluator: a configuration error). The result: ``metrics = {"evaluators":
    {path: judgment | {"error": msg}}, "checks": {path: bool}}``; ``passed`` = every per-log
    check passed (see :func:`log_checks`; with no checks, passed = no evaluator raised);
    ``score`` = the share of checks passed (with no checks, 1.0 or 0.0 as ``passed``),
    ``score_max`` = 1.
    """

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        evaluators, log, datapoint = config.get("evaluators"), config.get("log"), config.get("datapoint")
        given = isinstance(evaluators, list) and all(isinstance(e, LocalEvaluator) for e in evaluators)
        if not (given and isinstance(log, dict) and isinstance(datapoint, dict)):
            raise InvalidConfig("the evaluations grader grades with the evaluators of evaluations.run")
        verdicts = {evaluator.path: evaluator.judge(log, datapoint) for evaluator in evaluators}
        checks = log_checks(evaluators, verdicts)
        raised = any(isinstance(v, dict) and "error" in v for v in verdicts.values())
        passed = all(checks.values()) if checks else not raised
        reasoning = "; ".join(
            f"{path}: {_describe(value)}" + ("" if path not in checks else (" [pass]" if checks[path] else " [fail]"))
            for path, value in verdicts.items()
        )
        return GraderResult(
            passed=passed,
            score=(sum(checks.values()) / len(checks)) if checks else float(passed),
            score_max=1.0,
            metrics={EVALUATORS_KEY: verdicts, "checks": checks},
            reasoning=reasoning,
            agent_answer=answer,
        )


class EvaluationGrade:
    """The run's grade function: each unit graded as any eval's
    (:func:`~rayeval.unit.execution.grade_execution`), by the ``evaluations`` grader given the
    run's evaluators and the unit's log. A callable that raised or timed out gives an error row
    (status error/timeout) on which no evaluator runs: every evaluator counts it in
    ``num_errors``. The LLM-as-judge evaluators' model calls are the run's judge calls."""

    def __init__(
        self,
        evaluators: list[LocalEvaluator],
        *,
        name: str,
        file: dict[str, Any],
        version_id: str,
        grade_timeout: float = DEFAULT_GRADE_TIMEOUT_S,
    ):
        self.evaluators = evaluators
        self.name = name
        self.file = file
        self.version_id = version_id
        #: the evaluators run on a log in a grading process of its own (the log is hostile
        #: input: a crafted output can make an evaluator's regex run for ever), stopped after it
        self.grade_timeout = grade_timeout
        from .prompts import LLMJudge

        #: LLM-as-judge evaluators, whose model calls a batch run makes as judge calls of its own
        self.judges = [evaluator for evaluator in evaluators if isinstance(evaluator.fn, LLMJudge)]
        self.judged = bool(self.judges)

    def judge_requests(self, eval_: Eval, execution: EvalResult) -> Judgments:
        """The model calls of the LLM-as-judge evaluators for this execution (none are made)."""
        return judge_requests(
            self._unit_eval(eval_, execution, self.judges), execution, grade_timeout=self.grade_timeout
        )

    def __call__(self, eval_: Eval, execution: EvalResult, judgments: Judgments | None = None) -> EvalResult:
        """The unit's row; ``judgments``: the outcomes of :meth:`judge_requests`' calls (else the
        LLM-as-judge evaluators call their models here)."""
        if execution.outcome == "no_answer":  # cannot happen with DatapointCaller; an error if it does
            execution = execution.model_copy(
                update={"outcome": "error", "error_type": execution.error_type or "NoOutput"}
            )
        unit_eval = self._unit_eval(eval_, execution, self.evaluators)
        # without the judges' outcomes, its LLM judges call their models here, where the keys are
        bounded = judgments is not None or not self.judges
        timeout = self.grade_timeout if bounded else None
        return grade_execution(unit_eval, execution, grade_timeout=timeout, judgments=judgments)

    def _unit_eval(self, eval_: Eval, execution: EvalResult, evaluators: list[LocalEvaluator]) -> Eval:
        """``eval_`` graded by ``evaluators`` on this execution's log (the config holds the
        evaluators themselves: a grading process gets them pickled)."""
        config = {"evaluators": evaluators, "log": self.log(eval_, execution), "datapoint": self.datapoint(eval_)}
        return eval_.model_copy(update={"grader": GraderSpec.model_construct(type=EVALUATIONS_GRADER, config=config)})

    def log(self, eval_: Eval, execution: EvalResult) -> dict[str, Any]:
        extra = eval_.model_extra or {}
        answer = execution.agent_answer if isinstance(execution.agent_answer, dict) else {}
        assert execution.started_at and execution.finished_at, "the runner times every execution"
        usage = lift_metadata(execution)
        return {
            "output": answer.get("output"),
            "inputs": copy.deepcopy(extra.get("inputs") or {}),
            "messages": copy.deepcopy(extra.get("messages")),
            "error": None,
            "datapoint_id": eval_.id,
            "source_datapoint_id": eval_.id,
            "run_id": execution.run_id,
            "evaluation": self.name,
            "file": dict(self.file),
            "version_id": self.version_id,
            "start_time": execution.started_at.isoformat(),
            "end_time": execution.finished_at.isoformat(),
            "duration_s": execution.agent_s,
            # as the row stores them: the gateway's counts of a sandboxed callable's calls, a
            # prompt file's own account of the call rayeval made for it
            "cost_usd": usage.get("agent_cost_usd"),
            "input_tokens": usage.get("input_tokens"),
            "output_tokens": usage.get("output_tokens"),
        }

    @staticmethod
    def datapoint(eval_: Eval) -> dict[str, Any]:
        extra = eval_.model_extra or {}
        return {
            "id": eval_.id,
            "inputs": copy.deepcopy(extra.get("inputs") or {}),
            "messages": copy.deepcopy(extra.get("messages")),
            "target": copy.deepcopy(extra.get("target")),
        }
