"""The REAL programs' run summaries and their ends, as latch-eval-tools 0.4.54's runner gives
them: ``refusal_verdict.json`` on every run, an empty run's unknown counts, each provider's own
token counts, mini-swe-agent's model calls as its steps and its run without a model reply,
Codex's function calls as its steps, a provider cooldown that oversleeps the unit's deadline,
and Claude Code's ``--effort max``. Each against the scripted loopback model server."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from rayeval.agents import _base, _recovery, claude_code, codex, mini_swe_agent, pi
from rayeval.agents._refusal import VERDICT_NAME
from rayeval.agents.resolve import agent_ref
from rayeval.unit.run_summary import RunSummary
from rayeval.unit.runner import EvalRunner

from .conftest import PROGRAM_TIMEOUT, answer_42_evals
from .test_pi import WRITE_ANSWER
from .test_real_agents import PROMPT, answer_command

FINISH = {"text": "Finished: the answer is in eval_answer.json."}


def _summary(metadata: dict) -> RunSummary:
    summary = RunSummary.model_validate(metadata["run_summary"])
    assert summary.version == 2
    return summary


@pytest.mark.parametrize("program", ["claude-code", "pi"])
def test_an_anthropic_summary_keeps_its_counts_with_the_cache_apart(
    program: str, request: pytest.FixtureRequest, model_server, tmp_path: Path
) -> None:
    """Claude Code and pi count as Anthropic does: ``input_tokens`` leaves out the cache reads
    and writes, which have fields of their own; the metadata's counts every prompt token."""
    request.getfixturevalue("claude_available" if program == "claude-code" else "pi_available")
    server = model_server([{"command": answer_command("cache")}, FINISH], cache_read_tokens=300, cache_write_tokens=20)
    work_dir = tmp_path / "work"
    if program == "claude-code":
        agent = claude_code("claude-sonnet-4-5", base_url=server.url, timeout=PROGRAM_TIMEOUT)
    else:
        agent = pi("anthropic/claude-sonnet-4-5", base_url=server.url, timeout=PROGRAM_TIMEOUT)
    out = agent(PROMPT, work_dir)
    md = out["metadata"]
    assert out["answer"] == {"answer": 42, "token": "cache"}, md.get("error_details")
    uncached, output = server.total_usage("anthropic")
    summary = _summary(md)
    assert summary.usage.input_tokens == uncached and summary.usage.output_tokens == output
    assert (summary.usage.cache_read_tokens, summary.usage.cache_write_tokens) == (600, 40)
    assert md["input_tokens"] == md["usage"]["input_tokens"] == uncached + 640
    assert (summary.n_turns, summary.n_steps, summary.refusal) == (2, 1, "not_detected")
    assert json.loads((work_dir / VERDICT_NAME).read_text()) is None  # written on every run


def test_the_gateways_cost_of_a_cached_claude_code_run_is_what_claude_code_reports(
    claude_available, model_server, tmp_path: Path
) -> None:
    """Each turn reads 3,000 prompt tokens from the cache and writes 400 to it: the gateway
    prices them at claude-sonnet-4-5's cache prices, as Claude Code prices its own run, so the
    row's cost is the program's to the cent and no claim differs (priced as fresh input, the
    gateway's cost was 2.2 times the program's)."""
    server = model_server([{"command": WRITE_ANSWER}, FINISH], cache_read_tokens=3000, cache_write_tokens=400)
    evals = answer_42_evals(tmp_path / "evals", "cached", PROMPT)
    runner = EvalRunner(evals / "e.json", work_root=tmp_path / "w", cache_dir=tmp_path / "c", run_id="r")
    args = {"base_url": server.url, "timeout": str(PROGRAM_TIMEOUT), "env": '{"CLAUDE_CODE_MAX_RETRIES": "0"}'}
    result = runner.run(agent_ref("claude-code"), model="claude-sonnet-4-5", agent_args=args, isolation="sandbox")
    assert result.status == "passed", result.error_message
    md = result.metadata
    assert (md["cost_source"], md["run_summary"]["usage"]["cache_read_tokens"]) == ("provider_reported", 6000)
    assert result.agent_cost_usd == pytest.approx(md["cost_usd"], abs=1e-9)
    assert "claims_differ_from_gateway" not in md


