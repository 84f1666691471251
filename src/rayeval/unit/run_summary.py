"""A unit's run summary: what one agent run took and said, with one meaning for every harness.

Every agent row's metadata holds ``run_summary`` (:class:`RunSummary`, versioned): the run's
duration in seconds, its model turns (model calls) and steps (tool calls), its token usage,
its cost with where that cost comes from, and whether the model refused. Version 2's usage
is each provider's own counts: Anthropic's ``input_tokens`` leaves out the cache reads and
writes (``cache_read_tokens``, ``cache_write_tokens``), OpenAI's includes the cache reads
(version 1 counted every prompt token in ``input_tokens``, as the gateway does); a run that
left no events has null turns and steps and was not searched for a refusal. A harness that
knows these (the program agents, the prompt agent, replay) reports its summary; for any other
agent the trusted side fills in what it measured (the duration) and leaves the rest null,
the refusal ``not_evaluated``. A summary that is not one is replaced the same way.

Where the unit's calls went through the model gateway (not a replay of recorded runs), the
summary is the trusted side's whatever the agent reports: the measured duration, the usage
the gateway counted (each provider's own counts: the cache reads and writes of Anthropic's
calls taken out of ``input_tokens`` again), the cost it priced them at, the refusal it relayed
(as the row's ``refusal`` column), the models that answered; only the steps and the turns
(no more than the gateway's model calls) are the agent's. The agent's own valid summary is
kept as ``agent_reported_summary``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._json import amount_in, count_in
from ..gateway.server import ModelUsage
from ..models.prices import PRICING_VERSION
from ..models.types import Count, Usage

RUN_SUMMARY_VERSION: Literal[2] = 2
RefusalStatus = Literal["detected", "not_detected", "not_evaluated"]
#: where the gateway's cost of a unit's calls comes from: it prices them with the shipped table
#: (``Gateway`` is given no other), by the rule of ``PRICING_VERSION``
GATEWAY_COST_SOURCE = "rayeval_price_table"
#: the metadata key of the agent's own summary, where the trusted side made the row's
AGENT_REPORTED = "agent_reported_summary"


class RunSummary(BaseModel):
    """``metadata["run_summary"]``. ``cost_source``: ``provider_reported`` (the program said
    it), ``rayeval_price_table`` / ``configured_prices`` (computed from tokens, with
    ``pricing_version``), ``litellm_pricing``, ``response_cache`` (a cached reply: 0),
    ``recorded`` (replayed); None without a cost."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1, 2] = RUN_SUMMARY_VERSION  # an agent's version-1 summary is kept as it is
    duration_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    n_turns: Count = None
    n_steps: Count = None
    usage: Usage = Field(default_factory=Usage)
    cost_usd: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    cost_source: str | None = None
    pricing_version: str | None = None
    refusal: RefusalStatus = "not_evaluated"
    #: the model that answered the unit's last model call, as the gateway saw it (Claude Code's
    #: refusal fallback may have moved it off the requested one); None: no gateway, or no call
    effective_model: str | None = None
    #: each model's tokens, as the gateway counted its calls (``input_tokens``: every prompt token)
    usage_by_model: dict[str, Usage] = Field(default_factory=dict)


def run_summary(
    *,
    duration_s: Any,
    n_turns: Any = None,
    n_steps: Any = None,
    usage: Mapping[str, Any] | None = None,
    cost_usd: Any = None,
    cost_source: Any = None,
    pricing_version: Any = None,
    refusal: RefusalStatus = "not_evaluated",
) -> dict[str, Any]:
    """A harness's summary as metadata holds it; a count or amount that is not one (negative,
    NaN, a string: what a program's events may hold) is left null."""
    cost = amount_in(cost_usd)
    return RunSummary(
        duration_s=amount_in(duration_s),
        n_turns=count_in(n_turns),
        n_steps=count_in(n_steps),
        usage=Usage(**{name: count_in((usage or {}).get(name)) for name in Usage.model_fields}),
        cost_usd=cost,
        cost_source=cost_source if cost is not None and isinstance(cost_source, str) else None,
        pricing_version=pricing_version if cost is not None and isinstance(pricing_version, str) else None,
        refusal=refusal,
    ).model_dump()


def refusal_status(evaluated: bool, detected: bool) -> RefusalStatus:
    if not evaluated:
        return "not_evaluated"
    return "detected" if detected else "not_detected"


def with_run_summary(metadata: dict[str, Any], measured_s: float, counted: ModelUsage | None = None) -> dict[str, Any]:
    """``metadata`` with a valid ``run_summary``: where the gateway ``counted`` the unit's calls,
    the trusted side's (:func:`counted_summary`), the agent's own valid one kept as
    :data:`AGENT_REPORTED`; else the agent's, or the one the trusted side makes
    (``measured_s``: the agent's run as timed here)."""
    try:
        reported: RunSummary | None = RunSummary.model_validate(metadata["run_summary"])
    except (KeyError, ValidationError):
        reported = None
    if counted is None:
        summary = reported or RunSummary(duration_s=max(measured_s, 0.0))
        return {**metadata, "run_summary": summary.model_dump()}
    kept = {AGENT_REPORTED: reported.model_dump()} if reported is not None else {}
    return {**metadata, **kept, "run_summary": counted_summary(counted, measured_s, reported).model_dump()}


def counted_summary(counted: ModelUsage, measured_s: float, reported: RunSummary | None) -> RunSummary:
    """The summary of a run whose calls the gateway ``counted``: every number and label the
    trusted side knows is its own; only the steps, and the turns (at most the model calls
    counted), are what the agent ``reported``."""
    turns = reported.n_turns if reported is not None else None
    priced = counted.cost_usd is not None
    return RunSummary(
        duration_s=max(measured_s, 0.0),
        n_turns=None if turns is None else min(turns, counted.n_model_calls),
        n_steps=reported.n_steps if reported is not None else None,
        usage=provider_counts(counted),
        cost_usd=counted.cost_usd,
        cost_source=GATEWAY_COST_SOURCE if priced else None,
        pricing_version=PRICING_VERSION if priced else None,
        refusal="detected" if counted.refusals else "not_detected",
        effective_model=counted.last_model,
        usage_by_model={model: seen.usage for model, seen in counted.by_model.items()},
    )


def provider_counts(counted: ModelUsage) -> Usage:
    """The gateway's counts as each provider counts (a version-2 summary's): Anthropic's
    ``input_tokens`` without its cache reads and writes."""
    usage = counted.usage.model_copy()
    if usage.input_tokens is not None:
        usage.input_tokens = max(usage.input_tokens - counted.cache_apart_tokens, 0)
    return usage


def refusal_column(metadata: dict[str, Any]) -> bool | None:
    """The row's ``refusal``: True or False where the run was searched for one, else None."""
    summary = metadata.get("run_summary")
    status = summary.get("refusal") if isinstance(summary, dict) else None
    return {"detected": True, "not_detected": False}.get(status) if isinstance(status, str) else None
