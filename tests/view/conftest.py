"""One results root for the viewer tests, three runs in it:

- ``reference``: a real ``rayeval run`` of the example evals by the ``reference`` agent
  (two models, one seed), so units have real tasks, answers, verdicts and metrics;
- ``replay``: a real ``rayeval run`` replaying the scbench corpus (recorded answers, costs,
  durations; seed 4 has no recorded trial, so its units are error rows);
- ``crafted``: rows written through :class:`ResultStore` with the trajectories the built-in
  harnesses store (Claude Code, Codex, mini-swe-agent), a hostile answer, a huge error
  message and a retried unit.

And a viewer server on 127.0.0.1 over that root, for the whole session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rayeval import load_eval
from rayeval.record import UnitRecord
from rayeval.report import ResultsReader
from rayeval.storage import ResultStore
from rayeval.storage.manifest import RunManifest
from rayeval.view import ViewData, ViewServer
from tests.conftest import read_jsonl, shared_path
from tests.report.helpers import base_row

REPO = Path(__file__).resolve().parents[2]
REPLAY_PAIRS = 3  # model@harness pairs of the corpus replayed
REPLAY_SEEDS = "1,4"  # the corpus has no 4th trial: those units are error rows

HOSTILE_ANSWER = '<script>window.__pwned = "script"</script><img src=x onerror="window.__pwned = \'img\'">'
HOSTILE_REASONING = "<b>bold?</b><img src=x onerror=\"window.__pwned = 'reasoning'\">"
HOSTILE_TRACEBACK = (
    f'Traceback (most recent call last):\n  File "agent.py", line 1, in run\nRuntimeError: {HOSTILE_ANSWER}'
)
HUGE_ERROR_CHARS = 300_000
REFUSAL_VERDICT = {
    "provider": "openai",
    "code": "content_filter",
    "message": "Incomplete response returned, reason: content_filter",
    "excerpt": "I can't help with that.",
}
TASK_TEXT = 'Count the cells in cells.csv and answer <EVAL_ANSWER>{"n_cells": N}</EVAL_ANSWER>.'

CLAUDE_TRAJECTORY = [
    {"type": "system", "subtype": "init", "model": "claude-test"},
    {
        "type": "assistant",
        "message": {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "I will count the cells."},
                {
                    "type": "tool_use",
                    "id": "t1",
                    "name": "Bash",
                    "input": {"command": "wc -l cells.csv"},
                },
            ],
        },
    },
    {
        "type": "user",
        "message": {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "703 cells.csv"}],
        },
    },
    {"type": "result", "subtype": "success", "result": "There are 702 cells."},
]
CODEX_TRAJECTORY = [
    {"type": "thread.started", "thread_id": "th1"},
    {
        "type": "item.completed",
        "item": {"type": "reasoning", "text": "Counting lines minus the header."},
    },
    {
        "type": "item.completed",
        "item": {
            "type": "command_execution",
            "command": "bash -lc 'wc -l cells.csv'",
            "aggregated_output": "703 cells.csv",
            "exit_code": 0,
        },
    },
    {
        "type": "item.completed",
        "item": {"type": "agent_message", "text": "The file holds 702 cells."},
    },
    {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 5}},
]
MINI_SWE_TRAJECTORY = [
    {"role": "system", "content": "You are a careful analyst."},
    {"role": "user", "content": "Count the cells."},
    {
        "role": "assistant",
        "content": "THOUGHT: count lines\n```bash\nwc -l cells.csv\n```",
    },
    {
        "role": "user",
        "content": "<returncode>0</returncode><output>703 cells.csv</output>",
    },
    {"role": "exit", "content": "702"},
]


# Runs each list of ``rayeval`` arguments (a JSON list of them on argv) in turn, on one
# embedded Ray: it starts once for all of them.
_RUNS_ON_ONE_RAY = """
import json, sys
from rayeval.batch.config import RayConfig
from rayeval.batch.cluster import connect
from rayeval.cli import main

connect(RayConfig())
for args in json.loads(sys.argv[1]):
    if main(args) != 0:
        sys.exit("rayeval " + " ".join(args) + " failed")
