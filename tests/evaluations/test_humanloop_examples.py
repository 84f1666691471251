"""The three ``evaluations.run`` examples of Humanloop's "Run Evaluation" page
(https://humanloop.com/docs/sdk/run-evaluation), each called with the arguments the page gives
it, ``humanloop.evaluations.run`` being rayeval's: an arbitrary flow function, a prompt and a
dataset stored under their paths, and a prompt defined in code. Their model calls (the prompt's,
the "Semantic similarity" judge's) reach the loopback model server through OPENAI_BASE_URL, as
the examples pass no connection options; the embedded Ray of the module sees that environment."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from rayeval import evaluations
from tests.agents.fake_model_server import FakeModelServer

# where the examples call the Humanloop client's evaluations.run
humanloop = SimpleNamespace(evaluations=evaluations)

SIMILARITY = "Example Evaluators/AI/Semantic similarity"


def reply(body: dict) -> str:
    """The similarity judge rates 4; any other call is the evaluated prompt, which answers."""
    text = "\n".join(m["content"] for m in body["messages"] if isinstance(m.get("content"), str))
    if "Rate how similar" in text:
        return "Close in meaning.\n4"
    return "Machine learning is a field of AI in which programs learn from data."


@pytest.fixture(scope="module")
def server() -> Iterator[FakeModelServer]:
    with (
        FakeModelServer(script=[], answer=reply, base_input_tokens=500, base_output_tokens=20) as srv,
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setenv("OPENAI_API_KEY", "sk-test-key-for-the-loopback-server")
        patch.setenv("OPENAI_BASE_URL", f"{srv.url}/v1")
        yield srv


@pytest.fixture
def shared_ray(server: FakeModelServer, shared_ray: None) -> None:
    """The module's embedded Ray, started once the model server's variables are set: its
    workers make the model calls."""


@pytest.fixture(autouse=True)
def _in_a_scratch_folder(
    shared_ray: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)  # the examples write to the default output, ./rayeval-results
    caplog.set_level(logging.WARNING)


def _calls(server: FakeModelServer, since: int) -> list[dict]:
    return [r.body for r in server.model_requests()[since:]]


def _judged(body: dict) -> bool:
    return "Rate how similar" in json.dumps(body)


def test_1_an_arbitrary_flow_function_with_datapoints_without_a_target(
    server: FakeModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The flow's datapoint has messages and no target: the similarity judge cannot judge it.
    The run goes on (Humanloop's hosted evaluators judge what they can), says so at start,
    records that judgment as not applicable, and counts it; Latency judges as usual."""
    before = len(server.model_requests())

    def my_flow_function(messages):
        return "Response based on messages"

    evaluation = humanloop.evaluations.run(
        name="Custom Flow Evaluation",
        type="flow",
        file={"path": "Custom/Flow", "callable": my_flow_function},
        evaluators=[{"path": SIMILARITY}, {"path": "Example Evaluators/Code/Latency"}],
        dataset={
            "path": "Test/Dataset",
            "datapoints": [{"messages": [{"role": "user", "content": "Test question 1"}]}],
        },
    )

    warned = [r.getMessage() for r in caplog.records if "not applicable" in r.getMessage()]
    assert warned == [
        (
            f"evaluations.run: evaluator {SIMILARITY!r} needs a target, and datapoints[0] of dataset 'Test/Dataset' "
            "has none: its judgment is recorded as not applicable (no target)"
        )
    ]
    similarity, latency = evaluation.checks
    assert (similarity.path, similarity.score, similarity.num_judgments) == (SIMILARITY, None, 0)
    assert similarity.num_not_applicable == 1 and similarity.num_errors == 0
    assert latency.num_judgments == 1 and latency.score is not None and latency.score >= 0
    stats = {s.evaluator: s for s in evaluation.stats.run_stats[0].evaluator_stats}
    assert (stats[SIMILARITY].num_nulls, stats[SIMILARITY].num_not_applicable, stats[SIMILARITY].total_logs) == (
        1,
        1,
        1,
    )
    assert "n/a" in evaluation.report
    assert not _calls(server, before)  # no judge was asked what it could not judge
    rows = pd.read_parquet("rayeval-results", filters=[("run_id", "==", evaluation.run_id)])
    (row,) = rows.to_dict("records")
    assert json.loads(row["answer_json"]) == {"output": "Response based on messages"}
    assert json.loads(row["metrics_json"])["evaluators"][SIMILARITY] == {"not_applicable": "no target"}
    assert row["status"] == "passed"  # nothing failed: the one check that could run had no threshold


