"""Per-run work folders: unique per run, eval, model, seed and attempt, made new for every unit.

A folder is never handed from one unit to the next, even empty: it keeps what an agent put on
it (extended attributes, a default ACL that shapes every file made in it, its timestamps),
and nothing cheap proves it is as it was made (ctime is coarser than the calls that change
it). Making one costs the file system ≈0.1 ms against the ≈5 ms of a sandboxed unit's start."""

from __future__ import annotations

import os
import random
import re
import stat
import tempfile
from pathlib import Path

from ..errors import RayevalError
from ..sandbox.config import MAX_ARTIFACT_BYTES

WORK_ROOT_ENV = "RAYEVAL_WORK_ROOT"
#: the model's refusal as the harness that found it says it (see rayeval.agents._refusal)
REFUSAL_VERDICT_NAME = "refusal_verdict.json"
ARTIFACT_NAMES = ("trajectory.json", "agent_output.log", "agent_stdout.log", REFUSAL_VERDICT_NAME)

# The reference agent wrote its files in this subfolder of the work folder.
LEGACY_SUBDIR = "agent_workspace"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")

# Work-folder name suffixes.  A generator of our own, not ``random``'s (an agent seeding it for
# determinism would make every process draw the same names) nor ``uuid4`` (``os.urandom`` is a
# system call, which hands the GIL to a unit running on another thread); reseeded from the OS
# in forked children, so that they do not draw their parent's names.
_SUFFIXES = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_SUFFIXES.seed)

# The folders the agent could leave files in (the work folder first, then its legacy
# subfolder when there is one) and the names in each.
Listing = list[tuple[Path, set[str]]]


def default_work_root() -> Path:
    return Path(os.environ.get(WORK_ROOT_ENV) or Path(tempfile.gettempdir()) / "rayeval-work")


def _component(text: str) -> str:
    return _UNSAFE.sub("_", text).strip("._")[:80] or "x"


def make_work_dir(root: Path, *, run_id: str | None, eval_id: str, model: str | None, seed: int | None) -> Path:
    """``root/<run>/<eval>__<model>__s<seed>__<random>``, made new: parallel runs and retries
    never collide (a name already taken, however unlikely, is drawn again)."""
    stem = f"{_component(eval_id)}__{_component(model or 'nomodel')}__s{seed if seed is not None else 'x'}__"
    parent = root / _component(run_id or "local")
    while True:
        path = parent / f"{stem}{_SUFFIXES.getrandbits(40):010x}"
        try:
            path.mkdir(parents=True)
        except FileExistsError:
            continue
        return path


def list_or_remove(work_dir: Path) -> Listing | None:
    """What the agent left behind (see ``list_work_dir``), or None when it left nothing: the
    folder is then gone."""
    try:
        os.rmdir(work_dir)  # one system call tells an empty folder, and removes it
    except OSError:
        return list_work_dir(work_dir)
    return None


def list_work_dir(work_dir: Path) -> Listing:
    """What the agent left behind, listed once for everything that looks (answer files, artifacts)."""
    try:
        names = set(os.listdir(work_dir))
    except OSError:
        return []
    listing = [(work_dir, names)]
    legacy = work_dir / LEGACY_SUBDIR
    if LEGACY_SUBDIR in names and not legacy.is_symlink():  # a link would lead out of the work folder
        try:
            listing.append((legacy, set(os.listdir(legacy))))
        except OSError:  # a file of that name, or gone
            pass
    return listing


class FileTooLarge(RayevalError, ValueError):
    """A file the agent left is larger than what may be read of it."""


def read_left_file(path: Path, limit: int, *, tail: bool = False) -> bytes | None:
    """The bytes of a regular file the agent left, without following a symbolic link (a link
    would lead the trusted side to a file the agent cannot read itself) and without reading
    more than ``limit`` bytes: beyond it, the last ``limit`` (``tail``) or ``FileTooLarge``.
    None when ``path`` is not a regular file (a link, a folder, a pipe) or is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        if info.st_size > limit:
            if not tail:
                raise FileTooLarge(f"{path.name} is {info.st_size} bytes, more than the {limit} that are read")
            handle.seek(info.st_size - limit)
            return b"[... truncated ...]\n" + handle.read(limit)
        return handle.read(limit + 1)[:limit]


def collect_artifacts(listing: Listing, limit: int = MAX_ARTIFACT_BYTES) -> dict[str, str]:
    """Text of the files worth keeping after the work folder is gone: the last ``limit`` bytes
    of each, read from its end (never whole)."""
    if not listing:
        return {}
    work_dir, present = listing[0]
    found = {}
    for name in ARTIFACT_NAMES:
        if name in present:
            data = read_left_file(work_dir / name, limit, tail=True)
            if data is not None:
                found[name] = data.decode("utf-8", errors="replace")
    return found
