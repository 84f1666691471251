"""Humanloop's prompt-in-code on a real embedded Ray against the loopback model server: the
template called per datapoint, built-in and LLM-judge evaluators, stored datasets and prompts."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from rayeval import evaluations
from tests.agents.fake_model_server import FakeModelServer

from .conftest import FAST, results_root

pytestmark = pytest.mark.usefixtures("shared_ray")

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Peru": "Lima"}
PROMPT = {
    "model": "gpt-4o-mini",
    "provider": "openai",
    "template": [
        {"role": "system", "content": "You answer geography questions in one word."},
        {"role": "user", "content": "What is the capital of {{country}}?"},
    ],
    "temperature": 0,
}
DATASET = {
    "path": "geo/capitals",
    "datapoints": [
        {"inputs": {"country": "France"}, "target": {"output": "Paris"}},
        {"inputs": {"country": "Japan"}, "target": {"output": "Tokyo"}},
        {
            "inputs": {"country": "Peru"},
            "messages": [{"role": "user", "content": "Answer in lower case."}],
            "target": {"output": "Lima"},
        },
    ],
}


def reply(body: dict) -> str:
    """The model: capitals (Peru's wrong), judges' verdicts, and a rambling judge."""
    text = "\n".join(m["content"] for m in body["messages"])
    if "Rate how similar" in text:
        return "Same meaning.\n5" if "Text B (the answer given):\nParis" in text else "Different.\n1"
    if "Is this answer polite" in text:
        return "yes" if "Tokyo" not in text else "I cannot decide."
    country = next(c for c in CAPITALS if c in text)
    return "Cusco" if country == "Peru" else CAPITALS[country]


@pytest.fixture(scope="module", autouse=True)
def _key() -> Iterator[None]:
    """A fake key, set before the module's Ray starts so that its workers have it too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_API_KEY", "sk-test-key-for-the-loopback-server")
        patch.delenv("OPENAI_BASE_URL", raising=False)
        yield


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(script=[], answer=reply, base_input_tokens=1000, base_output_tokens=10) as srv:
        yield srv


EVALUATORS = [
    {"path": "Example Evaluators/Code/Exact match", "threshold": 0.5},
    {"path": "Example Evaluators/Code/Latency"},
    {"path": "Example Evaluators/Code/Cost"},
    {"path": "Example Evaluators/AI/Semantic similarity"},
    {
        "path": "polite",
        "evaluator_type": "llm",
        "args_type": "target_free",
        "return_type": "boolean",
        "prompt": {"model": "openai/gpt-4o-mini", "template": "Is this answer polite: {{output}}?"},
    },
]


def test_a_prompt_in_code_is_called_per_datapoint_and_judged(tmp_path: Path, server: FakeModelServer) -> None:
    output = results_root(tmp_path)
    options = {"base_url": server.url + "/v1"}
    result = evaluations.run(
        "geo",
        {"path": "geo/answerer", "version": PROMPT},
        EVALUATORS,
        DATASET,
        output=output,
        model_options=options,
        **FAST,
    )
    checks = {c.path: c for c in result.checks}
    assert checks["Example Evaluators/Code/Exact match"].score == pytest.approx(2 / 3)
    assert checks["Example Evaluators/Code/Exact match"].threshold_check is True
    assert checks["Example Evaluators/AI/Semantic similarity"].score == pytest.approx((5 + 1 + 1) / 3)
    # the price table's gpt-4o-mini: 1000 input and 10 output tokens per call
    cost = checks["Example Evaluators/Code/Cost"]
    assert cost.num_judgments == 3 and cost.score is not None and cost.score > 0
    assert checks["Example Evaluators/Code/Latency"].num_judgments == 3
    # the judge that rambles on Tokyo: an error for that log, not a crash
    assert (checks["polite"].num_judgments, checks["polite"].num_errors) == (2, 1)
    assert checks["polite"].score == pytest.approx(2 / 3)

    # what the model got: the filled template, then the datapoint's own messages
    calls = [r.body for r in server.model_requests() if "capital of" in json.dumps(r.body)]
    assert len(calls) == 3 and all(body["temperature"] == 0 for body in calls)  # the version's settings
    sent = [body["messages"] for body in calls]
    peru = next(m for m in sent if "Peru" in m[1]["content"])
    assert peru == [
        {"role": "system", "content": "You answer geography questions in one word."},
        {"role": "user", "content": "What is the capital of Peru?"},
        {"role": "user", "content": "Answer in lower case."},
    ]

    frame = pd.read_parquet(Path(output) / f"run_id={result.run_id}")
    assert len(frame) == 3 and set(frame["isolation"]) == {"inline"} and set(frame["harness"]) == {"prompt"}
    assert "3 of 3 units are not known to have run in a sandbox (inline: 3)" in result.report  # as rayeval report says
    assert set(frame["input_tokens"]) == {1000} and (frame["cost_usd"] > 0).all()
    # each datapoint: the prompt's call, then its two LLM judges' calls, on the same model and usage
    call = (1000 * 0.15 + 10 * 0.6) / 1e6
    assert frame["agent_cost_usd"].tolist() == pytest.approx([call] * 3)
    assert frame["judge_cost_usd"].tolist() == pytest.approx([2 * call] * 3)
    assert frame["cost_usd"].tolist() == pytest.approx([3 * call] * 3)
    outputs = sorted(json.loads(a)["output"] for a in frame["answer_json"])
    assert outputs == ["Cusco", "Paris", "Tokyo"] and result.version_id.startswith("geo/answerer@v-")
    judged = {json.loads(r.answer_json)["output"]: json.loads(r.metrics_json)["evaluators"] for r in frame.itertuples()}
    tokyo = judged["Tokyo"]["polite"]
    assert "the judge's last line 'I cannot decide.' is not true or false" in tokyo["error"]

    # a later run names the stored prompt and dataset by path alone: the same versions
    again = evaluations.run(
        "geo",
        {"path": "geo/answerer"},
        [{"path": "Example Evaluators/Code/Exact match"}],
        {"path": "geo/capitals"},
        output=output,
        model_options=options,
        **FAST,
    )
    assert again.version_id == result.version_id and again.previous_run_id == result.run_id
    assert again.checks[0].score == pytest.approx(2 / 3) and again.checks[0].delta == 0.0
    first_ids = sorted(pd.read_parquet(Path(output) / f"run_id={result.run_id}")["eval_id"])
    assert sorted(pd.read_parquet(Path(output) / f"run_id={again.run_id}")["eval_id"]) == first_ids


JUDGE_DELAY_S = 1.0


def test_llm_judges_are_called_apart_holding_no_datapoint_slot(tmp_path: Path) -> None:
    """With one datapoint in flight (workers=1) and a judge that answers after a second, every
    datapoint's prompt call is made before the first judge reply: the LLM-as-judge calls are
    the run's judge calls, not made in the datapoint's slot."""

    def answer(body: dict) -> str:
        if "Is this answer polite" in json.dumps(body):
            time.sleep(JUDGE_DELAY_S)
        return reply(body)

    with FakeModelServer(script=[], answer=answer) as srv:
        result = evaluations.run(
            "geo-slow-judge",
            {"path": "geo/slow-judged", "version": PROMPT},
            [EVALUATORS[-1]],  # the polite judge
            {**DATASET, "path": "geo/capitals-slow-judged"},
            1,
            output=results_root(tmp_path),
            model_options={"base_url": srv.url + "/v1"},
            **FAST,
        )
    calls = srv.model_requests()
    judge_asked = [call.at for call in calls if "Is this answer polite" in json.dumps(call.body)]
    prompt_asked = [call.at for call in calls if "capital of" in json.dumps(call.body)]
    assert len(judge_asked) == 3 and len(prompt_asked) == 3
    assert max(prompt_asked) < min(judge_asked) + JUDGE_DELAY_S, (prompt_asked, judge_asked)
    polite = result.checks[0]
    frame = pd.read_parquet(Path(results_root(tmp_path)) / f"run_id={result.run_id}")
    verdicts = [json.loads(metrics)["evaluators"]["polite"] for metrics in frame["metrics_json"]]
    # Tokyo's judge rambles, as above
    assert (polite.num_judgments, polite.num_errors) == (2, 1), verdicts
