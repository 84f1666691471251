"""The one path of an LLM judge's calls, for the rubric grader and ``evaluations.run``'s AI
evaluators alike: a judge request is plain JSON (a rubric criterion's :class:`JudgeRequest`, or
an evaluator's ``prompt`` request, see ``rayeval.models.calls``), :func:`judge_call` turns any
of them into its JSON outcome, and :func:`judge_outcomes` says where the calls are made.

By default a grader calls its judge itself (``grade(eval_, answer)`` in a notebook). A batch run
grades in two passes instead: the first *collects* the judge requests every LLM-judged grader of
an eval would send (nothing is called), the run makes them as judge tasks of their own (outside
the agent's slot, and outside the grading process, which holds no credentials), and the second
pass grades *with* their outcomes.  Requests and outcomes are plain JSON; a grader's requests are
keyed by their content, so the second pass finds its outcomes without knowing where in a
composite the grader sits.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from .._messages import field_problems
from ..models.providers import ModelError
from ..models.types import ChatMessage, ModelOutput, RetryPolicy
from .registry import named_grader_types

if TYPE_CHECKING:  # the SDKs load with the first judge call
    from ..models.model import Model

#: judge replies read per criterion before an unreadable or refused reply fails the grading
JUDGE_MAX_REPLIES = 4
PARSE_RETRY_BASE_S = 0.5
PARSE_RETRY_MAX_S = 8.0
PARSE_RETRY_JITTER_S = 0.5
#: rate limits, overloads, 5xx and connection errors: full backoff up to 20 s, or retry-after
JUDGE_RETRY_POLICY = RetryPolicy(
    max_attempts=8, backoff_s=2.0, max_backoff_s=20.0, max_retry_after_s=30.0, max_total_s=120.0
)
#: judge calls a grader makes at once in its own process (a rubric's criteria)
MAX_PARALLEL_CALLS = 16
#: stop reasons that carry no verdict (Anthropic, then OpenAI's names)
NO_VERDICT_STOPS = frozenset({"refusal", "max_tokens", "length", "content_filter"})
RAW_REPLY_LIMIT = 20_000

FailureKind = Literal["transient", "fatal", "unparseable"]

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


def judge_outcomes(requests: JudgeRequests) -> list[dict[str, Any]] | Deferred:
    """The outcomes of a grader's judge ``requests``: those given for them (second pass),
    DEFERRED while collecting (first pass), else their :func:`judge_call` made here."""
    key = requests_key(requests)
    given = _outcomes.get()
    if given is not None and key in given:
        return given[key]
    collected = _collected.get()
    if collected is not None:
        collected[key] = requests
        return DEFERRED
    return judge_here(requests)


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


# ------------------------------------------------------------------ a rubric criterion's call


# What the judge must answer, as JSON; its schema is sent as the reference sends it, so the
# class has no docstring (pydantic would send it as the schema's description).
class JudgeReply(BaseModel):
    model_config = ConfigDict(extra="forbid", title="RubricCriterionGraderOutput")

    met: bool
    rationale: str = ""


class JudgeRequest(BaseModel):
    """One criterion's judge call, all of it plain JSON so it can be sent to another process."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    criterion_index: int
    model: str
    system: str
    prompt: str
    max_tokens: int
    extra_body: dict[str, Any]
    timeout_s: float


class JudgeUsage(BaseModel):
    """What the judge calls of one criterion took: replies read, HTTP requests sent, tokens, cost."""

    model_config = ConfigDict(frozen=True)

    replies: int = 0
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    #: None once a reply's cost is unknown (a model missing from the price table)
    cost_usd: float | None = 0.0

    def plus(self, output: ModelOutput) -> JudgeUsage:
        cost = None if self.cost_usd is None or output.cost_usd is None else self.cost_usd + output.cost_usd
        return JudgeUsage(
            replies=self.replies + 1,
            requests=self.requests + output.attempts,
            input_tokens=self.input_tokens + (output.input_tokens or 0),
            output_tokens=self.output_tokens + (output.output_tokens or 0),
            cost_usd=cost,
        )


class CriterionVerdict(BaseModel):
    kind: Literal["verdict"] = "verdict"
    index: int
    met: bool
    rationale: str
    stop_reason: str | None
    usage: JudgeUsage


class JudgeFailure(BaseModel):
    """No verdict: the judge was unreachable (``transient``: worth a later retry), refused the
    request (``fatal``: a bad request, key or model), or never gave a readable verdict."""

    kind: FailureKind
    index: int
    message: str
    #: a transient failure whose last try the judge did not answer in its time: the answer it
    #: read may have brought that about (asking it to write at length)
    timed_out: bool = False
    stop_reason: str | None = None
    raw_reply: str | None = None
    usage: JudgeUsage


JudgeOutcome = CriterionVerdict | JudgeFailure


def describe_errors(exc: ValidationError) -> str:
    """Every problem as ``field: message`` (``criteria[0].score_delta: ...``), joined by ``; ``."""
    return "; ".join(map(str, field_problems(exc)))


