"""Agents that lie about their model calls, hunt for keys or forge the runner's word, each run
end to end through ``rayeval run`` on a real (embedded) Ray, its models a loopback scripted
server reached through rayeval's gateway: what a unit says of itself never becomes a stored
number. A control run with ``--isolation inline`` (no gateway: the agent's own report is all
there is) shows each attack works where nothing stands in between, so that each test can fail.
See tests/security/gateway_agents.py.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.dataset as ds
import pytest
import ray

from rayeval.batch.budget import stored_spend
from rayeval.cli import main as rayeval_main
from rayeval.report.benchmark import excused_errors
from rayeval.storage import ResultStore
from tests.agents.fake_model_server import FakeModelServer

AGENTS = "tests.security.gateway_agents"
PROVIDER_KEY = f"sk-ant-provider-{secrets.token_hex(8)}"  # drawn now: no file a unit sees holds one
SPARE_KEY = f"sk-ant-spare-{secrets.token_hex(8)}"
JUDGE_KEY = f"sk-judge-{secrets.token_hex(8)}"
#: the password of the workers' proxy (one no unit reaches: it is never used)
PROXY_PASSWORD = f"sk-proxy-{secrets.token_hex(8)}"
#: a third party's key, in a variable whose name does not look secret, that runs hand units
SERPAPI_KEY = f"serp-live-{secrets.token_hex(8)}"
#: claude-sonnet-4-5 at 3 and 15 USD per million tokens (the shipped price table)
CALL_COST = (1000 * 3 + 50 * 15) / 1e6


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One embedded Ray whose workers hold the provider's key, a fallback key, a judge's key
    and an HTTPS proxy's password, and reach the scripted server as the provider; one eval
    whose key is 7391.25."""
    base = tmp_path_factory.mktemp("gateway-attacks")
    evals = base / "evals"
    evals.mkdir()
    grader = {"type": "numeric_tolerance", "config": {"ground_truth": {"value": 7391.25},
              "tolerances": {"value": {"type": "absolute", "value": 0.01}}}}  # fmt: skip
    (evals / "one.json").write_text(json.dumps({"id": "one", "task": "Find the value.", "grader": grader}))
    server = FakeModelServer(script=[], answer=lambda body: "7391.25").start()
    variables = {
        "ANTHROPIC_API_KEY": PROVIDER_KEY,
        "ANTHROPIC_API_KEY_FALLBACKS": json.dumps([SPARE_KEY]),
        "ANTHROPIC_BASE_URL": server.url,
        "OPENAI_API_KEY": JUDGE_KEY,
        "HTTPS_PROXY": f"http://corp-user:{PROXY_PASSWORD}@proxy.invalid:3128",
        "NO_PROXY": "127.0.0.1,localhost",
        "SERPAPI_KEY": SERPAPI_KEY,
    }
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    ray.init(address="local", include_dashboard=False, object_store_memory=128 << 20, log_to_driver=False)
    try:
        yield {"evals": evals, "server": server}
    finally:
        ray.shutdown()
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run(site: dict[str, Any], out: Path, agent: str, *options: str) -> tuple[int, list[dict[str, Any]]]:
    """``rayeval run`` in this process, on the module's Ray: its exit code and rows."""
    code = rayeval_main(
        ["run", str(site["evals"]), "--agent", f"{AGENTS}:{agent}", "--output", str(out), "--no-progress", *options]
    )
    rows = ds.dataset(out, format="parquet", partitioning="hive").to_table().to_pylist() if out.exists() else []
    return code, rows


@pytest.mark.slow
def test_a_rows_usage_and_cost_are_what_the_gateway_relayed(site: dict[str, Any], tmp_path: Path) -> None:
    server: FakeModelServer = site["server"]
    before = len(server.replies)
    _, (row,) = run(site, tmp_path / "s", "forge_usage")
    served = server.replies[before:]
    assert len(served) == 2
    assert (row["input_tokens"], row["output_tokens"]) == (sum(r.input_tokens for r in served), 100)
    assert row["n_model_calls"] == 2 and row["cost_usd"] == pytest.approx(2 * CALL_COST)
    claims = json.loads(row["metadata_json"])
    assert claims["cost_usd"] == 0.0  # its word stays in its metadata, marked as differing
    assert claims["claims_differ_from_gateway"]["input_tokens"] == {"claimed": 1, "counted": 2000}
    _, (inline,) = run(site, tmp_path / "i", "forge_usage", "--isolation", "inline")  # the control
    assert (inline["input_tokens"], inline["cost_usd"], inline["n_model_calls"]) == (1, 0.0, None)


@pytest.mark.slow
def test_a_provider_failure_the_agent_reports_is_its_own_error(site: dict[str, Any], tmp_path: Path) -> None:
    """No ProviderError, so no rerun with a fresh deadline, and no endless retry hint."""
    started = time.monotonic()
    code, rows = run(site, tmp_path / "s", "forge_provider_failure", "--retries", "2")
    assert code == 0 and time.monotonic() - started < 120  # a failed unit: no error of the run
    assert [(r["status"], r["error_type"], r["attempt"]) for r in rows] == [("failed", "NoAnswer", 1)]
    _, inline = run(site, tmp_path / "i", "forge_provider_failure", "--isolation", "inline", "--retries", "0")
    assert [r["error_type"] for r in inline] == ["ProviderError"]  # the control: its word taken


