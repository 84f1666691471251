"""Hostile agents end to end: a real ``rayeval run`` of an agent that leaves every kind of
artifact no viewer or report should choke on (``hostile_artifacts`` in
tests/security/attack_agents.py, one kind per seed, the last one honest), then the real
``rayeval view`` server (its pages over HTTP and in Chromium), ``rayeval view --static`` and
``rayeval report`` in every format: every page answers and renders, each unit on its own,
what is cut says so, nothing of the agent's runs, and the honest unit is intact everywhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from rayeval.view.bounded import MAX_TEXT_CHARS
from rayeval.view.trajectory import MAX_STEPS, MAX_TRAJECTORY_CHARS
from tests.security.attack_agents import ARTIFACT_KINDS

from .conftest import REPO
from .test_api import api, request
from .test_browser import wait_for
from .test_hostile_rows import PAGE_BYTES

KEY = 7391.25
TIMEOUT_S = 600  # a guard against hangs, never a speed assertion


def rayeval(*args: str, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run(
        [sys.executable, "-m", "rayeval.cli", *args],
        cwd=REPO,  # the agent is tests.security.attack_agents:hostile_artifacts
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("hostile-agents")
    evals = base / "evals"
    evals.mkdir()
    grader = {"ground_truth": {"value": KEY}, "tolerances": {"value": {"type": "absolute", "value": 0.01}}}
    eval_ = {"id": "artifacts", "task": "Find the value. <EVAL_ANSWER>{\"value\": <number>}</EVAL_ANSWER>",
             "grader": {"type": "numeric_tolerance", "config": grader}}  # fmt: skip
    (evals / "artifacts.json").write_text(json.dumps(eval_))
    root = base / "results"
    done = rayeval(
        "run", str(evals), "--agent", "tests.security.attack_agents:hostile_artifacts", "--agent-arg", f"key={KEY}",
        "--seeds", str(len(ARTIFACT_KINDS)), "--max-concurrency", "4", "--timeout", "120", "--retries", "0",
        "--output", str(root), "--run-id", "hostile", "--no-progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return root


#: ``rayeval view`` with Ctrl-C as a user's shell leaves it: handled, not blocked. An earlier test
#: of a full run leaves this process's SIGINT ignored or blocked, which a child inherits (the
#: viewer then sat in its select loop, its stacks showed).
VIEW_AS_FROM_A_SHELL = (
    "import signal, sys; signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
    "signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from rayeval.cli import main; sys.exit(main(sys.argv[1:]))"
)


@pytest.fixture(scope="module")
def served(hostile_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``rayeval view ROOT --port 0``, as a user starts it; its secret address. Ctrl-C must
    stop it: if it does not within 60 s, its threads' stacks (faulthandler, on SIGABRT) say
    where it hangs."""
    errors = tmp_path_factory.mktemp("view-stderr") / "stderr.txt"
    with open(errors, "w") as stderr:
        server = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-c", VIEW_AS_FROM_A_SHELL, "view", str(hostile_run), "--port", "0"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        line = server.stdout.readline() if server.stdout else ""
        assert " at http://127.0.0.1:" in line, line
        yield line.split(" at ")[1].split(" ")[0]
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.send_signal(signal.SIGABRT)
            server.wait(timeout=10)
            pytest.fail(f"rayeval view did not stop on Ctrl-C within 60 s:\n{errors.read_text()[-6000:]}")


def units_by_kind(base: str) -> dict[str, dict[str, Any]]:
    page = api(base, "units", run="hostile", size=500)
    rows = [dict(zip(page["columns"], row)) for row in page["rows"]]
    assert len(rows) == len(ARTIFACT_KINDS)
    return {ARTIFACT_KINDS[row["seed"] - 1]: row for row in rows}


def unit(base: str, kind: str) -> dict[str, Any]:
    status, _, body = request(base, f"/api/unit?run=hostile&id={units_by_kind(base)[kind]['unit_id']}")
    assert status == 200 and len(body) < PAGE_BYTES and body.isascii() and b"<" not in body, (kind, body[:300])
    return json.loads(body)


def test_every_page_of_the_live_viewer_answers(served: str) -> None:
    runs = api(served, "runs")["runs"]
    assert [(r["run_id"], r["units"]) for r in runs] == [("hostile", len(ARTIFACT_KINDS))]
    units = units_by_kind(served)
    for sort in ("eval", "duration", "cost", "tokens", "score", "turns"):
        assert api(served, "units", run="hostile", sort=sort, order="desc")["matched"] == len(units)
    for kind in api(served, "units", run="hostile")["facets"]["error"]:
        assert len(kind) <= 200 and api(served, "units", run="hostile", error=kind)["matched"] >= 1
    for kind in units:
        assert unit(served, kind)["unit_id"] == units[kind]["unit_id"]
    pair = api(served, "compare", run="hostile", eval="artifacts", seed=1, a="default", b="default")
    assert pair["a"]["unit_id"] == units[ARTIFACT_KINDS[0]]["unit_id"]
    board = api(served, "leaderboard", run="hostile")
    for name in board["plots"]:
        assert request(served, f"/api/plot?run=hostile&name={name}")[0] == 200
    secret = served.rstrip("/").rsplit("/", 1)[1]
    assert request(served.replace(secret, "guess"), "/api/runs")[0] == 404  # still only under its secret path