def judge_criterion(request: JudgeRequest) -> JudgeOutcome:
    """Ask the judge about one criterion until it gives a readable verdict (at most
    :data:`JUDGE_MAX_REPLIES` replies); transient HTTP errors are retried by the model layer
    under :data:`JUDGE_RETRY_POLICY`. Never raises."""
    index = request.criterion_index
    usage = JudgeUsage()
    try:
        model = _judge_model(request.model, request.timeout_s, _client_environment())
    except ModelError as exc:
        return JudgeFailure(kind="fatal", index=index, message=f"criterion {index}: {exc}", usage=usage)
    messages = [ChatMessage(role="system", content=request.system), ChatMessage(role="user", content=request.prompt)]
    while True:
        try:
            output = model.generate(messages, max_tokens=request.max_tokens, extra_body=request.extra_body)
        except ModelError as exc:
            kind: FailureKind = "transient" if exc.transient else "fatal"
            timed_out = exc.call is not None and exc.call.timed_out
            message = f"criterion {index}: {exc}"
            return JudgeFailure(kind=kind, index=index, message=message, timed_out=timed_out, usage=usage)
        except Exception as exc:  # noqa: BLE001 - the request (the answer in it) may be what failed: never out of reach
            message = f"criterion {index}: {type(exc).__name__}: {exc}"
            return JudgeFailure(kind="fatal", index=index, message=message, usage=usage)
        usage = usage.plus(output)
        reply = read_reply(output)
        if isinstance(reply, JudgeReply):
            return CriterionVerdict(
                index=index, met=reply.met, rationale=reply.rationale, stop_reason=output.stop_reason, usage=usage
            )
        if usage.replies >= JUDGE_MAX_REPLIES:
            return JudgeFailure(
                kind="unparseable",
                index=index,
                message=f"criterion {index}: no readable verdict in {usage.replies} judge replies: {reply}",
                stop_reason=output.stop_reason,
                raw_reply=output.text[:RAW_REPLY_LIMIT],
                usage=usage,
            )
        time.sleep(parse_retry_delay_s(usage.replies - 1))


def _client_environment() -> tuple[tuple[str, str], ...]:
    """The variables a model client reads its key and endpoint from, as they are now."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.endswith(("_API_KEY", "_BASE_URL"))))


@functools.lru_cache(maxsize=32)
def _judge_model(name: str, timeout_s: float, environment: tuple[tuple[str, str], ...]) -> Model:
    """One client per judge model, timeout and key/endpoint variables in a process: an SDK
    client is costly to make, and a judge task makes many calls."""
    from ..models.model import Model

    return Model(name, timeout_s=timeout_s, retry_policy=JUDGE_RETRY_POLICY)


def read_reply(output: ModelOutput) -> JudgeReply | str:
    """The judge's verdict, or what is wrong with its reply."""
    if output.stop_reason in NO_VERDICT_STOPS:
        return f"the judge stopped with stop_reason={output.stop_reason!r}"
    try:
        return JudgeReply.model_validate_json(output.text)
    except ValidationError as exc:
        return f"not a {{met, rationale}} object: {describe_errors(exc)}"


def parse_retry_delay_s(retry: int) -> float:
    """The wait before asking again after an unreadable reply: a bad reply is not a busy
    server, so the waits are short."""
    return min(PARSE_RETRY_BASE_S * 2**retry, PARSE_RETRY_MAX_S) + random.uniform(0, PARSE_RETRY_JITTER_S)


# ------------------------------------------------------------------ the calls


def judge_call(request: dict[str, Any]) -> dict[str, Any]:
    """One judge request's outcome, as JSON; never raises for a judge's failure."""
    from ..models.calls import PROMPT_REQUEST, run_prompt_request  # the SDKs and the response cache

    if request.get("kind") == PROMPT_REQUEST:
        return run_prompt_request(request)
    return judge_criterion(JudgeRequest.model_validate(request)).model_dump(mode="json")


def unmade_judge_call(request: dict[str, Any], message: str, kind: FailureKind = "transient") -> dict[str, Any]:
    """The outcome, as JSON, of a judge request that could not be made at all (a rubric
    criterion's is a ``transient`` failure, worth a later retry, where the judge was out of
    reach; ``fatal`` where the request itself failed)."""
    from ..models.calls import PROMPT_REQUEST

    if request.get("kind") == PROMPT_REQUEST:
        return {"error": message}
    index = request.get("criterion_index", 0)
    failure = JudgeFailure(kind=kind, index=index, message=f"criterion {index}: {message}", usage=JudgeUsage())
    return failure.model_dump(mode="json")


def judge_here(requests: JudgeRequests) -> list[dict[str, Any]]:
    """Every request's outcome, the calls made in parallel threads of this process."""
    with ThreadPoolExecutor(max_workers=max(1, min(len(requests), MAX_PARALLEL_CALLS))) as pool:
        return list(pool.map(judge_call, requests))