def test_a_claude_code_run_that_left_no_events_has_unknown_counts(
    claude_available, model_server, tmp_path: Path
) -> None:
    server = model_server([FINISH])
    work_dir = tmp_path / "work"
    agent = claude_code("claude-sonnet-4-5", base_url=server.url, timeout=PROGRAM_TIMEOUT, extra_args=["--no-such"])
    md = agent(PROMPT, work_dir)["metadata"]
    assert md["trajectory"] == [] and md["exit_code"] not in (0, None)  # the program refused its command line
    summary = _summary(md)
    assert (summary.n_turns, summary.n_steps, summary.refusal) == (None, None, "not_evaluated")
    assert (md["n_turns"], md["n_steps"]) == (None, None)
    assert json.loads((work_dir / VERDICT_NAME).read_text()) is None
    assert server.model_requests() == []


def test_claude_code_runs_with_max_effort_unless_told_otherwise(claude_available, model_server, tmp_path: Path) -> None:
    """On a model of adaptive thinking (latch-eval-tools' Claude models) the program sends its
    effort with every main-loop call."""
    for effort in ("max", "low"):
        server = model_server([{"command": answer_command(effort)}, FINISH])
        options = {} if effort == "max" else {"effort": effort}  # the agent arg turns it down
        agent = claude_code("claude-opus-4-8", base_url=server.url, timeout=PROGRAM_TIMEOUT, **options)
        out = agent(PROMPT, tmp_path / effort)
        assert out["answer"] == {"answer": 42, "token": effort}, out["metadata"].get("error_details")
        command = out["metadata"]["command"]
        assert command[command.index("--effort") + 1] == effort
        sent = [r.body.get("output_config") for r in server.model_requests() if r.body.get("tools")]
        assert sent and all(config == {"effort": effort} for config in sent), sent


def test_mini_swe_agent_counts_responses_api_replies_and_its_model_calls(
    mini_available, model_server, tmp_path: Path
) -> None:
    server = model_server(
        [{"command": answer_command("responses")}, {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}],
        cache_read_tokens=400,
    )
    work_dir = tmp_path / "work"
    agent = mini_swe_agent(
        "openai/gpt-test", base_url=server.url + "/v1", model_class="litellm_response", timeout=PROGRAM_TIMEOUT
    )
    out = agent(PROMPT, work_dir)
    md = out["metadata"]
    assert out["answer"] == {"answer": 42, "token": "responses"}, md.get("error_details")
    assert len(server.scripted_replies("responses")) == 2
    total_in, total_out = server.total_usage("responses")
    summary = _summary(md)
    # OpenAI's own counts: input_tokens includes the cache reads
    assert (summary.usage.input_tokens, summary.usage.output_tokens) == (total_in, total_out)
    assert summary.usage.cache_read_tokens == 800
    assert (summary.n_turns, summary.n_steps) == (2, 2)  # the agent's model calls, one action each
    assert md["input_tokens"] == total_in


#: OpenAI's rejection of a prompt, as its API sends it
INVALID_PROMPT = {
    "error": {
        "message": "Invalid prompt: we've limited access to this content for safety reasons.",
        "type": "invalid_request_error",
        "code": "invalid_prompt",
    }
}


