"""Provider failures and resumed sessions of Codex and mini-swe-agent (issue 27, parts 1 and 2).

The real programs run against the scripted model server, which fails on demand: each test drives
one program spec's pieces (environment, config, the command line for a new and for a resumed
session, ``summarize``) the way the resume loop does, so what it checks is what the programs
emit now.  The parsers are also checked on event lines captured from the pinned programs
(``program_failure_events.json``: Codex 0.171.0 with its default and with rayeval's retry
bounds; the mini-swe-agent driver with litellm 1.108).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from rayeval.agents import _cli, codex, mini_swe_agent
from rayeval.agents._base import ProgramAgent, Summary
from rayeval.agents._provider_hints import retry_after_from_body
from rayeval.agents.codex import REQUEST_MAX_RETRIES, STREAM_MAX_RETRIES, codex_failures
from rayeval.agents.mini_swe import MODEL_CLIENT_RETRIES, summarize_mini_events
from rayeval.models.retry import retry_after_s

from .conftest import FAKE_KEY, PROGRAM_TIMEOUT
from .test_real_agents import PROMPT, answer_command

CAPTURED = json.loads((Path(__file__).parent / "program_failure_events.json").read_text())
GOOGLE_ERROR = {
    "error": {
        "code": 429,
        "message": "Resource exhausted",
        "status": "RESOURCE_EXHAUSTED",
        "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "30s"}],
    }
}
#: a gateway that passes Google's error on as its own error's message
GATEWAY_BODY = {"error": {"code": 429, "message": json.dumps(GOOGLE_ERROR), "status": "RESOURCE_EXHAUSTED"}}
OPENROUTER_BODY = {"error": {"message": "Provider returned error", "metadata": {"retry_after_seconds": 17}}}


@dataclass
class Program:
    available: str  # the fixture that fails when the program is missing
    protocol: str  # what the scripted server speaks to it
    finish: dict[str, str]  # the scripted last turn
    tries: int  # model requests it makes for one failing call before it gives up
    make: Callable[[str, Path], ProgramAgent]  # (server url, state folder) -> its spec


PROGRAMS = {
    "codex": Program(
        "codex_available",
        "responses",
        {"text": "Finished."},
        (1 + REQUEST_MAX_RETRIES) * (1 + STREAM_MAX_RETRIES),
        lambda url, state: codex("gpt-5.1-codex", base_url=url + "/v1", timeout=PROGRAM_TIMEOUT, state_dir=str(state)),
    ),
    "mini": Program(
        "mini_available",
        "chat",
        {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"},
        1 + MODEL_CLIENT_RETRIES,
        lambda url, state: mini_swe_agent(
            "openai/gpt-test", base_url=url + "/v1", timeout=PROGRAM_TIMEOUT, state_dir=str(state)
        ),
    ),
}


@dataclass
class Session:
    """One program spec, its state and work folders, and its environment: attempts run in it."""

    agent: ProgramAgent
    state: Path
    work_dir: Path
    env: dict[str, str]

    @classmethod
    def start(cls, agent: ProgramAgent, tmp_path: Path) -> Session:
        state, work_dir = tmp_path / "state", tmp_path / "work"
        work_dir.mkdir()
        env = _cli.build_env(
            pass_keys=(*agent.key_names, *agent.pass_env), extra={**agent.program_env(state, work_dir), **agent.env}
        )
        agent.check_env(env)
        agent.prepare(state, work_dir, env, "legacy")
        return cls(agent, state, work_dir, env)

    def attempt(self, argv: list[str], prompt: str) -> tuple[_cli.CliResult, Summary]:
        result = _cli.run_streaming(
            argv, work_dir=self.work_dir, env=self.env, stdin_text=prompt, timeout=PROGRAM_TIMEOUT, secrets={FAKE_KEY}
        )
        return result, self.agent.summarize(result.events, self.state, self.work_dir)

    def first(self) -> tuple[_cli.CliResult, Summary]:
        return self.attempt(self.agent.build_argv(self.agent.program_argv(), self.state, self.work_dir), PROMPT)

    def resumed(self, session_id: str) -> tuple[_cli.CliResult, Summary]:
        argv = self.agent.resume_argv(self.agent.program_argv(), self.state, self.work_dir, session_id)
        assert argv is not None
        return self.attempt(argv, "Continue.")


# ----------------------------------------------------------------------------- real programs
@pytest.mark.slow  # by hand, run by run: the agent function's own resume is in test_provider_recovery
@pytest.mark.parametrize("key", list(PROGRAMS))
def test_overload_after_the_first_turn_resumes_the_session(
    key: str, request: pytest.FixtureRequest, model_server, tmp_path: Path
) -> None:
    """A 529 storm after turn 1 ends the program after its bounded retries with the failure and
    its session; the session resumes (once more when the storm outlasts the first resume) and
    goes on from turn 2: turn 1 is never asked again."""
    program = PROGRAMS[key]
    request.getfixturevalue(program.available)
    token = uuid.uuid4().hex[:12]
    server = model_server([{"command": answer_command(token)}, program.finish])
    server.fail(529, program.tries, after_turns=1)
    session = Session.start(program.make(server.url, tmp_path / "state"), tmp_path)

    first, summary = session.first()
    assert first.exit_code != 0
    assert server.faults == []  # it tried exactly as often as its bound allows: one more try would pass
    failure = summary.failures[-1]
    assert (failure.status, failure.code, failure.retryable) == (529, "overloaded", True)
    assert "529" in failure.message
    assert summary.session_id
    assert [r.turn for r in server.scripted_replies(program.protocol)] == [0]

    server.fail(529, program.tries)
    still, stormy = session.resumed(summary.session_id)
    assert still.exit_code != 0
    assert ([f.status for f in stormy.failures], stormy.session_id) == ([529], summary.session_id)

    last, resumed = session.resumed(summary.session_id)
    assert last.exit_code == 0, last.stderr_tail
    assert (resumed.failures, resumed.session_id) == ([], summary.session_id)
    answer, details, _ = _cli.read_answer(session.work_dir)
    assert answer == {"answer": 42, "token": token}, details
    assert [r.turn for r in server.scripted_replies(program.protocol)] == [0, 1]  # turn 1 was not redone
    final_request = json.dumps(server.model_requests()[-1].body)
    assert PROMPT in final_request and "Continue." in final_request  # the same conversation, continued
    if key == "mini":  # the driver asks to continue once, however often it was resumed
        assert final_request.count('"content": "Continue."') == 1
    # the session's runs, one after the other, account for what the provider answered
    runs = first.events + still.events + last.events
    whole = session.agent.summarize(runs, session.state, session.work_dir)
    assert whole.n_turns == 2
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == server.total_usage(program.protocol)
    assert [f.status for f in whole.failures] == [529, 529]
    assert server.external_attempts == []


HINT_CASES = [
    # (program, status, retry-after header, error body, the hint the failure keeps)
    ("mini", 429, "1", None, 1.0),
    ("mini", 529, None, OPENROUTER_BODY, 17.0),
    ("codex", 503, None, GATEWAY_BODY, 30.0),
    ("codex", 429, "1", None, None),  # Codex waits as Retry-After says, and reports no hint
    ("codex", 500, None, None, None),  # the status only in the session file
]


@pytest.mark.parametrize(("key", "status", "retry_after", "body", "hint"), HINT_CASES)
def test_failure_keeps_status_and_hint(
    key: str,
    status: int,
    retry_after: str | None,
    body: dict | None,
    hint: float | None,
    request: pytest.FixtureRequest,
    model_server,
    tmp_path: Path,
) -> None:
    program = PROGRAMS[key]
    request.getfixturevalue(program.available)
    server = model_server([{"command": "echo one"}, program.finish])
    server.fail(status, 20, retry_after, body=body)
    session = Session.start(program.make(server.url, tmp_path / "state"), tmp_path)
    result, summary = session.first()
    assert result.exit_code != 0
    assert [(f.status, f.retry_after_s) for f in summary.failures] == [(status, hint)]
    assert summary.session_id
    assert server.scripted_replies(program.protocol) == []


@pytest.mark.parametrize("key", list(PROGRAMS))
def test_rejected_key_is_a_failure_with_401(
    key: str, request: pytest.FixtureRequest, model_server, tmp_path: Path
) -> None:
    program = PROGRAMS[key]
    request.getfixturevalue(program.available)
    server = model_server([{"command": "echo one"}, program.finish])
    server.fail(401, 20)
    session = Session.start(program.make(server.url, tmp_path / "state"), tmp_path)
    result, summary = session.first()
    assert result.exit_code != 0
    failure = summary.failures[-1]
    assert (failure.status, failure.code, failure.key_rejected, failure.retryable) == (401, "http_401", True, False)
    assert FAKE_KEY not in json.dumps([f.as_dict() for f in summary.failures])


def test_mini_resume_of_a_missing_session_is_impossible(tmp_path: Path) -> None:
    agent = mini_swe_agent("openai/gpt-test", base_url="http://127.0.0.1:9/v1")
    assert agent.resume_argv(agent.program_argv(), tmp_path, tmp_path, "0123abcd") is None
    (tmp_path / "mini-swe-agent" / "sessions").mkdir(parents=True)
    (tmp_path / "mini-swe-agent" / "sessions" / "0123abcd.json").write_text('{"messages": []}')
    (tmp_path / "elsewhere.json").write_text('{"messages": []}')
    assert agent.resume_argv(["python"], tmp_path, tmp_path, "0123abcd") == [
        "python",
        str(tmp_path / "config.json"),
        "--resume",
        "0123abcd",
    ]
    assert agent.resume_argv(["python"], tmp_path, tmp_path, "../../elsewhere") is None
    assert agent.resume_argv(["python"], tmp_path, tmp_path, "0123abcd\n") is None


# ----------------------------------------------------------------------------- parsers
def _codex_summary(case: str, tmp_path: Path) -> Summary:
    """``summarize`` of captured Codex events, with the captured session records in CODEX_HOME."""
    captured = CAPTURED[case]
    sessions = tmp_path / "codex" / "sessions"
    sessions.mkdir(parents=True)
    thread_id = captured["events"][0]["thread_id"]
    records = "".join(json.dumps(r) + "\n" for r in captured["session_records"])
    (sessions / f"rollout-{thread_id}.jsonl").write_text(records)
    return codex("gpt-5.1-codex").summarize(captured["events"], tmp_path, tmp_path)


CODEX_CASES = [
    # (captured case, status, code, hint)
    ("codex_529_default_retries", 529, "overloaded", None),
    ("codex_429_retry_after", 429, "rate_limit", None),
    ("codex_500", 500, "server_error", None),
    ("codex_401", 401, "http_401", None),
    ("codex_503_google_body", 503, "server_error", 30.0),
]


@pytest.mark.parametrize(("case", "status", "code", "hint"), CODEX_CASES)
def test_codex_failures_from_captured_events(
    case: str, status: int, code: str, hint: float | None, tmp_path: Path
) -> None:
    summary = _codex_summary(case, tmp_path)
    assert [(f.status, f.code, f.retry_after_s) for f in summary.failures] == [(status, code, hint)]
    assert summary.failures[0].message == CAPTURED[case]["events"][-1]["error"]["message"][:500]
    assert summary.session_id == CAPTURED[case]["events"][0]["thread_id"]


def test_codex_captured_retries_match_the_documented_counts() -> None:
    """Default retries: 6 stream attempts of 5 requests for a 5xx; rayeval's bound: 4 requests."""
    assert CAPTURED["codex_529_default_retries"]["requests"] == 30
    assert CAPTURED["codex_500"]["requests"] == (1 + REQUEST_MAX_RETRIES) * (1 + STREAM_MAX_RETRIES)
    assert CAPTURED["codex_429_retry_after"]["requests"] == 1 + STREAM_MAX_RETRIES


