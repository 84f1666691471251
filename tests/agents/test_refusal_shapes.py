"""Refusals in every shape the reference runner reads (a trajectory of any shape, an agent's
output object, its error, a pi refusal sidecar), and in a run that ended while its program
was still retrying after a refusal: the real programs against the scripted server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rayeval.agents import claude_code, detect_refusal, pi
from rayeval.agents._refusal import EXCERPT_CHARS, MESSAGE_CHARS, VERDICT_NAME

from .conftest import PROGRAM_TIMEOUT
from .test_refusals import BIO, PROMPT

POLICY = "I am unable to respond due to Anthropic usage policy."


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        ({"trajectory": {"messages": [{"text": POLICY}]}}, ("anthropic", "usage_policy")),
        ({"trajectory": {"finish_reason": "content_filter"}}, ("openai", "content_filter")),
        ({"trajectory": [{"type": "result", "stop_reason": "refusal", "result": ""}]}, ("anthropic", "stop_reason_refusal")),
        ({"trajectory": {"messages": [{"text": "Refusal: this request violates our safety policy."}]}}, ("unknown", "refusal")),
        ({"sidecar": [{"provider": "anthropic", "raw_reason": "safety"}]}, ("anthropic", "safety")),
        ({"output": {"message": BIO}}, ("openai", "biological_risk")),
        ({"trajectory": [{"type": "turn.failed", "error": {"message": BIO}}]}, ("openai", "biological_risk")),
        ({"error": BIO}, ("openai", "biological_risk")),
        ({"error": json.dumps({"type": "turn.failed", "error": {"message": BIO}})}, ("openai", "biological_risk")),
    ],
)  # fmt: skip
def test_a_refusal_in_each_shape(found: dict, expected: tuple[str | None, str]) -> None:
    verdict = detect_refusal(**found)
    assert verdict is not None and (verdict.provider, verdict.code) == expected


@pytest.mark.parametrize(
    "found",
    [
        {"trajectory": {"answer": "42 cells"}},
        # the halves of a marker pair in unrelated messages: an ls listing, and a policy of the task
        {"trajectory": {"messages": [{"text": "/root/.pi/.refusal_patcher_status.json\t4 KB"},
                                     {"text": "Applying the sample QC policy to the remaining pixels."}]}},
        {"output": {"message": "Analyze possible biological risk in the provided dataset."}},
        {"output": {"message": "Connection failed: error sending request"}},
        {"sidecar": []},
    ],
)  # fmt: skip
def test_no_refusal_in_ordinary_shapes(found: dict) -> None:
    assert detect_refusal(**found) is None


def test_the_sidecar_comes_first_and_every_verdict_is_bounded() -> None:
    hostile = '\x02"\\🧪' * 20_000
    verdict = detect_refusal(
        trajectory={"messages": [{"text": POLICY}]},
        sidecar=[{"provider": "google", "raw_reason": "SAFETY", "explanation": f"{POLICY} {hostile}"}],
    )
    assert verdict is not None and (verdict.provider, verdict.code) == ("google", "SAFETY")
    assert len(verdict.message) <= MESSAGE_CHARS and len(verdict.excerpt) <= EXCERPT_CHARS
    verdict = detect_refusal(trajectory={"code": hostile, "message": f"{POLICY} {hostile}"})
    assert verdict is not None and verdict.message.endswith("…") and len(verdict.excerpt) <= EXCERPT_CHARS


#: a pi extension that writes a refusal sidecar, as the reference runner's image has one do: a
#: record for each turn the model refused, beside pi's own folder
SIDECAR_EXTENSION = """
import { appendFileSync } from "node:fs";
import { dirname, join } from "node:path";

export default function (pi) {
  pi.on("turn_end", (event) => {
    const message = event.message || {};
    if (message.stopReason === "error" && /refused/.test(message.errorMessage || "")) {
      const record = { provider: "google", raw_reason: "SAFETY", explanation: message.errorMessage };
      appendFileSync(join(dirname(process.env.PI_CODING_AGENT_DIR), "refusal_events.jsonl"), JSON.stringify(record) + "\\n");
    }
  });
}
"""


def test_pis_refusal_sidecar_is_the_verdict(pi_available, model_server, tmp_path: Path) -> None:
    server = model_server([{"text": "unused"}] * 4)
    server.refused_by.add("claude-sonnet-4-5")
    extension = tmp_path / "refusal_sidecar.js"
    extension.write_text(SIDECAR_EXTENSION)
    work_dir = tmp_path / "work"
    agent = pi("anthropic/claude-sonnet-4-5", base_url=server.url, timeout=PROGRAM_TIMEOUT,
               extra_args=("--extension", str(extension)))  # fmt: skip
    md = agent(PROMPT, work_dir)["metadata"]
    assert (md["refusal"]["provider"], md["refusal"]["code"]) == ("google", "SAFETY"), md["trajectory"]
    assert json.loads((work_dir / VERDICT_NAME).read_text()) == md["refusal"]
    assert md["run_summary"]["refusal"] == "detected"


def test_a_refusal_claude_code_was_still_retrying_at_the_deadline(
    claude_available, model_server, tmp_path: Path
) -> None:
    """The model refuses; Claude Code goes on once after it, and that call meets an overload it
    is still retrying (``api_retry``) when the unit's time ends: no result event says refusal,
    the refusal is found all the same."""
    server = model_server([{"text": "unused"}] * 4)
    server.refused_by.add("claude-sonnet-4-5")
    server.fail(529, 100, retry_after="3", after_turns=1)
    agent = claude_code("claude-sonnet-4-5", base_url=server.url, timeout=12, env={"CLAUDE_CODE_MAX_RETRIES": "50"})
    md = agent(PROMPT, tmp_path / "work")["metadata"]
    assert md["timed_out"], md["trajectory"]
    assert not any(event.get("type") == "result" for event in md["trajectory"])
    assert any(event.get("subtype") == "api_retry" for event in md["trajectory"])
    assert (md["refusal"]["provider"], md["refusal"]["code"]) == ("anthropic", "stop_reason_refusal")
    assert md["run_summary"]["refusal"] == "detected"
