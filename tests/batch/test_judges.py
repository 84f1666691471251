"""LLM-judged graders in a batch run: the judge calls are made by the run's judge actor, apart
from the agents (a slow judge holds no agent's slot), with the key the grading process never
has, against a judge on the loopback model server."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray

from rayeval import EvalFileError, batch
from rayeval.batch.summary import summarize
from rayeval.cli import main
from rayeval.report import read_units
from rayeval.storage import ResultStore
from tests.agents.fake_model_server import FakeModelServer
from tests.batch.conftest import read_invocations

REPO = Path(__file__).resolve().parents[2]
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


@pytest.fixture(scope="module")
def _slow_judge_server() -> Iterator[FakeModelServer]:
    with FakeModelServer(script=[], answer=lambda body: MET, delay_s=JUDGE_DELAY_S) as server:
        yield server


@pytest.fixture
def slow_judge(_slow_judge_server: FakeModelServer, monkeypatch: pytest.MonkeyPatch) -> FakeModelServer:
    """A judge that meets every criterion after JUDGE_DELAY_S; its key and endpoint are in the
    environment the embedded Ray's processes inherit. One server for the module: its tests'
    environments are alike, and share a Ray."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", _slow_judge_server.url)
    return _slow_judge_server


@pytest.fixture
def shared_ray(slow_judge: FakeModelServer, shared_ray: None) -> None:
    """The shared Ray, started once the judge's variables are set: its judge actor calls it."""


