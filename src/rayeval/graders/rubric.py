"""rubric: an LLM judge decides, one criterion at a time, whether a free-text answer meets each
criterion of a rubric; the score is the points of the met criteria over the positive points.

The semantics of latch-eval-tools 0.4.54's ``rubric`` grader (its ``LLM_GRADER_REGISTRY``):
the same config, judge prompt, reading of the judge's reply, score, pass threshold, truncation
and length penalty. The judge is called through :mod:`rayeval.models` (its retries, costs and
request limit); the README's grader section lists where this differs from the reference.

Grading is three steps, so that the model calls can run somewhere else (another process, a
Ray task) while the grader itself knows nothing of where: :func:`prepare_rubric` (config and
answer to judge requests, no network), :func:`judge_criterion` (one request to one outcome:
the model call, JSON in and out, never raises; it lives in :mod:`.judging`, the judge path the
AI evaluators of ``evaluations.run`` share) and :func:`score_rubric` (outcomes to the
GraderResult).
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from ..models.calls import check_model
from ..models.providers import ModelError, split_name
from ._common import agent_failure, config_error, echo_answer, lookup_dotted
from .base import Grader
from .judging import (
    CriterionVerdict,
    Deferred,
    FailureKind,
    JudgeFailure,
    JudgeOutcome,
    JudgeReply,
    JudgeRequest,
    describe_errors,
    judge_criterion,  # noqa: F401 - the second step, as the README names it
    judge_outcomes,
)
from .registry import register_grader
from .result import GraderResult

DEFAULT_JUDGE_MODEL = "anthropic/claude-sonnet-5"
DEFAULT_MODEL_PARAMS: dict[str, Any] = {"thinking": {"type": "adaptive", "display": "omitted"}}
DEFAULT_TRUNCATION_LENGTH = 512
SYSTEM_PROMPT = "You are a teacher grading a test response vs a rubric."
#: a model id without a provider goes to Anthropic, as every reference judge does
BARE_MODEL_PROVIDER = "anthropic"
REQUEST_TIMEOUT_S = 40.0
MAX_TOKENS_WITH_THINKING = 16_000
MAX_TOKENS = 4_096

#: which failure a grading reports when criteria fail differently: a transient one first, so
#: a caller retries the grading later instead of recording it as broken for good
FAILURE_PRIORITY: tuple[FailureKind, ...] = ("transient", "fatal", "unparseable")


def _non_blank(value: str) -> str:
    stripped = value.strip()
    if not stripped:
        raise ValueError("must be a non-empty string")
    return stripped


NonBlank = Annotated[str, Field(min_length=1), AfterValidator(_non_blank)]


def judge_model_name(model_id: str) -> str:
    """``provider/model`` for rayeval.models; a bare model id is an Anthropic model."""
    if "/" in model_id:
        return model_id
    return f"{BARE_MODEL_PROVIDER}/{model_id}"


def judge_models(specs: Any, field: str) -> Iterator[tuple[str, str]]:
    """``(field, judge model)`` of every rubric grader in grader entries ``specs`` (as JSON,
    composite children included), the field as ``field`` continues:
    ``grader.config.children[1].config.model_id``."""
    if isinstance(specs, dict):
        config = specs.get("config")
        if specs.get("type") == "rubric" and isinstance(config, dict):
            model_id = config.get("model_id", DEFAULT_JUDGE_MODEL)
            if isinstance(model_id, str) and model_id.strip():
                yield f"{field}.config.model_id", judge_model_name(model_id.strip())
        for key, value in specs.items():
            yield from judge_models(value, f"{field}.{key}")
    elif isinstance(specs, list):
        for index, value in enumerate(specs):
            yield from judge_models(value, f"{field}[{index}]")


def check_judge_key(model: str) -> None:
    """:class:`ModelError` naming the variable when the judge ``model``'s API key is not in this
    process's environment (where its calls read it): what calling it would find, found before."""
    check_model(model, {}, environment=True, key_alone=True)


def _known_model(model_id: str) -> str:
    try:
        split_name(judge_model_name(model_id))
    except ModelError as exc:
        raise ValueError(str(exc)) from None
    return model_id


class RubricCriterion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: NonBlank
    score_delta: float = Field(allow_inf_nan=False)


