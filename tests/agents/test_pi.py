"""The pi coding agent's program spec with the REAL pi against the scripted model server: its
custom provider models, its provider failures (pi exits 0 after one: its events tell), the
session it resumes, its own retries, and a run through ``rayeval run`` in the sandbox.

Failures and resumes run the program once per call through the spec's hooks (what the resume
loop of :class:`rayeval.agents._base.ProgramAgent` calls), so they show what pi itself does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from rayeval.agents import _cli, _tools, pi
from rayeval.agents._base import AgentConfigError, Summary
from rayeval.agents.pi import PROVIDER_STYLES, PiAgent, failure_from_error, summarize_pi_events

from .conftest import FAKE_KEY, PROGRAM_TIMEOUT

REPO = Path(__file__).resolve().parents[2]
PROMPT = "Compute the answer and write it as JSON to eval_answer.json in the working directory."
WRITE_ANSWER = "printf '{\"answer\": %d}' $((6*7)) > eval_answer.json && echo wrote-the-answer"


def run_once(agent: PiAgent, work_dir: Path, state: Path, session_id: str | None = None) -> tuple[Summary, Any]:
    """One run of pi through the spec: a new session, or ``session_id`` resumed with ``Continue.``."""
    program = agent.program_argv()
    env = _cli.build_env(pass_keys=agent.key_names, extra=agent.program_env(state, work_dir))
    agent.check_env(env)
    agent.prepare(state, work_dir, env, "legacy")
    if session_id is None:
        argv, prompt = agent.build_argv(program, state, work_dir), PROMPT
    else:
        resumed = agent.resume_argv(program, state, work_dir, session_id)
        assert resumed is not None
        argv, prompt = resumed, "Continue."
    result = _cli.run_streaming(
        argv, work_dir=work_dir, env=env, stdin_text=prompt, timeout=PROGRAM_TIMEOUT,
        secrets=_cli.secrets_for(env), keep_event=agent.keep_event,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr_tail  # pi exits 0 after a provider's failure too
    return agent.summarize(result.events, state, work_dir), result


def session_file_entries(state: Path) -> list[dict[str, Any]]:
    """The entries of pi's one session file: each message a ``message`` entry."""
    (session_file,) = (state / "pi" / "agent" / "sessions").glob("*/*.jsonl")
    return [json.loads(line) for line in session_file.read_text().splitlines()]


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    work_dir, state = tmp_path / "work", tmp_path / "state"
    work_dir.mkdir()
    state.mkdir()
    return work_dir, state


# ------------------------------------------------------------------------------- the spec
@pytest.mark.parametrize(
    ("model", "base_url", "provider", "api", "key"),
    [
        ("anthropic/claude-sonnet-4-5", None, "anthropic", "anthropic-messages", "ANTHROPIC_API_KEY"),
        ("openrouter/moonshotai/kimi-k3", None, "openrouter", "openai-completions", "OPENROUTER_API_KEY"),
        (
            "fireworks/accounts/fireworks/models/x",
            "http://h/v1/",
            "fireworks",
            "openai-completions",
            "FIREWORKS_API_KEY",
        ),
    ],
)
def test_custom_models_of_each_provider_style(
    model: str, base_url: str | None, provider: str, api: str, key: str, tmp_path: Path
) -> None:
    agent = pi(model, base_url=base_url, model_config={"contextWindow": 1000000, "maxTokens": 64000})
    agent.prepare(tmp_path, tmp_path, {}, "legacy")
    written = json.loads((tmp_path / "pi" / "agent" / "models.json").read_text())
    config = written["providers"][provider]
    assert config["apiKey"] == f"${key}" and config["api"] == api  # the variable's name, never a key
    assert config["baseUrl"] == (base_url.rstrip("/") if base_url else PROVIDER_STYLES[provider].base_url)
    entry = config["models"][0]
    assert entry["id"] == model.partition("/")[2] and entry["contextWindow"] == 1000000 and entry["maxTokens"] == 64000
    argv = agent.build_argv(["pi"], tmp_path, tmp_path)
    assert argv[argv.index("--model") + 1] == model and argv[argv.index("--thinking") + 1] == "xhigh"


