from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest


@pytest.fixture(autouse=True)
def _quiet_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")


def write_mc_evals(folder: Path, ids: list[str]) -> Path:
    """Multiple-choice evals whose right answer is B; ids steer tests.batch.agents:misbehaving."""
    folder.mkdir(parents=True, exist_ok=True)
    for eval_id in ids:
        body = {
            "id": eval_id,
            "task": 'A or B? <EVAL_ANSWER>{"answer": "A|B"}</EVAL_ANSWER>',
            "metadata": {"task": "qc", "kit": "synthetic"},
            "grader": {"type": "multiple_choice", "config": {"correct_answer": "B"}},
        }
        (folder / f"{eval_id}.json").write_text(json.dumps(body))
    return folder


def read_invocations(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def invocation_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "invocations.jsonl"
    monkeypatch.setenv("RAYEVAL_TEST_INVOCATION_LOG", str(path))
    return path


def completed_units(out: Path, run_id: str = "r1") -> set[tuple[str, int]]:
    """Units with a stored row: in Parquet parts or in the write-ahead log."""
    run = out / f"run_id={run_id}"
    done = set()
    for wal in run.glob("_wal/*.jsonl"):
        for line in wal.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by the kill
            done.add((row["eval_id"], row["seed"]))
    if list(run.rglob("*.parquet")):
        frame = pd.read_parquet(run)
        done |= set(zip(frame["eval_id"], frame["seed"]))
    return done
