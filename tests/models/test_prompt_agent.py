"""The built-in ``prompt`` agent: its options, and real ``rayeval run`` runs against the
loopback server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pyarrow.compute as pc
import pytest
from aiohttp import web

from rayeval.agents.resolve import AgentArgsError, agent_ref, check_agent_args
from rayeval.cli import main
from rayeval.storage import ResultStore
from tests.agents.fake_model_server import FakeModelServer
from tests.gateway.provider import Provider

from .conftest import ANTHROPIC_KEY, OPENAI_KEY, mc_answer

REPO = Path(__file__).resolve().parents[2]
MC_EVAL = "pbmc_fcgr3a_top_population"


@pytest.mark.parametrize(
    ("args", "models", "message"),
    [
        (
            {"temprature": "0"},
            ["openai/gpt-4o"],
            "unknown --agent-arg temprature (it takes base_url, api_key_env, temperature",
        ),
        (
            {"temperature": "hot"},
            ["openai/gpt-4o"],
            "--agent-arg temperature: Input should be a valid number",
        ),
        (
            {"max_connections": "0"},
            ["openai/gpt-4o"],
            "--agent-arg max_connections: Input should be greater than or equal to 1",
        ),
        ({}, ["default"], "expected provider/model"),
        (
            {},
            ["openai/gpt-4o", "mistral/large"],
            "unknown provider 'mistral' (known: openai, openai-compatible, anthropic)",
        ),
        (
            {"api_key_env": "NO_SUCH_KEY"},
            ["anthropic/claude-haiku-4-5"],
            "needs an API key in the environment variable NO_SUCH_KEY",
        ),
        (
            {"prices": "/nonexistent/prices.json"},
            ["openai/gpt-4o"],
            "price file /nonexistent/prices.json: cannot read it",
        ),
        (
            {"cache": "responses"},
            ["openai/gpt-4o"],
            "--agent-arg cache: Value error, a folder or file here must be an absolute path",
        ),
        ({"cache": "s3://"}, ["openai/gpt-4o"], "--agent-arg cache: Value error, 's3://' names no bucket"),
    ],
)
def test_bad_options_and_models_are_refused_before_any_unit(keys: None, args: dict, models: list, message: str) -> None:
    with pytest.raises(AgentArgsError, match=None) as raised:
        check_agent_args("prompt", args, models)
    assert message in str(raised.value)


def test_a_cluster_run_checks_only_what_does_not_need_its_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    check_agent_args("prompt", {"temperature": "0"}, ["openai/gpt-4o"], environment=False)  # the key is the cluster's
    with pytest.raises(AgentArgsError, match="unknown provider"):
        check_agent_args("prompt", {}, ["nope/x"], environment=False)


def test_listed_and_run_in_the_worker(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agents"]) == 0
    listed = capsys.readouterr().out
    assert (
        "prompt " in listed
        and "options: base_url, api_key_env, temperature, max_tokens, top_p, seed, system, cache" in listed
    )
    ref = agent_ref("prompt")
    assert ref.runs_in_worker and not ref.needs_data and not agent_ref("sleep").runs_in_worker


def _run(tmp_path: Path, server: FakeModelServer, run_id: str, *extra: str) -> int:
    return main(
        [
            "run", str(REPO / "evals"), "--agent", "prompt", "--models", "openai/gpt-4o",
            "--agent-arg", f"base_url={server.url}/v1", "--agent-arg", "temperature=0",
            "--agent-arg", f"cache={tmp_path / 'responses'}",
            "--output", str(tmp_path / "out"), "--run-id", run_id, "--no-progress", *extra,
        ]
    )  # fmt: skip


@pytest.mark.usefixtures("shared_ray")
def test_rayeval_run_with_the_prompt_agent(tmp_path: Path, server: FakeModelServer) -> None:
    assert _run(tmp_path, server, "first", "--seeds", "2") == 0
    evals = len(list((REPO / "evals").rglob("*.json")))
    requests = server.model_requests()
    assert len(requests) == 2 * evals
    assert {r.body["seed"] for r in requests} == {
        1,
        2,
    }  # the unit's seed: two trials, two requests
    assert all(r.body["temperature"] == 0 and r.body["model"] == "gpt-4o" for r in requests)
    sent = [r.body["messages"][0]["content"] for r in requests]
    assert all("<EVAL_ANSWER>{...}</EVAL_ANSWER>" in text and "Working directory" not in text for text in sent)

    table = ResultStore(tmp_path / "out").read_table("first")
    rows = table.to_pylist()
    assert len(rows) == 2 * evals
    assert {row["model"] for row in rows} == {"openai/gpt-4o"} and {row["harness"] for row in rows} == {"prompt"}
    assert {row["isolation"] for row in rows} == {"inline"}  # it ran in the worker, and says so
    assert all(row["input_tokens"] == 1200 and row["output_tokens"] == 300 and row["n_turns"] == 1 for row in rows)
    assert all(row["cost_usd"] == pytest.approx((1200 * 2.5 + 300 * 10.0) / 1e6) for row in rows)
    # its call went through the gateway, with the unit's token: counted there, and kept
    assert {row["n_model_calls"] for row in rows} == {1}
    assert {r.headers["authorization"] for r in requests} == {f"Bearer {OPENAI_KEY}"}
    transcript = json.loads(json.loads(rows[0]["artifacts_json"])["model_calls.json"])["calls"]
    assert transcript[0]["status"] == 200 and "<EVAL_ANSWER>{...}</EVAL_ANSWER>" in json.dumps(transcript[0])
    mc = table.filter(pc.equal(table["eval_id"], MC_EVAL)).to_pylist()
    assert [row["passed"] for row in mc] == [True, True]
    others = [row for row in rows if row["eval_id"] != MC_EVAL]
    assert all(row["error_type"] == "NoAnswer" and "holds no <EVAL_ANSWER>" in row["error_message"] for row in others)
    stored = "".join(str(row) for row in rows)
    assert OPENAI_KEY not in stored and "reply to 1 message(s)" in stored

    # the same run again: every reply from the response cache, no model call, no cost
    assert _run(tmp_path, server, "again", "--seeds", "2") == 0
    assert len(server.model_requests()) == 2 * evals
    again = ResultStore(tmp_path / "out").read_table("again").to_pylist()
    assert len(again) == 2 * evals and all(row["cost_usd"] == 0.0 and row["n_model_calls"] == 0 for row in again)
    assert [row["passed"] for row in again if row["eval_id"] == MC_EVAL] == [True, True]


@pytest.mark.parametrize(("status", "count", "code", "calls"), [(401, 1, "http_401", 1), (503, 100, "server_error", 3)])
def test_a_call_the_provider_fails_is_a_provider_error(
    tmp_path: Path, server: FakeModelServer, status: int, count: int, code: str, calls: int
) -> None:
    """After the gateway's own retries (none for a 401; a 503 for 2 s of the gateway's wait
    budget), the unit is an error of the provider's, as the gateway saw it, not an answer that
    failed."""
    from rayeval.sandbox.config import SandboxConfig, UnitLimits
    from rayeval.unit import EvalRunner

    server.fail(status, count, retry_after="1")
    runner = EvalRunner(
        REPO / "evals" / "pbmc" / f"{MC_EVAL}.json", work_root=tmp_path / "work", data_roots=[REPO / "evals"]
    )
    args = {"base_url": f"{server.url}/v1", "max_connections": "1"}
    sandbox = SandboxConfig(limits=UnitLimits(gateway_retry_s=2.5))
    result = runner.run(
        agent_ref("prompt", load=True), model="openai/gpt-4o", agent_args=args, isolation="inline", sandbox=sandbox
    )
    assert (result.status, result.error_type) == ("error", "ProviderError")
    details = result.metadata["error_details"]
    assert (details["status"], details["code"], details["seen_by"]) == (status, code, "gateway")
    assert f"scripted failure {status}" in details["message"] and OPENAI_KEY not in str(result.model_dump())
    assert len(server.model_requests()) == calls and result.metadata["gateway"]["failed_calls"] == 1


def test_a_reply_the_provider_breaks_off_is_a_provider_error(tmp_path: Path, keys: None) -> None:
    """The provider answers 200, then breaks its reply off: the gateway saw the provider fail,
    as a 502 (worth another try), and the unit left without an answer is the provider's error,
    not an answer that failed."""
    from rayeval.unit import EvalRunner

    async def broken(request: web.Request) -> web.StreamResponse:
        reply = web.StreamResponse(headers={"content-type": "application/json", "content-length": "4000"})
        await reply.prepare(request)
        await reply.write(b'{"id": "c", "object": "chat.completion", "model": "gpt-4o", "choices": [')
        await asyncio.sleep(0.2)
        assert request.transport is not None
        request.transport.close()
        return reply

    with Provider({"/v1/chat/completions": broken}) as provider:
        runner = EvalRunner(
            REPO / "evals" / "pbmc" / f"{MC_EVAL}.json", work_root=tmp_path / "work", data_roots=[REPO / "evals"]
        )
        args = {"base_url": f"{provider.url}/v1"}
        result = runner.run(agent_ref("prompt", load=True), model="openai/gpt-4o", agent_args=args, isolation="inline")
    assert (result.status, result.error_type) == ("error", "ProviderError"), result.error_message
    details = result.metadata["error_details"]
    assert (details["status"], details["code"], details["seen_by"]) == (502, "server_error", "gateway")
    assert "the provider's reply ended early" in details["message"]
    assert (result.metadata["gateway"]["n_model_calls"], result.metadata["gateway"]["failed_calls"]) == (1, 1)


FALLBACK_KEYS = ["sk-ant-test-FALLBACK-ONE-0123456789", "sk-ant-test-FALLBACK-TWO-0123456789"]


@pytest.mark.slow
def test_a_rejected_key_moves_to_the_fallback_key(
    tmp_path: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prompt agent on an Anthropic model: a 401 for the key sends the call again at once
    with the next key of ANTHROPIC_API_KEY_FALLBACKS (a rejected fallback too), through a real
    run; the row passes, counts the switches, and holds no key."""
    monkeypatch.setenv("ANTHROPIC_API_KEY_FALLBACKS", json.dumps(FALLBACK_KEYS))
    server.rejected_credentials |= {ANTHROPIC_KEY, FALLBACK_KEYS[0]}
    code = main(
        [
            "run", str(REPO / "evals" / "pbmc" / f"{MC_EVAL}.json"), "--data-root", str(REPO / "evals"),
            "--agent", "prompt", "--models", "anthropic/claude-haiku-4-5", "--agent-arg", f"base_url={server.url}",
            "--output", str(tmp_path / "out"), "--run-id", "fallback", "--no-progress",
        ]
    )  # fmt: skip
    assert code == 0
    keys = [
        r.headers.get("x-api-key") or r.headers["authorization"].removeprefix("Bearer ")
        for r in server.model_requests()
    ]
    assert keys == [ANTHROPIC_KEY, *FALLBACK_KEYS]
    (row,) = ResultStore(tmp_path / "out").read_table("fallback").to_pylist()
    assert (row["status"], row["passed"]) == ("passed", True), row["error_message"]
    assert json.loads(row["metadata_json"])["gateway"]["key_fallbacks"] == 2  # the gateway switched, not the agent
    assert not any(key in str(row) for key in (ANTHROPIC_KEY, *FALLBACK_KEYS))