def test_bash_timeout_s_is_passed_to_its_extension(tmp_path: Path) -> None:
    """Every run, resume and chunk loads the extension that gives a bash call without a timeout
    ``bash_timeout_s`` (300 by default); null loads none."""
    agent = pi("anthropic/claude-sonnet-4-5")
    agent.prepare(tmp_path, tmp_path, {}, "legacy")
    extension = str(tmp_path / "pi" / "bash_timeout.js")
    assert 'registerFlag("bash-timeout"' in Path(extension).read_text()
    for argv in (
        agent.build_argv(["pi"], tmp_path, tmp_path),
        agent.resume_argv(["pi"], tmp_path, tmp_path, "s1"),
        agent.chunk_argv(["pi"], tmp_path, 3, None, fork=False),
    ):
        assert argv is not None and argv[argv.index(extension) - 1 : argv.index(extension) + 3] == [
            "--extension", extension, "--bash-timeout", "300",
        ]  # fmt: skip
    unlimited = pi("anthropic/claude-sonnet-4-5", bash_timeout_s=None)
    assert "--bash-timeout" not in unlimited.build_argv(["pi"], tmp_path, tmp_path)


def test_options_that_cannot_work_are_refused() -> None:
    with pytest.raises(AgentConfigError, match="for a model named anthropic/"):
        pi("claude-sonnet-4-5", base_url="http://h")
    with pytest.raises(AgentConfigError, match="api must be one of"):
        pi("openai/gpt-test", api="bedrock")
    with pytest.raises(AgentConfigError, match="needs OPENROUTER_API_KEY"):
        pi("openrouter/moonshotai/kimi-k3").check_env({"ANTHROPIC_API_KEY": "k"})
    for seconds in (0, -1, True, "300", float("nan"), float("inf")):
        with pytest.raises(AgentConfigError, match="bash_timeout_s must be a number of seconds above 0 or null"):
            pi("anthropic/claude-sonnet-4-5", bash_timeout_s=seconds)


