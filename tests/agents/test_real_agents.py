"""End-to-end runs of the REAL agent programs against a scripted model server.

Each harness runs its actual program (Claude Code, Codex, mini-swe-agent, pi) in a fresh work folder.
The server scripts a two-turn session: turn 1 calls the program's shell tool with a command that
computes and writes ``eval_answer.json``; turn 2 ends the session.  The program executes the
command itself: the harness never writes the answer file.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rayeval.agents import claude_code, codex, mini_swe_agent, pi
from rayeval.agents.claude_code import BACKGROUND_PROCESS_NOTE

from .conftest import FAKE_KEY, OTHER_SECRET, PROGRAM_TIMEOUT, files_text

FALLBACK_KEY = "sk-test-FALLBACK-789"
PI_PRICES = {"input": 3.0, "output": 15.0, "cacheRead": 0.3, "cacheWrite": 3.75}  # USD per million tokens


@dataclass
class Harness:
    name: str
    available: str  # fixture that skips/fails when the program is missing
    protocol: str  # what the fake server speaks to it
    make: Callable[..., Any]
    finish: dict[str, str]  # the scripted last turn
    credential_header: str


HARNESSES = {
    "claude": Harness(
        "claude-code",
        "claude_available",
        "anthropic",
        lambda url, **kw: claude_code("claude-sonnet-4-5", base_url=url, **kw),
        {"text": "Finished: the answer is in eval_answer.json."},
        "x-api-key",
    ),
    "codex": Harness(
        "codex",
        "codex_available",
        "responses",
        lambda url, **kw: codex("gpt-5.1-codex", base_url=url + "/v1", **kw),
        {"text": "Finished: the answer is in eval_answer.json."},
        "authorization",
    ),
    "mini": Harness(
        "mini-swe-agent",
        "mini_available",
        "chat",
        lambda url, **kw: mini_swe_agent("openai/gpt-test", base_url=url + "/v1", **kw),
        {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"},
        "authorization",
    ),
    "pi": Harness(
        "pi",
        "pi_available",
        "anthropic",
        lambda url, **kw: pi("anthropic/claude-sonnet-4-5", base_url=url, model_config={"cost": PI_PRICES}, **kw),
        {"text": "Finished: the answer is in eval_answer.json."},
        "x-api-key",
    ),
}

PROMPT = "Compute the answer and write it as JSON to eval_answer.json in the working directory."


def answer_command(token: str) -> str:
    """Writes the answer (computed by the shell, so only an executed command produces it) and
    reports which secrets the tool's environment could see, and the shell's process group."""
    return (
        f'printf \'{{"answer": %d, "token": "%s"}}\' $((6*7)) {token} > eval_answer.json && '
        'echo "tool-ran-$((6*7)) gh=[${GITHUB_TOKEN:-unset}] fb=[${ANTHROPIC_API_KEY_FALLBACKS:-unset}] '
        'key=[${ANTHROPIC_API_KEY:-}${OPENAI_API_KEY:-}] pgid=[$(cut -d" " -f5 /proc/$$/stat)]"'
    )


def assert_no_secrets(out: dict, work_dir: Path) -> None:
    blob = json.dumps(out)
    for name, text in files_text(work_dir).items():
        for secret in (FAKE_KEY, FALLBACK_KEY, OTHER_SECRET):
            assert secret not in text, f"{secret} leaked into {name}"
    for secret in (FAKE_KEY, FALLBACK_KEY, OTHER_SECRET):
        assert secret not in blob, f"{secret} leaked into the returned answer/metadata"


@pytest.mark.parametrize("key", list(HARNESSES))
def test_scripted_session_end_to_end(key: str, request: pytest.FixtureRequest, model_server, tmp_path: Path) -> None:
    h = HARNESSES[key]
    request.getfixturevalue(h.available)
    token = uuid.uuid4().hex[:12]
    server = model_server([{"command": answer_command(token)}, h.finish], echo_credential=True)
    work_dir = tmp_path / "work"
    (work_dir / "data").mkdir(parents=True)
    (work_dir / "data" / "input.txt").write_text("6 7\n")

    agent = h.make(server.url, timeout=PROGRAM_TIMEOUT)
    out = agent(PROMPT, work_dir)
    md = out["metadata"]

    # The answer, read from the file the program's own tool execution wrote.
    assert out["answer"] == {"answer": 42, "token": token}, md.get("error_details")
    assert json.loads((work_dir / "eval_answer.json").read_text()) == {"answer": 42, "token": token}
    traj_text = json.dumps(md["trajectory"])
    assert "tool-ran-42" in traj_text  # the command's output, not its text: it really ran
    assert md["harness"] == h.name and md["exit_code"] == 0 and md["timed_out"] is False
    assert md["duration_s"] > 0 and "error_details" not in md

    # Accounting matches what the "provider" reported.
    scripted = server.scripted_replies(h.protocol)
    assert len(scripted) == 2
    total_in, total_out = server.total_usage(h.protocol)
    assert (md["input_tokens"], md["output_tokens"]) == (total_in, total_out)
    assert md["usage"]["input_tokens"] == total_in
    assert md["n_turns"] == 2
    assert md["n_steps"] >= 1
    if key == "claude":
        assert md["cost_usd"] > 0 and md["cost_source"] == "provider_reported"
        assert md["session_id"]
    elif key == "codex":
        assert md["cost_usd"] == pytest.approx((total_in * 1.25 + total_out * 10.0) / 1e6)
        assert md["thread_id"]
    elif key == "pi":  # pi prices the calls with the model's configured prices
        assert md["cost_usd"] == pytest.approx((total_in * 3.0 + total_out * 15.0) / 1e6)
        assert md["cost_source"] == "configured_prices" and md["session_id"]
    else:
        assert md["exit_status"] == "Submitted"
        assert "cost_usd" in md

    # Trajectory: non-empty, on disk, and the same as returned.
    assert md["trajectory"]
    assert json.loads((work_dir / "trajectory.json").read_text()) == md["trajectory"]
    assert (work_dir / "agent_output.log").read_text().strip()

    # Keys: reached the program through its environment, appear nowhere we keep.
    assert any(r.headers.get(h.credential_header) in (FAKE_KEY, f"Bearer {FAKE_KEY}") for r in server.requests), (
        "the program did not authenticate with the key from its environment"
    )
    assert "***" in traj_text  # the server echoed the key back; it was masked
    assert "gh=[unset]" in traj_text and "fb=[unset]" in traj_text  # unrelated secrets never reached it
    assert not any(FAKE_KEY in arg for arg in md["command"])
    assert_no_secrets(out, work_dir)

    # Offline: nothing but the model endpoint was contacted.
    assert server.external_attempts == []

    # Claude Code's prompt ends with latch-eval-tools' note on background processes; no other's
    asked = json.dumps([request.body for request in server.model_requests()])
    assert (json.dumps(PROMPT + BACKGROUND_PROCESS_NOTE)[1:-1] in asked) == (key == "claude")
    assert ("a background process is still running" in asked) == (key == "claude")

    if key == "mini":  # our own command runner keeps the caller's process group
        assert f"pgid=[{os.getpgid(0)}]" in traj_text


@pytest.mark.parametrize("key", list(HARNESSES))
def test_program_that_never_writes_the_answer(
    key: str, request: pytest.FixtureRequest, model_server, tmp_path: Path
) -> None:
    h = HARNESSES[key]
    request.getfixturevalue(h.available)
    server = model_server([{"text": "I cannot do this task."}])
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    options: dict[str, Any] = {"timeout": PROGRAM_TIMEOUT}
    if key == "mini":
        options["step_limit"] = 1  # a reply without a tool call is a format error; then stop
    out = h.make(server.url, **options)(PROMPT, work_dir)
    md = out["metadata"]
    assert out["answer"] is None
    details = md["error_details"]
    assert "no final answer" in details["error"]
    assert details["timed_out"] is False
    assert details["log_tail"]
    assert md["trajectory"]
    assert not (work_dir / "eval_answer.json").exists()
    assert_no_secrets(out, work_dir)
    assert server.external_attempts == []


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(int(entry))
    return found


@pytest.mark.parametrize("key", list(HARNESSES))
def test_timeout_kills_the_program_tree(key: str, request: pytest.FixtureRequest, model_server, tmp_path: Path) -> None:
    h = HARNESSES[key]
    request.getfixturevalue(h.available)
    seconds = f"{300 + int(uuid.uuid4().int % 1000)}.25"  # a unique sleep to look for afterwards
    server = model_server([{"command": f"echo started && sleep {seconds} && echo finished"}, h.finish])
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    start = time.monotonic()
    # mini-swe-agent needs room for a slow start (the litellm import) on a loaded machine; the
    # CLIs must be cut off before their own ~10 s per-command limit ends the sleep for them
    out = h.make(server.url, timeout=15 if key == "mini" else 6)(PROMPT, work_dir)
    elapsed = time.monotonic() - start
    md = out["metadata"]
    assert out["answer"] is None
    assert md["timed_out"] is True and md["error_details"]["timed_out"] is True
    assert "timed out" in md["error_details"]["error"]
    assert elapsed < 45
    assert len(server.scripted_replies(h.protocol)) == 1  # it was still running the command
    deadline = time.monotonic() + 5
    while _processes_with(f"sleep {seconds}") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_with(f"sleep {seconds}") == [], "the agent's tool process outlived the timeout"


def test_claude_max_turns(request: pytest.FixtureRequest, model_server, tmp_path: Path) -> None:
    request.getfixturevalue("claude_available")
    server = model_server([{"command": "echo one"}, {"command": "echo two"}, {"text": "done"}])
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    out = claude_code("claude-sonnet-4-5", base_url=server.url, max_turns=1, timeout=PROGRAM_TIMEOUT)(PROMPT, work_dir)
    md = out["metadata"]
    assert "--max-turns" in md["command"]
    assert md["result_subtype"] == "error_max_turns"
    assert len(server.scripted_replies("anthropic")) == 1
    assert out["answer"] is None and "exited with code" in md["error_details"]["error"]


def test_claude_codes_helper_models_are_the_units_model(claude_available, model_server, tmp_path: Path) -> None:
    """Its side tasks and subagents (Haiku by default) run on the unit's model: the gateway lets
    a unit call its own model only."""
    server = model_server([{"command": "echo helpers=[$ANTHROPIC_DEFAULT_HAIKU_MODEL,$CLAUDE_CODE_SUBAGENT_MODEL]"}])
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    out = claude_code("anthropic/claude-sonnet-4-5", base_url=server.url, timeout=PROGRAM_TIMEOUT)(PROMPT, work_dir)
    assert "helpers=[claude-sonnet-4-5,claude-sonnet-4-5]" in json.dumps(out["metadata"]["trajectory"])
    assert {request.body["model"] for request in server.model_requests()} == {"claude-sonnet-4-5"}


def test_mini_swe_speaks_the_benchmark_convention(mini_available, model_server, tmp_path: Path) -> None:
    """Under latch-eval-tools' benchmark names the packaged templates tell the model about
    analysis_output.json and RUN_COMPLETE (never the legacy names); the session ends on
    RUN_COMPLETE and the answer is read from analysis_output.json."""
    from rayeval.unit.context import AgentContext

    server = model_server(
        [{"command": "printf '{\"answer\": 42}' > analysis_output.json"}, {"command": "echo RUN_COMPLETE"}]
    )
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    agent = mini_swe_agent("openai/gpt-test", base_url=server.url + "/v1", timeout=PROGRAM_TIMEOUT)
    out = agent(PROMPT, work_dir, context=AgentContext(eval_id="e", convention="benchmark"))

    assert out["answer"] == {"answer": 42}, out["metadata"].get("error_details")
    assert out["metadata"]["exit_status"] == "Submitted"
    told = json.dumps(server.model_requests()[0].body)
    # the task (PROMPT) keeps its own words; rayeval's instructions use the benchmark names
    assert told.count("eval_answer.json") == PROMPT.count("eval_answer.json")
    assert "analysis_output.json" in told and "echo RUN_COMPLETE" in told
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" not in told


def test_mini_swe_keeps_user_templates_as_given(mini_available, model_server, tmp_path: Path) -> None:
    """A template the user gave is not rewritten (as latch-eval-tools merges the caller's agent
    config over its rewritten one); only the completion marker placeholder takes the convention."""
    from rayeval.unit.context import AgentContext

    server = model_server(
        [{"command": "printf '{\"answer\": 1}' > eval_answer.json"}, {"command": "echo RUN_COMPLETE"}]
    )
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    template = "{{task}}\nWrite eval_answer.json, then run `echo {{completion_marker}}`."
    agent = mini_swe_agent(
        "openai/gpt-test", base_url=server.url + "/v1", timeout=PROGRAM_TIMEOUT, instance_template=template
    )
    out = agent("Answer 1.", work_dir, context=AgentContext(eval_id="e", convention="benchmark"))

    assert out["answer"] == {"answer": 1}
    told = json.dumps(server.model_requests()[0].body)
    assert "Write eval_answer.json, then run `echo RUN_COMPLETE`" in told
