"""Refusals as the reference runner (latch-eval-tools 0.4.54) judges them, case by case, and
Codex's filtered reply it was still retrying when the unit's time ran out: the real pinned
Codex against the scripted server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rayeval.agents import codex, detect_refusal
from rayeval.agents._refusal import CODE_CHARS, VERDICT_NAME
from rayeval.agents.resolve import program_class

from .test_refusals import BIO, DECLINED, PROMPT

POLICY = "I am unable to respond due to Anthropic usage policy."
GENERIC = "Refusal: this request violates our safety policy."
LISTING = "/root/.pi/.refusal_patcher_status.json\t4 KB"
BIO_EVENT = {"type": "turn.failed", "error": {"message": BIO}}


#: the reference runner's own cases (its tests/test_llm_refusal.py and
#: test_cli_refusal_fallback.py), each with rayeval's verdict: provider, code, message
@pytest.mark.parametrize(
    ("found", "expected"),
    [
        ({"trajectory": {"messages": [{"text": POLICY}]}}, ("anthropic", "usage_policy", POLICY)),
        ({"trajectory": [{"text": POLICY}]}, ("anthropic", "usage_policy", POLICY)),
        ({"trajectory": {"finish_reason": "content_filter"}}, ("openai", "content_filter", "finish_reason content_filter")),
        ({"trajectory": {"messages": [{"text": LISTING}, {"text": GENERIC}]}}, ("unknown", "refusal", GENERIC)),
        ({"sidecar": [{"provider": "anthropic", "raw_reason": "safety"}]}, ("anthropic", "safety", "Model refusal (safety)")),
        ({"sidecar": [{"provider": "xai", "raw_reason": "safety"}]}, ("unknown", "safety", "Model refusal (safety)")),
        ({"output": BIO_EVENT["error"]}, ("openai", "biological_risk", BIO)),
        ({"trajectory": [BIO_EVENT]}, ("openai", "biological_risk", BIO)),
        ({"error": BIO}, ("openai", "biological_risk", BIO)),
        ({"error": json.dumps(BIO_EVENT)}, ("openai", "biological_risk", BIO)),
        # a refused result with nothing said: the message says what was seen, not an id or a type
        ({"trajectory": [{"type": "result", "subtype": "success", "stop_reason": "refusal", "result": "",
                          "session_id": "session-1"}]}, ("anthropic", "stop_reason_refusal", "stop_reason refusal")),
        ({"error": "Read about configuring a fallback model for Claude."}, ("anthropic", "refusal", None)),
        # an error's code names it; its message is what the provider said
        ({"error": json.dumps({"code": "invalid_prompt", "message": "OpenAI limited access for safety reasons"})},
         ("openai", "invalid_prompt", "OpenAI limited access for safety reasons")),
        # a value's own code is the verdict's, whatever named the refusal: the first non-empty
        # string so named, a mapping's own before those nested in it
        ({"trajectory": {"code": "policy_violation", "message": POLICY}}, ("anthropic", "policy_violation", POLICY)),
        ({"output": {"error": {"code": "nested"}, "code": "own", "message": GENERIC}}, ("unknown", "own", GENERIC)),
        ({"trajectory": [{"code": ""}, {"error": {"code": 400}}, {"code": "second", "finish_reason": "content_filter"}]},
         ("openai", "second", None)),
    ],
)  # fmt: skip
def test_the_reference_runners_cases(found: dict, expected: tuple[str, str, str | None]) -> None:
    verdict = detect_refusal(**found)
    assert verdict is not None
    provider, code, message = expected
    assert (verdict.provider, verdict.code) == (provider, code)
    assert message is None or verdict.message == message
    source = next(name for name in ("sidecar", "trajectory", "output", "error") if name in found)
    assert verdict.source == {"sidecar": "refusal_sidecar", "trajectory": "trajectory"}.get(source, "agent_output")


@pytest.mark.parametrize(
    "found",
    [
        {"trajectory": {"answer": "42 cells"}},
        {"trajectory": [{"text": "42 cells"}]},
        {"trajectory": {"messages": [{"text": LISTING}, {"text": "Applying the sample QC policy."}, {"text": "Done"}]}},
        {"trajectory": [{"type": "result", "subtype": "success", "stop_reason": "end_turn", "result": "done"}]},
        {"output": {"message": "Analyze possible biological risk in the provided dataset."}},
        {"output": {"message": "Connection failed: error sending request"}},
    ],
)  # fmt: skip
def test_the_reference_runners_cases_without_a_refusal(found: dict) -> None:
    assert detect_refusal(**found) is None


def _said(harness: str, text: str) -> list[dict[str, Any]]:
    """An event list in which the program's model says ``text`` as its reply."""
    if harness == "claude-code":
        return [{"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}}]
    if harness == "codex":
        return [{"type": "item.completed", "item": {"type": "agent_message", "text": text}}]
    if harness == "pi":
        message = {"role": "assistant", "content": [{"type": "text", "text": text}], "stopReason": "stop"}
        return [{"type": "message_end", "message": message}]
    return [{"role": "assistant", "content": text}]


@pytest.mark.parametrize("harness", ["claude-code", "codex", "mini-swe-agent", "pi"])
def test_a_refusal_no_provider_names_in_each_programs_reply(harness: str) -> None:
    """The reference runner's one-message rule (``refusal`` with ``policy`` or ``safety``) holds
    for what each program's model says; the halves in two replies make none."""
    found = program_class(harness).refusal_in(_said(harness, GENERIC))
    assert found is not None and (found.provider, found.code, found.message) == ("unknown", "refusal", GENERIC)
    assert program_class(harness).refusal_in(_said(harness, LISTING) + _said(harness, "The QC policy.")) is None


#: Codex's reconnects of a failed stream, raised from the one the runner sets: the filtered
#: replies are still being retried when the unit's time runs out
RETRY_ON = {"model_providers": {"rayeval": {"stream_max_retries": 50}}}


def test_a_filtered_reply_codex_was_still_retrying_at_the_deadline(
    codex_available, model_server, tmp_path: Path
) -> None:
    """Every reply is cut by OpenAI's filter; Codex reconnects (backing off) until the unit's
    time ends: no failed turn says so, the refusal is found all the same."""
    server = model_server([{"text": DECLINED, "stop": "content_filter"}] * 8)
    work_dir = tmp_path / "work"
    agent = codex("gpt-5.1-codex", base_url=server.url + "/v1", timeout=10, config=RETRY_ON)
    md = agent(PROMPT, work_dir)["metadata"]
    events = md["trajectory"]
    assert md["timed_out"], events
    assert not any(event.get("type") in ("turn.failed", "turn.completed") for event in events)
    assert str(events[-1].get("message")).startswith("Reconnecting... "), events[-3:]
    assert (md["refusal"]["provider"], md["refusal"]["code"]) == ("openai", "content_filter")
    assert "content_filter" in md["refusal"]["message"] and DECLINED in md["refusal"]["excerpt"]
    assert md["refusal"]["source"] == "trajectory"
    assert json.loads((work_dir / VERDICT_NAME).read_text()) == md["refusal"]
    assert md["run_summary"]["refusal"] == "detected"


def test_hostile_verdicts_fit_the_reference_runners_completion_bound() -> None:
    """The reference runner bounds a verdict in JSON bytes so that it fits a 32 KiB completion;
    rayeval's bounds in characters (MESSAGE_CHARS, EXCERPT_CHARS, CODE_CHARS) keep the escaped,
    multibyte worst case within it too; a cut field ends with "…", as the reference runner's."""
    hostile = ("\x01" * 20_000) + ('"\\🧪' * 20_000)
    verdicts = [
        detect_refusal(trajectory={"code": hostile, "message": f"{POLICY} {hostile}"}),
        detect_refusal(
            sidecar=[{"provider": "anthropic", "raw_reason": hostile, "explanation": f"{POLICY} {hostile}"}]
        ),
        detect_refusal(error=json.dumps({"code": "invalid_prompt", "message": f"OpenAI limited access {hostile}"})),
    ]
    for verdict in verdicts:
        assert verdict is not None and verdict.message.endswith("…")
        assert len(json.dumps(verdict.as_dict(), ensure_ascii=False).encode()) <= 32_768 // 2
    # the trajectory's own code and the sidecar's reason, cut as the reference runner cuts them
    assert [len(v.code) for v in verdicts if v is not None and v.code.endswith("…")] == [CODE_CHARS, CODE_CHARS]
