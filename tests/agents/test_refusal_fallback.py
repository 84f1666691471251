"""The REAL Claude Code program whose model refuses, against the scripted model server: the
gateway moves to the next fallback key on a refusal (``ANTHROPIC_KEY_FALLBACK_ON``), and
Claude Code's own model routing (``switchModelsOnFlag``, ``model_refusal_fallback``) gives the
row's effective model and each model's usage, as the gateway counted them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rayeval.agents import claude_code
from rayeval.agents.claude_code import ClaudeCodeAgent, model_routing
from rayeval.cli import main
from rayeval.gateway.accounting import Usage
from rayeval.gateway.server import ModelCalls, ModelUsage
from rayeval.unit.run_summary import run_summary, with_run_summary

from .conftest import FAKE_KEY, PROGRAM_TIMEOUT, answer_42_evals
from .test_real_agents import FALLBACK_KEY, PROMPT, answer_command

FINISH = {"text": "Finished: the answer is in eval_answer.json."}
#: the model Claude Code falls back to from claude-fable-5 when it refuses
FALLBACK_MODEL = "claude-opus-5"
#: the scripted server's refusals carry no category: the pinned program falls back on them too
CATCH_ALL = json.dumps({"CLAUDE_CODE_REFUSAL_FALLBACK_CATCH_ALL": "1"})


def _run(evals: Path, out: Path, model: str, *agent_args: str) -> tuple[int, dict[str, Any]]:
    args = [f"timeout={PROGRAM_TIMEOUT}", *agent_args]
    code = main(["run", str(evals), "--agent", "claude-code", "--models", model, "--output", str(out),
                 "--retries", "0", "--no-progress", *[x for a in args for x in ("--agent-arg", a)]])  # fmt: skip
    (row,) = pd.read_parquet(out).to_dict("records")
    return code, row


def test_a_refusal_moves_the_gateway_to_the_next_key_and_only_what_follows_is_judged(
    claude_available, model_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """latch's key fallback: the model refuses on the first key; the gateway asks again with the
    fallback key, Claude Code never sees the refusal, and the row is no refusal."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("ANTHROPIC_KEY_FALLBACK_ON", "refusal")
    server = model_server([{"command": answer_command("second-key")}, FINISH])
    server.refused_by.add(FAKE_KEY)
    evals = answer_42_evals(tmp_path / "evals", "refused", PROMPT)
    code, row = _run(evals, tmp_path / "out", "claude-sonnet-4-5", "base_url=" + server.url)
    assert code == 0 and row["passed"], row["error_message"]
    assert row["refusal"] is False
    metadata = json.loads(row["metadata_json"])
    assert metadata["gateway"]["refusal_fallbacks"] == 1 and metadata["gateway"]["refusals"] == []
    assert metadata["run_summary"]["refusal"] == "not_detected"  # the program never saw it
    keys = [r.headers.get("x-api-key") for r in server.model_requests()]
    assert keys[0] == FAKE_KEY and set(keys[1:]) == {FALLBACK_KEY}
    calls = json.loads(json.loads(row["artifacts_json"])["model_calls.json"])["calls"]
    assert calls[0]["refusal_fallback"] and row["n_model_calls"] == len(calls)  # the refused call is counted


