"""A chunked session's checkpoint: packed from the agent's folders without links or devices,
unpacked as untrusted input."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from rayeval.unit import checkpoint
from rayeval.unit.checkpoint import CheckpointError, pack, unpack


def _folders(tmp_path: Path) -> dict[str, Path]:
    work, state = tmp_path / "work", tmp_path / "state"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "notes.txt").write_text("halfway there")
    (state / "projects").mkdir(parents=True)
    (state / "projects" / "s1.jsonl").write_bytes(b'{"turn": 1}\n' * 3)
    return {"work": work, "state": state}


def test_a_packed_session_unpacks_into_fresh_folders(tmp_path: Path) -> None:
    folders = _folders(tmp_path)
    os.symlink("/etc/passwd", folders["work"] / "leak")
    os.mkfifo(folders["work"] / "pipe")
    out = io.BytesIO()
    packed = pack(folders, out)
    fresh = {"work": tmp_path / "fresh-work", "state": tmp_path / "fresh-state"}
    assert unpack(io.BytesIO(out.getvalue()), fresh) == packed == len("halfway there") + 36
    assert (fresh["work"] / "sub" / "notes.txt").read_text() == "halfway there"
    assert (fresh["state"] / "projects" / "s1.jsonl").read_bytes() == b'{"turn": 1}\n' * 3
    assert sorted(p.name for p in fresh["work"].iterdir()) == ["sub"]  # no link, no pipe


def test_packing_past_the_cap_fails(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="more than 40 bytes"):
        pack(_folders(tmp_path), io.BytesIO(), max_bytes=40)


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
        (_member("work/../escape"), "outside its folders"),
        (_member("/work/abs"), "outside its folders"),
        (_member("results/x"), "outside its folders"),
        (_member("work/link", tarfile.SYMTYPE, "/etc/passwd"), "neither a file nor a folder"),
        (_member("work/hard", tarfile.LNKTYPE, "work/x"), "neither a file nor a folder"),
        (_member("work/dev", tarfile.CHRTYPE), "neither a file nor a folder"),
    ],
)
def test_an_untrusted_member_is_refused(tmp_path: Path, member: tarfile.TarInfo, problem: str) -> None:
    into = {"work": tmp_path / "work"}
    with pytest.raises(CheckpointError, match=problem):
        unpack(_tar((member, b"x")), into)
    assert not (tmp_path / "escape").exists()


def test_unpacking_refuses_a_link_in_the_folder_and_a_name_given_twice(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(tmp_path, work / "up")
    with pytest.raises(CheckpointError, match="is a link"):
        unpack(_tar((_member("work/up/x"), b"x")), {"work": work})
    assert not (tmp_path / "x").exists()
    with pytest.raises(CheckpointError, match="twice"):
        unpack(_tar((_member("work/a"), b"1"), (_member("work/a"), b"2")), {"work": work})


def test_unpacking_past_the_caps_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint, "MAX_CHECKPOINT_ENTRIES", 5)
    with pytest.raises(CheckpointError, match="more than 3 bytes"):
        unpack(_tar((_member("work/big"), b"four")), {"work": tmp_path / "work"}, max_bytes=3)
    many = [(_member(f"work/{i}"), b"") for i in range(6)]
    with pytest.raises(CheckpointError, match="entries"):
        unpack(_tar(*many), {"work": tmp_path / "work2"})
    with pytest.raises(CheckpointError, match="no readable tar"):
        unpack(io.BytesIO(b"not a tar" * 100), {"work": tmp_path / "work3"})
