"""pi as the reference runner (latch-eval-tools 0.4.54) runs it, with the REAL pi against the
scripted model server: an error without an HTTP status is no provider failure, an aborted or
failed reply is no progress, a run that stops on its length limit or after a compaction goes on
with ``Continue.``, pi thinks at its highest level unless told otherwise, and its custom models
come from the registry of known models (an unknown one is refused before any unit runs).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from rayeval.agents import pi
from rayeval.agents._base import AgentConfigError
from rayeval.agents.pi import REGISTERED_ONLY, known_models
from rayeval.cli import main
from rayeval.models.prices import PRICING_VERSION, find_price, shipped_prices
from rayeval.unit.runner import provider_failure_details

from .conftest import FAKE_KEY, PROGRAM_TIMEOUT, answer_42_evals
from .test_pi import PROMPT, WRITE_ANSWER

NO_RETRY = {"retry": {"enabled": False}}
#: an overload whose body says to try again at once (pi's error text keeps the body, not the headers)
OVERLOADED_NOW = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded", "metadata": {"retry_after_seconds": 0}}}  # fmt: skip


def _harness_lines(work_dir: Path) -> list[str]:
    return [line for line in (work_dir / "agent_output.log").read_text().splitlines() if line.startswith("HARNESS:")]


def _replies(trajectory: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        event["message"]
        for event in trajectory
        if event.get("type") == "message_end" and event.get("message", {}).get("role") == "assistant"
    ]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ------------------------------------------------------------------ 1. no status, no provider failure
def test_an_error_without_a_status_is_a_missing_answer_not_a_provider_failure(
    pi_available, model_server, tmp_path: Path
) -> None:
    """pi's call to an endpoint that is not there ends on ``Connection error.``: no HTTP status,
    so no provider's failure (no resume, no failure in the details, no ProviderError row)."""
    model_server([{"command": WRITE_ANSWER}])  # the proxy that refuses the internet; never called
    agent = pi("anthropic/claude-sonnet-4-5", base_url=f"http://127.0.0.1:{_closed_port()}", settings=NO_RETRY,
               timeout=PROGRAM_TIMEOUT, provider_jitter_s=0)  # fmt: skip
    out = agent(PROMPT, tmp_path / "work")
    md = out["metadata"]
    (reply,) = _replies(md["trajectory"])
    assert reply["stopReason"] == "error" and not reply["errorMessage"][:1].isdigit(), reply["errorMessage"]
    assert out["answer"] is None and md["provider_retry_count"] == 0
    details = md["error_details"]
    assert "code" not in details and "provider_retry_stop_reason" not in details
    assert provider_failure_details(details) is None  # what the runner reads: NoAnswer, not ProviderError
    assert _harness_lines(tmp_path / "work") == []


# ------------------------------------------------------------------ 2. an aborted reply is no progress
#: a pi extension that aborts, once, the first model call of a resumed run (one whose history
#: holds a failed reply) before it is sent, then asks the model to go on in the same run
ABORT_ONCE = """
const fs = require("node:fs");
module.exports = function (pi) {
  let aborted = false;
  pi.on("context", (event, ctx) => {
    const failedBefore = event.messages.some((m) => m.role === "assistant" && m.stopReason === "error");
    if (failedBefore && !fs.existsSync("aborted-once")) {
      fs.writeFileSync("aborted-once", "");
      aborted = true;
      ctx.abort();
    }
  });
  pi.on("agent_end", () => {
    if (aborted) {
      aborted = false;
      pi.sendUserMessage("Go on.", { deliverAs: "followUp" });
    }
  });
};
"""