"""


def _rayeval_runs(*runs: list[str], cwd: Path = REPO) -> None:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run(
        [sys.executable, "-c", _RUNS_ON_ONE_RAY, json.dumps(runs)],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"the runs failed:\n{done.stdout}\n{done.stderr}"


def crafted_row(**values: object) -> UnitRecord:
    return UnitRecord(**base_row(**{"run_id": "crafted", "agent": "test", "isolation": "sandbox", **values}))


def crafted_rows(eval_hash: str) -> list[UnitRecord]:
    def trajectory(data: object) -> str:
        return json.dumps({"trajectory.json": json.dumps(data), "agent_output.log": "log line\n"})

    common = {
        "eval_id": "count_cells",
        "eval_hash": eval_hash,
        "seed": 1,
        "grader_type": "numeric_tolerance",
    }
    return [
        crafted_row(
            model="claude",
            harness="claude-code",
            cost_usd=0.5,
            input_tokens=1200,
            output_tokens=300,
            n_turns=3,
            answer_json='{"n_cells": 702}',
            reasoning="n_cells: 702 within 5 of 700",
            metrics_json='{"n_cells": {"actual": 702, "expected": 700}}',
            artifacts_json=trajectory(CLAUDE_TRAJECTORY),
            **common,
        ),
        crafted_row(
            model="codex",
            harness="codex",
            status="failed",
            passed=False,
            score=0.0,
            normalized_score=0.0,
            cost_usd=0.2,
            input_tokens=10,
            output_tokens=5,
            answer_json='{"n_cells": 703}',
            reasoning="n_cells: 703 off by 3",
            refusal=True,  # as a harness that found a refusal stores it
            artifacts_json=json.dumps(
                {**json.loads(trajectory(CODEX_TRAJECTORY)), "refusal_verdict.json": json.dumps(REFUSAL_VERDICT)}
            ),
            **common,
        ),
        crafted_row(
            model="mini",
            harness="mini-swe-agent",
            cost_usd=0.05,
            answer_json='{"n_cells": 702}',
            reasoning="ok",
            # a program's run writes its verdict every time: null, it found no refusal
            artifacts_json=json.dumps({**json.loads(trajectory(MINI_SWE_TRAJECTORY)), "refusal_verdict.json": "null"}),
            **common,
        ),
        crafted_row(
            model="hostile",
            harness="h",
            eval_id="hostile_eval",
            eval_hash="none",
            status="failed",
            passed=False,
            score=0.0,
            normalized_score=0.0,
            answer_json=json.dumps({"answer": HOSTILE_ANSWER}),
            reasoning=HOSTILE_REASONING,
            error_type="<i>Kind</i>",
            error_message=HOSTILE_ANSWER,
            error_traceback=HOSTILE_TRACEBACK,
            artifacts_json=trajectory([{"role": "assistant", "content": HOSTILE_ANSWER}]),
        ),
        crafted_row(
            model="hostile",
            harness="h",
            eval_id="crash_eval",
            eval_hash="none",
            status="error",
            passed=False,
            score=0.0,
            normalized_score=0.0,
            error_type="AgentCrashed",
            error_message="x" * HUGE_ERROR_CHARS,
        ),
        # a unit retried: the viewer shows its latest attempt only
        crafted_row(
            model="mini",
            harness="mini-swe-agent",
            unit_id="retried-unit",
            eval_id="retry_eval",
            eval_hash="none",
            attempt=1,
            status="error",
            passed=False,
            error_type="Flaky",
            error_message="first attempt",
        ),
        crafted_row(
            model="mini",
            harness="mini-swe-agent",
            unit_id="retried-unit",
            eval_id="retry_eval",
            eval_hash="none",
            attempt=2,
            reasoning="second attempt passed",
        ),
    ]


def _write_crafted(root: Path, evals: Path) -> None:
    eval_file = evals / "count_cells.json"
    eval_file.write_text(
        json.dumps(
            {
                "id": "count_cells",
                "task": TASK_TEXT,
                "grader": {
                    "type": "numeric_tolerance",
                    "config": {
                        "ground_truth": {"n_cells": 700},
                        "tolerances": {"n_cells": {"type": "absolute", "value": 5}},
                    },
                },
            }
        )
    )
    eval_hash = load_eval(eval_file, check_data_nodes=False).content_hash()
    store = ResultStore(root)
    store.write_rows("crafted", crafted_rows(eval_hash))
    store.write_manifest(
        RunManifest(
            run_id="crafted",
            status="completed",
            agent="test",
            models=["claude", "codex", "mini", "hostile"],
            seeds=[1],
            eval_files=[{"path": str(eval_file), "id": "count_cells", "eval_hash": eval_hash}],
        )
    )


@pytest.fixture(scope="session")
def view_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("view") / "results"
    trials = shared_path("corpus", "scbench", "trials.jsonl")
    pairs = sorted({(r["model"], r["harness"]) for r in read_jsonl(trials)})[:REPLAY_PAIRS]
    _rayeval_runs(
        ["run", "evals", "--agent", "reference", "--models", "alpha,beta", "--seeds", "1",
         "--output", str(root), "--run-id", "reference", "--no-progress"],
        ["run", str(shared_path("corpus", "scbench", "evals")), "--agent", "replay", "--agent-arg", f"trials={trials}",
         "--models", ",".join(f"{m}@{h}" for m, h in pairs), "--seeds", REPLAY_SEEDS,
         "--output", str(root), "--run-id", "replay", "--no-progress", "--retries", "0"],
    )  # fmt: skip
    # (no retries: each error unit would run twice more, after 2 s and 4 s, to the same error)
    evals = tmp_path_factory.mktemp("crafted-evals")
    _write_crafted(root, evals)
    return root


@pytest.fixture(scope="session")
def view_url(view_root: Path) -> Iterator[str]:
    server = ViewServer(ViewData(ResultsReader(view_root)), "127.0.0.1", 0)
    server.start()
    yield server.url
    server.shutdown()
    server.server_close()


BROWSER_ARGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
    # nothing beyond loopback: every other host fails to resolve, and any proxy use goes nowhere
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--proxy-server=http://127.0.0.1:9",
)


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Debian's headless Chromium driven by selenium (fails, never skips, when missing)."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.fail(
            "the viewer's browser tests need chromium and chromedriver: run python scripts/install_test_tools.py (Debian, as root)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        *BROWSER_ARGS,
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(arg)
    session = webdriver.Chrome(service=Service(driver), options=options)
    try:
        yield session
    finally:
        session.quit()
