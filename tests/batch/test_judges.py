"""LLM-judged graders in a batch run: the judge calls are made by the run's judge actor, apart
from the agents (a slow judge holds no agent's slot), with the key the grading subprocess never
has, against a judge on the loopback model server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from rayeval import batch
from tests.agents.fake_model_server import FakeModelServer
from tests.batch.conftest import read_invocations

JUDGE_DELAY_S = 1.0
MET = json.dumps({"met": True, "rationale": "present"})


def _rubric_eval(folder: Path) -> Path:
    folder.mkdir(parents=True)
    grader = {
        "type": "rubric",
        "config": {
            "answer_field": "rationale",
            "criteria": [
                {"description": "states that hERG is required", "score_delta": 1},
                {"description": "names the unit", "score_delta": 1},
            ],
            "model_id": "anthropic/claude-haiku-4-5",
        },
    }
    (folder / "herg.json").write_text(json.dumps({"id": "herg", "task": "Why?", "grader": grader}))
    return folder


@pytest.fixture
def slow_judge(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeModelServer]:
    """A judge that meets every criterion after JUDGE_DELAY_S; its key and endpoint are in the
    environment the embedded Ray's processes inherit."""
    with FakeModelServer(script=[], answer=lambda body: MET, delay_s=JUDGE_DELAY_S) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        yield server


def test_judge_calls_run_apart_from_the_agents_slots(
    tmp_path: Path, invocation_log: Path, slow_judge: FakeModelServer
) -> None:
    summary = batch.run(
        str(_rubric_eval(tmp_path / "evals")),
        agent="tests.batch.agents:rationale_writer",
        seeds=[1, 2, 3, 4],
        output=str(tmp_path / "out"),
        run_id="judged",
        max_concurrency=1,  # one agent at a time
        judge_concurrency=8,
        isolation="inline",
        show_progress=False,
        flush_seconds=0.5,
    )
    rows = pd.read_parquet(tmp_path / "out" / "run_id=judged")
    assert summary.stored_rows == 4 and (rows["status"] == "passed").all(), rows[["status", "reasoning"]]
    metrics = [json.loads(text) for text in rows["metrics_json"]]
    assert all(m["judge_requests"] == 2 and "judge_error" not in m for m in metrics), metrics
    judge_calls = slow_judge.model_requests()
    assert len(judge_calls) == 8 and all("hERG" in json.dumps(call.body) for call in judge_calls)
    # With the judges holding the only agent slot, each agent would start after the previous
    # unit's judge replies (JUDGE_DELAY_S after they were asked); apart, the agents run on
    # while the first unit's judge calls are still out.
    first_reply = min(call.at for call in judge_calls) + JUDGE_DELAY_S
    starts = sorted(entry["start"] for entry in read_invocations(invocation_log))
    assert sum(start < first_reply for start in starts) >= 3, (starts, first_reply)


def test_a_judge_without_a_key_is_a_judge_error_not_a_lost_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, invocation_log: Path
) -> None:
    """A unit whose judge gives no verdict is an error of the run (counted as one), not a failed
    answer; the run's own retries do not run its agent again (the judge calls were retried
    already), --retry-errors does, once a judge can be reached."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    options = {
        "agent": "tests.batch.agents:rationale_writer",
        "output": str(tmp_path / "out"),
        "run_id": "nokey",
        "isolation": "inline",
        "show_progress": False,
        "flush_seconds": 0.5,
    }
    evals = str(_rubric_eval(tmp_path / "evals"))
    summary = batch.run(evals, retries=2, **options)
    rows = pd.read_parquet(tmp_path / "out" / "run_id=nokey")
    assert list(rows["status"]) == ["error"] and list(rows["error_type"]) == ["JudgeError"]
    assert "ANTHROPIC_API_KEY" in rows["error_message"].iloc[0] and summary.errors == 1
    metrics = json.loads(rows["metrics_json"].iloc[0])
    assert metrics["judge_error"] == "fatal"
    assert len(read_invocations(invocation_log)) == 1  # not retried by the run

    with FakeModelServer(script=[], answer=lambda body: MET) as judge:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", judge.url)
        batch.run(evals, resume=True, retry_errors=True, **options)
    rows = pd.read_parquet(tmp_path / "out" / "run_id=nokey").sort_values("attempt")
    assert list(zip(rows["attempt"], rows["status"])) == [(1, "error"), (2, "passed")]
