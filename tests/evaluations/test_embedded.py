"""The user's path: ``evaluations.run`` starts its own loopback Ray, shows progress, prints the
report and shuts Ray down again."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import ray

import rayeval

from .conftest import qa_dataset


def test_run_with_its_own_ray_prints_progress_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert not ray.is_initialized()
    answers = {"2+2?": "4", "3*3?": "9"}  # a closure over local data: shipped by value
    result = rayeval.evaluations.run(
        name="arith",
        file={
            "path": "math/solver",
            "type": "prompt",
            "version": {"model": "tiny", "temperature": 0},
            "callable": lambda question, **_: answers.get(question, "?"),
        },
        evaluators=[
            {
                "path": "correct",
                "args_type": "target_required",
                "return_type": "boolean",
                "callable": lambda log, dp: log["output"] == dp["target"]["answer"],
                "threshold": 0.4,
            },
        ],
        dataset=qa_dataset("math/smoke"),
        workers=2,
        output=str(tmp_path / "out"),
        flush_seconds=0.2,
    )
    assert not ray.is_initialized()  # the run started Ray, so it stopped it
    check = result.checks[0]
    assert (check.path, check.score, check.delta, check.threshold_check) == ("correct", pytest.approx(0.4), None, True)
    printed = capsys.readouterr()
    assert "[rayeval] 5/5 units done" in printed.err  # the engine's progress display
    assert "Evaluation 'arith'" in printed.out and "correct" in printed.out and "PASS" in printed.out
    frame = pd.read_parquet(tmp_path / "out" / f"run_id={result.run_id}")
    assert len(frame) == 5 and frame["model"].nunique() == 1
    assert frame["model"].iloc[0] == result.version_id and result.version_id.startswith("math/solver@v-")
    assert set(frame["agent"]) == {"prompt"}
