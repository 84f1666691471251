"""Refusals in each program's events, found by rayeval.agents._refusal, and the run summary a
program's row carries: the real programs against the scripted server whose model refuses,
and the detection on event lists of the programs' shapes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rayeval.agents import claude_code, codex, mini_swe_agent, pi
from rayeval.agents._refusal import EXCERPT_CHARS, MESSAGE_CHARS, VERDICT_NAME, reply_refusal
from rayeval.agents.resolve import program_class
from rayeval.unit.run_summary import RunSummary
from rayeval.unit.runner import provider_failure_details

from .conftest import PROGRAM_TIMEOUT

PROMPT = "Compute the answer and write it as JSON to eval_answer.json in the working directory."
DECLINED = "I can't help with that request."

#: each program, its scripted refusal turn, and the verdict it must give
PROGRAMS = {
    "claude": (
        "claude_available",
        lambda url, **kw: claude_code("claude-sonnet-4-5", base_url=url, **kw),
        {"text": DECLINED, "stop": "refusal"},  # twice: Claude Code goes on once after a refusal
        ("anthropic", "stop_reason_refusal"),
    ),
    "codex": (
        "codex_available",
        lambda url, **kw: codex("gpt-5.1-codex", base_url=url + "/v1", **kw),
        {"text": DECLINED, "stop": "content_filter"},  # Codex drops refusal parts, retries 5 times
        ("openai", "content_filter"),
    ),
    "mini": (
        "mini_available",
        lambda url, **kw: mini_swe_agent("openai/gpt-test", base_url=url + "/v1", step_limit=2, **kw),
        {"text": DECLINED, "stop": "content_filter"},
        ("openai", "content_filter"),
    ),
    "pi": (
        "pi_available",
        lambda url, **kw: pi("anthropic/claude-sonnet-4-5", base_url=url, **kw),
        {"text": DECLINED, "stop": "refusal"},
        ("anthropic", "stop_reason_refusal"),
    ),
}


@pytest.mark.parametrize("key", list(PROGRAMS))
def test_a_real_program_whose_model_refuses(key: str, request: pytest.FixtureRequest, model_server, tmp_path: Path):
    available, make, turn, (provider, code) = PROGRAMS[key]
    request.getfixturevalue(available)
    server = model_server([turn] * 8)
    work_dir = tmp_path / "work"
    out = make(server.url, timeout=PROGRAM_TIMEOUT)(PROMPT, work_dir)
    md = out["metadata"]
    events = json.dumps(md["trajectory"])[:3000]
    assert out["answer"] is None
    assert md.get("refusal") is not None, events
    assert (md["refusal"]["provider"], md["refusal"]["code"]) == (provider, code), events
    assert DECLINED in md["refusal"]["excerpt"]
    assert json.loads((work_dir / VERDICT_NAME).read_text()) == md["refusal"]
    # the model's answer, not the provider's failure: a failed row, never resumed
    assert md["provider_retry_count"] == 0 and provider_failure_details(md.get("error_details") or {}) is None
    summary = RunSummary.model_validate(md["run_summary"])
    assert summary.refusal == "detected" and summary.version == 2
    assert summary.duration_s is not None and summary.duration_s > 0


@pytest.mark.parametrize("key", list(PROGRAMS))
def test_a_real_program_that_answers_has_no_refusal(
    key: str, request: pytest.FixtureRequest, model_server, tmp_path: Path
):
    available, make, _, _ = PROGRAMS[key]
    request.getfixturevalue(available)
    finish = {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"} if key == "mini" else {"text": "Finished."}
    server = model_server([{"command": "echo '{\"answer\": 42}' > eval_answer.json"}, finish])
    work_dir = tmp_path / "work"
    out = make(server.url, timeout=PROGRAM_TIMEOUT)(PROMPT, work_dir)
    md = out["metadata"]
    assert out["answer"] == {"answer": 42}, md.get("error_details")
    assert "refusal" not in md and json.loads((work_dir / VERDICT_NAME).read_text()) is None  # written, null
    summary = RunSummary.model_validate(md["run_summary"])
    assert summary.refusal == "not_detected"
    assert (summary.n_turns, summary.usage.input_tokens) == (md["n_turns"], md["input_tokens"])
    assert summary.usage.output_tokens == md["output_tokens"] and summary.n_steps == md["n_steps"]
    assert summary.cost_usd == md["cost_usd"]


# ------------------------------------------------------------------ detection on event lists

CLAUDE_POLICY = (
    "API Error: Claude Code is unable to respond to this request, which appears to violate our Usage Policy "
    "(https://www.anthropic.com/legal/aup). Please double press esc to edit your last message."
)
CODEX_FILTERED_RETRY = {
    "type": "error",
    "message": "Reconnecting... 1/5 (stream disconnected before completion: Incomplete response returned, "
    "reason: content_filter)",
}
BIO = "This content was flagged for possible biological risk. If this seems wrong, try rephrasing your request."


def _pi_message(stop: str, text: str = "", error: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": [{"type": "text", "text": text}], "stopReason": stop}
    if error is not None:
        message["errorMessage"] = error
    return {"type": "message_end", "message": message}


@pytest.mark.parametrize(
    ("harness", "events", "expected"),
    [
        (  # Claude Code's result event of a refused request
            "claude-code",
            [{"type": "result", "subtype": "success", "is_error": True, "result": CLAUDE_POLICY}],
            ("anthropic", "usage_policy"),
        ),
        (
            "claude-code",
            [
                {
                    "type": "assistant",
                    "message": {"content": [{"type": "text", "text": "No."}], "stop_reason": "refusal"},
                }
            ],
            ("anthropic", "stop_reason_refusal"),
        ),
        ("codex", [{"type": "turn.failed", "error": {"message": BIO}}], ("openai", "biological_risk")),
        # a filtered reply Codex was still retrying when the run ended: nothing after the reconnect
        ("codex", [CODEX_FILTERED_RETRY], ("openai", "content_filter")),
        (
            "codex",
            [{"type": "turn.failed", "error": {"message": "Incomplete response returned, reason: content_filter"}}],
            ("openai", "content_filter"),
        ),
        (
            "codex",
            [{"type": "error", "message": "Invalid prompt: your prompt was flagged by OpenAI as violating policy"}],
            ("openai", "invalid_prompt"),
        ),
        (
            "mini-swe-agent",
            [
                {
                    "role": "assistant",
                    "content": "",
                    "extra": {"response": {"choices": [{"message": {"refusal": "No."}}]}},
                }
            ],
            ("openai", "refusal_content"),
        ),
        (
            "mini-swe-agent",
            [{"type": "result", "error": "litellm.ContentPolicyViolationError: the request was filtered"}],
            ("openai", "content_policy_violation"),
        ),
        ("pi", [_pi_message("error", error=CLAUDE_POLICY)], ("anthropic", "usage_policy")),
        ("pi", [_pi_message("sensitive", "No.")], ("anthropic", "stop_reason_sensitive")),
    ],
)
def test_refusals_in_each_programs_events(harness: str, events: list[dict], expected: tuple[str, str]) -> None:
    found = program_class(harness).refusal_in(events)
    assert found is not None and (found.provider, found.code) == expected


@pytest.mark.parametrize(
    ("harness", "events"),
    [
        # a tool's output and the model's own words about policies are no refusal
        (
            "claude-code",
            [
                {"type": "user", "message": {"content": [{"type": "tool_result", "content": CLAUDE_POLICY}]}},
                {"type": "assistant", "message": {"content": [{"type": "text", "text": "Applying the QC policy."}]}},
                {"type": "result", "subtype": "success", "is_error": False, "result": "Done."},
            ],
        ),
        ("codex", [{"type": "error", "message": "Connection failed: error sending request"}]),
        # a filtered reply Codex retried, and the retry answered (the turn ended, or a tool ran)
        ("codex", [CODEX_FILTERED_RETRY, {"type": "turn.completed", "usage": {}}]),
        ("codex", [CODEX_FILTERED_RETRY, {"type": "item.started", "item": {"type": "command_execution"}}]),
        ("codex", [{"type": "item.completed", "item": {"type": "agent_message", "text": "Possible biological risk."}}]),
        ("mini-swe-agent", [{"role": "user", "content": CLAUDE_POLICY}]),
        ("pi", [_pi_message("error", error="An unknown error occurred")]),
        ("pi", [{"type": "tool_execution_end", "result": {"content": [{"type": "text", "text": CLAUDE_POLICY}]}}]),
    ],
)
def test_no_refusal_in_ordinary_events(harness: str, events: list[dict]) -> None:
    assert program_class(harness).refusal_in(events) is None


def test_a_verdict_is_bounded() -> None:
    huge = "I am unable to respond due to Anthropic usage policy. " + "x" * 100_000
    found = program_class("pi").refusal_in([_pi_message("error", huge, error=huge)])
    assert found is not None
    assert len(found.message) <= MESSAGE_CHARS and len(found.excerpt) <= EXCERPT_CHARS


def test_replies_of_the_model_layer() -> None:
    assert reply_refusal("anthropic", "refusal", "No.").code == "stop_reason_refusal"  # type: ignore[union-attr]
    assert reply_refusal("openai", "stop", "", "I can't.").code == "refusal_content"  # type: ignore[union-attr]
    assert reply_refusal("openai", "content_filter", "").code == "content_filter"  # type: ignore[union-attr]
    assert reply_refusal("anthropic", "end_turn", "The usage policy of the dataset says ...") is None
    assert reply_refusal("openai", "stop", "42") is None
