"""``rayeval run --resume`` on a real (embedded) Ray after one of the run's parts was damaged:
it finishes (exit 0), the damaged part is moved to ``_quarantine/``, its units run again, and
every unit ends up stored exactly once among the readable parts."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rayeval.storage import ResultStore
from rayeval.storage.store import QUARANTINE_FOLDER
from tests.batch.conftest import write_mc_evals

REPO = Path(__file__).resolve().parents[2]


def _ran_now(stdout: str) -> tuple[int, int]:
    """(units run now, units already done) from the summary ``rayeval run`` prints."""
    match = re.search(r"\((\d+) run now, (\d+) already done\)", stdout)
    assert match, stdout
    return int(match[1]), int(match[2])


@pytest.mark.slow  # a stored part damaged, then two CLI runs: ~24 s
def test_resume_after_a_part_was_damaged(tmp_path: Path) -> None:
    evals = write_mc_evals(tmp_path / "evals", ["e1", "e2", "e3"])
    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "rayeval.cli", "run", str(evals), "--agent", "sleep", "--agent-arg", "seconds=0",
        "--models", "m1,m2", "--seeds", "2", "--output", str(out), "--run-id", "r1", "--no-progress",
    ]  # fmt: skip
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    first = subprocess.run(command, cwd=REPO, env=env, check=False, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    store = ResultStore(out)
    planned = store.stored_unit_ids("r1")
    assert len(planned) == 12

    # the first part of model m1 is cut in half (its footer is gone); a stray file lies beside it
    victim = Path(store.part_paths("r1")[0])
    assert victim.parent.name == "model=m1"
    data = victim.read_bytes()
    lost = set(pq.read_table(io.BytesIO(data)).column("unit_id").to_pylist())
    assert lost
    victim.write_bytes(data[: len(data) // 2])
    notes = out / "run_id=r1" / "notes.txt"
    notes.write_text("my notes")
    assert store.stored_unit_ids("r1") == planned - lost

    done = subprocess.run(
        [*command, "--resume"], cwd=REPO, env=env, check=False, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert _ran_now(done.stdout) == (len(lost), 12 - len(lost))
    assert str(victim) in done.stderr and "_quarantine" in done.stderr, done.stderr  # says what it moved, and why
    # moved aside with its bytes; the stray file left where it was
    quarantined = out / "run_id=r1" / QUARANTINE_FOLDER / "model=m1" / victim.name
    assert not victim.exists() and quarantined.read_bytes() == data[: len(data) // 2]
    assert notes.read_text() == "my notes"
    table = store.read_table("r1", columns=["unit_id", "status"])
    ids = table.column("unit_id").to_pylist()
    assert len(ids) == 12 and set(ids) == planned  # every unit exactly once among the readable parts
    assert [item.path for item in store.parts("r1", warn=False).skipped] == [
        str(notes)
    ]  # not a part: only warned about
    print(done.stderr)