OPENROUTER_429 = {"code": 429, "message": "slow down", "metadata": {"retry_after_seconds": 12, "headers": {"Retry-After": "30"}}}  # fmt: skip
GOOGLE_RETRY = {"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "41s"}]}}
GOOGLE_429 = {"error": {"code": 429, "message": json.dumps(GOOGLE_RETRY)}}


@pytest.mark.parametrize(
    ("message", "status", "code", "hint"),
    [
        ('529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', 529, "overloaded", None),
        ("401 scripted failure 401", 401, "http_401", None),
        (json.dumps(OPENROUTER_429), 429, "rate_limit", 30.0),  # no status first: the body's code
        (f"429 {json.dumps(GOOGLE_429)} and more", 429, "rate_limit", 41.0),
        ('503 {"error":{"message":"cut sh', 503, "server_error", None),
    ],
)
def test_failures_from_pis_error_messages(message: str, status: int, code: str, hint: float | None) -> None:
    """pi's ``errorMessage`` as its providers word it: the status first, then the provider's body
    (OpenRouter's and Google's retry hints inside it)."""
    failure = failure_from_error(message)
    assert failure is not None
    assert (failure.status, failure.code, failure.retry_after_s) == (status, code, hint)
    assert failure.message == message


@pytest.mark.parametrize(
    "message", ["Connection error.", "Invalid model configuration", "rate limit exceeded", "4290: []", "", None]
)
def test_an_error_message_without_a_status_is_no_provider_failure(message: str | None) -> None:
    assert failure_from_error(message) is None


# ------------------------------------------------------------------------------- the real pi
def test_openrouter_style_model_over_chat_completions(pi_available, model_server, folders, monkeypatch) -> None:
    """An OpenRouter-style custom model speaks Chat Completions with the OpenRouter key, which is
    the only key pi (and its tools) see."""
    monkeypatch.setenv("OPENROUTER_API_KEY", FAKE_KEY)
    check = "echo anthropic=[${ANTHROPIC_API_KEY:-unset}] openai=[${OPENAI_API_KEY:-unset}]"
    server = model_server([{"command": f"{WRITE_ANSWER} && {check}"}, {"text": "Done."}])
    work_dir, _ = folders
    out = pi("openrouter/moonshotai/kimi-k3", base_url=server.url + "/v1", timeout=PROGRAM_TIMEOUT)(PROMPT, work_dir)
    md = out["metadata"]
    assert out["answer"] == {"answer": 42}, md.get("error_details")
    assert {r.path for r in server.model_requests()} == {"/v1/chat/completions"}
    assert all(r.headers["authorization"] == f"Bearer {FAKE_KEY}" for r in server.model_requests())
    assert "anthropic=[unset] openai=[unset]" in json.dumps(md["trajectory"])
    assert (md["input_tokens"], md["output_tokens"]) == server.total_usage("chat")
    tokens_in, tokens_out = server.total_usage("chat")  # a known model: priced with the price table's prices
    assert md["cost_usd"] == pytest.approx((tokens_in * 3.0 + tokens_out * 15.0) / 1e6)
    assert md["cost_source"] == "rayeval_price_table"
    assert server.external_attempts == []


@pytest.mark.parametrize(("status", "code"), [(529, "overloaded"), (401, "http_401")])
def test_a_provider_failure_ends_the_session_with_its_failure(
    status: int, code: str, pi_available, model_server, folders
) -> None:
    server = model_server([{"command": WRITE_ANSWER}, {"text": "Done."}])
    server.fail(status)
    work_dir, state = folders
    agent = pi("anthropic/claude-sonnet-4-5", base_url=server.url)
    summary, result = run_once(agent, work_dir, state)
    assert [(f.status, f.code) for f in summary.failures] == [(status, code)]
    assert str(status) in summary.failures[0].message
    assert summary.failures[0].key_rejected is (status == 401)
    assert summary.session_id and summary.session_id == summary.extra["session_id"]
    assert summary.n_turns == 0 and summary.extra["program_retry_count"] == 0  # pi retried neither
    assert len(server.model_requests()) == 1 and not (work_dir / "eval_answer.json").exists()
    assert FAKE_KEY not in json.dumps(result.events)


def test_pi_retries_a_429_itself(pi_available, model_server, folders) -> None:
    """pi's own retry (its settings' default: 3 times, 2 s doubling) goes on after a 429; the
    session ends with an answer and no failure left, the retry counted."""
    server = model_server([{"command": WRITE_ANSWER}, {"text": "Done."}])
    server.fail(429)
    work_dir, state = folders
    summary, _ = run_once(pi("anthropic/claude-sonnet-4-5", base_url=server.url), work_dir, state)
    assert summary.failures == [] and summary.n_turns == 2
    assert summary.extra["program_retry_count"] == 1 and summary.extra["program_retry_wait_s"] == 2.0
    assert json.loads((work_dir / "eval_answer.json").read_text()) == {"answer": 42}


def test_a_bash_call_without_a_timeout_is_stopped_after_bash_timeout_s(pi_available, model_server, folders) -> None:
    """pi's bash has no default timeout: a command that would hang held the unit to its deadline.
    With ``bash_timeout_s=1`` (the reference runner's tool_timeout.js, 300 s by default) a call
    that sets none is stopped after 1 s and the session goes on; a call's own timeout is kept;
    the model is told of the default in the tool's description, as the reference runner tells it."""
    hang = "echo started-to-hang && sleep 60 && echo never"
    past_default = "sleep 1.5 && echo slept-past-the-default"
    script = [{"command": hang}, {"command": past_default, "timeout": 10}, {"command": WRITE_ANSWER}, {"text": "Done."}]
    server = model_server(script)
    work_dir, state = folders
    began = time.monotonic()
    summary, _ = run_once(pi("anthropic/claude-sonnet-4-5", base_url=server.url, bash_timeout_s=1), work_dir, state)
    assert time.monotonic() - began < 30 and summary.n_turns == 4
    assert json.loads((work_dir / "eval_answer.json").read_text()) == {"answer": 42}
    first, second = (json.dumps(server.model_requests()[n].body["messages"][-1]) for n in (1, 2))
    assert "started-to-hang" in first and "Command timed out after 1 seconds" in first
    assert "slept-past-the-default" in second and "timed out" not in second
    bash = next(tool for tool in server.model_requests()[0].body["tools"] if tool["name"] == "bash")
    assert bash["input_schema"]["properties"]["timeout"]["description"] == "Timeout in seconds (1s default)"


def test_resume_goes_on_without_redoing_the_first_turn(pi_available, model_server, folders) -> None:
    """Turn 1 runs a command; the next call fails (529) and pi ends; resumed with ``Continue.``
    the session goes on from there: the command ran once, the answer is written."""
    work_dir, state = folders
    first = "echo once >> turns.txt && while [ ! -e go ]; do sleep 0.05; done && echo first-turn-done"
    server = model_server([{"command": first}, {"command": WRITE_ANSWER}, {"text": "Done."}])

    def fail_the_next_call() -> None:  # queued while turn 1's command waits for it
        deadline = time.monotonic() + PROGRAM_TIMEOUT
        while not (work_dir / "turns.txt").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        server.fail(529)
        (work_dir / "go").touch()

    threading.Thread(target=fail_the_next_call, daemon=True).start()
    agent = pi("anthropic/claude-sonnet-4-5", base_url=server.url, settings={"retry": {"enabled": False}})
    failed, _ = run_once(agent, work_dir, state)
    assert [f.code for f in failed.failures] == ["overloaded"] and failed.n_turns == 1
    assert failed.session_id
    # the session file's ``message`` entries tell the same (the reference runner reads both shapes)
    from_file = summarize_pi_events(session_file_entries(state))
    assert [e["type"] for e in session_file_entries(state)].count("message_end") == 0
    assert (from_file.failures, from_file.usage, from_file.n_turns, from_file.n_steps, from_file.session_id) == (
        failed.failures, failed.usage, 1, 1, failed.session_id,
    )  # fmt: skip
    assert from_file.usage.output_tokens and from_file.cost_usd == failed.cost_usd

    resumed, result = run_once(agent, work_dir, state, failed.session_id)
    assert resumed.session_id == failed.session_id and resumed.failures == []
    assert json.loads((work_dir / "eval_answer.json").read_text()) == {"answer": 42}
    assert (work_dir / "turns.txt").read_text() == "once\n"  # the first turn was not redone
    assert [r.turn for r in server.scripted_replies("anthropic")] == [0, 1, 2]
    told = json.dumps(server.model_requests()[-2].body)  # the resumed call carries the first turn
    assert "first-turn-done" in told and "Continue." in told
    assert any(e.get("type") == "session" and e.get("id") == failed.session_id for e in result.events)


# ------------------------------------------------------------------------------- rayeval run
def test_rayeval_run_pi_in_the_sandbox(pi_available, model_server, tmp_path: Path) -> None:
    """``rayeval run --agent pi`` under the default sandbox, binding nothing: pi (its install
    folder, Node.js) runs in the unit's sandbox, its tool writes the answer, the row passes."""
    server = model_server([{"command": "printf '{\"value\": %d}' $((6*7)) > eval_answer.json"}, {"text": "Done."}])
    evals = tmp_path / "evals"
    evals.mkdir()
    grader = {"type": "numeric_tolerance", "config": {"ground_truth": {"value": 42}, "tolerances": {"value": {"type": "absolute", "value": 0.5}}}}  # fmt: skip
    (evals / "answer.json").write_text(json.dumps({"id": "answer", "task": PROMPT, "grader": grader}))
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-m", "rayeval.cli", "run", str(evals), "--agent", "pi", "--models", "anthropic/claude-sonnet-4-5",
         "--agent-arg", f"base_url={server.url}", "--agent-arg", "timeout=120", "--output", str(tmp_path / "out"),
         "--no-progress"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = ds.dataset(tmp_path / "out", format="parquet", partitioning="hive").to_table().to_pylist()
    assert len(rows) == 1
    row, metadata = rows[0], json.loads(rows[0]["metadata_json"])
    assert row["status"] == "passed" and row["passed"], (row.get("error_details"), metadata.get("error_details"))
    assert row["isolation"] == "sandbox"
    assert any(str(_tools.tools_dir()) in part for part in metadata["command"])  # shown at its own path
    assert metadata["harness"] == "pi" and metadata["n_turns"] == 2 and metadata["session_id"]
    assert len(server.scripted_replies("anthropic")) == 2
    assert FAKE_KEY not in json.dumps(rows, default=str)