def test_an_aborted_reply_does_not_reset_the_doubling_of_waits(pi_available, model_server, tmp_path: Path) -> None:
    """A 529 (its hint, in the body as OpenRouter words it: 0 s) ends the first run: resumed
    after 1 s. The resumed run's first reply is aborted, then its next call gets a 529 too: no
    reply in between ended well, so the next wait is doubled (2 s; the reference runner's 60,
    120 where an aborted reply counted as a turn gave 60, 60); the third run answers."""
    server = model_server([{"command": WRITE_ANSWER}, {"text": "Done."}])
    server.fail(529, 2, body=OVERLOADED_NOW)
    extension = tmp_path / "abort_once.js"
    extension.write_text(ABORT_ONCE)
    agent = pi("anthropic/claude-sonnet-4-5", base_url=server.url, settings=NO_RETRY, timeout=PROGRAM_TIMEOUT,
               provider_jitter_s=0, extra_args=("--extension", str(extension)))  # fmt: skip
    work_dir = tmp_path / "work"
    out = agent(PROMPT, work_dir)
    md = out["metadata"]
    assert out["answer"] == {"answer": 42}, md.get("error_details")
    stops = [reply["stopReason"] for reply in _replies(md["trajectory"])]
    assert stops == ["error", "aborted", "error", "toolUse", "stop"]
    assert md["provider_retry_count"] == 2 and 3.0 <= md["provider_retry_wait_s"] < 3.5  # the time waited
    waits = [line.rsplit("after ", 1)[1].split(" s")[0] for line in _harness_lines(work_dir)]
    assert waits == ["1.0", "2.0"]


def test_only_a_reply_that_ended_well_is_progress() -> None:
    """pi's replies that stopped, called a tool or reached their length limit are progress; an
    aborted or failed one is not (the reference runner's rule)."""
    agent = pi("anthropic/claude-sonnet-4-5")

    def run(*stops: str) -> list[dict[str, Any]]:
        return [{"type": "message_end", "message": {"role": "assistant", "stopReason": stop}} for stop in stops]

    assert [agent.made_progress(agent.summarize(run(s), Path(), Path()), run(s)) for s in ("stop", "toolUse", "length")] == [True] * 3  # fmt: skip
    for stops in (("aborted",), ("error",), ("aborted", "error")):
        events = run(*stops)
        assert not agent.made_progress(agent.summarize(events, Path(), Path()), events), stops


# ------------------------------------------------------------------ 3. cut short: resumed with Continue.
def test_a_reply_cut_at_its_length_limit_is_resumed_with_continue(pi_available, model_server, tmp_path: Path) -> None:
    """The model's first reply stops at ``max_tokens``: pi exits 0 without an answer, and the
    session goes on with ``Continue.`` (no wait, no provider failure) to the answer."""
    server = model_server([{"text": "Let me think about this at len", "stop": "max_tokens"}, {"command": WRITE_ANSWER}])
    work_dir = tmp_path / "work"
    out = pi("anthropic/claude-sonnet-4-5", base_url=server.url, timeout=PROGRAM_TIMEOUT)(PROMPT, work_dir)
    md = out["metadata"]
    assert out["answer"] == {"answer": 42}, md.get("error_details")
    assert [reply["stopReason"] for reply in _replies(md["trajectory"])][:2] == ["length", "toolUse"]
    assert _harness_lines(work_dir) == ["HARNESS: the program stopped short of an answer; resuming the session"]
    assert md["provider_retry_count"] == 0 and md["provider_retry_wait_s"] == 0
    resumed = server.model_requests()[1].body["messages"]
    assert "Continue." in json.dumps(resumed[-1]) and "at len" in json.dumps(resumed)  # the same session
    assert sum(1 for event in md["trajectory"] if event.get("type") == "session") == 2


def test_cut_short_is_the_latest_length_stop_or_compaction() -> None:
    agent = pi("anthropic/claude-sonnet-4-5")
    length = {"type": "message_end", "message": {"role": "assistant", "stopReason": "length"}}
    stop = {"type": "message_end", "message": {"role": "assistant", "stopReason": "stop"}}
    compacted, aborted = {"type": "compaction_end", "aborted": False}, {"type": "compaction_end", "aborted": True}
    assert agent.cut_short([stop, length]) and agent.cut_short([length, stop]) and agent.cut_short([stop, compacted])
    assert not agent.cut_short([stop]) and not agent.cut_short([length, aborted]) and not agent.cut_short([])