def test_without_a_fallback_left_a_rejected_key_is_a_provider_error(
    tmp_path: Path, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rayeval.unit import EvalRunner

    monkeypatch.setenv("ANTHROPIC_API_KEY_FALLBACKS", json.dumps(FALLBACK_KEYS[:1]))
    server.rejected_credentials |= {ANTHROPIC_KEY, FALLBACK_KEYS[0]}
    runner = EvalRunner(
        REPO / "evals" / "pbmc" / f"{MC_EVAL}.json", work_root=tmp_path / "work", data_roots=[REPO / "evals"]
    )
    result = runner.run(
        agent_ref("prompt", load=True),
        model="anthropic/claude-haiku-4-5",
        agent_args={"base_url": server.url},
        isolation="inline",
    )
    assert (result.status, result.error_type) == ("error", "ProviderError")
    assert result.metadata["error_details"]["status"] == 401 and result.metadata["gateway"]["key_fallbacks"] == 1
    assert len(server.model_requests()) == 2
    assert not any(key in str(result.model_dump()) for key in (ANTHROPIC_KEY, *FALLBACK_KEYS))


@pytest.mark.parametrize("value", ['"one-key"', "[]x", '[""]', "[1]"])
def test_a_bad_fallback_list_is_refused_before_any_unit(
    keys: None, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY_FALLBACKS", value)
    with pytest.raises(AgentArgsError, match="ANTHROPIC_API_KEY_FALLBACKS must be a JSON list") as raised:
        check_agent_args("prompt", {}, ["anthropic/claude-haiku-4-5"])
    assert value not in str(raised.value)
    check_agent_args("prompt", {}, ["openai/gpt-4o"])  # Anthropic's keys: nothing to do with OpenAI


def test_a_local_openai_compatible_server_needs_no_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's example: a model served on this machine, no key in the environment. The
    prompt agent's call reaches it through the gateway with no key (never the unit's token);
    a program agent with base_url is not refused at start for want of one (without base_url
    it is)."""
    for name in ("OPENAI_API_KEY", "CODEX_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with FakeModelServer(script=[], answer=mc_answer) as local:
        code = main(
            ["run", str(REPO / "evals" / "pbmc" / f"{MC_EVAL}.json"), "--data-root", str(REPO / "evals"),
             "--agent", "prompt", "--models", "openai-compatible/Qwen2.5-7B-Instruct",
             "--agent-arg", f"base_url={local.url}/v1", "--output", str(tmp_path / "out"), "--no-progress"]
        )  # fmt: skip
        (request,) = local.model_requests()
    assert code == 0, capsys.readouterr().err
    assert "authorization" not in {name.lower() for name in request.headers}
    (row,) = ResultStore(tmp_path / "out").read_table().to_pylist()
    assert row["passed"] and row["n_model_calls"] == 1
    dry = ["run", str(REPO / "evals"), "--agent", "codex", "--models", "gpt-5.1-codex", "--output", str(tmp_path / "o")]
    assert main([*dry, "--agent-arg", "base_url=http://127.0.0.1:8000/v1", "--dry-run"]) == 0
    assert main([*dry, "--dry-run"]) == 2 and "codex needs OPENAI_API_KEY" in capsys.readouterr().err


def test_a_tagged_answer_of_more_values_than_an_answer_may_hold_is_no_answer_unread(tmp_path: Path, keys: None) -> None:
    """The model's ``<EVAL_ANSWER>`` is read as an answer file is: a body of more JSON values
    than one a 10 bytes of 10 MB is not decoded, and the unit's details say why."""
    from rayeval.agents.prompt import prompt_agent
    from rayeval.unit.context import AgentContext

    many = json.dumps([{}] * 1_500_000)
    with FakeModelServer(script=[], answer=lambda body: f"<EVAL_ANSWER>{many}</EVAL_ANSWER>") as srv:
        context = AgentContext(eval_id="e", model="openai/gpt-4o", seed=1, args={"base_url": f"{srv.url}/v1"})
        returned = prompt_agent("How many cells?", tmp_path, context)
    assert returned["answer"] is None
    assert "answer is too large to read: it holds more than" in returned["metadata"]["error_details"]["error"]
