"""A unit's limits on its model calls, as ``rayeval run-one`` takes them: the gateway refuses
the call made once a limit is reached, the agent ends as it will, its answer is graded and the
row names the limit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rayeval.cli import main
from tests.agents.fake_model_server import FakeModelServer

GRADER = {"type": "numeric_tolerance", "config": {"ground_truth": {"value": 1},
          "tolerances": {"value": {"type": "absolute", "value": 0}}}}  # fmt: skip


@pytest.fixture
def eval_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An eval, and the scripted server as this process's Anthropic (each call: 1,000 tokens
    in, 50 out, 0.00375 USD at claude-sonnet-4-5's price)."""
    with FakeModelServer(script=[], answer=lambda body: "ok") as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
        path = tmp_path / "e.json"
        path.write_text(json.dumps({"id": "e", "task": "Answer.", "grader": GRADER}))
        yield path


def run_one(eval_file: Path, capsys: pytest.CaptureFixture[str], *options: str) -> dict[str, Any]:
    main(["run-one", str(eval_file), "--agent", "tests.gateway.limit_agents:call_until_refused", *options])
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("option", "calls", "limit"),
    [
        ("--limit-model-calls=3", 3, "model_calls"),
        ("--limit-tokens=2500", 3, "tokens"),
        ("--limit-cost=0.005", 2, "cost"),
    ],
)
def test_the_call_past_a_limit_is_refused_and_the_answer_left_is_graded(
    eval_file: Path, capsys: pytest.CaptureFixture[str], option: str, calls: int, limit: str
) -> None:
    result = run_one(eval_file, capsys, option)
    assert result["passed"] and (result["n_model_calls"], result["limit_reached"]) == (calls, limit)
    assert result["metadata"]["made"] == calls
    assert (
        result["metadata"]["refused_with"].startswith("400: ")
        and "reached its limit" in result["metadata"]["refused_with"]
    )
    assert result["input_tokens"] == 1000 * calls and result["cost_usd"] == pytest.approx(0.00375 * calls)


def test_without_limits_the_agent_calls_as_it_likes(eval_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_one(eval_file, capsys)
    assert (result["n_model_calls"], result["limit_reached"]) == (20, None)


def test_a_unit_ended_by_its_time_limit_names_it(eval_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["run-one", str(eval_file), "--agent", "sleep", "--agent-arg", "seconds=30", "--timeout", "1"])
    result = json.loads(capsys.readouterr().out)
    assert (result["status"], result["limit_reached"]) == ("timeout", "time")
