"""A model that refuses, end to end: ``rayeval run`` with the prompt agent against the loopback
server, the stored rows (failed, ``refusal`` true, the verdict as an artifact, the run summary),
rows stored before the column, and ``rayeval report``'s count of refusals per model."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rayeval.cli import main
from rayeval.report import read_units
from rayeval.storage import ResultStore
from rayeval.unit.run_summary import RunSummary
from tests.agents.fake_model_server import FakeModelServer

from .conftest import mc_answer

REPO = Path(__file__).resolve().parents[2]
MC_EVAL = "pbmc_fcgr3a_top_population"
DECLINED = "I can't help with that."


def refuses_the_mc_eval(body: dict) -> str | tuple[str, str]:
    """Refuses the multiple-choice eval (Anthropic's ``stop_reason: refusal``, OpenAI's
    refusal field), answers the others as ``mc_answer`` does."""
    text = json.dumps(body.get("messages"))
    return (DECLINED, "refusal") if "FCGR3A" in text else mc_answer(body)


@pytest.fixture
def refusing(keys: None):
    with FakeModelServer(script=[], answer=refuses_the_mc_eval, base_input_tokens=1200, base_output_tokens=300) as srv:
        yield srv


@pytest.mark.usefixtures("shared_ray")
@pytest.mark.parametrize(("model", "path", "provider", "code"), [
    ("anthropic/claude-haiku-4-5", "", "anthropic", "stop_reason_refusal"),
    pytest.param("openai/gpt-4o", "/v1", "openai", "refusal_content", marks=pytest.mark.slow),
])  # fmt: skip
def test_a_refusal_is_a_failed_row_with_its_verdict(
    tmp_path: Path,
    refusing: FakeModelServer,
    capsys: pytest.CaptureFixture[str],
    model: str,
    path: str,
    provider: str,
    code: str,
) -> None:
    out = tmp_path / "out"
    command = [
        "run", str(REPO / "evals"), "--agent", "prompt", "--models", model,
        "--agent-arg", f"base_url={refusing.url}{path}", "--output", str(out), "--run-id", "refused", "--no-progress",
    ]  # fmt: skip
    assert main(command) == 0
    rows = {row["eval_id"]: row for row in ResultStore(out).read_table("refused").to_pylist()}
    refused = rows.pop(MC_EVAL)
    assert refused["status"] == "failed" and refused["refusal"] is True
    verdict = json.loads(json.loads(refused["artifacts_json"])["refusal_verdict.json"])
    assert (verdict["provider"], verdict["code"]) == (provider, code) and DECLINED in verdict["excerpt"]
    metadata = json.loads(refused["metadata_json"])
    assert metadata["refusal"] == verdict
    summary = RunSummary.model_validate(metadata["run_summary"])
    assert (summary.refusal, summary.n_turns, summary.usage.input_tokens) == ("detected", 1, 1200)
    errored = [
        (row["eval_id"], row["error_type"], row["error_traceback"]) for row in rows.values() if row["status"] == "error"
    ]
    assert rows and not errored, errored
    assert all(row["refusal"] is False for row in rows.values())
    assert all(json.loads(row["metadata_json"])["run_summary"]["refusal"] == "not_detected" for row in rows.values())

    capsys.readouterr()
    assert main(["report", str(out), "--format", "json"]) == 0
    (line,) = json.loads(capsys.readouterr().out)
    assert (line["model_name"], line["Refusals"], line["Errors"]) == (model, 1, 0)


@pytest.mark.usefixtures("shared_ray")
def test_rows_stored_before_the_column_read_it_as_null(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Other agents' rows: the trusted side's run summary (the measured duration, refusal not
    evaluated), ``refusal`` null; a part written before the column reads it as null too."""
    out = tmp_path / "out"
    command = [
        "run", str(REPO / "evals"), "--agent", "sleep", "--agent-arg", "seconds=0", "--isolation", "inline",
        "--output", str(out), "--run-id", "new", "--no-progress",
    ]  # fmt: skip
    assert main(command) == 0
    new = ResultStore(out).read_table("new").to_pylist()
    assert new and all(row["refusal"] is None for row in new)
    summaries = [RunSummary.model_validate(json.loads(row["metadata_json"])["run_summary"]) for row in new]
    assert all(s.refusal == "not_evaluated" and s.duration_s is not None and s.cost_usd is None for s in summaries)

    part = next((out / "run_id=new").rglob("*.parquet"))
    (out / "run_id=old" / "model=default").mkdir(parents=True)
    pq.write_table(pq.read_table(part).drop_columns(["refusal"]), out / "run_id=old" / "model=default" / "p.parquet")
    units = read_units(out, runs="old")
    assert len(units) == len(new) and units["refusal"].isna().all()
    capsys.readouterr()
    assert main(["report", str(out), "--run", "old", "--format", "json"]) == 0
    assert [line["Refusals"] for line in json.loads(capsys.readouterr().out)] == [0]