class RubricLengthPenalty(BaseModel):
    """A capped penalty on the full answer's length in characters (before truncation)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    allowed_chars: int = Field(gt=0)
    ramp_percent: float = Field(gt=0.0, allow_inf_nan=False)
    max_penalty: float = Field(ge=0.0, le=1.0, allow_inf_nan=False)
    curve: Literal["linear", "power_0_5"] = "linear"


class RubricConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    answer_field: NonBlank
    criteria: list[RubricCriterion] = Field(min_length=1)
    model_id: Annotated[NonBlank, AfterValidator(_known_model)] = DEFAULT_JUDGE_MODEL
    model_params: dict[str, Any] = Field(default_factory=lambda: copy.deepcopy(DEFAULT_MODEL_PARAMS))
    truncation_length: int = Field(default=DEFAULT_TRUNCATION_LENGTH, gt=0)
    passing_reward_threshold: float = Field(default=1.0, ge=0.0, le=1.0)
    length_penalty: RubricLengthPenalty | None = None

    @field_validator("criteria")
    @classmethod
    def _some_positive_points(cls, criteria: list[RubricCriterion]) -> list[RubricCriterion]:
        if max_score(criteria) <= 0:
            raise ValueError("criteria must include at least one positive score_delta (max_score must be > 0)")
        return criteria

    @field_validator("model_params")
    @classmethod
    def _readable_timeout(cls, params: dict[str, Any]) -> dict[str, Any]:
        timeout = params.get("timeout", REQUEST_TIMEOUT_S)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        return params


@dataclass(frozen=True)
class RubricPlan:
    """A valid config and an answer that has the field: the judge calls still to make."""

    config: RubricConfig
    answer: Any
    answer_length_chars: int
    requests: list[JudgeRequest]


# ------------------------------------------------------------------ step 1: config and answer


def prepare_rubric(answer: Any, config: dict) -> RubricPlan | GraderResult:
    """The judge requests, or the result when there is nothing to judge (a configuration
    error, or an answer without the field). Makes no model call."""
    try:
        parsed = RubricConfig.model_validate(config)
    except ValidationError as exc:
        return config_error(describe_errors(exc), answer)
    found, value = lookup_dotted(answer, parsed.answer_field)
    if not found:
        return agent_failure(
            f"Rubric: FAIL\n\n  x Agent answer missing required field: {parsed.answer_field}",
            answer,
            metrics={"answer_field": parsed.answer_field},
        )
    full_response = str(value)
    response = full_response[: parsed.truncation_length]
    requests = [judge_request(parsed, response, criterion, index) for index, criterion in enumerate(parsed.criteria)]
    return RubricPlan(parsed, answer, len(full_response), requests)


#: a tag of the prompt's own (``response``, ``criterion``; opening or closing, case and spaces
#: aside) written in the response: its ``<`` is written ``&lt;`` there (see :func:`criterion_prompt`)
_PROMPT_TAG = re.compile(r"<(?=\s*/?\s*(?:response|criterion)(?:[\s/>]|$))", re.IGNORECASE)


def criterion_prompt(response: str, criterion: RubricCriterion, index: int) -> str:
    """The reference's user prompt, word for word: the judge sees exactly what it saw, but for a
    response that writes the prompt's own tags (closing its ``<response>`` to add a criterion of
    its own, met): their ``<`` is written ``&lt;``, so the response cannot end before its end."""
    response = _PROMPT_TAG.sub("&lt;", response)
    return (
        f"<response>\n{response}\n</response>\n\n"
        f'<criterion index="{index}">\n{criterion.description}\n</criterion>\n\n'
        "Report met=true exactly when the condition stated in this criterion is true of the response. "
        "Report met=false when it is not true. The label describes whether the condition occurred, "
        "not whether the response is good overall.\n\n"
        "Keep the rationale under 256 characters."
    )


def judge_request(config: RubricConfig, response: str, criterion: RubricCriterion, index: int) -> JudgeRequest:
    model = judge_model_name(config.model_id)
    params = config.model_params
    return JudgeRequest(
        criterion_index=index,
        model=model,
        system=SYSTEM_PROMPT,
        prompt=criterion_prompt(response, criterion, index),
        max_tokens=MAX_TOKENS_WITH_THINKING if "thinking" in params else MAX_TOKENS,
        extra_body=structured_output_fields(split_name(model)[0].sdk, params),
        timeout_s=float(params.get("timeout", REQUEST_TIMEOUT_S)),
    )


def structured_output_fields(sdk: str, params: dict[str, Any]) -> dict[str, Any]:
    """Request fields that hold the judge to :class:`JudgeReply`'s schema: Anthropic's
    ``output_config.format`` (with the other ``output_config`` keys of ``model_params``) and
    ``thinking``; OpenAI's ``response_format``."""
    schema = JudgeReply.model_json_schema()
    if sdk == "openai":
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "judgment", "schema": schema}}}
    output_config: dict[str, Any] = {"format": {"type": "json_schema", "schema": schema}}
    configured = params.get("output_config")
    if isinstance(configured, dict):
        output_config.update({key: value for key, value in configured.items() if key != "format"})
    fields: dict[str, Any] = {"output_config": output_config}
    if "thinking" in params:
        fields["thinking"] = params["thinking"]
    return fields