def test_codex_without_its_session_file_keeps_what_the_events_say() -> None:
    """A 500's message names no status: without the session file the failure has none."""
    events = CAPTURED["codex_500"]["events"]
    assert [(f.status, f.code) for f in codex_failures(events)] == [(None, "connection_error")]
    events = CAPTURED["codex_401"]["events"]
    assert [f.status for f in codex_failures(events)] == [401]


def test_codex_status_from_the_session_files_error_names() -> None:
    events = [{"type": "turn.failed", "error": {"message": "Busy."}}, {"type": "turn.failed", "error": {}}]
    infos = {"Busy.": "server_overloaded"}
    assert [(f.status, f.message) for f in codex_failures(events, infos)] == [(529, "Busy."), (None, "")]
    assert [f.status for f in codex_failures(events[:1], {"Busy.": {"other": {"http_status_code": 502}}})] == [502]
    assert [f.status for f in codex_failures(events[:1], {"Busy.": "usage_limit_exceeded"})] == [None]


def test_codex_stopped_while_reconnecting_reports_the_failure_it_was_retrying() -> None:
    events = CAPTURED["codex_529_default_retries"]["events"]
    cut = [*events[: next(i for i, e in enumerate(events) if e.get("type") == "error") + 1]]
    assert cut[-1]["message"].startswith("Reconnecting... 1/5 (")
    failures = codex_failures(cut)
    assert [(f.status, f.message) for f in failures] == [(529, events[-1]["error"]["message"])]


