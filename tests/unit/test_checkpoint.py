"""A chunked session's checkpoint: packed from the agent's folders without links or devices,
unpacked as untrusted input."""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import anthropic
import pytest

from rayeval import EvalRunner
from rayeval.data.cache import remove_tree
from rayeval.evals import Eval
from rayeval.gateway.server import CallLimits, ModelCalls, ModelUsage, Session
from rayeval.models.types import Usage
from rayeval.record import RAYEVAL_FAILURE
from rayeval.sandbox import unit_runner
from rayeval.sandbox.unit_runner import send_frame
from rayeval.unit import checkpoint
from rayeval.unit.checkpoint import CheckpointError, ChunkCheckpoints, pack, unpack
from rayeval.unit.context import AgentContext
from tests.agents.fake_model_server import FakeModelServer
from tests.fixtures_s3 import S3Bucket
from tests.gateway.provider import ChargedBudget

from .test_workspace import QUICK_EVAL


def _work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "notes.txt").write_text("halfway there")
    (work / ".program-state" / "projects").mkdir(parents=True)
    (work / ".program-state" / "projects" / "s1.jsonl").write_bytes(b'{"turn": 1}\n' * 3)
    (work / "data").mkdir()
    (work / "data" / "input.csv").write_text("staged again on resume")
    return work


def test_a_packed_session_unpacks_into_a_fresh_folder(tmp_path: Path) -> None:
    work = _work(tmp_path)
    os.symlink("/etc/passwd", work / "leak")
    os.mkfifo(work / "sub" / "pipe")
    out = io.BytesIO()
    packed = pack(work, out, leave_out={"data"})
    fresh = tmp_path / "fresh"
    assert unpack(io.BytesIO(out.getvalue()), fresh) == packed == len("halfway there") + 36
    assert (fresh / "sub" / "notes.txt").read_text() == "halfway there"
    assert (fresh / ".program-state" / "projects" / "s1.jsonl").read_bytes() == b'{"turn": 1}\n' * 3
    assert sorted(p.name for p in fresh.iterdir()) == [".program-state", "sub"]  # no data, no link
    assert [p.name for p in (fresh / "sub").iterdir()] == ["notes.txt"]  # no pipe


def test_packing_past_the_cap_fails(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="more than 40 bytes"):
        pack(_work(tmp_path), io.BytesIO(), max_bytes=40)


def test_a_folder_swapped_for_a_link_while_packing_is_not_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The agent's process swaps folder ``z`` (listed already) for a link to a folder outside
    the work folder while the file sorted before it is packed: what the link leads to is never
    packed."""
    outside = tmp_path / "host_only"
    outside.mkdir()
    (outside / "credentials").write_text("host secret")
    work = tmp_path / "work"
    (work / "z").mkdir(parents=True)
    (work / "z" / "credentials").write_text("decoy")
    (work / "a_file").write_text("packed before z's files")
    add = tarfile.TarFile.addfile

    def swapping_z_on_a_file(tar: tarfile.TarFile, info: tarfile.TarInfo, fileobj: Any = None) -> None:
        if info.name == "a_file":
            os.rename(work / "z", work / "z_old")
            os.symlink(outside, work / "z")
        add(tar, info, fileobj)

    monkeypatch.setattr(tarfile.TarFile, "addfile", swapping_z_on_a_file)
    out = io.BytesIO()
    pack(work, out)
    monkeypatch.undo()
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        packed = {member.name: tar.extractfile(member).read() if member.isfile() else None for member in tar}  # type: ignore[union-attr]
    assert b"host secret" not in packed.values()
    assert "z/credentials" not in packed and packed["a_file"] == b"packed before z's files"


def test_a_folder_moved_while_packing_fails_the_pack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The folder being packed is moved into another one: the folder above it is no longer the
    one it came down from, so the rest is not packed from there."""
    work = tmp_path / "work"
    (work / "a").mkdir(parents=True)
    (work / "a" / "x").write_text("in a")
    (work / "b").mkdir()
    add = tarfile.TarFile.addfile

    def moving_a_on_its_file(tar: tarfile.TarFile, info: tarfile.TarInfo, fileobj: Any = None) -> None:
        if info.name == "a/x":
            os.rename(work / "a", work / "b" / "a")
        add(tar, info, fileobj)

    monkeypatch.setattr(tarfile.TarFile, "addfile", moving_a_on_its_file)
    with pytest.raises(CheckpointError, match="'a/' was moved while it was packed"):
        pack(work, io.BytesIO())