@pytest.mark.parametrize(("status", "excused"), [(429, False), pytest.param(529, True, marks=pytest.mark.slow)])
def test_a_provider_failure_the_agents_requests_may_bring_on_buys_neither_excuse_nor_rerun(
    site: dict[str, Any], tmp_path: Path, status: int, excused: bool
) -> None:
    """A rate limit may be the agent's own doing (a request over the tokens-per-minute limit,
    a burst of calls), to skip an eval it cannot answer or to try it again afresh: its
    ProviderError row is seen by no one outside the agent, ``--errors exclude`` counts it as
    failed, and the run does not run it again; an overload is excused, and run again."""
    site["server"].fail(status, retry_after="0")
    _, (row,) = run(site, tmp_path / "s", "give_up_on_a_failed_call", "--retries", "1", "--gateway-retry-s", "0")
    if excused:  # run again (its first attempt is not stored), its second try's call answered
        assert (row["attempt"], row["error_type"]) == (2, "NoAnswer")
        return
    details = json.loads(row["metadata_json"])["error_details"]
    assert (row["attempt"], row["status"], row["error_type"]) == (1, "error", "ProviderError")
    assert details["status"] == status and "seen_by" not in details
    assert list(excused_errors(pd.DataFrame([row]))) == [False]
    assert "--resume --retry-errors" in row["error_message"]  # what helps, said where it is seen


