"""``rayeval run`` with bad options: exit 2 and one message naming the option, before Ray starts."""
from __future__ import annotations

from pathlib import Path

import pytest

from rayeval.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--max-concurrency", "0"], "--max-concurrency: Input should be greater than or equal to 1 (got 0)"),
        (["--timeout", "-1"], "--timeout: Input should be greater than 0 (got -1.0)"),
        (["--retries", "-1"], "--retries: Input should be greater than or equal to 0 (got -1)"),
        (["--workers", "0"], "--workers: Input should be greater than or equal to 1 (got 0)"),
        (["--output", "s3://"], "--output: results root 's3://' has no bucket"),
        (["--output", ""], "--output: the results root is empty"),
        (["--seeds", "abc"], "--seeds expects N or a comma-separated list of integers, got 'abc'"),
        (["--seeds", str(10**20)], "--seeds N needs 1 <= N <= 1,000,000, got 100000000000000000000"),
        (["--seeds", f"1,{2**63}"], "--seeds: Input should be less than or equal to 9223372036854775807"),
        (["--seeds", "0"], "--seeds N needs 1 <= N"),
        (["--models", ","], "--models is empty"),
        (["--model-concurrency", "m=abc"], "--model-concurrency expects MODEL=N"),
        (["--agent-arg", "noequals"], "--agent-arg expects key=value, got 'noequals'"),
        (["--resume"], "--resume needs --run-id"),
        (["--force"], "--force goes with --resume"),
    ],
)
def test_bad_run_options_exit_2_naming_the_option(
    options: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", str(REPO / "evals"), "--agent", "reference", "--output", str(tmp_path / "out"), "--no-progress", *options])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err and "errors.pydantic.dev" not in err
    assert not (tmp_path / "out").exists()


def test_resume_without_run_id_lists_the_unfinished_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The run to finish after a crash is usually the newest unfinished one: the error names them."""
    from datetime import datetime, timezone

    from rayeval.storage import ResultStore, RunManifest

    store = ResultStore(tmp_path / "out")
    for run_id, status, day in (("old-crash", "running", 1), ("done", "completed", 2), ("stopped", "cancelled", 3)):
        store.write_manifest(RunManifest(run_id=run_id, status=status, created_at=datetime(2026, 11, day, 8, 30, tzinfo=timezone.utc)))
    (tmp_path / "out" / "run_id=garbled").mkdir()
    (tmp_path / "out" / "run_id=garbled" / "_manifest.json").write_text("{not json")  # skipped: only a hint
    code = main(["run", str(REPO / "evals"), "--agent", "reference", "--output", str(tmp_path / "out"), "--no-progress", "--resume"])
    err = capsys.readouterr().err
    assert code == 2
    assert (
        f"--resume needs --run-id; unfinished runs under {tmp_path / 'out'}, newest first: "
        "stopped (cancelled, started 2026-11-03 08:30 UTC), old-crash (running, started 2026-11-01 08:30 UTC)"
    ) in err
    assert "done" not in err
