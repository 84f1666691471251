"""The run summary every agent row carries: what a harness reports, what the trusted side fills
in for any other agent, and the row's ``refusal`` it gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rayeval.agents.replay import replay_agent
from rayeval.unit.context import AgentContext
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
