"""A row's model and harness come from the run's configuration, not from what the agent says."""

from __future__ import annotations

import json
from pathlib import Path

from rayeval.agents.labels import row_labels
from rayeval.batch.plan import plan_units
from rayeval.batch.rows import row_from_result
from rayeval.evals import Eval
from rayeval.unit.result import EvalResult


def _trials(path: Path, pairs: list[tuple[str, str]]) -> str:
    lines = [
        json.dumps({"eval_id": "e", "model": model, "harness": harness, "trial": 1, "answer": {}})
        for model, harness in pairs
    ]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_replay_model_at_harness_names_both(tmp_path: Path) -> None:
    trials = _trials(tmp_path / "t.jsonl", [("solo", "mini-swe-agent"), ("duo", "claude-code"), ("duo", "codex")])
    assert row_labels("replay", "duo@codex", {"trials": trials}) == ("duo", "codex")
    # one recorded harness: it need not be named
    assert row_labels("replay", "solo", {"trials": trials}) == ("solo", "mini-swe-agent")
    # several, or no readable trials: the agent's name, the same for every unit of the model
    assert row_labels("replay", "duo", {"trials": trials}) == ("duo", "replay")
    assert row_labels("replay", "solo", {"trials": str(tmp_path / "missing.jsonl")}) == ("solo", "replay")


def test_other_agents_keep_the_model_as_given_and_their_name_as_harness() -> None:
    # Vertex AI model names carry an @version: part of the name
    assert row_labels("claude-code", "claude-sonnet-4@20250514", {}) == ("claude-sonnet-4@20250514", "claude-code")
    assert row_labels("my_agents:run", "gpt-4o", {}) == ("gpt-4o", "my_agents:run")


def test_a_harness_the_agent_reports_does_not_label_its_row(tmp_path: Path) -> None:
    eval_ = Eval.model_validate(
        {"id": "e", "task": "t", "grader": {"type": "multiple_choice", "config": {"correct_answer": "B"}}}
    )
    unit = plan_units([eval_], ["gpt-4o"], [1], "my_agents:run")[0]
    stamp = "2026-01-01T00:00:00Z"
    for status in ("passed", "error"):
        result = EvalResult(eval_id="e", status=status, passed=status == "passed", harness="leaderboard-topper",
                            metadata={"harness": "leaderboard-topper"}, started_at=stamp, finished_at=stamp)  # fmt: skip
        row = row_from_result(
            result, unit=unit, eval_=eval_, run_id="r", agent="my_agents:run", agent_args={}, attempt=1, node="n"
        )
        assert (row.model, row.harness) == ("gpt-4o", "my_agents:run")
        assert json.loads(row.metadata_json)["harness"] == "leaderboard-topper"  # kept, as the agent's claim