def test_codex_without_failures(tmp_path: Path) -> None:
    events = [{"type": "thread.started", "thread_id": "t-1"}, {"type": "turn.completed", "usage": {}}]
    summary = codex("gpt-5.1-codex").summarize(events, tmp_path, tmp_path)
    assert (summary.failures, summary.session_id) == ([], "t-1")


@pytest.mark.parametrize(
    ("case", "status", "code", "hint"),
    [
        ("mini_529", 529, "overloaded", None),
        ("mini_429_retry_after", 429, "rate_limit", 1.0),
        ("mini_401", 401, "http_401", None),
    ],
)
def test_mini_failures_from_captured_events(case: str, status: int, code: str, hint: float | None) -> None:
    events = CAPTURED[case]["events"]
    summary = summarize_mini_events(events)
    assert [(f.status, f.code, f.retry_after_s) for f in summary.failures] == [(status, code, hint)]
    assert summary.session_id == events[0]["session_id"]
    assert CAPTURED[case]["requests"] == (1 if status == 401 else 1 + MODEL_CLIENT_RETRIES)


def test_mini_failure_message_is_cut_to_500_characters() -> None:
    events = [{"type": "error", "status": 503, "message": "x" * 2000, "retry_after_s": -1}]
    (failure,) = summarize_mini_events(events).failures
    assert (len(failure.message), failure.retry_after_s, failure.code) == (500, None, "server_error")