def test_each_unit_shows_what_it_left_and_says_what_is_cut(served: str) -> None:
    too_deep = unit(served, "trajectory_too_deep")["trajectory"]
    assert too_deep["steps"][0]["note"].startswith("nested too deep to read as JSON: shown as stored; truncated")
    deep = unit(served, "trajectory_deep_messages")["trajectory"]
    assert deep["total"] == 2400 and sum(len(s["text"]) for s in deep["steps"]) <= MAX_TRAJECTORY_CHARS
    tiny = unit(served, "trajectory_tiny_messages")["trajectory"]
    assert (len(tiny["steps"]), tiny["total"]) == (MAX_STEPS, 60_000)
    for kind in ("trajectory_wrong_shapes", "trajectory_odd_types"):
        steps = unit(served, kind)["trajectory"]["steps"]
        assert steps and all(len(s["role"]) <= 200 and len(s["title"]) <= 200 for s in steps), kind
    metadata = unit(served, "metadata")
    # its garbage numbers stay in its metadata: the cost is the gateway's (no call), turns unknown
    assert metadata["cost_usd"] == 0.0 and metadata["n_turns"] is None
    assert "truncated: showing the first 200,000 characters of its JSON" in metadata["metadata"]["note"]
    huge = unit(served, "answer_huge")["answer"]
    assert len(huge["text"]) == MAX_TEXT_CHARS and "truncated" in huge["note"]
    logs = {a["name"]: a for a in unit(served, "logs")["artifacts"]}
    assert "\ufffd" in logs["agent_stdout.log"]["text"] and "truncated" in logs["agent_output.log"]["note"]
    raised = unit(served, "exception")
    assert len(raised["error_type"]) <= 200 and raised["error_type"].startswith("</script>")
    assert unit(served, "raised_frame")["error_type"] == "BadAgentResult"
    honest = unit(served, "honest")
    assert honest["verdict"] == "passed" and json.loads(honest["answer"]["text"]) == {"value": KEY}


def test_every_unit_page_renders_in_chromium_and_runs_nothing(browser: Any, served: str) -> None:
    units = units_by_kind(served)
    for kind in [*ARTIFACT_KINDS, "honest"]:  # each page, then the honest one after all of them
        browser.get(f"{served}#/unit?run=hostile&id={units[kind]['unit_id']}")
        wait_for(browser, "table.facts", units[kind]["unit_id"])  # this unit's page, rendered
        assert browser.find_elements(By.CSS_SELECTOR, "#answer, #trajectory"), kind
        assert browser.execute_script("return window.__pwned") is None, kind
        assert browser.execute_script("return document.querySelectorAll('main script, main img').length") == 0
    assert "7391.25" in wait_for(browser, "#answer", "7391.25").text
    browser.get(f"{served}#/unit?run=hostile&id={units['trajectory_too_deep']['unit_id']}")
    assert "nested too deep to read as JSON" in wait_for(browser, "#trajectory", "nested too deep").text
    browser.get(f"{served}#/units?run=hostile&sort=cost&order=desc")
    wait_for(browser, "#counts", f"{len(units)} of {len(units)} units")


def test_the_static_export_finishes_and_renders(browser: Any, hostile_run: Path, served: str, tmp_path: Path) -> None:
    done = rayeval("view", str(hostile_run), "--static", str(tmp_path / "site"))
    assert done.returncode == 0, done.stderr
    units = units_by_kind(served)
    page = (tmp_path / "site" / "index.html").as_uri()
    for kind in ("trajectory_too_deep", "trajectory_wrong_shapes", "trajectory_odd_types", "answer_markup", "honest"):
        browser.get(f"{page}#/unit?run=hostile&id={units[kind]['unit_id']}")
        wait_for(browser, "table.facts", units[kind]["unit_id"])
        assert browser.execute_script("return window.__pwned") is None, kind
    assert "7391.25" in wait_for(browser, "#answer", "7391.25").text


@pytest.mark.parametrize(
    "options", [["--format", "table"], ["--format", "csv"], ["--format", "json"], ["--format", "html"]]
)
def test_every_report_format_finishes(hostile_run: Path, tmp_path: Path, options: list[str]) -> None:
    out = tmp_path / "report"
    done = rayeval("report", str(hostile_run), "--run", "latest", *options, "--out", str(out))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    if "json" in options:
        rows = json.loads(
            out.read_text(), parse_constant=lambda constant: pytest.fail(f"{constant} in the JSON report")
        )
        assert rows[0]["N"] == len(ARTIFACT_KINDS)
