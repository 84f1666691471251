"""Where the judge calls of LLM-judged graders are made.

By default a grader calls its judge itself (``grade(eval_, answer)`` in a notebook). A batch run
grades in two passes instead: the first *collects* the judge requests every LLM-judged grader of
an eval would send (nothing is called), the run makes them as judge tasks of their own (outside
the agent's slot, and outside the grading subprocess, which holds no credentials), and the second
pass grades *with* their outcomes.  Requests and outcomes are plain JSON; a grader's requests are
keyed by their content, so the second pass finds its outcomes without knowing where in a
composite the grader sits.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from .registry import named_grader_types

JudgeRequests = list[dict[str, Any]]
#: a grader's requests' key -> those requests (collected), or -> their outcomes (to grade with)
Judgments = dict[str, list[dict[str, Any]]]

_collected: ContextVar[Judgments | None] = ContextVar("rayeval_judge_requests", default=None)
_outcomes: ContextVar[Judgments | None] = ContextVar("rayeval_judge_outcomes", default=None)


#: grader types that call an LLM judge
JUDGED_GRADER_TYPES = frozenset({"rubric"})


def uses_judges(specs: Any) -> bool:
    """Whether grader entries ``specs`` (composite children included) hold an LLM-judged grader."""
    return any(kind in JUDGED_GRADER_TYPES for kind in named_grader_types(specs))


class Deferred:
    """The judge calls are being collected: the grader's result of this pass is discarded."""


DEFERRED = Deferred()


def requests_key(requests: JudgeRequests) -> str:
    return hashlib.sha256(json.dumps(requests, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def judge_outcomes(
    requests: JudgeRequests, judge: Callable[[JudgeRequests], list[dict[str, Any]]]
) -> list[dict[str, Any]] | Deferred:
    """The outcomes of a grader's judge ``requests``: those given for them (second pass),
    DEFERRED while collecting (first pass), else ``judge(requests)`` called here."""
    key = requests_key(requests)
    given = _outcomes.get()
    if given is not None and key in given:
        return given[key]
    collected = _collected.get()
    if collected is not None:
        collected[key] = requests
        return DEFERRED
    return judge(requests)


@contextmanager
def collecting_judge_requests() -> Iterator[Judgments]:
    """Within it, LLM-judged graders call no judge: their requests land in the dict yielded."""
    collected: Judgments = {}
    token = _collected.set(collected)
    try:
        yield collected
    finally:
        _collected.reset(token)


@contextmanager
def judged(outcomes: Judgments) -> Iterator[None]:
    """Within it, LLM-judged graders take their outcomes from ``outcomes`` (by their requests' key)."""
    token = _outcomes.set(outcomes)
    try:
        yield
    finally:
        _outcomes.reset(token)


def judgments_cost_usd(judgments: Judgments) -> float | None:
    """What the judge calls behind ``judgments`` (their outcomes) cost, in USD: None when there
    were none, or when one's cost is unknown (its model is missing from the price table).  A
    call that could not be made cost nothing."""
    costs = [_outcome_cost(outcome) for outcomes in judgments.values() for outcome in outcomes]
    if not costs or None in costs:
        return None
    return sum(cost for cost in costs if cost is not None)


def _outcome_cost(outcome: dict[str, Any]) -> float | None:
    if "usage" in outcome:  # a rubric criterion's, failed or not
        return outcome["usage"].get("cost_usd")
    if "error" in outcome:  # a model call (an LLM evaluator's) that failed
        return 0.0
    return (outcome.get("metadata") or {}).get("cost_usd")  # a model call's reply