def test_a_tree_deeper_than_the_recursion_limit_packs_and_unpacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    depth = sys.getrecursionlimit() + 200
    work = tmp_path / "work"
    work.mkdir()
    fd = os.open(work, os.O_RDONLY)
    try:
        for _ in range(depth):  # made by folder fds: its paths grow past what a recursive walk reaches
            os.mkdir("d", dir_fd=fd)
            fd_below = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = fd_below
        os.close(os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
        os.close(fd)
        out = io.BytesIO()
        pack(work, out)
        with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
            names = tar.getnames()
        assert len(names) == depth + 1 and names[-1] == "d/" * depth + "bottom.txt"
        looked_at: list[Path] = []
        is_symlink = Path.is_symlink
        monkeypatch.setattr(Path, "is_symlink", lambda path: looked_at.append(path) or is_symlink(path))
        restored = tmp_path / "restored"
        restored.mkdir()
        try:  # each path looked at for a link once, not each of its folders for each member below
            assert unpack(io.BytesIO(out.getvalue()), restored) == 0
            assert len(looked_at) == len(set(looked_at)) == depth + 1
        finally:
            remove_tree(restored)
    finally:
        remove_tree(work)  # pytest's own removal recurses


def _tar(*members: tuple[tarfile.TarInfo, bytes]) -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data))
    out.seek(0)
    return out


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize(
    ("member", "problem"),
    [
        (_member("../escape"), "outside its folder"),
        (_member("sub/../../escape"), "outside its folder"),
        (_member("/abs"), "outside its folder"),
        (_member("link", tarfile.SYMTYPE, "/etc/passwd"), "neither a file nor a folder"),
        (_member("hard", tarfile.LNKTYPE, "x"), "neither a file nor a folder"),
        (_member("dev", tarfile.CHRTYPE), "neither a file nor a folder"),
    ],
)
def test_an_untrusted_member_is_refused(tmp_path: Path, member: tarfile.TarInfo, problem: str) -> None:
    with pytest.raises(CheckpointError, match=problem):
        unpack(_tar((member, b"x")), tmp_path / "work")
    assert not (tmp_path / "escape").exists()


def test_unpacking_refuses_a_link_in_the_folder_and_a_name_given_twice(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(tmp_path, work / "up")
    with pytest.raises(CheckpointError, match="is a link"):
        unpack(_tar((_member("up/x"), b"x")), work)
    assert not (tmp_path / "x").exists()
    with pytest.raises(CheckpointError, match="twice"):
        unpack(_tar((_member("a"), b"1"), (_member("a"), b"2")), work)


def test_unpacking_past_the_caps_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint, "MAX_CHECKPOINT_ENTRIES", 5)
    with pytest.raises(CheckpointError, match="more than 3 bytes"):
        unpack(_tar((_member("big"), b"four")), tmp_path / "work", max_bytes=3)
    many = [(_member(str(i)), b"") for i in range(6)]
    with pytest.raises(CheckpointError, match="entries"):
        unpack(_tar(*many), tmp_path / "work2")
    with pytest.raises(CheckpointError, match="no readable tar"):
        unpack(io.BytesIO(b"not a tar" * 100), tmp_path / "work3")


# ------------------------------------------------------------ chunk reports from a unit's process
def _reports_chunks_without_model_calls(prompt: str, work_dir: Path, context: AgentContext) -> dict[str, list[bool]]:
    """Reports chunks done again and again, none after a model call; then floods the socket
    with reports whose answers it never reads."""
    acked = [context.chunk_done("s-1", 1) for _ in range(20)]
    for _ in range(5000):
        send_frame(unit_runner._unit_socket, unit_runner.CHUNK, b'{"session_id": "../../x", "turns": 9}')
    return {"acked": acked}


def test_chunk_reports_without_model_calls_save_nothing_and_never_hold_the_worker(tmp_path: Path) -> None:
    sessions = tmp_path / "results" / "_sessions"
    runner = EvalRunner(
        Eval.model_validate(QUICK_EVAL), work_root=tmp_path / "w", run_id="r", sessions_root=str(sessions)
    )
    done = runner.execute(_reports_chunks_without_model_calls, isolation="process", timeout=60)
    assert done.agent_answer == {"acked": [True] * 20}, done.error_message  # each report answered, and waited for
    assert "session_checkpoints" not in done.metadata
    assert not sessions.exists()