@pytest.mark.usefixtures("shared_ray")
def test_judge_calls_run_apart_from_the_agents_slots(tmp_path: Path, slow_judge: FakeModelServer) -> None:
    before = len(slow_judge.model_requests())
    invocations = tmp_path / "invocations.jsonl"
    summary = batch.run(
        str(_rubric_eval(tmp_path / "evals")),
        agent="tests.batch.agents:rationale_writer",
        agent_args={"log": str(invocations)},
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
    judge_calls = slow_judge.model_requests()[before:]
    assert len(judge_calls) == 8 and all("hERG" in json.dumps(call.body) for call in judge_calls)
    # With the judges holding the only agent slot, each agent would start after the previous
    # unit's judge replies (JUDGE_DELAY_S after they were asked); apart, the agents run on
    # while the first unit's judge calls are still out.
    first_reply = min(call.at for call in judge_calls) + JUDGE_DELAY_S
    starts = sorted(entry["start"] for entry in read_invocations(invocations))
    assert sum(start < first_reply for start in starts) >= 3, (starts, first_reply)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_a_judge_without_a_key_stops_the_run_before_any_agent_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an embedded Ray the judge actor has this process's environment: a judge without its
    key would make every unit a JudgeError after its agent ran, so the run stops first, naming
    the eval file, the field and the variable. A resume of a run with stored rows is refused
    before anything of it is touched."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    evals = _rubric_eval(tmp_path / "evals")
    out = tmp_path / "out"
    invocations = tmp_path / "invocations.jsonl"
    options = {"agent": "tests.batch.agents:rationale_writer", "agent_args": {"log": str(invocations)},
               "output": str(out), "run_id": "nokey", "isolation": "inline", "show_progress": False,
               "flush_seconds": 0.5}  # fmt: skip
    with pytest.raises(EvalFileError) as refused:
        batch.run(str(evals), **options)
    ((problem),) = refused.value.problems
    assert (problem.path, problem.field) == (str(evals / "herg.json"), "grader.config.model_id")
    assert problem.message == (
        "the rubric judge 'anthropic/claude-haiku-4-5' cannot be called: provider 'anthropic' needs an API key in the "
        "environment variable ANTHROPIC_API_KEY. It runs on this machine's Ray, with this environment: set the "
        "variable before the run, or name another judge in model_id"
    )
    assert not read_invocations(invocations) and not out.exists()

    with FakeModelServer(script=[], answer=lambda body: MET) as judge:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", judge.url)
        batch.run(str(evals), **options)
    stored = _files(out)
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(EvalFileError, match="ANTHROPIC_API_KEY"):
        batch.run(str(evals), resume=True, retry_errors=True, **options)
    assert _files(out) == stored and len(read_invocations(invocations)) == 1


@pytest.mark.slow  # a judge model that refuses: ~21 s on a loaded machine
def test_a_judge_that_refuses_is_a_judge_error_not_a_lost_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit whose judge gives no verdict is an error of the run (counted as one), not a failed
    answer; the run's own retries do not run its agent again (the judge calls were retried
    already), --retry-errors does, once the judge answers."""
    invocations = tmp_path / "invocations.jsonl"
    options = {
        "agent": "tests.batch.agents:rationale_writer",
        "agent_args": {"log": str(invocations)},
        "output": str(tmp_path / "out"),
        "run_id": "refused",
        "isolation": "inline",
        "show_progress": False,
        "flush_seconds": 0.5,
    }
    evals = str(_rubric_eval(tmp_path / "evals"))
    with FakeModelServer(script=[], answer=lambda body: MET) as judge:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-revoked-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", judge.url)
        judge.fail(401, count=2)  # both criteria's calls
        summary = batch.run(evals, retries=2, **options)
        rows = pd.read_parquet(tmp_path / "out" / "run_id=refused")
        assert list(rows["status"]) == ["error"] and list(rows["error_type"]) == ["JudgeError"]
        assert "HTTP 401" in rows["error_message"].iloc[0] and summary.errors == 1
        metrics = json.loads(rows["metrics_json"].iloc[0])
        assert metrics["judge_error"] == "fatal"
        assert len(read_invocations(invocations)) == 1  # not retried by the run

        batch.run(evals, resume=True, retry_errors=True, **options)
    rows = pd.read_parquet(tmp_path / "out" / "run_id=refused").sort_values("attempt")
    assert list(zip(rows["attempt"], rows["status"])) == [(1, "error"), (2, "passed")]


@pytest.mark.usefixtures("shared_ray")
def test_a_units_cost_is_its_agents_and_its_judges(
    tmp_path: Path, slow_judge: FakeModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each row says what its agent and its judge calls cost, and ``cost_usd`` is their sum:
    the run's summary and the report's Cost count both. A run stored before the split (no such
    columns) still reads, its judge cost null."""
    out = tmp_path / "out"
    summary = batch.run(
        str(_rubric_eval(tmp_path / "evals")), agent="tests.batch.agents:rationale_writer", agent_args={"cost": "0.5"},
        seeds=[1, 2], output=str(out), run_id="costs", isolation="inline", show_progress=False, flush_seconds=0.5,
    )  # fmt: skip
    # two criteria, each one reply of 1,000 input and 50 output tokens at $1 and $5 per million
    judge_cost = 2 * (1000 * 1.0 + 50 * 5.0) / 1e6
    rows = pd.read_parquet(out / "run_id=costs")
    assert rows["agent_cost_usd"].tolist() == [0.5, 0.5]
    assert rows["judge_cost_usd"].tolist() == pytest.approx([judge_cost] * 2)
    assert rows["cost_usd"].tolist() == pytest.approx([0.5 + judge_cost] * 2)
    assert [json.loads(m)["judge_cost_usd"] for m in rows["metrics_json"]] == pytest.approx([judge_cost] * 2)
    assert summary.models[0].total_cost_usd == pytest.approx(2 * (0.5 + judge_cost))
    assert f"total cost ${2 * (0.5 + judge_cost):.2f} (of which LLM judges ${2 * judge_cost:.4f})" in summary.text()

    assert main(["report", str(out), "--run", "costs", "--format", "json"]) == 0
    (reported,) = json.loads(capsys.readouterr().out)
    assert reported["Cost ($)"] == pytest.approx(0.5 + judge_cost)

    # a run stored before the columns: the same rows without them, as an older rayeval wrote them
    parts = [pq.read_table(part) for part in sorted((out / "run_id=costs").rglob("*.parquet"))]  # one or two
    old = pa.concat_tables(parts).drop_columns(["agent_cost_usd", "judge_cost_usd"])
    (out / "run_id=old" / "model=default").mkdir(parents=True)
    pq.write_table(old, out / "run_id=old" / "model=default" / "part-0.parquet")
    units = read_units(out, runs="old")
    assert units["judge_cost_usd"].isna().all() and units["cost_usd"].tolist() == pytest.approx([0.5 + judge_cost] * 2)
    old_summary = summarize(
        ResultStore(str(out)), "old", total_units=2, skipped=0, ran=2, started=datetime.now(timezone.utc)
    )
    assert old_summary.models[0].judge_cost_usd is None and "of which LLM judges" not in old_summary.text()
    assert main(["report", str(out), "--run", "old", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["Cost ($)"] == pytest.approx(0.5 + judge_cost)


@pytest.mark.slow
def test_a_judged_run_whose_workers_hold_every_cpu_still_judges(tmp_path: Path, slow_judge: FakeModelServer) -> None:
    """Units of a quarter CPU, four times as many as CPUs: the workers are sized to hold every
    CPU of the embedded Ray, and the judge actor, asking for none, still starts (one asking for
    a hundredth of a CPU never did: the run waited on it for ever)."""
    cpus = int(ray._private.utils.get_num_cpus())
    command = [
        sys.executable, "-m", "rayeval.cli", "run", str(_rubric_eval(tmp_path / "evals")),
        "--agent", "tests.batch.agents:rationale_writer", "--isolation", "inline", "--seeds", str(4 * cpus),
        "--output", str(tmp_path / "out"), "--run-id", "full", "--no-progress",
    ]  # fmt: skip
    done = subprocess.run(command, check=False, cwd=REPO, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(tmp_path / "out" / "run_id=full")
    assert len(rows) == 4 * cpus and (rows["status"] == "passed").all()


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (ray.exceptions.ActorDiedError(), "transient"),
        (
            ray.exceptions.RayTaskError("judge", "Traceback ...", UnicodeEncodeError("utf-8", "\ud800", 0, 1, "x")),
            "fatal",
        ),
    ],
    ids=["the judge actor died", "the judge call raised"],
)
def test_a_judge_call_is_out_of_reach_only_where_the_judge_actor_died(
    monkeypatch: pytest.MonkeyPatch, error: Exception, kind: str
) -> None:
    """A call that raised may have raised on its request (the answer in it): no excuse."""
    from rayeval.batch import judging
    from rayeval.batch.plan import Unit
    from rayeval.unit.result import EvalResult

    def failed(ref: object) -> None:
        raise error

    monkeypatch.setattr(judging.ray, "get", failed)
    calls = judging.JudgeCalls(concurrency=1)
    request = {"criterion_index": 0}
    calls.add(Unit("u", 0, "e", "m", 0, 0), 1, judging.JudgeWork(EvalResult(eval_id="e"), {"rubric": [request]}))
    calls.in_flight["ref"] = calls.waiting.popleft()
    judged = calls.finished("ref")
    assert judged is not None and judged.outcomes["rubric"][0]["kind"] == kind