# ----------------------------------------------------------------------------- retry hints
def test_retry_after_headers() -> None:
    assert retry_after_s({"Retry-After-Ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_s({"Retry-After": "7"}) == 7.0
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:30 GMT"}, now=1445412500.0) == 10.0
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:30 GMT"}, now=1445412600.0) == 0.0
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({"retry-after": "-3"}) is None
    assert retry_after_s(None) is None


def test_retry_after_in_bodies() -> None:
    openrouter = {
        "error": {
            "code": 429,
            "message": "Rate limit exceeded",
            "metadata": {"headers": {"Retry-After": "12", "X-RateLimit-Reset": "1700000030000"}, "retry_after": 5},
        }
    }
    assert retry_after_from_body(openrouter, now=1700000000.0) == 30.0
    assert retry_after_from_body({"error": {"metadata": {"retry_after_seconds": 17}}}) == 17.0
    assert retry_after_from_body(GOOGLE_ERROR) == 30.0
    assert retry_after_from_body(GATEWAY_BODY) == 30.0
    codex_message = CAPTURED["codex_503_google_body"]["events"][-1]["error"]["message"]
    assert retry_after_from_body(codex_message) == 30.0  # Google's error as text, then ", url: ..."
    assert retry_after_from_body("unexpected status 503: upstream down") is None
    assert retry_after_from_body({"error": {"details": [{"@type": "other", "retryDelay": "9s"}]}}) is None
    assert retry_after_from_body(None) is None
