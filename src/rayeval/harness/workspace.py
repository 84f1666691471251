"""Per-run work folders: unique per run, eval, model, seed and attempt."""
from __future__ import annotations

import os
import random
import re
import tempfile
from pathlib import Path

WORK_ROOT_ENV = "RAYEVAL_WORK_ROOT"
ARTIFACT_NAMES = ("trajectory.json", "agent_output.log", "agent_stdout.log", "refusal_verdict.json")
MAX_ARTIFACT_BYTES = 2_000_000

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
    """``root/<run>/<eval>__<model>__s<seed>__<random>``: parallel runs and retries never collide
    (a name already taken, however unlikely, is drawn again)."""
    stem = f"{_component(eval_id)}__{_component(model or 'nomodel')}__s{seed if seed is not None else 'x'}__"
    parent = root / _component(run_id or "local")
    while True:
        path = parent / f"{stem}{_SUFFIXES.getrandbits(40):010x}"
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            continue


def remove_if_empty(work_dir: Path) -> bool:
    """Whether the work folder was empty, and is now gone: the agent left nothing to read.

    An agent that answered by its return value and wrote nothing (replay, in-memory agents)
    then costs one system call here instead of a listing and a removal."""
    try:
        os.rmdir(work_dir)
    except OSError:
        return False
    return True


def list_work_dir(work_dir: Path) -> Listing:
    """What the agent left behind, listed once for everything that looks (answer files, artifacts)."""
    try:
        names = set(os.listdir(work_dir))
    except OSError:
        return []
    listing = [(work_dir, names)]
    if LEGACY_SUBDIR in names:
        try:
            listing.append((work_dir / LEGACY_SUBDIR, set(os.listdir(work_dir / LEGACY_SUBDIR))))
        except OSError:  # a file of that name, or gone
            pass
    return listing


def collect_artifacts(listing: Listing) -> dict[str, str]:
    """Text of the files worth keeping after the work folder is gone (tail-capped)."""
    if not listing:
        return {}
    work_dir, present = listing[0]
    found = {}
    for name in ARTIFACT_NAMES:
        path = work_dir / name
        if name in present and path.is_file():
            data = path.read_bytes()
            if len(data) > MAX_ARTIFACT_BYTES:
                data = b"[... truncated ...]\n" + data[-MAX_ARTIFACT_BYTES:]
            found[name] = data.decode("utf-8", errors="replace")
    return found
