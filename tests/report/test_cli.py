"""`rayeval report` / `rayeval compare` as a user runs them: subprocesses and exit codes."""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from rayeval.report.cli import (
    EXIT_BAD_INPUT,
    EXIT_GATE_FAILED,
    EXIT_OK,
    add_report_commands,
    main,
    parse_by,
)

from .helpers import base_row, write_root


def run(*args: str) -> subprocess.CompletedProcess:
    """A real subprocess, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "rayeval.report.cli", *args], check=False, capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    """In-process (faster): returns a CompletedProcess-like result; SystemExit from argparse → its code."""

    def call(*args: str) -> subprocess.CompletedProcess:
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)

    return call


def test_report_table(corpus_root: Path) -> None:
    done = run("report", str(corpus_root))
    assert done.returncode == EXIT_OK, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "status: completed; 273 units done, 0 errors"
    # recorded runs from before rows said how their agents ran
    assert lines[1].startswith("Warning: 273 of 273 units are not known to have run in a sandbox (not recorded: 273)")
    assert lines[3].split()[:3] == ["model_name", "harness", "Accuracy"]
    assert "gpt-5.5" in lines[5]


def test_gate_fails_and_passes(corpus_root: Path) -> None:
    failing = run("report", str(corpus_root), "--fail-under", "30")
    assert failing.returncode == EXIT_GATE_FAILED
    assert "gate failed: 3 of 16 check(s)" in failing.stderr
    assert "FAIL claude-sonnet-4-5/mini-swe-agent: accuracy (%) 20.00" in failing.stderr
    assert "Traceback" not in failing.stderr
    passing = run("report", str(corpus_root), "--fail-under", "20", "--format", "csv")
    assert passing.returncode == EXIT_OK, passing.stderr
    assert "gates passed: 16 check(s)" in passing.stderr
    # The gate is per model × harness even when the table is broken down by task.
    by_task = run("report", str(corpus_root), "--by", "task", "--fail-under", "30")
    assert by_task.returncode == EXIT_GATE_FAILED and "3 of 16" in by_task.stderr


def test_error_rate_gate(tmp_path: Path, cli) -> None:
    rows = [
        base_row(eval_id=f"e{i}", seed=1, status="timeout" if i == 0 else "passed", passed=i != 0) for i in range(4)
    ]
    root = write_root(tmp_path, rows)
    assert cli("report", str(root), "--max-error-rate", "30").returncode == EXIT_OK
    done = cli("report", str(root), "--max-error-rate", "20")
    assert done.returncode == EXIT_GATE_FAILED and "error rate (%) 25.00" in done.stderr


def test_exports_to_files(corpus_root: Path, tmp_path: Path, cli) -> None:
    out = tmp_path / "table.csv"
    done = cli("report", str(corpus_root), "--format", "csv", "--out", str(out))
    assert done.returncode == EXIT_OK and done.stdout == ""
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == 16 and rows[0]["model_name"] == "gpt-5.5"
    data = json.loads(cli("report", str(corpus_root), "--format", "json", "--by", "kit").stdout)
    assert set(data) == {"metadata", "platforms"}
    filtered = json.loads(
        cli("report", str(corpus_root), "--format", "json", "--model", "gpt-5.5", "--eval", "DE01_pseudobulk_de").stdout
    )
    assert [(r["model_name"], r["N"]) for r in filtered] == [("gpt-5.5", 3), ("gpt-5.5", 3)]


def test_html_format(corpus_root: Path, tmp_path: Path, cli) -> None:
    import matplotlib  # noqa: F401  (the report extra; part of dev)

    out = tmp_path / "r.html"
    done = cli("report", str(corpus_root), "--format", "html", "--out", str(out), "--pass-k", "1,2")
    assert done.returncode == EXIT_OK, done.stderr
    assert out.read_text().count('src="data:image/png;base64,') == 4


@pytest.mark.parametrize(
    "args, message",
    [
        (["report", "{root}/nope"], "does not exist"),
        (["report", "{root}", "--by", "colour"], "--by: unknown column 'colour'"),
        (["report", "{root}", "--run", "missing-run"], "no results under"),
        (["report", "{root}", "--fail-under", "150"], "between 0 and 100"),
        (["report", "{root}", "--pass-k", "0"], "--pass-k"),
        (["report", "{root}", "--out", "{root}/no/such/dir/x.txt"], "inside the results root"),
        (["report", "{root}", "--out", "/proc/no/such/dir/x.txt"], "cannot write"),
        (["compare", "{root}", "--a", "nobody", "--b", "gpt-5.5"], "names no run or model"),
    ],
)
def test_bad_input_exits_2_without_traceback(corpus_root: Path, args: list[str], message: str, cli) -> None:
    done = cli(*[a.format(root=corpus_root) for a in args])
    assert done.returncode == EXIT_BAD_INPUT, (done.stdout, done.stderr)
    assert message in done.stderr and done.stderr.startswith("rayeval: ")
    assert "Traceback" not in done.stderr


def test_argparse_errors_also_exit_2(corpus_root: Path) -> None:
    done = run("report", str(corpus_root), "--fail-under", "abc")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    bad_root = run("compare", str(corpus_root / "nope"), "--a", "x", "--b", "y")
    assert (
        bad_root.returncode == EXIT_BAD_INPUT
        and bad_root.stderr.startswith("rayeval: ")
        and "Traceback" not in bad_root.stderr
    )


def test_compare(corpus_root: Path, cli) -> None:
    done = cli(
        "compare", str(corpus_root), "--a", "gpt-5.5/openai-codex", "--b", "model=claude-sonnet-4-5", "--format", "json"
    )
    assert done.returncode == EXIT_OK, done.stderr
    result = json.loads(done.stdout)
    assert result["n_evals"] == 5 and result["only_a"] == 1
    assert result["mean_diff"] > 0 and 0 < result["sign_test_p"] <= 1
    text = cli("compare", str(corpus_root), "--a", "gpt-5.5/openai-codex", "--b", "claude-sonnet-4-5")
    assert "mean difference A − B" in text.stdout


def test_compare_refuses_a_side_that_pools_runs_or_harnesses_of_the_same_evals(
    tmp_path: Path, corpus_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two runs of model A in one root, one at 100 %, one at 0 %: pooled they read as 50 %.
    ``rayeval compare`` refuses, naming the runs and how to pick one; picked, it compares."""
    from rayeval.cli import main as rayeval_main

    rows = [
        *(base_row(run_id="good", model="A", eval_id=f"e{i}") for i in range(4)),
        *(
            base_row(run_id="bad", model="A", eval_id=f"e{i}", status="failed", passed=False, score=0.0)
            for i in range(4)
        ),
        *(base_row(run_id="good", model="B", eval_id=f"e{i}") for i in range(4)),
    ]
    root = write_root(tmp_path, rows)
    assert rayeval_main(["compare", str(root), "--a", "A", "--b", "B"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "'A' would pool 4 evals' units from 2 runs or harnesses (run bad, harness h1; run good, harness h1)" in err
    assert "pick one with --run ID or a selector such as run=bad,model=A" in err
    assert rayeval_main(["compare", str(root), "--a", "A", "--b", "B", "--run", "good"]) == EXIT_OK
    assert "accuracy A: 100.00%" in capsys.readouterr().out
    assert rayeval_main(["compare", str(root), "--a", "run=bad,model=A", "--b", "B"]) == EXIT_OK
    assert "accuracy A: 0.00%" in capsys.readouterr().out
    # one run, one model under two harnesses (the corpus's claude-opus-4-7): refused the same way
    assert rayeval_main(["compare", str(corpus_root), "--a", "claude-opus-4-7", "--b", "gpt-5.1"]) == EXIT_BAD_INPUT
    assert "harness claude-code; run " in capsys.readouterr().err


def test_wires_into_another_parser(corpus_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="rayeval")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("validate")
    add_report_commands(sub)
    args = parser.parse_args(["report", str(corpus_root), "--by", "model", "--fail-under", "25"])
    assert args.handler(args) == EXIT_GATE_FAILED  # by model (harnesses pooled): sonnet-4-5 at 20%
    assert "model_name" in capsys.readouterr().out
    assert parse_by("task") == ["task", "model", "harness"]
    assert parse_by("platform") == ["kit", "model", "harness"]
    assert parse_by("model,run") == ["model", "run_id"]


def test_run_manifest_gives_status_and_plan(tmp_path: Path, cli) -> None:
    rows = [base_row(run_id="r1", eval_id=f"e{i}") for i in range(3)]
    root = write_root(tmp_path, rows)
    (root / "run_id=r1" / "_manifest.json").write_text(
        json.dumps({"run_id": "r1", "status": "cancelled", "total_units": 4})
    )
    done = cli("report", str(root))
    assert done.returncode == EXIT_OK
    assert done.stdout.splitlines()[0] == "status: cancelled; 3/4 units done (75.0%), 0 errors"
    # Filtered to one eval: the plan no longer applies, the status still does.
    assert cli("report", str(root), "--eval", "e1").stdout.splitlines()[0] == "status: cancelled; 1 unit done, 0 errors"
    (root / "run_id=r1" / "_manifest.json").write_text("{broken")  # left out: the rows are reported without it
    damaged = cli("report", str(root))
    assert damaged.returncode == EXIT_OK and "unusable _manifest.json" in damaged.stderr
    assert damaged.stdout.splitlines()[0] == "status: completed; 3 units done, 0 errors"  # as without a manifest


def test_the_report_says_when_units_ran_without_a_sandbox(tmp_path: Path, cli) -> None:
    sandboxed = [base_row(eval_id=f"e{i}", isolation="sandbox") for i in range(3)]
    root = write_root(tmp_path / "sandboxed", sandboxed)
    text = cli("report", str(root)).stdout
    assert "sandbox" not in text.lower()
    mixed = [*sandboxed, base_row(eval_id="e3", isolation="process"), base_row(eval_id="e4", isolation="inline")]
    root = write_root(tmp_path / "mixed", mixed)
    header = cli("report", str(root)).stdout.splitlines()[1]
    assert header.startswith("Warning: 2 of 5 units are not known to have run in a sandbox (inline: 1, process: 1)")
    assert "are not known to have run in a sandbox" in cli("report", str(root), "--format", "csv").stderr
    out = tmp_path / "report.html"
    assert cli("report", str(root), "--format", "html", "--out", str(out)).returncode == EXIT_OK
    assert '<p class="warning">Warning: 2 of 5 units are not known to have run in a sandbox' in out.read_text()
    legacy = write_root(tmp_path / "legacy", [base_row(eval_id="e0")])  # rows from before the column
    assert "1 of 1 units are not known to have run in a sandbox (not recorded: 1)" in cli("report", str(legacy)).stdout


def test_a_report_is_never_written_inside_a_results_root(tmp_path: Path, cli) -> None:
    root = write_root(tmp_path / "results", [base_row(eval_id="e0")])
    inside = root / "report.html"
    done = cli("report", str(root), "--format", "html", "--out", str(inside))
    assert done.returncode == EXIT_BAD_INPUT and "inside the results root" in done.stderr
    assert not inside.exists()
    assert len(pd.read_parquet(root)) == 1  # still a Parquet dataset
    beside = tmp_path / "report.html"
    assert cli("report", str(root), "--format", "html", "--out", str(beside)).returncode == EXIT_OK and beside.exists()