def test_claude_codes_refusal_fallback_model_is_the_effective_model_with_each_models_usage(
    claude_available, model_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # claude-fable-5 refuses turn 0, then again when Claude Code goes on once; claude-opus-5 gets
    # the conversation with the refused reply in it: turn 1
    server = model_server([FINISH, {"command": answer_command("opus")}, FINISH])
    server.refused_by.add("claude-fable-5")
    evals = answer_42_evals(tmp_path / "evals", "routed", PROMPT)
    code, row = _run(
        evals, tmp_path / "out", "claude-fable-5", "base_url=" + server.url, "switch_models_on_flag=true",
        "env=" + CATCH_ALL,
    )  # fmt: skip
    assert code == 0 and row["passed"], row["error_message"]
    metadata = json.loads(row["metadata_json"])
    summary, seen = metadata["run_summary"], metadata["gateway"]["by_model"]
    assert summary["effective_model"] == FALLBACK_MODEL
    assert set(summary["usage_by_model"]) == set(seen) == {"claude-fable-5", FALLBACK_MODEL}
    # the gateway let the program's fallback model in after the refusals it relayed, and says so
    assert (metadata["gateway"]["fallback_model"], metadata["gateway"]["off_model_calls"]) == (FALLBACK_MODEL, 0)
    assert row["refusal"] is True  # the refusals were the unit's (relayed), though it went on
    for model, usage in summary["usage_by_model"].items():
        assert usage == seen[model]["usage"]
        served = [r for r in server.model_requests() if r.body["model"] == model]
        assert seen[model]["n_model_calls"] == len(served)
    routing = metadata["model_routing"]  # the program's own account: claims, kept beside
    assert (routing["initial_model"], routing["effective_model"]) == ("claude-fable-5", FALLBACK_MODEL)
    assert routing["fallback_occurred"] and routing["fallback_recovered"]
    assert routing["safety_fallbacks"][0]["original_model"] == "claude-fable-5"
    assert set(routing["per_model_usage"]) == set(seen)
    assert '"switchModelsOnFlag": true' in " ".join(metadata["command"])


def test_a_session_that_fell_back_resumes_on_its_fallback_model(claude_available, model_server, tmp_path: Path) -> None:
    """After claude-fable-5's refusals and the fallback (claude-opus-5 ran turn 1), an overload
    ends the run and the session resumes: on the fallback model, as Claude Code keeps a resumed
    session latch gives no ``--model``; put back on claude-fable-5, it would be refused again."""
    server = model_server([FINISH, {"command": "echo first-turn-ran"}, {"command": answer_command("opus")}, FINISH])
    server.refused_by.add("claude-fable-5")
    server.fail(529, 3, retry_after="0", after_turns=3)  # claude-opus-5's next call, and Claude Code's two retries
    agent = claude_code(
        "claude-fable-5", base_url=server.url, timeout=PROGRAM_TIMEOUT, provider_jitter_s=0,
        switch_models_on_flag=True, env=json.loads(CATCH_ALL),
    )  # fmt: skip
    out = agent(PROMPT, tmp_path / "work")
    md = out["metadata"]
    assert out["answer"] == {"answer": 42, "token": "opus"}, md.get("error_details")
    assert md["provider_retry_count"] == 1 and md["model_routing"]["fallback_occurred"]
    resumed = [r for r in server.model_requests() if "Continue." in json.dumps(r.body["messages"])]
    assert resumed and {r.body["model"] for r in resumed} == {FALLBACK_MODEL}
    assert [e["model"] for e in md["trajectory"] if e.get("subtype") == "init"] == ["claude-fable-5", FALLBACK_MODEL]


def test_with_model_switching_off_claude_code_stops_on_the_refusal(
    claude_available, model_server, tmp_path: Path
) -> None:
    server = model_server([{"command": answer_command("never")}, FINISH])
    server.refused_by.add("claude-fable-5")
    agent = claude_code(
        "claude-fable-5", base_url=server.url, timeout=PROGRAM_TIMEOUT, switch_models_on_flag=False,
        env=json.loads(CATCH_ALL),
    )  # fmt: skip
    md = agent(PROMPT, tmp_path / "work")["metadata"]
    assert {r.body["model"] for r in server.model_requests()} == {"claude-fable-5"}
    assert not md["model_routing"]["fallback_occurred"] and md["model_routing"]["terminal_stop_reason"] == "refusal"
    assert md["refusal"]["code"] == "stop_reason_refusal" and md["run_summary"]["refusal"] == "detected"


def test_the_option_takes_a_boolean_only() -> None:
    with pytest.raises(ValueError, match="switch_models_on_flag must be true or false"):
        claude_code("claude-fable-5", switch_models_on_flag=1)


#: latch's own events of a routed session (camelCase fields), two runs of it
LATCH_EVENTS: list[dict[str, Any]] = [
    {"type": "system", "subtype": "init", "model": "claude-fable-5"},
    {"type": "system", "subtype": "model_refusal_fallback", "trigger": "refusal", "originalModel": "claude-fable-5",
     "fallbackModel": "claude-opus-5", "apiRefusalCategory": "bio", "apiRefusalExplanation": "Biology classifier."},
    {"type": "assistant", "parent_tool_use_id": None, "message": {"model": "claude-opus-5", "content": []}},
    {"type": "result", "subtype": "success", "is_error": False, "stop_reason": "end_turn",
     "modelUsage": {"claude-fable-5": {"inputTokens": 100, "outputTokens": 0, "costUSD": 0.01},
                    "claude-opus-5": {"inputTokens": 200, "outputTokens": 50, "costUSD": 0.05}}},
    {"type": "result", "subtype": "success", "is_error": False, "stop_reason": "end_turn",
     "modelUsage": {"claude-opus-5": {"inputTokens": 300, "outputTokens": 75, "costUSD": 0.07}}},
]  # fmt: skip


def test_the_routing_claims_of_latchs_events() -> None:
    routing = model_routing(LATCH_EVENTS, "anthropic/claude-fable-5", True)
    assert (routing["initial_model"], routing["effective_model"]) == ("claude-fable-5", "claude-opus-5")
    assert routing["fallback_occurred"] and routing["fallback_recovered"]
    assert routing["safety_fallbacks"][0]["category"] == "bio"
    opus = routing["per_model_usage"]["claude-opus-5"]
    assert (opus["input_tokens"], opus["output_tokens"]) == (500, 125)
    assert opus["cost_usd"] == pytest.approx(0.12)
    refused = [LATCH_EVENTS[1], {"type": "result", "subtype": "success", "is_error": False, "stop_reason": "refusal"}]
    routing = model_routing(refused, "claude-fable-5", True)
    assert routing["fallback_occurred"] and not routing["fallback_recovered"]
    assert routing["effective_model"] == "claude-opus-5"


def test_every_resume_of_a_session_that_fell_back_names_its_fallback_model() -> None:
    """A chunk's continuation too; a session that did not fall back keeps the requested model,
    and a fallback model that reads as an option is never put on the command line."""
    agent = claude_code("anthropic/claude-fable-5", chunk_turns=5, state_dir="state")
    going_on = agent.resuming(LATCH_EVENTS)
    argv = going_on.chunk_argv(["claude"], Path("state"), 5, "session-1", fork=False)
    assert argv[argv.index("--model") + 1] == "claude-opus-5" and "--resume" in argv
    assert agent.resuming(LATCH_EVENTS[:1]) is agent
    forged = [{**LATCH_EVENTS[1], "fallbackModel": "--dangerously-load-development-channels"}]
    assert agent.resuming(forged) is agent


def test_a_restored_session_reads_its_fallback_from_its_own_transcript(tmp_path: Path) -> None:
    """The restored state's transcript of the session (the last fallback it records; a line that
    is no JSON skipped) chooses the model; another session's transcript, or a session id that
    reads as a pattern, chooses none."""
    agent = claude_code("claude-fable-5", chunk_turns=5)
    projects = tmp_path / "claude" / "projects"
    (projects / "-work-a").mkdir(parents=True)
    (projects / "-work-b").mkdir()
    opus, sonnet = LATCH_EVENTS[1], {**LATCH_EVENTS[1], "fallbackModel": "claude-sonnet-5"}
    (projects / "-work-a" / "session-1.jsonl").write_text(f"{json.dumps(sonnet)}\nnot json\n{json.dumps(opus)}\n")
    (projects / "-work-b" / "session-2.jsonl").write_text(json.dumps(sonnet) + "\n")
    assert agent.resuming(agent.restored_events(tmp_path, "session-1")).model == "claude-opus-5"
    assert agent.resuming(agent.restored_events(tmp_path, "session-3")) is agent
    assert agent.restored_events(tmp_path, "*") == []


def test_the_run_summarys_models_are_the_gateways_whatever_the_agent_claims() -> None:
    claimed = run_summary(duration_s=1.0, usage={"input_tokens": 1})
    claimed = {
        **claimed,
        "effective_model": "claude-fable-5",
        "usage_by_model": {"claude-fable-5": {"input_tokens": 1}},
    }
    opus = ModelCalls(n_model_calls=2, usage=Usage(input_tokens=500, output_tokens=125), cost_usd=None)
    counted = ModelUsage(n_model_calls=2, usage=opus.usage, cost_usd=None, by_model={FALLBACK_MODEL: opus},
                         last_model=FALLBACK_MODEL)  # fmt: skip
    summary = with_run_summary({"run_summary": claimed}, 1.0, counted)["run_summary"]
    assert summary["effective_model"] == FALLBACK_MODEL
    assert summary["usage_by_model"] == {FALLBACK_MODEL: opus.usage.as_dict()}
    assert with_run_summary({"run_summary": claimed}, 1.0)["run_summary"]["effective_model"] == "claude-fable-5"


@pytest.mark.parametrize(("trigger", "spare"), [(None, True), ("both", True), ("refusal", False)])
def test_an_agent_without_the_gateway_moves_on_a_rejected_key_unless_told_refusal_only(
    trigger: str | None, spare: bool
) -> None:
    environ = {"ANTHROPIC_API_KEY_FALLBACKS": json.dumps([FALLBACK_KEY])}
    if trigger is not None:
        environ["ANTHROPIC_KEY_FALLBACK_ON"] = trigger
    assert ClaudeCodeAgent.spare_keys(environ) == ([FALLBACK_KEY] if spare else [])