def test_2_a_prompt_and_a_dataset_stored_on_the_platform(server: FakeModelServer) -> None:
    """``file={"path": "Existing/Prompt"}`` and ``dataset={"path": "Existing/Dataset"}`` name a
    prompt and a dataset stored earlier under the results root (a run given them in full
    stores them): the prompt is called per datapoint, judged, and its cost recorded."""
    evaluations.run(
        "store them",
        {"path": "Existing/Prompt", "version": {"model": "openai/gpt-4o-mini", "template": "Define {{term}}."}},
        [{"path": "Example Evaluators/Code/Length"}],
        {"path": "Existing/Dataset", "datapoints": [
            {"inputs": {"term": "machine learning"}, "target": {"output": "Programs that learn from data."}},
            {"inputs": {"term": "overfitting"}, "target": {"output": "Fitting noise instead of signal."}},
        ]},
        print_report=False, show_progress=False,
    )  # fmt: skip
    before = len(server.model_requests())

    evaluation = humanloop.evaluations.run(
        name="Existing Prompt Evaluation",
        file={"path": "Existing/Prompt"},
        evaluators=[{"path": SIMILARITY}, {"path": "Example Evaluators/Code/Cost"}],
        dataset={"path": "Existing/Dataset"},
    )

    calls = _calls(server, before)
    asked = sorted(body["messages"][0]["content"] for body in calls if not _judged(body))
    assert asked == ["Define machine learning.", "Define overfitting."]
    assert sum(_judged(body) for body in calls) == 2
    similarity, cost = evaluation.checks
    assert similarity.score == 4 and similarity.num_judgments == 2 and similarity.num_not_applicable == 0
    assert cost.num_judgments == 2 and cost.score is not None and cost.score > 0  # gpt-4o-mini has a price


def test_3_a_prompt_defined_in_code_with_a_bare_model_name(
    server: FakeModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    """``"model": "gpt-4"`` names no provider, and can only be OpenAI's: it is called as
    openai/gpt-4, with a warning saying so; a dataset given without a path takes the
    evaluation's name."""
    before = len(server.model_requests())

    evaluation = humanloop.evaluations.run(
        name="Code Prompt Evaluation",
        file={
            "path": "Code/Prompt",
            "version": {
                "model": "gpt-4",
                "template": [{"role": "system", "content": "You are a helpful assistant on the topic of {{topic}}."}],
            },
        },
        evaluators=[{"path": SIMILARITY}, {"path": "Example Evaluators/Code/Latency"}],
        dataset={"datapoints": [{
            "inputs": {"topic": "machine learning"},
            "messages": [{"role": "user", "content": "What is machine learning?"}],
            "target": {"output": "Machine learning is a subset of artificial intelligence..."},
        }]},
    )  # fmt: skip

    assert any(
        "model 'gpt-4' names no provider: calling openai/gpt-4" in record.getMessage() for record in caplog.records
    )
    (prompt,) = [body for body in _calls(server, before) if not _judged(body)]
    assert prompt["model"] == "gpt-4" and prompt["messages"] == [
        {"role": "system", "content": "You are a helpful assistant on the topic of machine learning."},
        {"role": "user", "content": "What is machine learning?"},
    ]
    similarity, latency = evaluation.checks
    assert similarity.score == 4 and latency.num_judgments == 1
    assert "on dataset 'Code Prompt Evaluation'" in evaluation.report
