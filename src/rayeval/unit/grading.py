"""Grading an eval's answer in this process: its single grader, or each entry of its graders
list; and a grading process's side of a bounded grading (``grading_process``)."""

from __future__ import annotations

import base64
import dataclasses
import json
import pickle
from pathlib import Path
from typing import Any

from .._json import json_fallback
from ..evals.model import Eval, GraderSpec
from ..graders.judging import Judgments, collecting_judge_requests, judged
from ..graders.registry import GRADER_REGISTRY, get_grader, is_registered
from ..graders.result import GraderResult, result_problem

RESULT_FIELDS = tuple(field.name for field in dataclasses.fields(GraderResult))
#: the key of a grading reply whose verdict's ``agent_answer`` is the answer it was sent
ECHOED = "agent_answer_is_the_answer"


def grade_spec(spec: GraderSpec, answer: Any) -> GraderResult:
    """One grader entry; an unregistered type, or a grader whose result is malformed (a
    plugin's ``metrics=None``), is a configuration error, not an exception."""
    if not is_registered(spec.type):
        return _configuration_error(f"unknown grader type {spec.type!r}", f"Unknown grader type {spec.type!r}", answer)
    result = get_grader(spec.type).evaluate_answer(answer, spec.config)
    problem = result_problem(result)
    if problem is not None:
        why = f"grader {spec.type!r} returned an invalid result: {problem}"
        return _configuration_error(why, why, answer)
    return result


def _configuration_error(reason: str, reasoning: str, answer: Any) -> GraderResult:
    return GraderResult(
        passed=False,
        score=0.0,
        metrics={"configuration_error": reason},
        reasoning=reasoning,
        agent_answer=answer if isinstance(answer, dict) else None,
    )


def _entry_label(index: int, spec: GraderSpec) -> str:
    name = (spec.model_extra or {}).get("name")
    return str(name) if name else f"graders[{index}].{spec.type}"


def combine_entries(specs: list[GraderSpec], results: list[GraderResult], answer: Any) -> GraderResult:
    """Independent top-level entries: mean of normalized scores, passed only if all passed."""
    labels = [_entry_label(i, s) for i, s in enumerate(specs)]
    normalized = [r.normalized_score() for r in results]
    entries = [
        {
            "label": label,
            "type": spec.type,
            "passed": result.passed,
            "score": result.score,
            "score_max": result.score_max,
            "normalized_score": norm,
            "metrics": result.metrics,
        }
        for label, spec, result, norm in zip(labels, specs, results, normalized)
    ]
    metrics: dict[str, Any] = {"graders": entries}
    broken = [
        f"{label}: {r.metrics['configuration_error']}" for label, r in zip(labels, results) if r.is_configuration_error
    ]
    if broken:
        metrics["configuration_error"] = "; ".join(broken)
    unjudged = [(label, r) for label, r in zip(labels, results) if r.judge_failure is not None]
    if unjudged:  # as the first entry whose judge failed says
        label, first = unjudged[0]
        metrics["judge_error"] = first.metrics["judge_error"]
        metrics["grader_error"] = f"{label}: {first.judge_failure}"
    passed = all(r.passed for r in results)
    reasoning = "\n\n".join(
        f"[{label}] {'PASS' if r.passed else 'FAIL'}\n{r.reasoning}" for label, r in zip(labels, results)
    )
    return GraderResult(
        passed=passed and not broken,
        score=sum(normalized) / len(normalized),
        score_max=1.0,
        metrics=metrics,
        reasoning=reasoning,
        agent_answer=answer if isinstance(answer, dict) else None,
        field_scores=dict(zip(labels, normalized)),
    )


def grade_specs(specs: list[GraderSpec], answer: Any, *, single: bool) -> GraderResult:
    """Grade ``answer`` with an eval's grader entries: its one ``grader`` (``single``) or its
    ``graders`` list. Never raises for any JSON answer."""
    if single:
        return grade_spec(specs[0], answer)
    return combine_entries(specs, [grade_spec(s, answer) for s in specs], answer)


def grade(eval_: Eval, answer: Any) -> GraderResult:
    """Grade ``answer`` against ``eval_``. Never raises for any JSON answer."""
    return grade_specs(eval_.grader_specs, answer, single=eval_.grader is not None)


def grade_with_outcomes(
    specs: list[GraderSpec], answer: Any, *, single: bool, judgments: Judgments | None
) -> GraderResult:
    """``grade_specs`` given the outcomes of its LLM-judged graders' judge calls (``judgments``,
    see ``rayeval.graders.judging``); without them, those graders call their judge here."""
    with judged(judgments or {}):
        return grade_specs(specs, answer, single=single)


def collect_judge_requests(specs: list[GraderSpec], answer: Any, *, single: bool) -> Judgments:
    """The judge calls the LLM-judged graders among ``specs`` would make on ``answer``; none is made."""
    with collecting_judge_requests() as collected:
        grade_specs(specs, answer, single=single)
    return collected


def graded_request(call: dict[str, Any], work_dir: Path) -> str:
    """In a grading process: the reply to the request ``call["request"]`` (JSON text: grader
    entries ``specs`` or ``pickled``, ``single``, where its ``plugins`` are defined, ``answer``, and
    ``judgments`` or ``collect``): the verdict's fields, or the judge requests, as JSON text."""
    request = json.loads(call["request"])
    unregistered = [kind for kind, plugin in request["plugins"].items() if _defined_at(kind) != plugin]
    if unregistered:  # its module did not register it here: the caller grades it itself
        return json.dumps({"unregistered": unregistered})
    if request["pickled"]:  # the caller's own entries (its evaluators): trusted, never the agent's
        specs = pickle.loads(base64.b64decode(request["pickled"]))
    else:
        specs = [GraderSpec.model_validate(spec) for spec in request["specs"]]
    single, answer = bool(request["single"]), request["answer"]
    if request.get("collect"):  # the judge calls of LLM-judged graders, none made
        reply: dict[str, Any] = {"requests": collect_judge_requests(specs, answer, single=single)}
    else:
        result = grade_with_outcomes(specs, answer, single=single, judgments=request.get("judgments"))
        fields = {name: getattr(result, name) for name in RESULT_FIELDS}
        if answer is not None and fields["agent_answer"] is answer:  # the caller has it: not sent back
            fields["agent_answer"] = None
            reply = {"result": fields, ECHOED: True}
        else:
            reply = {"result": fields}
    return json.dumps(reply, default=json_fallback)


def _defined_at(kind: str) -> str | None:
    """Where the grader type ``kind`` registered here is defined, ``module:qualified name``."""
    if not is_registered(kind):
        return None
    grader = GRADER_REGISTRY[kind]
    return f"{grader.__module__}:{grader.__qualname__}"
