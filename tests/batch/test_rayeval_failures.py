"""rayeval's own failure on a unit, on its worker: the unit's error row, never a lost worker's."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from rayeval import batch
from rayeval.evals import Eval
from rayeval.gateway.transcript import MODEL_CALLS_ARTIFACT
from rayeval.graders.judging import Judgments
from rayeval.record import RAYEVAL_FAILURE
from rayeval.unit.execution import judge_requests
from rayeval.unit.result import EvalResult
from tests.agents.fake_model_server import FakeModelServer

from .conftest import write_mc_evals


def _tripping_grade(eval_: Eval, execution: EvalResult) -> EvalResult:
    raise RuntimeError("the grading tripped")


@pytest.mark.usefixtures("shared_ray")
def test_a_unit_rayeval_fails_on_is_its_error_stored_at_once(tmp_path: Path) -> None:
    """Its row says rayeval failed on it, on its worker's node, at attempt 1: once a task error,
    it was a row seen_by ray, which the run's retries ran again and a resume went on from."""
    evals = write_mc_evals(tmp_path / "evals", ["e1"])
    config = batch.BatchConfig(
        evals=[str(evals)], agent="answers-b", output=str(tmp_path / "out"), run_id="r", retries=2,
        isolation="inline", show_progress=False, retry_backoff_s=0.1,
    )  # fmt: skip
    batch.run_batch(config, agent=lambda prompt, work_dir: {"answer": "B"}, grade=_tripping_grade)
    (row,) = pd.read_parquet(tmp_path / "out" / "run_id=r").itertuples()
    assert (row.status, row.error_type, row.attempt) == ("error", RAYEVAL_FAILURE, 1)
    assert row.error_message == "rayeval failed on this unit: RuntimeError: the grading tripped"
    assert "error_details" not in json.loads(row.metadata_json) and row.node != "unknown"


#: the scripted server's reply (1,000 tokens in, 50 out) at claude-sonnet-4-5's price (3 and 15
#: USD per million), and the two judge calls of the rubric at claude-haiku-4-5's (1 and 5)
AGENT_CALL_USD = (1000 * 3 + 50 * 15) / 1e6
JUDGE_CALLS_USD = 2 * (1000 * 1 + 50 * 5) / 1e6
MET = json.dumps({"met": True, "rationale": "present"})


class _JudgedThenTripping:
    """A run's grade function that hands its judge calls to the run (those of the eval's own
    LLM-judged graders), then trips on every unit, its judge calls made or none to make."""

    judged = True

    def judge_requests(self, eval_: Eval, execution: EvalResult) -> Judgments:
        return judge_requests(eval_, execution)

    def __call__(self, eval_: Eval, execution: EvalResult, judgments: Judgments | None = None) -> EvalResult:
        raise RuntimeError("the grading tripped")


def _evals(folder: Path) -> Path:
    """A rubric eval (two criteria, each one judge call) and one without LLM-judged graders."""
    folder.mkdir(parents=True)
    rubric = {"type": "rubric", "config": {"answer_field": "rationale", "model_id": "anthropic/claude-haiku-4-5",
              "criteria": [{"description": "states that hERG is required", "score_delta": 1},
                           {"description": "says why", "score_delta": 1}]}}  # fmt: skip
    (folder / "judged.json").write_text(json.dumps({"id": "judged", "task": "Why?", "grader": rubric}))
    choice = {"type": "multiple_choice", "config": {"correct_answer": "B"}}
    (folder / "plain.json").write_text(json.dumps({"id": "plain", "task": "A or B?", "grader": choice}))
    return folder


@pytest.mark.slow  # end to end through rayeval run: CI runs it in its slow phase
def test_a_unit_rayeval_fails_on_after_its_agent_ran_keeps_what_its_calls_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent made a model call through its gateway, then rayeval tripped grading it: in
    the worker's grading (``plain``) or in its second pass, after the run made its judge calls
    (``judged``). Its row is rayeval's failure, with the call as the gateway counted it, and
    the judge calls made: none of the cost is lost, nothing of the agent's own is kept."""
    with FakeModelServer(script=[], answer=lambda body: MET) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        config = batch.BatchConfig(
            evals=[str(_evals(tmp_path / "evals"))], agent="tests.batch.agents:rationale_after_a_call",
            output=str(tmp_path / "out"), run_id="r", isolation="process", show_progress=False,
        )  # fmt: skip
        batch.run_batch(config, grade=_JudgedThenTripping())
        served = [request.body["model"] for request in server.model_requests()]
    assert sorted(served) == ["claude-haiku-4-5"] * 2 + ["claude-sonnet-4-5"] * 2
    rows = pd.read_parquet(tmp_path / "out" / "run_id=r").set_index("eval_id")
    for eval_id, judge_usd in [("plain", math.nan), ("judged", JUDGE_CALLS_USD)]:  # plain: none made
        row = rows.loc[eval_id]
        assert (row.status, row.error_type, row.attempt) == ("error", RAYEVAL_FAILURE, 1), row.error_message
        assert row.error_message == "rayeval failed on this unit: RuntimeError: the grading tripped"
        assert (row.n_model_calls, row.input_tokens, row.output_tokens) == (1, 1000, 50)
        assert row.agent_cost_usd == pytest.approx(AGENT_CALL_USD)
        assert row.judge_cost_usd == pytest.approx(judge_usd, nan_ok=True)
        assert row.cost_usd == pytest.approx(AGENT_CALL_USD + (0.0 if math.isnan(judge_usd) else judge_usd))
        assert row.answer_json is None and row.agent_s > 0
        assert list(json.loads(row.artifacts_json)) == [MODEL_CALLS_ARTIFACT]
        assert json.loads(row.metadata_json)["gateway"]["n_model_calls"] == 1