@pytest.mark.parametrize(
    ("status", "body", "refusal"), [(401, None, "not_evaluated"), (400, INVALID_PROMPT, "detected")]
)
def test_a_mini_swe_agent_run_without_a_model_reply_is_empty(
    status: int, body: dict | None, refusal: str, mini_available, model_server, tmp_path: Path
) -> None:
    """The provider fails the first call: the driver reports the run's start and end, but no
    model reply was seen, so turns and steps are unknown and the run was not searched for a
    refusal (latch-eval-tools: not evaluated); a refusal in the driver's error is found all the
    same, as the agent's output (latch-eval-tools' agent error)."""
    server = model_server([{"command": answer_command("never")}])
    server.fail(status, 20, body=body)
    agent = mini_swe_agent("openai/gpt-test", base_url=server.url + "/v1", timeout=PROGRAM_TIMEOUT)
    md = agent(PROMPT, tmp_path / "work")["metadata"]
    assert [e["type"] for e in md["trajectory"] if e.get("type") in ("session", "error", "result")] == [
        "session",
        "error",
        "result",
    ]
    summary = _summary(md)
    assert (summary.n_turns, summary.n_steps, md["n_turns"], md["n_steps"]) == (None, None, None, None)
    assert summary.refusal == refusal
    if refusal == "detected":
        assert (md["refusal"]["provider"], md["refusal"]["code"]) == ("openai", "invalid_prompt")
        assert md["refusal"]["source"] == "agent_output"


def test_codex_counts_the_function_calls_of_its_session_file_as_steps(
    codex_available, model_server, tmp_path: Path
) -> None:
    """As latch-eval-tools counts them: a call of a tool that runs no command (``get_goal``) is a
    step, though the events show no item for it; turns stay model calls, and Codex's own turns
    (the prompts it answered, latch-eval-tools' turn count) are ``codex_turns``."""
    server = model_server([{"call": "get_goal", "arguments": "{}"}, {"command": answer_command("goal")}, FINISH])
    agent = codex("gpt-5.1-codex", base_url=server.url + "/v1", timeout=PROGRAM_TIMEOUT)
    out = agent(PROMPT, tmp_path / "work")
    md = out["metadata"]
    assert out["answer"] == {"answer": 42, "token": "goal"}, md.get("error_details")
    commands = [e for e in md["trajectory"] if e.get("type") == "item.completed" and "command" in e["item"]["type"]]
    assert len(commands) == 1  # the events show the command alone
    summary = _summary(md)
    assert (summary.n_turns, summary.n_steps, md["n_steps"], md["codex_turns"]) == (3, 2, 2, 1)


def test_a_cooldown_past_the_deadline_ends_the_unit_there(
    claude_available, model_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider's cooldown is decided within the unit's time, then overslept (a machine
    that stalls): the program is not started again, the time waited is the time it took, and
    the provider's failure stays in the error details."""
    timeout = 40.0
    skipped = [0.0]  # the stall, on a clock of its own: the test does not wait it out

    def oversleep(seconds: float) -> None:
        skipped[0] += seconds + timeout

    clock = SimpleNamespace(monotonic=lambda: time.monotonic() + skipped[0], sleep=oversleep)
    monkeypatch.setattr(_base, "time", clock)
    monkeypatch.setattr(_recovery, "time", clock)
    server = model_server([{"command": "echo first-turn-ran"}, {"command": answer_command("never")}, FINISH])
    server.fail(529, 1000, retry_after="0", after_turns=1)
    work_dir = tmp_path / "work"
    start = time.monotonic()
    agent = claude_code("claude-sonnet-4-5", base_url=server.url, timeout=timeout, provider_jitter_s=0)
    md = agent(PROMPT, work_dir)["metadata"]
    assert time.monotonic() - start < timeout + 30  # not started again: no second run, no kill
    details = md["error_details"]
    assert md["timed_out"] is True and details["timed_out"] is True
    assert (details["status"], details["code"]) == (529, "overloaded")
    assert details["provider_retry_stop_reason"] == "run_deadline"
    assert md["provider_retry_wait_s"] == details["provider_retry_wait_s"] >= timeout  # as long as it took
    assert sum(1 for e in md["trajectory"] if e.get("subtype") == "init") == 1  # one run of the program
    assert not any("Continue." in json.dumps(r.body.get("messages")) for r in server.model_requests())
    lines = (work_dir / "agent_output.log").read_text()
    assert "HARNESS: the provider's cooldown ran past the unit's deadline" in lines
