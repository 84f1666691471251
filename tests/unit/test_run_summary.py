"""The run summary every agent row carries: what a harness reports, what the trusted side fills
in for any other agent or where the gateway counted the unit's calls, and the row's ``refusal``
it gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rayeval.agents.replay import replay_agent
from rayeval.gateway.server import ModelCalls, ModelUsage
from rayeval.models.prices import PRICING_VERSION
from rayeval.models.types import Usage
from rayeval.unit.context import AgentContext
from rayeval.unit.execution import reported_fields
from rayeval.unit.result import EvalResult
from rayeval.unit.run_summary import RunSummary, refusal_column, run_summary, with_run_summary


def test_an_agent_without_a_summary_gets_the_measured_duration_only() -> None:
    metadata = with_run_summary({"cost_usd": 3.0, "n_turns": 4}, 1.5)
    assert metadata["cost_usd"] == 3.0  # the agent's own keys are kept
    assert metadata["run_summary"] == RunSummary(duration_s=1.5).model_dump()
    assert metadata["run_summary"]["refusal"] == "not_evaluated" and refusal_column(metadata) is None


@pytest.mark.parametrize(
    "reported",
    [
        "detected",
        {"version": 3, "refusal": "detected"},
        {"version": 1, "refusal": "maybe"},
        {"version": 1, "n_turns": -1},
        {"version": 1, "duration_s": float("nan")},
        {"version": 1, "extra_key": 1},
    ],
)
def test_a_summary_that_is_not_one_is_replaced(reported: object) -> None:
    metadata = with_run_summary({"run_summary": reported}, 2.0)
    assert metadata["run_summary"] == RunSummary(duration_s=2.0).model_dump()
    assert refusal_column(metadata) is None


@pytest.mark.parametrize(("status", "column"), [("detected", True), ("not_detected", False), ("not_evaluated", None)])
def test_a_harness_summary_is_kept_and_gives_the_refusal_column(status: str, column: bool | None) -> None:
    reported = run_summary(duration_s=3, n_turns=2, usage={"input_tokens": 10}, refusal=status)  # type: ignore[arg-type]
    metadata = with_run_summary({"run_summary": reported}, 99.0)
    assert metadata["run_summary"] == reported and metadata["run_summary"]["duration_s"] == 3.0
    assert refusal_column(metadata) is column


def test_a_harness_summary_of_version_1_is_kept_as_it_is() -> None:
    """Version 1 counted every prompt token in ``input_tokens``: its version says so."""
    reported = {**run_summary(duration_s=3, usage={"input_tokens": 170, "cache_read_tokens": 60}), "version": 1}
    metadata = with_run_summary({"run_summary": reported}, 99.0)
    assert metadata["run_summary"] == reported
    assert run_summary(duration_s=1)["version"] == 2


def test_what_a_program_reports_wrongly_is_left_null() -> None:
    summary = run_summary(
        duration_s=-1,
        n_turns=True,
        n_steps="3",
        usage={"input_tokens": -5, "output_tokens": 7, "reasoning_tokens": 1.5},
        cost_usd=float("inf"),
        cost_source="provider_reported",
        pricing_version=1,
    )
    assert summary["duration_s"] is None and summary["n_turns"] is None and summary["n_steps"] is None
    assert summary["usage"] == {
        "input_tokens": None,
        "output_tokens": 7,
        "cache_read_tokens": None,
        "cache_write_tokens": None,
        "reasoning_tokens": None,
    }
    assert (summary["cost_usd"], summary["cost_source"], summary["pricing_version"]) == (None, None, None)


def test_replay_reports_the_recorded_run(tmp_path: Path) -> None:
    trials = tmp_path / "trials.jsonl"
    row = {"eval_id": "e", "model": "m", "trial": 1, "answer": {"x": 1}, "duration_s": 12.5, "cost_usd": 0.25}
    trials.write_text(json.dumps({**row, "input_tokens": 100, "n_turns": 3, "refusal": True}) + "\n")
    context = AgentContext(eval_id="e", model="m", seed=1, args={"trials": str(trials)})
    summary = RunSummary.model_validate(replay_agent("task", tmp_path, context)["metadata"]["run_summary"])
    assert (summary.duration_s, summary.n_turns, summary.usage.input_tokens) == (12.5, 3, 100)
    assert (summary.cost_usd, summary.cost_source, summary.refusal) == (0.25, "recorded", "detected")


#: the summary review13's agent forged: a cost labelled as rayeval's, tokens, a duration, a
#: refusal, turns and steps of its choosing
FORGED = run_summary(
    duration_s=0.1,
    n_turns=7,
    n_steps=4,
    usage={"input_tokens": 1, "output_tokens": 1},
    cost_usd=1e-6,
    cost_source="rayeval_price_table",
    pricing_version="2026-01-01",
    refusal="detected",
)


def counted_calls(refusals: list[str] | None = None) -> ModelUsage:
    """Three calls the gateway counted: 1,000 prompt tokens each on Anthropic's wire protocol, of
    which 300 read from the cache and 100 written to it (it counts them among the prompt tokens)."""
    usage = Usage(input_tokens=3000, output_tokens=150, cache_read_tokens=900, cache_write_tokens=300)
    sonnet = ModelCalls(n_model_calls=3, usage=usage, cost_usd=0.01)
    return ModelUsage(
        n_model_calls=3,
        usage=usage,
        cache_apart_tokens=1200,
        cost_usd=0.01,
        refusals=refusals or [],
        by_model={"claude-sonnet-4-5": sonnet},
        last_model="claude-sonnet-4-5",
    )


@pytest.mark.parametrize("refusals", [[], ["I can't help with that."]])
def test_where_the_gateway_counted_the_summary_is_the_trusted_sides(refusals: list[str]) -> None:
    """Every number and label the trusted side knows is its own; the agent's summary is kept
    under a name that says whose it is; only its steps, and its turns up to the model calls
    counted, are taken."""
    metadata = with_run_summary({"run_summary": FORGED}, 42.5, counted_calls(refusals))
    summary = RunSummary.model_validate(metadata["run_summary"])
    assert (summary.duration_s, summary.n_turns, summary.n_steps) == (42.5, 3, 4)
    assert summary.usage == Usage(input_tokens=1800, output_tokens=150, cache_read_tokens=900, cache_write_tokens=300)
    priced = (summary.cost_usd, summary.cost_source, summary.pricing_version)
    assert priced == (0.01, "rayeval_price_table", PRICING_VERSION)
    assert summary.refusal == ("detected" if refusals else "not_detected")
    assert metadata["agent_reported_summary"] == FORGED
    execution = EvalResult(
        eval_id="e", metadata={"run_summary": FORGED}, agent_s=42.5, model_usage=counted_calls(refusals)
    )
    assert reported_fields(execution)["refusal"] is bool(refusals)  # the column and the summary agree


def test_where_the_gateway_counted_an_agent_without_a_summary_gets_the_trusted_one() -> None:
    counted = counted_calls().model_copy(update={"cost_usd": None})  # a model without a price
    metadata = with_run_summary({"run_summary": "forged"}, 2.0, counted)
    summary = RunSummary.model_validate(metadata["run_summary"])
    assert (summary.duration_s, summary.n_turns, summary.n_steps, summary.refusal) == (2.0, None, None, "not_detected")
    assert (summary.cost_usd, summary.cost_source, summary.pricing_version) == (None, None, None)
    assert summary.usage.input_tokens == 1800 and "agent_reported_summary" not in metadata


def test_a_replays_summary_is_the_recorded_runs_though_the_gateway_stood_in_between() -> None:
    execution = EvalResult(eval_id="e", metadata={"run_summary": FORGED}, replayed=True, model_usage=counted_calls())
    reported = reported_fields(execution)
    assert reported["metadata"]["run_summary"] == FORGED and reported["refusal"] is True
