"""A program's process is out of its tools' reach where its binary is shown execute-only
(``rayeval.sandbox.exec_only``): a tool cannot read its environment nor open its stdout, the
event pipe its agent reads; without it (the control), the same tool can."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from rayeval import EvalRunner
from rayeval.agents.resolve import agent_ref
from rayeval.sandbox import SandboxConfig, units
from rayeval.sandbox.exec_only import exec_only_copy, exec_only_views

INTERPRETER = os.path.realpath(sys.executable)


def test_an_execute_only_copy_is_made_once_per_version(tmp_path: Path) -> None:
    binary = tmp_path / "program"
    binary.write_bytes(b"\x7fELF one")
    first = exec_only_copy(str(binary), tmp_path / "copies")
    assert stat.S_IMODE(os.stat(first).st_mode) == 0o111 and Path(first).read_bytes() == b"\x7fELF one"
    assert exec_only_copy(str(binary), tmp_path / "copies") == first  # the same file: the same copy
    binary.write_bytes(b"\x7fELF two, longer")
    second = exec_only_copy(str(binary), tmp_path / "copies")
    assert second != first and Path(second).read_bytes() == b"\x7fELF two, longer"
    assert sorted(p.name for p in (tmp_path / "copies").iterdir()) == sorted([Path(first).name, Path(second).name])


@pytest.mark.parametrize("exec_only", [True, False], ids=["execute-only", "control"])
def test_a_tool_cannot_reach_a_program_shown_execute_only(tmp_path: Path, exec_only: bool) -> None:
    evals = tmp_path / "evals"
    evals.mkdir()
    body = {"id": "e", "task": "Run.", "grader": {"type": "multiple_choice", "config": {"correct_answer": "B"}}}
    (evals / "e.json").write_text(json.dumps(body))
    config = SandboxConfig(exec_only=(INTERPRETER,) if exec_only else ())
    runner = EvalRunner(evals / "e.json", work_root=tmp_path / "work", cache_dir=tmp_path / "cache")
    try:
        result = runner.run(agent_ref("tests.security.exec_only_agents:program_and_tool"), sandbox=config)
    finally:
        units.close_runners()
    found = result.agent_answer
    assert isinstance(found, dict), (result.error_type, result.error_message, result.metadata)
    assert found["control"] is True  # a process the tool started itself: readable
    assert (found["environ"], found["pipe"]) == ((False, False) if exec_only else (True, True)), found


def test_copies_left_half_made_or_unused_for_a_week_are_removed(tmp_path: Path) -> None:
    copies = tmp_path / "copies"
    copies.mkdir()
    kept = tmp_path / "kept"
    kept.write_bytes(b"\x7fELF kept")
    in_use = Path(exec_only_copy(str(kept), copies))
    old, fresh, unused = copies / ".partial-old", copies / ".partial-fresh", copies / "0123-old-program"
    for path in (old, fresh, unused):
        path.write_bytes(b"x")
    for path in (old, unused, in_use):
        os.utime(path, (0, 0))
    assert exec_only_copy(str(kept), copies) == str(in_use)  # asked for again: in use
    binary = tmp_path / "program"
    binary.write_bytes(b"\x7fELF")
    exec_only_copy(str(binary), copies)
    assert not old.exists() and not unused.exists() and fresh.exists() and in_use.exists()


def test_on_a_noexec_file_system_no_copy_is_made_and_the_log_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A copy there could not run: the units would all fail to start. (The mount itself needs
    privileges a test run may not have: the file system's flag is what the code reads.)"""
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(f_flag=os.ST_NOEXEC))
    binary = tmp_path / "program"
    binary.write_bytes(b"\x7fELF")
    assert exec_only_views((str(binary),), tmp_path / "copies") == []
    assert "mounted noexec" in caplog.text and not any((tmp_path / "copies").iterdir())
