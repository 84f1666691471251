"""Where the sandbox cannot start, a run stops before any unit and names the way out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest

REPO = Path(__file__).resolve().parents[2]
NO_USER_NAMESPACES = "bwrap: No permissions to create new namespace, likely because the kernel does not allow non-privileged user namespaces."


def _rayeval(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rayeval.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _evals(tmp_path: Path) -> Path:
    folder = tmp_path / "evals"
    folder.mkdir()
    body = {"id": "mc", "task": "A or B?", "grader": {"type": "multiple_choice", "config": {"correct_answer": "B"}}}
    (folder / "mc.json").write_text(json.dumps(body))
    return folder


@pytest.mark.slow  # a bubblewrap that cannot start, then four CLI runs: ~30 s on a loaded machine
def test_a_run_stops_before_any_unit_and_names_the_opt_out(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"  # a bubblewrap that fails as it does without user namespaces
    fake.write_text(f"#!/bin/sh\necho '{NO_USER_NAMESPACES}' >&2\nexit 1\n")
    fake.chmod(0o755)
    env = {**os.environ, "RAYEVAL_BWRAP": str(fake), "RAY_USAGE_STATS_ENABLED": "0"}
    evals, out = _evals(tmp_path), tmp_path / "results"

    checked = _rayeval("check-sandbox", env=env, cwd=tmp_path)
    assert checked.returncode == 2 and NO_USER_NAMESPACES in checked.stderr and "--isolation process" in checked.stderr

    refused = _rayeval(
        "run",
        str(evals),
        "--agent",
        "sleep",
        "--agent-arg",
        "seconds=0",
        "--output",
        str(out),
        "--no-progress",
        env=env,
        cwd=tmp_path,
    )
    assert refused.returncode == 2, refused.stderr
    assert "--isolation process" in refused.stderr and NO_USER_NAMESPACES in refused.stderr
    assert "Traceback" not in refused.stderr and not list(out.rglob("*.parquet"))

    opted_out = _rayeval(
        "run", str(evals), "--agent", "sleep", "--agent-arg", "seconds=0", "--isolation", "process", "--output", str(out), "--no-progress",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert opted_out.returncode == 0, opted_out.stderr
    rows = ds.dataset(out, format="parquet", partitioning="hive").to_table().to_pylist()
    assert [row["isolation"] for row in rows] == ["process"]
    report = _rayeval("report", str(out), "--run", "latest", env=env, cwd=tmp_path)
    assert "1 of 1 units are not known to have run in a sandbox (process: 1)" in report.stdout


def test_check_sandbox_says_what_works_here(tmp_path: Path) -> None:
    done = _rayeval("check-sandbox", env={**os.environ}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("sandbox works here: bubblewrap ")


def test_an_agent_that_runs_in_the_worker_needs_no_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prompt agent runs no agent code (it calls a model from the worker): a host where
    bubblewrap cannot start still runs it, under the default isolation."""
    from rayeval.batch import BatchConfig
    from rayeval.batch.preview import check_agent_loads_here
    from rayeval.evals import load_evals

    fake = tmp_path / "bwrap"
    fake.write_text(f"#!/bin/sh\necho '{NO_USER_NAMESPACES}' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("RAYEVAL_BWRAP", str(fake))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    evals = _evals(tmp_path)
    config = BatchConfig(evals=[str(evals)], agent="prompt", models=["openai/gpt-4o"], output=str(tmp_path / "out"))
    check_agent_loads_here(config, load_evals(evals), embedded=True)  # no SandboxError


def test_a_runner_that_died_before_its_first_unit_is_named_with_bubblewraps_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race behind a check that once ended in a traceback: bubblewrap has already exited
    when the first unit is handed to the runner, so the hand-over itself fails (EPIPE)."""
    import socket

    from rayeval.sandbox import units

    fake = tmp_path / "bwrap"
    fake.write_text(f"#!/bin/sh\necho '{NO_USER_NAMESPACES}' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("RAYEVAL_BWRAP", str(fake))
    real_start = units.UnitRunner._start

    def start_and_die(self: units.UnitRunner) -> socket.socket:
        control = real_start(self)
        assert self._process is not None
        self._process.wait(timeout=30)  # bubblewrap gave up before the hand-over
        return control

    def broken_pipe(*args: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(units.UnitRunner, "_start", start_and_die)
    monkeypatch.setattr(units, "send_fds", broken_pipe)
    runner = units.UnitRunner(units.SandboxConfig(), "sandbox", tmp_path / "work", None)
    ours, theirs = socket.socketpair()
    try:
        with ours, theirs, pytest.raises(units.SandboxError, match="the unit runner failed: .*Broken pipe") as raised:
            runner._request(theirs)
        assert NO_USER_NAMESPACES in str(raised.value)
    finally:
        runner.close()
