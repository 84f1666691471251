"""Per-run work folders: unique per run, eval, model, seed and attempt."""
from __future__ import annotations

import os
import re
import tempfile
import uuid
from pathlib import Path

WORK_ROOT_ENV = "RAYEVAL_WORK_ROOT"
ARTIFACT_NAMES = ("trajectory.json", "agent_output.log", "agent_stdout.log", "refusal_verdict.json")
MAX_ARTIFACT_BYTES = 2_000_000

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def default_work_root() -> Path:
    return Path(os.environ.get(WORK_ROOT_ENV) or Path(tempfile.gettempdir()) / "rayeval-work")


def _component(text: str) -> str:
    return _UNSAFE.sub("_", text).strip("._")[:80] or "x"


def make_work_dir(root: Path, *, run_id: str | None, eval_id: str, model: str | None, seed: int | None) -> Path:
    """``root/<run>/<eval>__<model>__s<seed>__<random>``: parallel runs and retries never collide."""
    name = f"{_component(eval_id)}__{_component(model or 'nomodel')}__s{seed if seed is not None else 'x'}__{uuid.uuid4().hex[:10]}"
    path = root / _component(run_id or "local") / name
    path.mkdir(parents=True)
    return path


def collect_artifacts(work_dir: Path) -> dict[str, str]:
    """Text of the files worth keeping after the work folder is gone (tail-capped)."""
    found = {}
    present = set(os.listdir(work_dir))
    for name in ARTIFACT_NAMES:
        path = work_dir / name
        if name in present and path.is_file():
            data = path.read_bytes()
            if len(data) > MAX_ARTIFACT_BYTES:
                data = b"[... truncated ...]\n" + data[-MAX_ARTIFACT_BYTES:]
            found[name] = data.decode("utf-8", errors="replace")
    return found