# ------------------------------------------------------------------ 4. thinking
def test_pi_thinks_at_its_highest_level_unless_told_otherwise(pi_available, model_server, tmp_path: Path) -> None:
    """By default ``--thinking xhigh`` (pi 0.79's highest), which ``thinking=max`` (the reference
    runner's top level, on pi 0.80) also gives: on a model with adaptive thinking the request asks
    for it at pi's top effort; ``thinking=low`` turns it down, ``off`` turns it off."""
    efforts = {}
    for level in ("max", "low", "off"):
        server = model_server([{"command": WRITE_ANSWER}, {"text": "Done."}])
        agent = pi("anthropic/claude-sonnet-5-5", base_url=server.url, timeout=PROGRAM_TIMEOUT, thinking=level)
        work_dir = tmp_path / level
        out = agent(PROMPT, work_dir)
        assert out["answer"] == {"answer": 42}, out["metadata"].get("error_details")
        body = server.model_requests()[0].body
        efforts[level] = (body.get("thinking", {}).get("type"), body.get("output_config", {}).get("effort"))
        command = out["metadata"]["command"]
        assert command[command.index("--thinking") + 1] == ("xhigh" if level == "max" else level)
    assert efforts == {"max": ("adaptive", "high"), "low": ("adaptive", "low"), "off": ("disabled", None)}
    by_default = pi("anthropic/claude-sonnet-5-5").build_argv(["pi"], tmp_path, tmp_path)
    assert by_default == pi("anthropic/claude-sonnet-5-5", thinking="max").build_argv(["pi"], tmp_path, tmp_path)
    with pytest.raises(AgentConfigError, match="thinking must be one of off, minimal, low, medium, high, xhigh or max"):
        pi("anthropic/claude-sonnet-5-5", thinking="maximal")


# ------------------------------------------------------------------ 5. the registry of known models
def test_a_known_model_is_registered_with_its_entry_and_the_price_tables_prices(
    pi_available, model_server, tmp_path: Path
) -> None:
    """``anthropic/claude-sonnet-5-5`` is written into pi's models.json with its context window,
    output limit and compat flags (adaptive thinking, no temperature), priced from the price
    table: pi's cost of the run is the table's (the cache apart), and says so. The same events
    without pi's cost (as the reference runner's test gives them) are priced the same from the
    table."""
    server = model_server([{"command": WRITE_ANSWER}, {"text": "Done."}], cache_read_tokens=300, cache_write_tokens=200)
    state = tmp_path / "state"
    agent = pi("anthropic/claude-sonnet-5-5", base_url=server.url, timeout=PROGRAM_TIMEOUT, state_dir=str(state))
    out = agent(PROMPT, tmp_path / "work")
    md = out["metadata"]
    assert out["answer"] == {"answer": 42}, md.get("error_details")
    entry = json.loads((state / "pi" / "agent" / "models.json").read_text())["providers"]["anthropic"]["models"][0]
    assert (entry["id"], entry["contextWindow"], entry["maxTokens"]) == ("claude-sonnet-5-5", 1000000, 128000)
    assert entry["compat"] == {"forceAdaptiveThinking": True, "supportsTemperature": False}
    assert "thinkingLevelMap" not in entry
    price = find_price(shipped_prices(), "anthropic/claude-sonnet-5-5")
    assert price is not None
    assert entry["cost"] == {"input": price.input, "output": price.output, "cacheRead": price.cache_read,
                             "cacheWrite": price.cache_write}  # fmt: skip
    tokens_in, tokens_out = server.total_usage("anthropic")
    calls = len(server.scripted_replies("anthropic"))
    assert price.cache_read is not None and price.cache_write is not None
    table_cost = (tokens_in * price.input + tokens_out * price.output
                  + calls * (300 * price.cache_read + 200 * price.cache_write)) / 1e6  # fmt: skip
    assert md["cost_usd"] == pytest.approx(table_cost)
    assert (md["cost_source"], md["run_summary"]["pricing_version"]) == ("rayeval_price_table", PRICING_VERSION)
    for reply in _replies(md["trajectory"]):
        del reply["usage"]["cost"]
    unpriced = agent.summarize(md["trajectory"], state, tmp_path / "work")
    assert unpriced.cost_usd == pytest.approx(table_cost) and unpriced.cost_source == "rayeval_price_table"
    assert unpriced.extra["pricing_version"] == PRICING_VERSION
    assert all("temperature" not in r.body for r in server.model_requests())


