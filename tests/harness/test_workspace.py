"""Work folders: an empty one an agent is done with serves the next unit (renamed), and only then:
when nothing the agent started can still run (a sandboxed unit, or an agent that says so), it
left the folder as made, and did not time out.

Most tests here run agents inline: they count the folder system calls of this process, and a
sandboxed unit never leaves its folder empty (its agent_stdout.log)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rayeval import EvalRunner
from rayeval.evals import Eval
from rayeval.harness import workspace

QUICK_EVAL = {
    "id": "quick",
    "task": 'A or B? <EVAL_ANSWER>{"answer": "A|B"}</EVAL_ANSWER>',
    "grader": {"type": "multiple_choice", "config": {"correct_answer": "B"}},
}


def _runner(root: Path, **extra) -> EvalRunner:
    return EvalRunner(Eval.model_validate({**QUICK_EVAL, **extra}), work_root=root, run_id="r")


def _recording(seen: list[os.stat_result], action=None, leaves_nothing_running: bool = True):
    """An agent that notes its work folder (its stat) and answers B."""

    def agent(prompt: str, work_dir: Path) -> dict:
        seen.append(os.stat(work_dir))
        if action:
            action(work_dir)
        return {"answer": "B"}

    agent.needs_data = False  # type: ignore[attr-defined]
    agent.leaves_nothing_running = leaves_nothing_running  # type: ignore[attr-defined]
    return agent


def _unit_folders(root: Path) -> list[str]:
    return sorted(name for name in os.listdir(root / "r") if not name.startswith("."))


@pytest.fixture
def folder_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The folder-making, -renaming and -removing system calls from now on, by kind."""
    calls: list[str] = []
    for name in ("mkdir", "rmdir", "rename"):
        real = getattr(os, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(os, name, spy)
    return calls


def test_an_empty_folder_serves_the_next_unit_under_the_next_units_name(
    tmp_path: Path, folder_calls: list[str]
) -> None:
    runner, seen = _runner(tmp_path), []
    agent = _recording(seen)
    for _ in range(3):
        assert runner.run(agent, isolation="inline").passed
        assert _unit_folders(tmp_path) == []  # no unit's name is left behind
    # made once (with its parents), then renamed to each unit's name and back
    assert folder_calls == ["mkdir"] * 3 + ["rename"] * 5
    assert len({info.st_ino for info in seen}) == 1
    assert [name.startswith(".spare-") for name in os.listdir(tmp_path / "r")] == [True]


def test_only_agents_that_leave_nothing_running_get_a_used_folder(tmp_path: Path, folder_calls: list[str]) -> None:
    """Something an agent started and left running (a subprocess in its folder) would write
    into the next unit's folder: agents that do not say otherwise get a new folder each time."""
    runner = _runner(tmp_path)
    for _ in range(3):
        assert runner.run(_recording([], leaves_nothing_running=False), isolation="inline").passed
    assert folder_calls == ["mkdir"] * 3 + ["rmdir", "mkdir", "rmdir", "mkdir", "rmdir"]
    assert os.listdir(tmp_path / "r") == []


def test_a_sandboxed_units_folder_serves_the_next_unit_without_the_agent_saying_so(tmp_path: Path) -> None:
    """Nothing a sandboxed agent started outlives its unit (its pid namespace ends with it): the
    empty folder it leaves serves the next unit, though the agent does not say it leaves
    nothing running. Without the sandbox, the same agent's folder is removed."""

    def agent(prompt: str, work_dir: Path) -> dict:
        (work_dir / "agent_stdout.log").unlink()  # what every unit leaves: its log, and
        for folder in (".home", ".tmp"):  # without the sandbox, its HOME and TMPDIR
            if (work_dir / folder).is_dir():
                (work_dir / folder).rmdir()
        return {
            "answer": {"answer": "B"},
            "metadata": {"seen": {"inode": os.stat(work_dir).st_ino, "left": os.listdir(work_dir)}},
        }

    agent.needs_data = False  # type: ignore[attr-defined]
    runner = _runner(tmp_path)

    def spares() -> list[str]:
        return [name for name in os.listdir(tmp_path / "r") if name.startswith(".spare-")]

    seen = []
    for isolation in ("process", "sandbox", "sandbox"):
        result = runner.run(agent, isolation=isolation)
        assert result.passed and result.isolation == isolation, result.error_message
        seen.append(result.metadata["seen"])
        assert seen[-1]["left"] == [] and _unit_folders(tmp_path) == []
        assert len(spares()) == (0 if isolation == "process" else 1)
    assert seen[2]["inode"] == seen[1]["inode"]  # the second sandboxed unit got the first's folder


def test_a_folder_the_agent_wrote_in_or_changed_is_not_reused(tmp_path: Path, folder_calls: list[str]) -> None:
    runner, seen = _runner(tmp_path), []
    runner.run(_recording(seen), isolation="inline")  # leaves a spare
    folder_calls.clear()
    runner.run(
        _recording(seen, lambda work_dir: work_dir.chmod(0o700 if seen[0].st_mode & 0o077 else 0o755)),
        isolation="inline",
    )
    assert folder_calls == ["rename", "rmdir"]  # took the spare; changed, it is removed, not kept
    folder_calls.clear()
    runner.run(_recording(seen, lambda work_dir: (work_dir / "notes.txt").write_text("x")), isolation="inline")
    assert folder_calls[:1] == ["mkdir"] and "rename" not in folder_calls  # a new folder; not kept with a file in it
    runner.run(_recording(seen), isolation="inline")
    assert [info.st_mode for info in seen] == [seen[0].st_mode] * 4  # every unit's folder as made
    assert _unit_folders(tmp_path) == []


def test_the_folder_of_an_agent_that_timed_out_is_never_reused(tmp_path: Path, folder_calls: list[str]) -> None:
    slow = _runner(tmp_path, agent_timeout=0.2)

    def hung(prompt: str, work_dir: Path) -> dict:
        import time

        time.sleep(1.0)  # still running, in its thread, after the unit is over
        return {"answer": "B"}

    hung.needs_data = False  # type: ignore[attr-defined]
    hung.leaves_nothing_running = True  # type: ignore[attr-defined]  # it says so, but it timed out
    assert slow.run(hung, isolation="inline").status == "timeout"
    assert folder_calls == ["mkdir"] * 3 + ["rmdir"]
    folder_calls.clear()
    _runner(tmp_path).run(_recording([]), isolation="inline")
    assert folder_calls[:1] == ["mkdir"]


def test_a_taken_name_is_drawn_again_when_a_spare_is_at_hand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rename would replace an empty folder of that name: the spare must not take it."""
    runner, seen = _runner(tmp_path), []
    runner.run(_recording(seen), isolation="inline")  # leaves a spare
    taken = tmp_path / "r" / "x__m__s1__0000000abc"  # another unit's, empty
    taken.mkdir()
    draws = iter([0xABC, 0xDEF])
    monkeypatch.setattr(workspace._SUFFIXES, "getrandbits", lambda bits: next(draws))
    second = workspace.make_work_dir(tmp_path, run_id="r", eval_id="x", model="m", seed=1)
    assert second.name.endswith("__0000000def") and taken.is_dir()
    assert not [name for name in os.listdir(tmp_path / "r") if name.startswith(".spare-")]  # the spare is the second


def test_a_forked_child_does_not_take_its_parents_spares(tmp_path: Path) -> None:
    runner, seen = _runner(tmp_path), []
    runner.run(_recording(seen), isolation="inline")  # leaves a spare in this process
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        inode = os.stat(workspace.make_work_dir(tmp_path, run_id="r", eval_id="x", model="m", seed=1)).st_ino
        os.write(writer, f"{inode}\n".encode())
        os._exit(0)
    os.waitpid(pid, 0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        child_inode = int(pipe.read())
    spares = [name for name in os.listdir(tmp_path / "r") if name.startswith(".spare-")]
    assert child_inode != seen[0].st_ino and len(spares) == 1  # the spare stayed the parent's


def _run_one_unit_in_a_process(root: Path, then: str) -> int:
    """A Python process that runs one unit of a reusing agent under ``root`` (leaving a spare),
    then the statement ``then``; returns its exit code."""
    script = f"""
import os, signal
from pathlib import Path
from rayeval import EvalRunner
from rayeval.evals import Eval
agent = lambda prompt, work_dir: {{"answer": "B"}}
agent.needs_data = False
agent.leaves_nothing_running = True
runner = EvalRunner(Eval.model_validate({QUICK_EVAL!r}), work_root=Path({str(root)!r}), run_id="r")
assert runner.run(agent, isolation="inline").passed
assert any(name.startswith(".spare-") for name in os.listdir({str(root / "r")!r}))
{then}
"""
    return subprocess.run([sys.executable, "-c", script], check=False, timeout=120).returncode


def test_spares_are_removed_when_the_process_exits(tmp_path: Path) -> None:
    assert _run_one_unit_in_a_process(tmp_path, "pass") == 0
    assert os.listdir(tmp_path / "r") == []


def test_rayevals_in_process_agents_say_they_leave_nothing_running(tmp_path: Path, folder_calls: list[str]) -> None:
    from rayeval.agents.sleep import sleep_agent

    runner = _runner(tmp_path)
    for _ in range(2):
        runner.run(sleep_agent, isolation="inline", agent_args={"seconds": "0"})
    assert folder_calls.count("rename") == 3 and "rmdir" not in folder_calls
    from rayeval.agents.replay import replay_agent

    assert replay_agent.leaves_nothing_running is True  # type: ignore[attr-defined]


def test_spares_of_a_killed_process_are_removed_by_the_next_one(tmp_path: Path) -> None:
    """A process killed before its exit handler left its spare: the next process to make a
    folder in that parent removes it, and leaves the spares of live processes alone."""
    assert _run_one_unit_in_a_process(tmp_path, "os.kill(os.getpid(), signal.SIGKILL)") == -signal.SIGKILL
    left = [name for name in os.listdir(tmp_path / "r") if name.startswith(".spare-")]
    assert len(left) == 1, left
    live = tmp_path / "r" / f".spare-{os.getppid()}-0"  # a live process's (this one's parent)
    live.mkdir()

    runner, seen = _runner(tmp_path), []
    assert runner.run(_recording(seen), isolation="inline").passed
    spares = sorted(name for name in os.listdir(tmp_path / "r") if name.startswith(".spare-"))
    assert left[0] not in spares and live.name in spares
