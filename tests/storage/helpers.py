"""Row factories and small checks shared by the storage tests."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow.parquet as pq

from rayeval.storage import UnitRecord

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def make_row(run_id: str, model: str, i: int, *, attempt: int = 1, **overrides) -> UnitRecord:
    """A complete, realistic row; ``unit_id`` is unique per (model, i)."""
    passed = i % 3 != 0
    fields = {
        "run_id": run_id,
        "model": model,
        "unit_id": f"u-{model}-{i:06d}",
        "eval_id": f"eval-{i % 50:03d}",
        "eval_hash": f"h{i % 50:03d}",
        "agent": "reference",
        "harness": "mini-swe",
        "seed": i % 5,
        "attempt": attempt,
        "status": "passed" if passed else "failed",
        "passed": passed,
        "score": 1.0 if passed else 0.0,
        "score_max": 1.0,
        "normalized_score": 1.0 if passed else 0.0,
        "grader_type": "numeric_tolerance",
        "metrics_json": f'{{"value": {i}}}',
        "reasoning": f"value {i} within tolerance" if passed else f"value {i} outside tolerance",
        "answer_json": f'{{"answer": {i}}}',
        "duration_s": 1.5 + i % 7,
        "agent_s": 1.0,
        "grade_s": 0.01,
        "cost_usd": 0.002,
        "input_tokens": 1200 + i % 100,
        "output_tokens": 300,
        "n_turns": 4,
        "started_at": T0 + timedelta(seconds=i),
        "finished_at": T0 + timedelta(seconds=i + 2),
        "node": "node-1",
        "task": "clustering",
        "kit": "scanpy",
        "eval_type": "numeric",
        "metadata_json": "{}",
        "rayeval_version": "0.1.0",
    }
    fields.update(overrides)
    return UnitRecord(**fields)


def make_rows(run_id: str, models: list[str], n: int, *, start: int = 0) -> list[UnitRecord]:
    """``n`` rows spread round-robin over ``models``."""
    return [make_row(run_id, models[i % len(models)], i) for i in range(start, start + n)]


def readable(path: str, filesystem=None) -> int:
    """Rows in one Parquet file (raises if the file is partial or corrupt)."""
    return pq.read_table(path, filesystem=filesystem).num_rows
