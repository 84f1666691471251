"""``rayeval run`` with bad options: exit 2 and one message naming the option, before Ray starts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from rayeval.cli import main
from tests.conftest import shared_path

REPO = Path(__file__).resolve().parents[2]
TRIALS = shared_path("corpus", "scbench", "trials.jsonl")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--max-concurrency", "0"], "--max-concurrency: must be at least 1 (got 0)"),
        (["--timeout", "-1"], "--timeout: must be more than 0 (got -1.0)"),
        (["--retries", "-1"], "--retries: must be at least 0 (got -1)"),
        (["--workers", "0"], "--workers: must be at least 1 (got 0)"),
        (["--output", "s3://"], "--output: results root 's3://' has no bucket"),
        (["--output", ""], "--output: the results root is empty"),
        (["--seeds", "abc"], "--seeds expects N or a comma-separated list of integers, got 'abc'"),
        (["--seeds", str(10**20)], "--seeds N needs 1 <= N <= 1,000,000, got 100000000000000000000"),
        (["--seeds", f"1,{2**63}"], "--seeds: must be at most 9223372036854775807"),
        (["--seeds", "0"], "--seeds N needs 1 <= N"),
        (["--models", ","], "--models is empty"),
        (["--model-concurrency", "m=abc"], "--model-concurrency expects MODEL=N"),
        (["--agent-arg", "noequals"], "--agent-arg expects key=value, got 'noequals'"),
        (["--resume"], "--resume needs --run-id"),
        (["--limit-output-mb", "0"], "--limit-output-mb: must be more than 0 (got 0.0)"),
        (["--limit-artifact-mb", "0"], "--limit-artifact-mb: must be more than 0 (got 0.0)"),
        (["--limit-answer-file-mb", "-1"], "--limit-answer-file-mb: must be more than 0 (got -1.0)"),
        (["--force"], "--force goes with --resume"),
        (["--limit", "0"], "--limit: must be at least 1 (got 0)"),
        (["--limit", "-3"], "--limit: must be at least 1 (got -3)"),
        (["--unit-cpus", "0"], "--unit-cpus: must be more than 0 (got 0.0)"),
        (["--unit-cpus", "inf"], "--unit-cpus: must be a finite number (got inf)"),
        (["--unit-resource", "GPU"], "--unit-resource expects NAME=AMOUNT with AMOUNT > 0"),
        (["--unit-resource", "GPU=-1"], "--unit-resource expects NAME=AMOUNT with AMOUNT > 0"),
        (["--judge-concurrency", "0"], "--judge-concurrency: must be at least 1 (got 0)"),
    ],
)
def test_bad_run_options_exit_2_naming_the_option(
    options: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "run",
            str(REPO / "evals"),
            "--agent",
            "reference",
            "--output",
            str(tmp_path / "out"),
            "--no-progress",
            *options,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err and "errors.pydantic.dev" not in err
    assert "Input should" not in err  # rayeval's words, not pydantic's
    assert not (tmp_path / "out").exists()


def test_resume_without_run_id_lists_the_unfinished_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The run to finish after a crash is usually the newest unfinished one: the error names them."""
    from datetime import datetime, timezone

    from rayeval.storage import ResultStore, RunManifest

    store = ResultStore(tmp_path / "out")
    for run_id, status, day in (("old-crash", "running", 1), ("done", "completed", 2), ("stopped", "cancelled", 3)):
        store.write_manifest(
            RunManifest(run_id=run_id, status=status, created_at=datetime(2026, 11, day, 8, 30, tzinfo=timezone.utc))
        )
    (tmp_path / "out" / "run_id=garbled").mkdir()
    (tmp_path / "out" / "run_id=garbled" / "_manifest.json").write_text("{not json")  # skipped: only a hint
    code = main(
        [
            "run",
            str(REPO / "evals"),
            "--agent",
            "reference",
            "--output",
            str(tmp_path / "out"),
            "--no-progress",
            "--resume",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert (
        f"--resume needs --run-id; unfinished runs under {tmp_path / 'out'}, newest first: "
        "stopped (cancelled, started 2026-11-03 08:30 UTC), old-crash (running, started 2026-11-01 08:30 UTC)"
    ) in err
    assert "done" not in err


@pytest.mark.parametrize(
    ("agent", "options", "message"),
    [
        ("replay", [], "agent 'replay' needs --agent-arg trials=PATH"),
        ("replay", ["--agent-arg", "trials=/no/such/trials.jsonl"], "cannot read trials file /no/such/trials.jsonl"),
        # a model the trials file records nothing of: every unit would be an error
        ("replay", ["--agent-arg", f"trials={TRIALS}"], "records no trial of model 'default' (--models names"),
        (
            "replay",
            ["--agent-arg", f"trials={TRIALS}", "--models", "gpt-5.5@openai-codex,claude-opus-4-7@codex"],
            "records no trial of model 'claude-opus-4-7@codex'",
        ),
        (
            "reference",
            ["--agent-arg", "answer=42"],
            "agent 'reference': unknown --agent-arg answer (it takes no options)",
        ),
        (
            "sleep",
            ["--agent-arg", "seconds=soon"],
            "agent 'sleep': --agent-arg seconds must be a number >= 0, got 'soon'",
        ),
        ("claude-code", ["--agent-arg", "tiemout=5"], "agent 'claude-code': unknown --agent-arg tiemout (it takes "),
        (
            "claude-code",
            ["--agent-arg", "timeout=-5"],
            "agent 'claude-code' with model 'default': timeout must be positive",
        ),
        ("claude-code", [], "agent 'claude-code': claude_code needs ANTHROPIC_API_KEY"),
    ],
)
def test_bad_agent_options_and_missing_keys_exit_2_before_any_unit(
    agent: str,
    options: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    code = main(
        ["run", str(REPO / "evals"), "--agent", agent, "--output", str(tmp_path / "out"), "--no-progress", *options]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.usefixtures("shared_ray")
def test_a_trials_file_in_the_private_tmp_is_shown_to_the_units(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file an agent's option names is shown to its units at its own path, read-only, even
    under /tmp (pytest's tmp_path is there), which is each unit's own: the replayed answers
    come back, graded."""
    copy = tmp_path / "trials.jsonl"
    copy.write_bytes(TRIALS.read_bytes())
    monkeypatch.setattr(sys, "path", [*sys.path])  # main() puts the working folder on it
    out = tmp_path / "out"
    code = main(["run", str(TRIALS.parent / "evals"), "--agent", "replay", "--agent-arg", f"trials={copy}",
                 "--models", "gpt-5.5@openai-codex", "--limit", "3", "--output", str(out), "--no-progress"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    rows = ds.dataset(out, format="parquet", partitioning="hive").to_table().to_pylist()
    assert len(rows) == 3 and all(row["status"] in ("passed", "failed") for row in rows), rows


@pytest.mark.usefixtures("shared_ray")
def test_a_run_whose_every_unit_errored_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", str(REPO / "evals" / "pbmc"), "--data-root", str(REPO / "evals"), "--agent", "tests.batch.agents:broken",
                 "--output", str(tmp_path / "out"), "--retries", "0", "--no-progress"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 1, captured.err
    assert "errored" in captured.err and "nothing was evaluated" in captured.err
    assert "accuracy %" in captured.out  # the summary is still printed
    import pandas as pd

    rows = pd.read_parquet(tmp_path / "out")
    assert (rows["error_type"] == "RuntimeError").all()
    assert (rows["error_message"] == "no model behind this agent").all()  # the message alone
    assert rows["error_traceback"].str.startswith("Traceback (most recent call last)").all()
    assert rows["error_traceback"].str.contains("in broken").all()


@pytest.mark.usefixtures("shared_ray")
@pytest.mark.parametrize(("agent", "staged"), [("reads_data", ["pbmc68k_reduced.h5ad"]), ("reads_nothing", None)])
def test_a_module_agent_that_declares_it_reads_nothing_gets_no_data_in_its_sandbox(
    tmp_path: Path, agent: str, staged: list | None
) -> None:
    """Its module is imported only in the sandbox: the start-up probe there reads the
    declaration, and the worker stages no data for its units."""
    code = main(["run", str(REPO / "evals" / "pbmc" / "pbmc_pca_summary.json"), "--data-root", str(REPO / "evals"),
                 "--agent", f"tests.batch.agents:{agent}", "--output", str(tmp_path / "out"), "--no-progress"])  # fmt: skip
    assert code in (0, 1)
    import pandas as pd

    (row,) = pd.read_parquet(tmp_path / "out").to_dict("records")
    assert row["isolation"] == "sandbox" and json.loads(json.loads(row["answer_json"])["answer"]) == staged


@pytest.mark.parametrize(
    ("text", "size"), [("512M", 512 * 2**20), ("2G", 2 * 2**30), ("2Gi", 2 * 2**30), ("1000", 1000)]
)
def test_unit_memory_reads_sizes(text: str, size: int) -> None:
    from rayeval.cli import _memory_size

    assert _memory_size(text) == size


def test_a_bad_unit_memory_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", str(REPO / "evals"), "--agent", "reference", "--output", "o", "--unit-memory", "lots"])
    assert exited.value.code == 2
    assert "expected a size such as 512M, 2G or a number of bytes, got 'lots'" in capsys.readouterr().err


@pytest.mark.usefixtures("shared_ray")
def test_an_agent_functions_own_option_check_runs_before_any_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module:function agent with a ``check_args`` attribute has its options checked by the
    start-up probe, in the sandbox where its units would run: exit 2 naming the problem."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(sys, "path", [*sys.path])  # main() puts the working folder on it
    monkeypatch.chdir(REPO)
    out = tmp_path / "out"
    args = ["run", str(REPO / "evals"), "--agent", "tests.batch.agents:picky", "--output", str(out), "--no-progress"]
    assert main([*args, "--agent-arg", "mode=sloppy"]) == 2
    err = capsys.readouterr().err
    assert "picky: --agent-arg mode must be strict or lenient, got 'sloppy'" in err and "Traceback" not in err
    assert not out.exists()


def test_an_output_that_cannot_be_written_is_said_plainly(
    small_disk, s3_server, aws_credentials: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A read-only folder, or a bucket that does not exist: the run stops before Ray starts,
    saying the root cannot be written and why, not how its lease failed."""
    import subprocess

    disk = small_disk("readonly", "1m")
    subprocess.run(["mount", "-o", "remount,ro", str(disk.path)], check=True)
    for output, why in (
        (str(disk.path / "results"), f"Read-only file system: {disk.path / 'results'}"),
        ("s3://no-such-bucket/results", "NoSuchBucket"),
    ):
        code = main(["run", str(REPO / "evals"), "--agent", "reference", "--output", output, "--no-progress",
                     "--s3-endpoint", s3_server.endpoint_url])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2, err
        assert f"results root {output} cannot be written (" in err and why in err, err
        assert "give --output a folder (or bucket) this user may write to" in err
        assert "lease" not in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("agent", "said"),
    [
        ("tests.batch.agentz:misbehaving", "package 'tests.batch' has no module 'agentz'; did you mean 'tests.batch.agents'?"),
        ("tests.batch.agents:misbehavin", "defines no 'misbehavin'; did you mean 'misbehaving'?"),
        ("no_such_agent_module_xyz:run", "no module 'no_such_agent_module_xyz' on this machine's import path"),
    ],
)  # fmt: skip
def test_a_misspelled_module_agent_is_refused_at_once_on_an_embedded_run(
    agent: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before Ray starts, once, with the nearest name; nothing of the agent's module runs."""
    import ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    evals = tmp_path / "evals"
    evals.mkdir()
    body = {"id": "e", "task": "A or B?", "grader": {"type": "multiple_choice", "config": {"correct_answer": "B"}}}
    (evals / "e.json").write_text(json.dumps(body))
    code = main(["run", str(evals), "--agent", agent, "--output", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count(said) == 1 and "--sandbox-bind" not in err, err
    assert not ray.is_initialized() and not (tmp_path / "out").exists()


@pytest.mark.usefixtures("shared_ray")
def test_a_run_without_output_writes_where_evaluations_run_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rayeval run`` and ``evaluations.run`` share one default results root: rayeval-results
    in the working folder (``--help`` says so)."""
    import inspect

    from rayeval import evaluations

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.chdir(tmp_path)
    evals = tmp_path / "evals"
    evals.mkdir()
    body = {"id": "e", "task": "A or B?", "grader": {"type": "multiple_choice", "config": {"correct_answer": "B"}}}
    (evals / "e.json").write_text(json.dumps(body))
    assert main(["run", str(evals), "--agent", "tests.batch.agents:instant", "--no-progress"]) == 0
    assert len(ds.dataset(tmp_path / "rayeval-results", format="parquet", partitioning="hive").to_table()) == 1
    assert inspect.signature(evaluations.run).parameters["output"].default == "rayeval-results"
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "(default rayeval-results, in the working folder" in " ".join(capsys.readouterr().out.split())


def test_an_s3_root_that_cannot_be_used_says_what_to_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, s3_server, aws_credentials
) -> None:
    """No server at the endpoint: the message names --s3-endpoint and AWS_ENDPOINT_URL; a
    bucket that does not exist (on moto's server): the bucket. Not the raw AWS error alone."""
    from rayeval._s3 import s3_hint

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    evals = tmp_path / "evals"
    evals.mkdir()
    body = {"id": "e", "task": "A or B?", "grader": {"type": "multiple_choice", "config": {"correct_answer": "B"}}}
    (evals / "e.json").write_text(json.dumps(body))
    base = ["run", str(evals), "--agent", "tests.batch.agents:instant", "--no-progress", "--output"]
    assert main([*base, "s3://nowhere/results", "--s3-endpoint", "http://127.0.0.1:9"]) == 2
    said = capsys.readouterr().err
    assert "The S3 endpoint http://127.0.0.1:9 cannot be reached: name an S3-compatible server" in said, said
    assert main([*base, "s3://no-such-bucket-here/results", "--s3-endpoint", s3_server.endpoint_url]) == 2
    said = capsys.readouterr().err
    assert f"No such bucket at {s3_server.endpoint_url}: create it" in said, said
    refused = "An error occurred (InvalidAccessKeyId) when calling the PutObject operation"
    assert s3_hint("s3://b/r", refused).startswith("the credentials were refused or are missing: set AWS_ACCESS_KEY_ID")
    assert s3_hint("/local/root", refused) == ""
