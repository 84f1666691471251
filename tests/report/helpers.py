"""Building a results root for the report tests without Ray or the storage writer.

The real scbench corpus (273 recorded runs of 6 public evals by 16 model/harness pairs) is
re-graded with ``rayeval.grade`` and written as hive-partitioned Parquet
(``ROOT/run_id=<id>/model=<m>/part-*.parquet``, values percent-encoded) with pyarrow.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

from rayeval import grade, load_evals
from rayeval.batch.rows import typed_metrics
from rayeval.storage.schema import FILE_SCHEMA, PARTITION_COLUMNS
from tests.conftest import read_jsonl, shared_path

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)
RUN_ID = "scbench-replay"


def unit_id(eval_hash: str, grader: Any, model: str, seed: int, harness: str | None) -> str:
    text = json.dumps([eval_hash, grader, model, seed, harness], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def base_row(**values: Any) -> dict[str, Any]:
    """A complete row (every file column plus the partition keys) with neutral defaults."""
    row: dict[str, Any] = {name: None for name in FILE_SCHEMA.names}
    row.update(
        run_id="run",
        model="m",
        unit_id="u",
        eval_id="e",
        eval_hash="h",
        agent="replay",
        harness="h1",
        seed=1,
        attempt=1,
        status="passed",
        passed=True,
        score=1.0,
        score_max=1.0,
        normalized_score=1.0,
        grader_type="numeric_tolerance",
        metrics_json="{}",
        reasoning="",
        duration_s=1.0,
        agent_s=1.0,
        grade_s=0.0,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=1),
        node="node-1",
        metadata_json="{}",
        rayeval_version="0.1.0",
    )
    row.update(values)
    if "unit_id" not in values:
        row["unit_id"] = unit_id(
            row["eval_hash"] + row["eval_id"], row["grader_type"], row["model"], row["seed"], row["harness"]
        )
    return row


@lru_cache(maxsize=1)
def corpus_rows() -> tuple[dict[str, Any], ...]:
    """Every recorded scbench run, graded now, as a result row of one run ``scbench-replay``."""
    evals = {e.id: e for e in load_evals(shared_path("corpus", "scbench", "evals"))}
    trials = read_jsonl(shared_path("corpus", "scbench", "trials.jsonl"))
    rows = []
    for index, trial in enumerate(trials):
        eval_ = evals[trial["eval_id"]]
        result = grade(eval_, trial["answer"])
        meta = eval_.metadata or {}
        started = T0 + timedelta(seconds=10 * index)
        duration = float(trial["duration_s"])
        rows.append(
            base_row(
                run_id=RUN_ID,
                model=trial["model"],
                unit_id=unit_id(
                    eval_.content_hash(),
                    [s.model_dump() for s in eval_.grader_specs],
                    trial["model"],
                    trial["trial"],
                    trial["harness"],
                ),
                eval_id=eval_.id,
                eval_hash=eval_.content_hash(),
                harness=trial["harness"],
                seed=int(trial["trial"]),
                status="passed" if result.passed else "failed",
                passed=result.passed,
                score=result.score,
                score_max=result.score_max,
                normalized_score=result.normalized_score(),
                grader_type=eval_.grader_specs[0].type,
                metrics_json=json.dumps(result.metrics, default=str),
                metrics=list(typed_metrics(result.metrics).items()),
                reasoning=result.reasoning,
                answer_json=json.dumps(trial["answer"], sort_keys=True),
                answer_source="replay",
                duration_s=duration,
                agent_s=duration,
                cost_usd=trial["cost_usd"],
                input_tokens=trial["input_tokens"],
                output_tokens=trial["output_tokens"],
                n_turns=trial["n_turns"],
                started_at=started,
                finished_at=started + timedelta(seconds=duration),
                task=meta.get("task"),
                kit=meta.get("kit"),
                time_horizon=meta.get("time_horizon"),
                eval_type=meta.get("eval_type"),
                metadata_json=json.dumps(meta, sort_keys=True),
            )
        )
    return tuple(rows)


def write_root(root: Path, rows: Iterable[dict[str, Any]], writer: str = "test", per_file: int = 0) -> Path:
    """Write ``rows`` under ``root`` in the hive layout; ``per_file`` > 0 splits parts."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["run_id"], row["model"]), []).append(row)
    for (run, model), members in groups.items():
        folder = root / f"run_id={quote(run, safe='')}" / f"model={quote(model, safe='')}"
        folder.mkdir(parents=True, exist_ok=True)
        size = per_file or len(members)
        existing = len(list(folder.glob("*.parquet")))
        for n, start in enumerate(range(0, len(members), size)):
            chunk = [{k: v for k, v in r.items() if k not in PARTITION_COLUMNS} for r in members[start : start + size]]
            table = pa.Table.from_pylist(chunk, schema=FILE_SCHEMA)
            pq.write_table(table, folder / f"part-{writer}-{existing + n}.parquet")
    return root
