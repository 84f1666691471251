"""Work folders: every unit gets one made for it, never one another unit had (even left empty:
its extended attributes, default ACL and timestamps would stay), and none is left behind.

Most tests here run agents inline: they count the folder system calls of this process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rayeval import EvalRunner
from rayeval.evals import Eval
from rayeval.unit import workspace

QUICK_EVAL = {
    "id": "quick",
    "task": 'A or B? <EVAL_ANSWER>{"answer": "A|B"}</EVAL_ANSWER>',
    "grader": {"type": "multiple_choice", "config": {"correct_answer": "B"}},
}
MARK_NS = 1_000_000_000_123_456_789  # a time no folder is made at


def _runner(root: Path) -> EvalRunner:
    return EvalRunner(Eval.model_validate(QUICK_EVAL), work_root=root, run_id="r")


def _default_acl(uid: int) -> bytes:
    """A default ACL as the kernel stores it (version 2; tag, permissions, id per entry): the
    owner, a named user, the group, a mask, the others."""
    entries = [
        (0x01, 7, 0xFFFFFFFF),
        (0x02, 7, uid),
        (0x04, 5, 0xFFFFFFFF),
        (0x10, 7, 0xFFFFFFFF),
        (0x20, 5, 0xFFFFFFFF),
    ]
    return (2).to_bytes(4, "little") + b"".join(
        tag.to_bytes(2, "little") + perm.to_bytes(2, "little") + id_.to_bytes(4, "little") for tag, perm, id_ in entries
    )


def _marking_agent(prompt: str, work_dir: Path) -> dict:
    """Reports what its folder carries, then leaves on it what an emptied folder keeps (an
    attribute, a default ACL, its times), and leaves it empty."""
    info = os.stat(work_dir)
    seen = {
        "xattrs": sorted(os.listxattr(work_dir)),
        "marked_times": MARK_NS in (info.st_atime_ns, info.st_mtime_ns),
        "left": sorted(os.listdir(work_dir)),
    }
    for name in seen["left"]:  # its log and, without the sandbox, its HOME and TMPDIR
        path = work_dir / name
        path.rmdir() if path.is_dir() else path.unlink()
    os.setxattr(work_dir, "user.rayeval-mark", b"1")
    os.setxattr(work_dir, "system.posix_acl_default", _default_acl(os.getuid()))
    os.utime(work_dir, ns=(MARK_NS, MARK_NS))
    return {"answer": {"answer": "B"}, "metadata": {"seen": seen}}


_marking_agent.needs_data = False  # type: ignore[attr-defined]


def _unit_folders(root: Path) -> list[str]:
    return sorted(os.listdir(root / "r"))


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


@pytest.mark.parametrize("isolation", ["inline", "process", "sandbox"])
def test_an_emptied_folder_never_serves_the_next_unit(tmp_path: Path, isolation: str) -> None:
    """Each unit leaves its folder empty but marked: the next one gets a folder without the
    marks, and none is left behind."""
    runner = _runner(tmp_path)
    for _ in range(3):
        result = runner.run(_marking_agent, isolation=isolation)
        assert result.passed and result.isolation == isolation, result.error_message
        seen = result.metadata["seen"]
        assert seen["xattrs"] == [] and not seen["marked_times"], seen
        assert _unit_folders(tmp_path) == []


def test_each_unit_makes_its_folder_and_removes_it(tmp_path: Path, folder_calls: list[str]) -> None:
    runner = _runner(tmp_path)
    for _ in range(3):
        assert runner.run(_marking_agent, isolation="inline", grade_timeout=None).passed  # no grading runner's folder
    # made (with its parents, the first time) and removed, never renamed
    assert folder_calls == ["mkdir"] * 3 + ["rmdir", "mkdir", "rmdir", "mkdir", "rmdir"]
    assert _unit_folders(tmp_path) == []


def test_a_taken_name_is_drawn_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    taken = tmp_path / "r" / "x__m__s1__0000000abc"  # another unit's, empty
    taken.mkdir(parents=True)
    draws = iter([0xABC, 0xDEF])
    monkeypatch.setattr(workspace._SUFFIXES, "getrandbits", lambda bits: next(draws))
    second = workspace.make_work_dir(tmp_path, run_id="r", eval_id="x", model="m", seed=1)
    assert second.name.endswith("__0000000def") and taken.is_dir() and os.listdir(taken) == []


def test_a_forked_child_draws_other_names_than_its_parent() -> None:
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(writer, str(workspace._SUFFIXES.getrandbits(40)).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        child = int(pipe.read())
    assert child != workspace._SUFFIXES.getrandbits(40)
