"""rayeval's own failure on a unit, on its worker: the unit's error row, never a lost worker's."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rayeval import batch
from rayeval.evals import Eval
from rayeval.record import RAYEVAL_FAILURE
from rayeval.unit.result import EvalResult

from .conftest import write_mc_evals


def _tripping_grade(eval_: Eval, execution: EvalResult) -> EvalResult:
    raise RuntimeError("the grading tripped")


@pytest.mark.usefixtures("shared_ray")
def test_a_unit_rayeval_fails_on_is_its_error_stored_at_once(tmp_path: Path) -> None:
    """Its row says rayeval failed on it, on its worker's node, at attempt 1: once a task error,
    it was a row seen_by ray, which the run's retries ran again and a resume went on from."""
    evals = write_mc_evals(tmp_path / "evals", ["e1"])
    config = batch.BatchConfig(
        evals=[str(evals)], agent="answers-b", output=str(tmp_path / "out"), run_id="r", retries=2,
        isolation="inline", show_progress=False, retry_backoff_s=0.1,
    )  # fmt: skip
    batch.run_batch(config, agent=lambda prompt, work_dir: {"answer": "B"}, grade=_tripping_grade)
    (row,) = pd.read_parquet(tmp_path / "out" / "run_id=r").itertuples()
    assert (row.status, row.error_type, row.attempt) == ("error", RAYEVAL_FAILURE, 1)
    assert row.error_message == "rayeval failed on this unit: RuntimeError: the grading tripped"
    assert "error_details" not in json.loads(row.metadata_json) and row.node != "unknown"