# ------------------------------------------------------------------ step 3: the score


def max_score(criteria: Sequence[RubricCriterion]) -> float:
    return sum(criterion.score_delta for criterion in criteria if criterion.score_delta > 0)


def length_penalty(answer_length_chars: int, penalty: RubricLengthPenalty | None) -> float:
    """0 up to ``allowed_chars``, then rising (linearly, or as a square root) to
    ``max_penalty`` over ``ramp_percent`` percent of ``allowed_chars`` more."""
    if penalty is None or answer_length_chars <= penalty.allowed_chars:
        return 0.0
    ramp_chars = penalty.allowed_chars * penalty.ramp_percent / 100.0
    overlong = min((answer_length_chars - penalty.allowed_chars) / ramp_chars, 1.0)
    if penalty.curve == "power_0_5":
        overlong = overlong**0.5
    return penalty.max_penalty * overlong


def usage_metrics(outcomes: Sequence[JudgeOutcome]) -> dict[str, Any]:
    """The judge calls' totals, for reports: requests, tokens and cost (None: not priced)."""
    costs = [outcome.usage.cost_usd for outcome in outcomes]
    return {
        "judge_requests": sum(outcome.usage.requests for outcome in outcomes),
        "judge_input_tokens": sum(outcome.usage.input_tokens for outcome in outcomes),
        "judge_output_tokens": sum(outcome.usage.output_tokens for outcome in outcomes),
        "judge_cost_usd": None if None in costs else sum(cost for cost in costs if cost is not None),
    }


@dataclass(frozen=True)
class RubricScore:
    field_scores: dict[str, float]
    raw_score: float
    max_score: float
    reward_before_penalty: float
    penalty_applied: float
    reward: float
    passed: bool


def compute_score(plan: RubricPlan, verdicts: Sequence[CriterionVerdict]) -> RubricScore:
    """Met criteria's points over the positive points, clamped to [0, 1], less the length
    penalty; passed at the threshold (inclusive)."""
    config = plan.config
    field_scores = {f"criterion_{v.index}": config.criteria[v.index].score_delta if v.met else 0.0 for v in verdicts}
    raw_score = sum(field_scores.values())
    best = max_score(config.criteria)
    before = min(max(raw_score / best, 0.0), 1.0)
    reward = max(0.0, before - length_penalty(plan.answer_length_chars, config.length_penalty))
    passed = reward >= config.passing_reward_threshold
    return RubricScore(field_scores, raw_score, best, before, before - reward, reward, passed)


def score_rubric(plan: RubricPlan, outcomes: Sequence[JudgeOutcome]) -> GraderResult:
    """The verdict from one outcome per criterion (in any order). A criterion without a
    verdict fails the grading with a ``grader_error`` (not a score of the answer)."""
    count = len(plan.config.criteria)
    indices = sorted(outcome.index for outcome in outcomes)
    if indices != list(range(count)):
        raise ValueError(f"judge outcomes for criteria {indices}, expected one for each of 0..{count - 1}")
    failures = [outcome for outcome in outcomes if isinstance(outcome, JudgeFailure)]
    if failures:
        return judge_failed(plan, failures, usage_metrics(outcomes))
    verdicts = sorted((o for o in outcomes if isinstance(o, CriterionVerdict)), key=lambda v: v.index)
    score = compute_score(plan, verdicts)
    return GraderResult(
        passed=score.passed,
        score=score.reward,
        score_max=1.0,
        metrics=verdict_metrics(plan, verdicts, score),
        reasoning=verdict_reasoning(plan, verdicts, score),
        agent_answer=echo_answer(plan.answer),
        field_scores=score.field_scores,
    )


