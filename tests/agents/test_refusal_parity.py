"""Refusals as the reference runner (latch-eval-tools 0.4.54) judges them, case by case, and
Codex's filtered reply it was still retrying when the unit's time ran out: the real pinned
Codex against the scripted server."""

from __future__ import annotations

import json
from pathlib import Path

from rayeval.agents import codex
from rayeval.agents._refusal import VERDICT_NAME

from .test_refusals import DECLINED, PROMPT

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
    assert json.loads((work_dir / VERDICT_NAME).read_text()) == md["refusal"]
    assert md["run_summary"]["refusal"] == "detected"