@pytest.mark.slow  # end to end through rayeval run: CI runs it in its slow phase
def test_a_retried_attempts_paid_calls_count_in_the_runs_spend(
    site: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Attempt 1 makes two paid calls, then the provider fails its third (an overload): the run
    retries it, and attempt 2 (three paid calls) is the unit's row. Attempt 1 is stored in no
    row of its own, so the final row lists it, and the run's summary total and a resumed run's
    budget count its calls: a resume whose --max-cost the five calls spent starts no unit."""
    server: FakeModelServer = site["server"]
    server.fail(529, retry_after="0", after_turns=len(server.scripted_replies()) + 2)
    out = tmp_path / "s"
    options = ("--retries", "1", "--gateway-retry-s", "0")
    _, (row,) = run(site, out, "pay_then_give_up_on_a_failed_call", *options)
    assert (row["attempt"], row["status"], row["error_type"]) == (2, "error", "RuntimeError")
    assert row["n_model_calls"] == 3 and row["cost_usd"] == pytest.approx(3 * CALL_COST)  # its own attempt's
    earlier = json.loads(row["metadata_json"])["earlier_attempts"]
    assert (earlier["attempts"], earlier["cost_usd"]) == (1, pytest.approx(2 * CALL_COST))
    (first,) = earlier["listed"]
    assert (first["attempt"], first["status"], first["error_type"]) == (1, "error", "ProviderError")
    assert first["n_model_calls"] == earlier["n_model_calls"] == 2 and first["input_tokens"] == 2000
    total = re.search(r"total cost \$([0-9.]+)", capsys.readouterr().out)
    assert total is not None and float(total.group(1)) == pytest.approx(5 * CALL_COST, abs=1e-4)
    assert stored_spend(ResultStore(out), row["run_id"]) == pytest.approx(5 * CALL_COST)
    resumed = ("--resume", "--run-id", row["run_id"], "--retry-errors", "--max-cost", f"{4 * CALL_COST}")
    _, rows = run(site, out, "pay_then_give_up_on_a_failed_call", *options, *resumed)
    assert [r["attempt"] for r in rows] == [2]  # spent already: attempt 3 never started
    assert f"its budget of ${4 * CALL_COST:g} is spent" in capsys.readouterr().err


def test_earlier_attempts_the_agent_claims_are_not_stored(site: dict[str, Any], tmp_path: Path) -> None:
    """Only the driver says what a unit's retried attempts used: an agent's claim of a
    dollar's worth is dropped, and no total counts it."""
    out = tmp_path / "s"
    _, (row,) = run(site, out, "forge_earlier_attempts")
    assert row["status"] == "passed" and "earlier_attempts" not in json.loads(row["metadata_json"])
    assert stored_spend(ResultStore(out), row["run_id"]) == pytest.approx(CALL_COST)


@pytest.mark.slow
def test_a_runner_failure_the_agent_claims_buys_no_rerun(site: dict[str, Any], tmp_path: Path) -> None:
    """Its own error (an answer file past the limit) with ``seen_by: runner`` in its metadata:
    the claim is dropped, and the unit is not run again."""
    _, rows = run(site, tmp_path / "s", "forge_runner_failure", "--retries", "2", "--limit-answer-file-mb", "0.001")
    assert [(r["status"], r["error_type"], r["attempt"]) for r in rows] == [("error", "AnswerTooLarge", 1)]
    assert json.loads(rows[0]["metadata_json"])["error_details"] == {"error": "the runner failed"}


@pytest.mark.parametrize(
    "agent", ["chunk_report_too_deep", pytest.param("work_folder_too_deep", marks=pytest.mark.slow)]
)
def test_a_chunk_the_trusted_side_cannot_take_buys_no_rerun(site: dict[str, Any], tmp_path: Path, agent: str) -> None:
    """A chunked session's chunk whose report or work folder made rayeval's own code raise (a
    RecursionError) as its checkpoint was saved: once a row said Ray lost the unit (retried, its
    calls uncounted). Now the unit goes on, its chunk saved, and its row is its own, counted."""
    _, rows = run(site, tmp_path / "s", agent, "--agent-arg", "chunk_turns=1", "--retries", "2")
    assert [(r["status"], r["attempt"], r["n_model_calls"]) for r in rows] == [("passed", 1, 1)], rows
    metadata = json.loads(rows[0]["metadata_json"])
    assert "error_details" not in metadata and metadata["chunk_saved"] is True
    assert metadata["session_checkpoints"] == {"saved": 1}


def test_no_key_is_anywhere_a_unit_can_read(site: dict[str, Any], tmp_path: Path) -> None:
    """Not in its environment, even where its options name the key variables, nor in any
    process's environment, command line or memory, nor in its files; its proxy variable
    without the proxy's password."""
    named = ["--agent-env", "ANTHROPIC_API_KEY", "--agent-env", "ANTHROPIC_API_KEY_FALLBACKS"]
    _, (row,) = run(site, tmp_path / "s", "hunt_keys", *named, "--agent-env", "OPENAI_API_KEY")
    seen = json.loads(row["metadata_json"])
    assert seen["found"] == [] and seen["memory_read_of"], seen
    assert seen["proxy"] == "http://proxy.invalid:3128"
    _, (inline,) = run(site, tmp_path / "i", "hunt_keys", "--isolation", "inline", "--agent-arg", "only=environ")
    assert "environ" in json.loads(inline["metadata_json"])["found"]


def test_what_a_run_hands_its_agent_is_masked_wherever_it_is_stored(
    site: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``--agent-env`` variable's value whatever its name, and secret agent arguments in
    either form: the agent echoes them into its metadata and a file it leaves; its row and the
    run's manifest (its arguments and command line) hold ``***``."""
    api_key, token = f"sk-live-{secrets.token_hex(8)}", f"tok-live-{secrets.token_hex(8)}"
    options = ["--agent-env", "SERPAPI_KEY", f"--agent-arg=api_key={api_key}", "--agent-arg", f"token={token}"]
    monkeypatch.setattr(sys, "argv", ["rayeval", "run", *options])  # the command line the manifest keeps
    out = tmp_path / "s"
    _, (row,) = run(site, out, "echo_handed", *options)
    masked = {"SERPAPI_KEY": "***", "args": {"api_key": "***", "token": "***"}}
    metadata = json.loads(row["metadata_json"])
    assert {name: metadata[name] for name in masked} == masked
    assert json.loads(json.loads(row["artifacts_json"])["agent_output.log"]) == masked
    (path,) = out.glob("run_id=*/_manifest.json")
    manifest = json.loads(path.read_text())
    assert manifest["agent_args"] == masked["args"]
    assert manifest["command_line"][-3:] == ["--agent-arg=api_key=***", "--agent-arg", "token=***"]
    assert not [secret for secret in (SERPAPI_KEY, api_key, token) if secret in path.read_text() + str(row)]


@pytest.mark.slow
def test_a_refusal_the_agent_claims_is_no_refusal(site: dict[str, Any], tmp_path: Path) -> None:
    _, (row,) = run(site, tmp_path / "s", "forge_refusal")
    assert (row["status"], row["refusal"]) == ("failed", False)
    summary = json.loads(row["metadata_json"])["run_summary"]  # rayeval's too, not the agent's
    assert (summary["refusal"], summary["usage"]["input_tokens"]) == ("not_detected", 1000)
    assert summary["cost_usd"] == pytest.approx(CALL_COST)
    _, (inline,) = run(site, tmp_path / "i", "forge_refusal", "--isolation", "inline")  # the control
    assert inline["refusal"] is True


def test_a_unit_that_forges_a_sandbox_failure_ends_alone(site: dict[str, Any], tmp_path: Path) -> None:
    """The frames the runner sends when a sandbox cannot be set up, written by the agent when
    it is called: its unit's error, not the run's end with advice to turn the sandbox off."""
    code, rows = run(site, tmp_path / "s", "forge_setup_failure", "--retries", "0")
    assert code == 1 and [r["error_type"] for r in rows] == ["BadAgentResult"], rows


def test_an_agent_module_that_forges_a_sandbox_failure_is_refused_as_itself(
    site: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Written by its module's import, in the run's start-up check: the agent does not load."""
    code = rayeval_main(
        ["run", str(site["evals"]), "--agent", "tests.security.forge_at_import:solve", "--output",
         str(tmp_path / "s"), "--no-progress"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "cannot be loaded in its sandbox" in err, err
    assert "--isolation process" not in err and "sandbox cannot start" not in err
