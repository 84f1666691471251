"""A program's process is out of its tools' reach where its binary is shown execute-only
(``rayeval.sandbox.exec_only``): a tool cannot read its environment nor open its stdout, the
event pipe its agent reads; without it (the control), the same tool can."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from rayeval import EvalResult, EvalRunner
from rayeval.agents.resolve import agent_ref
from rayeval.sandbox import SandboxConfig, units
from rayeval.sandbox.allowlist import FileSystemView, file_system_view
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


def _run(tmp_path: Path, agent: str, config: SandboxConfig) -> EvalResult:
    """The result of ``agent`` (of ``exec_only_agents``) run in a sandbox with ``config``."""
    evals = tmp_path / "evals"
    evals.mkdir()
    body = {"id": "e", "task": "Run.", "grader": {"type": "multiple_choice", "config": {"correct_answer": "B"}}}
    (evals / "e.json").write_text(json.dumps(body))
    runner = EvalRunner(evals / "e.json", work_root=tmp_path / "work", cache_dir=tmp_path / "cache")
    try:
        return runner.run(agent_ref(f"tests.security.exec_only_agents:{agent}"), sandbox=config)
    finally:
        units.close_runners()


def _what_the_tool_reached(tmp_path: Path, agent: str, config: SandboxConfig) -> dict:
    """What the tool of ``agent`` could open of its program."""
    result = _run(tmp_path, agent, config)
    found = result.agent_answer
    assert isinstance(found, dict), (result.error_type, result.error_message, result.metadata)
    assert found["control"] is True  # a process the tool started itself: readable
    return found


@pytest.mark.parametrize("exec_only", [True, False], ids=["execute-only", "control"])
def test_a_tool_cannot_reach_a_program_shown_execute_only(tmp_path: Path, exec_only: bool) -> None:
    config = SandboxConfig(exec_only=(INTERPRETER,) if exec_only else ())
    found = _what_the_tool_reached(tmp_path, "program_and_tool", config)
    assert (found["environ"], found["pipe"]) == ((False, False) if exec_only else (True, True)), found


@pytest.mark.parametrize("exec_only", [True, False], ids=["execute-only", "control"])
def test_a_program_in_a_folder_shown_through_a_link_is_execute_only_at_the_linked_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exec_only: bool
) -> None:
    """A tools folder that is a link to another folder (a git worktree's ``.agent-tools``
    linked to the main clone's): the sandbox shows the folder's content under the link's name,
    the only name the unit runs the program by; its real path is nowhere in the unit's view."""
    real = tmp_path / "main" / "tools"
    real.mkdir(parents=True)
    shutil.copy2(os.path.realpath("/bin/sh"), real / "sh")
    linked = tmp_path / "worktree" / "tools"
    linked.parent.mkdir()
    linked.symlink_to(real)
    monkeypatch.setenv("EXEC_ONLY_SHELL", str(linked / "sh"))
    config = SandboxConfig(
        bind=(str(linked),), env_names=("EXEC_ONLY_SHELL",), exec_only=(str(linked / "sh"),) if exec_only else ()
    )
    found = _what_the_tool_reached(tmp_path, "shell_and_tool", config)
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


def test_a_binary_is_found_at_every_name_the_view_shows_it_by(tmp_path: Path) -> None:
    real = tmp_path / "main" / "tools"
    (real / "bin").mkdir(parents=True)
    (real / "hidden").mkdir()
    for binary in (real / "bin" / "program", real / "hidden" / "program"):
        binary.write_bytes(b"\x7fELF")
    (tmp_path / "worktree").mkdir()
    (tmp_path / "worktree" / "tools").symlink_to(real)
    (tmp_path / "bin").symlink_to(real / "bin")
    linked = tmp_path / "worktree" / "tools"
    view = file_system_view(
        sys_path=[], modules=[], bound=[str(linked), str(tmp_path / "bin")], trusted=[str(linked / "hidden")]
    )
    assert sorted(view.paths_of(str(real / "bin" / "program"))) == [
        str(tmp_path / "bin" / "program"),
        str(linked / "bin" / "program"),
    ]  # never its real path, which the view does not show
    assert view.paths_of(str(real / "hidden" / "program")) == []  # covered: out of sight


def test_a_binary_missing_where_it_should_be_shown_execute_only_stops_the_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: a name the runner's view does not have the binary at (whatever layout led
    there) is no reason to run the program readable; the unit does not start."""
    missing = str(tmp_path / "nowhere" / "python")
    monkeypatch.setattr(FileSystemView, "paths_of", lambda view, real: [real, missing])
    result = _run(tmp_path, "program_and_tool", SandboxConfig(exec_only=(INTERPRETER,)))
    assert result.agent_answer is None and missing in (result.error_message or ""), result