def test_a_chunk_report_outside_a_unit_is_told_nobody_saves_it() -> None:
    assert AgentContext(eval_id="e").chunk_done("s-1", 1) is False


# ------------------------------------------------------------- where an attempt starts from
def _session(calls: int, budget: ChargedBudget | None = None) -> Session:
    session = Session(token="t", upstreams={}, limits=CallLimits(model_calls=3), prices={}, budget=budget)
    session.carry(
        ModelUsage(
            n_model_calls=calls,
            usage=Usage(input_tokens=10 * calls, output_tokens=calls),
            cost_usd=0.5 * calls,
            by_model={"m": ModelCalls(n_model_calls=calls, usage=Usage(output_tokens=calls), cost_usd=0.5 * calls)},
            last_model="m",
        ),
        [{"call": index} for index in range(calls)],
    )
    return session


def _saved(tmp_path: Path, attempt: int, chunks: int, removals_fail: bool = False) -> Path:
    """The checkpoints ``attempt`` saved after ``chunks`` chunks, each a model call more: the
    newest, each removing those before it, or all of them when the storage fails to remove any
    (``removals_fail``), for an attempt to fall back on."""
    work = _work(tmp_path / f"saved-{attempt}")
    folder = tmp_path / "sessions" / "unit"
    saver = ChunkCheckpoints(str(folder), work, attempt=attempt)
    saver.filesystem = _Flaky(saver.filesystem, removals_fail=removals_fail)
    for chunk in range(1, chunks + 1):
        (work / "sub" / "notes.txt").write_text(f"chunk {chunk}")
        saver.report = _session(chunk).report
        saver(b'{"session_id": "s-1", "turns": 1}')
    assert saver.saved == chunks
    assert saver.problem == (f"chunks before {chunks} not removed: OSError: AccessDenied" if removals_fail else None)
    kept = range(1 if removals_fail else chunks, chunks + 1)
    assert _names(folder) == [f"chunk-{chunk}.{kind}" for chunk in kept for kind in ("json", "tar")]
    return folder