def verdict_metrics(plan: RubricPlan, verdicts: Sequence[CriterionVerdict], score: RubricScore) -> dict[str, Any]:
    """The reference's metrics, and the judge calls' usage."""
    config = plan.config
    metrics = {
        "answer_field": config.answer_field,
        "model_id": config.model_id,
        "model_params": config.model_params,
        "truncation_length": config.truncation_length,
        "passing_reward_threshold": config.passing_reward_threshold,
        "raw_score": score.raw_score,
        "max_score": score.max_score,
        "reward": score.reward,
        "parse_attempts": sum(v.usage.replies for v in verdicts),
        "criterion_parse_attempts": {f"criterion_{v.index}": v.usage.replies for v in verdicts},
        "finish_reason": {f"criterion_{v.index}": v.stop_reason for v in verdicts},
        "grading_transport": f"{split_name(judge_model_name(config.model_id))[0].sdk}_api",
        "judgments": [{"index": v.index, "met": v.met, "rationale": v.rationale} for v in verdicts],
        **usage_metrics(verdicts),
    }
    if config.length_penalty is not None:
        metrics.update(
            {
                "answer_length_chars": plan.answer_length_chars,
                "length_penalty_config": config.length_penalty.model_dump(),
                "length_penalty_applied": score.penalty_applied,
                "reward_before_length_penalty": score.reward_before_penalty,
            }
        )
    return metrics


def verdict_reasoning(plan: RubricPlan, verdicts: Sequence[CriterionVerdict], score: RubricScore) -> str:
    config = plan.config
    lines = [
        f"Rubric: {'PASS' if score.passed else 'FAIL'}",
        f"  reward: {score.reward:.4f} (raw_score={score.raw_score}, max_score={score.max_score})",
    ]
    if config.length_penalty is not None:
        lines.append(f"  length penalty: {score.penalty_applied:.4f} (answer_length_chars={plan.answer_length_chars})")
    for verdict in verdicts:
        criterion = config.criteria[verdict.index]
        marker = "+" if verdict.met else "x"
        lines.append(f"  {marker} [{verdict.index}] {criterion.description} (delta={criterion.score_delta})")
        if verdict.rationale:
            lines.append(f"      rationale: {verdict.rationale}")
    return "\n".join(lines)


def judge_failed(plan: RubricPlan, failures: list[JudgeFailure], usage: dict[str, Any]) -> GraderResult:
    """The grading could not be done: the first failure by :data:`FAILURE_PRIORITY` is the
    ``grader_error``, every failure is in ``judge_failures``."""
    first = min(failures, key=lambda failure: (FAILURE_PRIORITY.index(failure.kind), failure.index))
    return GraderResult(
        passed=False,
        score=0.0,
        score_max=1.0,
        metrics={
            "grader_error": f"rubric judge ({first.kind}): {first.message}",
            "judge_error": first.kind,
            "judge_failures": [failure.model_dump(exclude={"usage"}) for failure in failures],
            "answer_field": plan.config.answer_field,
            "model_id": plan.config.model_id,
            **usage,
        },
        reasoning=f"Rubric: not graded, the judge failed ({first.kind}): {first.message}",
        agent_answer=echo_answer(plan.answer),
    )


_OUTCOME: TypeAdapter[JudgeOutcome] = TypeAdapter(JudgeOutcome)


@register_grader("rubric")
class RubricGrader(Grader):
    """An LLM judge checks each criterion; passed when the reward reaches the threshold."""

    def _evaluate(self, answer: Any, config: Any) -> GraderResult:
        plan = prepare_rubric(answer, config)
        if isinstance(plan, GraderResult):
            return plan
        outcomes = judge_outcomes([request.model_dump(mode="json") for request in plan.requests])
        if isinstance(outcomes, Deferred):
            return agent_failure("Rubric: the judge's verdicts are still to come", answer)
        return score_rubric(plan, [_OUTCOME.validate_python(outcome) for outcome in outcomes])