def test_every_known_model_is_priced_and_of_a_provider_pi_can_be_given() -> None:
    for name, entry in known_models().items():
        assert find_price(shipped_prices(), name) is not None, name
        assert set(entry["cost"]) == {"input", "output", "cacheRead", "cacheWrite"}
        assert pi(name).models_json()["providers"][name.partition("/")[0]]["models"][0]["name"] == entry["name"]


@pytest.mark.parametrize("provider", REGISTERED_ONLY)
def test_an_unknown_model_is_refused_before_any_unit_runs(
    provider: str, tmp_path: Path, agent_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """``rayeval run`` with an OpenRouter or Fireworks model pi is not known to work with stops
    at its checks (exit 2, no unit, no output), naming the ones it knows; ``model_config``
    declares another one."""
    monkeypatch.setenv(f"{provider.upper()}_API_KEY", FAKE_KEY)
    evals = answer_42_evals(tmp_path / "evals", "unknown", PROMPT)
    out = tmp_path / "out"
    code = main(["run", str(evals), "--agent", "pi", "--models", f"{provider}/acme/unheard-of", "--output", str(out),
                 "--no-progress"])  # fmt: skip
    assert code == 2 and not out.exists()
    said = capsys.readouterr().err
    assert f"got '{provider}/acme/unheard-of'" in said
    assert all(name in said for name in known_models() if name.startswith(f"{provider}/"))


def test_a_model_declared_with_model_config_runs_unpriced(
    pi_available, model_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Fireworks model pi is not known to work with, declared with ``model_config`` (no
    prices): it runs over Chat Completions, its entry as declared; the cost pi reports for it, 0,
    is kept as the provider's word (as the reference runner keeps it), not priced from the table."""
    monkeypatch.setenv("FIREWORKS_API_KEY", FAKE_KEY)
    server = model_server([{"command": WRITE_ANSWER}, {"text": "Done."}])
    state = tmp_path / "state"
    agent = pi("fireworks/acme/unheard-of", base_url=server.url + "/v1", model_config={"contextWindow": 32000},
               timeout=PROGRAM_TIMEOUT, state_dir=str(state))  # fmt: skip
    out = agent(PROMPT, tmp_path / "work")
    md = out["metadata"]
    assert out["answer"] == {"answer": 42}, md.get("error_details")
    entry = json.loads((state / "pi" / "agent" / "models.json").read_text())["providers"]["fireworks"]["models"][0]
    assert entry == {"id": "acme/unheard-of", "name": "acme/unheard-of", "contextWindow": 32000}
    assert {r.path for r in server.model_requests()} == {"/v1/chat/completions"}
    assert (md["cost_usd"], md["cost_source"]) == (0.0, "provider_reported")
    assert md["input_tokens"] == server.total_usage("chat")[0]


def test_a_run_that_ends_after_a_compaction_is_resumed_with_continue(
    pi_available, model_server, tmp_path: Path
) -> None:
    """A context window of 1,100 tokens, 100 held in reserve: the first reply (1,050 tokens of
    context) ends the run with a compaction (of all but that reply) and no answer; pi exits 0,
    and its session goes on with ``Continue.`` to the answer."""
    server = model_server([{"text": "I will come back to this."}, {"command": WRITE_ANSWER}, {"text": "Done."}])
    settings = {"retry": {"enabled": False}, "compaction": {"reserveTokens": 100, "keepRecentTokens": 1}}
    agent = pi("anthropic/claude-sonnet-4-5", base_url=server.url, model_config={"contextWindow": 1100},
               settings=settings, timeout=PROGRAM_TIMEOUT)  # fmt: skip
    work_dir = tmp_path / "work"
    out = agent(PROMPT, work_dir)
    md = out["metadata"]
    assert out["answer"] == {"answer": 42}, md.get("error_details")
    kinds = [event["type"] for event in md["trajectory"] if event["type"] in ("compaction_end", "session")]
    assert kinds[:3] == ["session", "compaction_end", "session"], kinds
    assert _harness_lines(work_dir)[0] == "HARNESS: the program stopped short of an answer; resuming the session"
    assert md["provider_retry_count"] == 0