def _names(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def test_an_attempt_goes_on_from_the_newest_whole_checkpoint_its_own_or_a_lost_ones(tmp_path: Path) -> None:
    folder = _saved(tmp_path, attempt=1, chunks=3, removals_fail=True)
    with open(folder / "chunk-3.tar", "r+b") as tar:  # the node died while it was written
        tar.truncate(512)
    ray_again = ChunkCheckpoints(str(folder), tmp_path / "again", attempt=1)
    (tmp_path / "again").mkdir()
    resumed = ray_again.start()
    assert resumed is not None and (resumed.chunk, resumed.session_id, resumed.turns) == (2, "s-1", 2)
    assert resumed.counted.n_model_calls == 2 and len(resumed.calls) == 2
    assert (tmp_path / "again" / "sub" / "notes.txt").read_text() == "chunk 2"
    assert not (tmp_path / "again" / "data").exists()  # staged afresh
    (tmp_path / "after").mkdir()
    after_lost = ChunkCheckpoints(str(folder), tmp_path / "after", attempt=2).start(from_any_checkpoint=True)
    assert after_lost is not None and after_lost.chunk == 2
    (tmp_path / "fresh").mkdir()
    fresh = ChunkCheckpoints(str(folder), tmp_path / "fresh", attempt=2)
    assert fresh.start() is None  # a new attempt (after a provider's failure, say) starts afresh
    assert not list(folder.iterdir()) and not list((tmp_path / "fresh").iterdir())


def test_a_record_that_does_not_read_is_skipped(tmp_path: Path) -> None:
    folder = _saved(tmp_path, attempt=1, chunks=2, removals_fail=True)
    (folder / "chunk-2.json").write_text('{"chunk": 2, "attempt": 1, "turns": -1}')
    (tmp_path / "w").mkdir()
    resumed = ChunkCheckpoints(str(folder), tmp_path / "w").start()
    assert resumed is not None and resumed.chunk == 1


class _Flaky:
    """A filesystem whose listing, or reads of the files named in ``failing``, fail as a
    throttled S3 would, for as long as asked, and so do its removals (``removals_fail``) and
    writes of the files named in ``writes_failing``; everything else as the real one."""

    def __init__(
        self,
        real: Any,
        failing: Collection[str] = (),
        listing_fails: bool = False,
        removals_fail: bool = False,
        writes_failing: Collection[str] = (),
    ):
        self.real, self.failing, self.listing_fails = real, set(failing), listing_fails
        self.removals_fail, self.writes_failing = removals_fail, set(writes_failing)

    def get_file_info(self, selector: Any) -> Any:
        if self.listing_fails and not isinstance(selector, str):
            raise OSError("SlowDown: please reduce your request rate")
        return self.real.get_file_info(selector)

    def open_input_stream(self, path: str) -> Any:
        if Path(path).name in self.failing:
            raise OSError("SlowDown: please reduce your request rate")
        return self.real.open_input_stream(path)

    def open_output_stream(self, path: str) -> Any:
        if Path(path).name in self.writes_failing:
            raise OSError("InternalError: please try again")
        return self.real.open_output_stream(path)

    def delete_file(self, path: str) -> None:
        if self.removals_fail:
            raise OSError("AccessDenied")
        self.real.delete_file(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def _flaky_attempt(folder: Path, work: Path, attempt: int, **failures: Any) -> ChunkCheckpoints:
    work.mkdir()
    checkpoints = ChunkCheckpoints(str(folder), work, attempt=attempt)
    checkpoints.filesystem = _Flaky(checkpoints.filesystem, **failures)
    return checkpoints


def test_a_chunk_that_cannot_be_read_is_passed_over_for_the_next_newest(tmp_path: Path) -> None:
    folder = _saved(tmp_path, attempt=1, chunks=3, removals_fail=True)
    again = _flaky_attempt(folder, tmp_path / "again", attempt=2, failing={"chunk-3.tar"})
    resumed = again.start(from_any_checkpoint=True)
    assert resumed is not None and resumed.chunk == 2
    assert (tmp_path / "again" / "sub" / "notes.txt").read_text() == "chunk 2"
    assert again.problem is not None and "chunk 3 not resumed from: OSError: SlowDown" in again.problem
    assert sorted(path.name for path in folder.iterdir())[-2:] == ["chunk-3.json", "chunk-3.tar"]  # kept


@pytest.mark.parametrize(
    "failures",
    [
        {"failing": {"chunk-1.json", "chunk-2.json"}},
        {"failing": {"chunk-1.tar", "chunk-2.tar"}},
        {"listing_fails": True},
    ],
)
def test_a_storage_error_removes_no_checkpoint_and_the_fresh_attempts_own_come_after_them(
    tmp_path: Path, failures: dict[str, Any]
) -> None:
    """Reads (or the listing) that fail leave the attempt to start afresh, the checkpoints kept;
    the chunks it saves then are numbered after them, so that Ray running it again goes on from
    its own newest, and a later attempt after a lost one from the newest of all."""
    folder = _saved(tmp_path, attempt=1, chunks=2, removals_fail=True)
    work = tmp_path / "fresh"
    fresh = _flaky_attempt(folder, work, attempt=2, **failures)
    assert fresh.start(from_any_checkpoint=True) is None and not list(work.iterdir())
    assert fresh.problem is not None and "OSError: SlowDown" in fresh.problem and "none removed" in fresh.problem
    assert {"chunk-1.tar", "chunk-2.tar"} <= {path.name for path in folder.iterdir()}
    fresh.filesystem = fresh.filesystem.real  # the storage is back
    (work / "notes.txt").write_text("the fresh attempt's own")
    fresh.report = _session(1).report
    fresh(b'{"session_id": "s-2", "turns": 1}')
    assert fresh.saved == 3 and json.loads((folder / "chunk-3.json").read_text())["attempt"] == 2
    assert _names(folder) == ["chunk-3.json", "chunk-3.tar"]  # those it was numbered after are removed now
    for attempt, from_any in ((2, False), (3, True)):
        (tmp_path / f"again-{attempt}").mkdir()
        resumed = ChunkCheckpoints(str(folder), tmp_path / f"again-{attempt}", attempt=attempt).start(from_any)
        assert resumed is not None and (resumed.chunk, resumed.session_id) == (3, "s-2")
        assert (tmp_path / f"again-{attempt}" / "notes.txt").read_text() == "the fresh attempt's own"


def test_each_chunk_saved_removes_those_before_it_a_sparse_file_counted_at_its_size(tmp_path: Path) -> None:
    """A unit that reports a chunk after each model call, a sparse file (no disk) in its work
    folder, leaves its newest checkpoint only, not one per call: each chunk saved removes those
    before it, its attempt's and an earlier one's. The sparse file is stored, and counted
    against the cap, at its size."""
    folder = _saved(tmp_path, attempt=1, chunks=2, removals_fail=True)
    work = tmp_path / "again"
    again = ChunkCheckpoints(str(folder), work, attempt=2)
    work.mkdir()
    assert again.start(from_any_checkpoint=True) is not None
    with open(work / "holes.bin", "wb") as sparse:
        sparse.truncate(4 << 20)
    for calls in range(3, 7):
        again.report = _session(calls).report
        again(b'{"session_id": "s-1", "turns": 1}')
    assert (again.saved, again.problem) == (6, None)
    assert _names(folder) == ["chunk-6.json", "chunk-6.tar"]
    assert (4 << 20) < (folder / "chunk-6.tar").stat().st_size < (5 << 20)
    assert sum(path.stat().st_blocks * 512 for path in folder.iterdir()) < 5 << 20
    with pytest.raises(CheckpointError, match="more than"):
        pack(work, io.BytesIO(), max_bytes=4 << 20)
    (tmp_path / "restored").mkdir()
    resumed = ChunkCheckpoints(str(folder), tmp_path / "restored", attempt=2).start()
    assert resumed is not None and resumed.chunk == 6
    assert (tmp_path / "restored" / "holes.bin").stat().st_size == 4 << 20


def test_a_chunk_saved_to_s3_removes_those_before_it(tmp_path: Path, s3_bucket: S3Bucket) -> None:
    folder = s3_bucket.uri("run_id=r/_sessions/unit")
    saver = ChunkCheckpoints(folder, _work(tmp_path), attempt=1, s3_endpoint_url=s3_bucket.endpoint_url)
    for calls in range(1, 4):
        saver.report = _session(calls).report
        saver(b'{"session_id": "s-1", "turns": 1}')
    assert (saver.saved, saver.problem) == (3, None)
    listed = s3_bucket.client.list_objects_v2(Bucket=s3_bucket.name, Prefix="run_id=r/_sessions/unit/")["Contents"]
    files = sorted(item["Key"].rpartition("/")[2] for item in listed)
    assert [name for name in files if name] == ["chunk-3.json", "chunk-3.tar"]  # but the folder's marker
    (tmp_path / "again").mkdir()
    again = ChunkCheckpoints(folder, tmp_path / "again", attempt=1, s3_endpoint_url=s3_bucket.endpoint_url)
    resumed = again.start()
    assert resumed is not None and resumed.chunk == 3


def test_a_chunk_whose_record_is_not_written_removes_none_before_it(tmp_path: Path) -> None:
    """The chunks before the one being saved are removed once its record is written, not
    before: a save that fails (or a node lost) midway leaves the newest whole one to go on from."""
    folder = _saved(tmp_path, attempt=1, chunks=2)
    again = _flaky_attempt(folder, tmp_path / "again", attempt=1, writes_failing={"chunk-3.json"})
    assert again.start() is not None
    again.report = _session(3).report
    again(b'{"session_id": "s-1", "turns": 1}')
    assert again.saved == 2 and again.problem == "chunk not saved: OSError: InternalError: please try again"
    assert _names(folder) == ["chunk-2.json", "chunk-2.tar", "chunk-3.tar"]
    (tmp_path / "w").mkdir()
    resumed = ChunkCheckpoints(str(folder), tmp_path / "w", attempt=1).start()
    assert resumed is not None and resumed.chunk == 2
    again.filesystem = again.filesystem.real  # the storage is back: chunk 3 saved, chunk 2 removed
    again(b'{"session_id": "s-1", "turns": 1}')
    assert again.saved == 3 and _names(folder) == ["chunk-3.json", "chunk-3.tar"]


def test_a_checkpoint_of_staged_data_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="left out"):
        unpack(_tar((_member("data/input.csv"), b"x")), tmp_path / "work", leave_out={"data"})


def test_a_carried_session_counts_both_parts_its_limits_on_the_sum_not_charged_again() -> None:
    budget = ChargedBudget()
    session = _session(3, budget)
    assert session.over_limit() == "model_calls"  # 3 carried of 3
    assert budget.charged == []  # charged when those calls were made
    report = session.report()
    assert report.counted.n_model_calls == 3 and report.counted.cost_usd == 1.5
    assert report.counted.by_model["m"].n_model_calls == 3 and report.calls == [{"call": i} for i in range(3)]
    assert _session(1).over_limit() is None


def test_a_saved_chunk_keeps_no_token_and_no_session_id_that_reads_as_an_option(tmp_path: Path) -> None:
    """The unit's gateway token, wherever its calls' transcript holds it, is masked in the
    record (the resumed unit's row masks its own token only); a session id starting with ``-``
    (it goes back on the program's command line) is not kept."""
    token = "rayeval-unit-s3cr3t-t0ken"
    session = Session(token=token, upstreams={}, limits=CallLimits(), prices={}, budget=None)
    session.carry(
        ModelUsage(n_model_calls=1, usage=Usage(), cost_usd=0.0), [{"body": {"messages": [f"my token is {token}"]}}]
    )
    folder = tmp_path / "sessions" / "unit"
    saver = ChunkCheckpoints(str(folder), _work(tmp_path), attempt=1)
    saver.report = session.report
    saver(b'{"session_id": "--dangerously-skip-permissions", "turns": 1}')
    record = (folder / "chunk-1.json").read_text()
    assert saver.saved == 1 and token not in record and "my token is ***" in record
    assert json.loads(record)["session_id"] is None


# ---------------------------------------------------- what the agent makes the trusted side trip on
def test_a_chunk_report_nested_past_the_parsers_depth_is_no_report(tmp_path: Path) -> None:
    saver = ChunkCheckpoints(str(tmp_path / "sessions" / "unit"), _work(tmp_path), attempt=1)
    saver.report = _session(1).report
    saver(b"[" * 4000)
    assert (saver.saved, saver.turns, saver.problem) == (1, 0, None)


def test_any_failure_to_save_a_chunk_is_its_problem_never_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def tripping(*args: Any, **kwargs: Any) -> int:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(checkpoint, "pack", tripping)
    saver = ChunkCheckpoints(str(tmp_path / "sessions" / "unit"), _work(tmp_path), attempt=1)
    saver.report = _session(1).report
    saver(b'{"session_id": "s-1", "turns": 1}')
    assert saver.saved == 0 and saver.problem == "chunk not saved: RecursionError: maximum recursion depth exceeded"


def _calls_then_reports_a_chunk(prompt: str, work_dir: Path, context: AgentContext) -> dict[str, Any]:
    anthropic.Anthropic(max_retries=0).messages.create(
        model="claude-sonnet-4-5", max_tokens=20, messages=[{"role": "user", "content": "hi"}]
    )
    return {"answer": "B", "metadata": {"chunk_saved": context.chunk_done("s-1", 1)}}


def test_rayevals_own_failure_as_the_unit_runs_is_the_units_error_its_calls_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever raises in the trusted side while the unit runs (here: as its chunk is saved)
    ends the unit as its own error, said to be rayeval's, not one a run retries; its gateway
    session is closed and its calls are counted in its row."""

    def tripping(self: ChunkCheckpoints, agent_report: bytes) -> None:
        raise RuntimeError("the trusted side tripped")

    monkeypatch.setattr(ChunkCheckpoints, "__call__", tripping)
    with FakeModelServer(script=[], answer=lambda body: "ok") as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
        runner = EvalRunner(
            Eval.model_validate(QUICK_EVAL), work_root=tmp_path / "w", sessions_root=str(tmp_path / "sessions")
        )
        done = runner.execute(_calls_then_reports_a_chunk, isolation="process", timeout=60)
    assert (done.outcome, done.error_type) == ("error", RAYEVAL_FAILURE), done.error_message
    assert done.error_message == "rayeval failed on this unit: RuntimeError: the trusted side tripped"
    assert "error_details" not in done.metadata
    assert done.model_usage is not None and done.model_usage.n_model_calls == 1
    assert "RuntimeError" in (done.error_traceback or "")
