"""``rayeval report``'s table, csv and json come from counts duckdb aggregates over the part
files (:mod:`rayeval.report.summary`): the same numbers as the benchmark table over the units
read as a frame, for every grouping, error policy and filter, and the same handling of parts
that cannot be read."""

from __future__ import annotations

import io
import json
import logging
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest

from rayeval.report import ResultsReader, benchmark_table, evaluation_stats, read_units
from rayeval.report.benchmark import table_from_pairs, to_csv
from rayeval.report.cli import main
from rayeval.report.reader import REPORT_COLUMNS
from rayeval.report.summary import read_summary
from rayeval.storage import ResultStore
from rayeval.storage.lease import run_lease

from .helpers import T0, base_row, corpus_rows, write_root

ODD_MODEL = "org/model v2:β%"


def _rows() -> list[dict]:
    """The corpus plus retries (a failed attempt then a pass, in other part files), errors, a
    row without harness, verdict or cost, and percent-encoded run and model names."""
    rows = [dict(r) for r in corpus_rows()]
    retried = [dict(r, attempt=2, status="passed", passed=True) for r in rows[:40] if not r["passed"]]
    errored = [dict(r, attempt=3, status="timeout", passed=None, cost_usd=None) for r in rows[40:50]]
    odd = [
        base_row(run_id="run 2026/01?x=1", model=ODD_MODEL, eval_id="e1", seed=1, harness=None, passed=None),
        base_row(
            run_id="run 2026/01?x=1",
            model=ODD_MODEL,
            eval_id="e1",
            seed=2,
            status="error",
            cost_usd=None,
            metadata_json='{"error_details": {"seen_by": "gateway"}}',
        ),
        base_row(run_id="run 2026/01?x=1", model=ODD_MODEL, eval_id="e2", seed=1, passed=False, status="failed"),
    ]
    return rows + retried + errored + odd


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_root(tmp_path_factory.mktemp("summary"), _rows(), per_file=9)


def _same(ours: pd.DataFrame, theirs: pd.DataFrame) -> None:
    """The same rows in the same order, numbers equal but for the order they were summed in."""
    pd.testing.assert_frame_equal(ours, theirs, check_dtype=False, rtol=1e-12)
    assert ours.attrs == theirs.attrs


@pytest.mark.parametrize(
    "by", [["model", "harness"], ["task", "model", "harness"], ["run_id"], ["kit", "model", "harness"], ["agent"]]
)
@pytest.mark.parametrize("errors", ["fail", "exclude"])
def test_the_summary_gives_the_benchmark_table_of_the_units(root: Path, by: list[str], errors: str) -> None:
    summary = read_summary(ResultsReader(root), by=by, errors=errors)
    assert summary is not None
    units = read_units(root, columns=[*REPORT_COLUMNS, "metadata_json"])
    _same(table_from_pairs(summary.pairs, by, errors=errors), benchmark_table(units, by=by, errors=errors))
    assert summary.units == len(units)
    assert summary.run_totals == units.groupby("run_id", observed=True).size().to_dict()
    assert summary.num_errors == int(units["status"].isin(["error", "timeout", "config_error"]).sum()) > 0


def test_only_errors_rayeval_saw_outside_the_agent_are_left_out(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``--errors exclude`` leaves out an error by who saw it (``error_details.seen_by``, the
    trusted side's word), never by its ``error_type``: an agent that raises its own
    ``JudgeError`` or ``ProviderError`` on the evals it cannot do still fails them."""
    seen = {None: "{}", "gateway": '{"error_details": {"seen_by": "gateway"}}',
            "judge": '{"error_details": {"seen_by": "judge", "error": "no verdict"}}'}  # fmt: skip
    errors = {"e1": ("JudgeError", None), "e2": ("ProviderError", None), "e3": ("ProviderError", "gateway"),
              "e4": ("JudgeError", "judge")}  # fmt: skip
    rows = []
    for eval_id, (error_type, seen_by) in errors.items():
        passed = eval_id != "e4"
        rows.append(base_row(eval_id=eval_id, seed=1, passed=passed, status="passed" if passed else "failed"))
        rows.append(
            base_row(eval_id=eval_id, seed=2, status="error", error_type=error_type, metadata_json=seen[seen_by])
        )
    root = write_root(tmp_path, rows)
    # e1, e2: 1 of 2 (the agent's errors fail); e3: 1 of 1; e4: 0 of 1 (the failed judge's unit left out)
    for options in ([], ["--pass-k", "1"]):  # from duckdb's counts, from the units read as a frame
        assert main(["report", str(root), "--errors", "exclude", "--format", "csv", *options]) == 0
        [row] = pd.read_csv(io.StringIO(capsys.readouterr().out.split("\n\n")[0])).to_dict("records")
        assert row["Accuracy (%)"] == pytest.approx(50.0) and row["Errors"] == 4


def test_filters_and_runs_select_the_same_units(root: Path) -> None:
    models, evals = [ODD_MODEL, "gpt-5.5"], ["e1", "e2", "DE01_pseudobulk_de"]
    for runs in (None, ["run 2026/01?x=1"]):
        summary = read_summary(ResultsReader(root), runs, models, evals)
        assert summary is not None
        units = read_units(root, runs, models, evals)
        _same(table_from_pairs(summary.pairs, ["model", "harness"]), benchmark_table(units))
    assert read_summary(ResultsReader(root), models=["no such model"]) is None


def test_the_cli_table_matches_the_units_table(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(root), "--format", "csv", "--by", "task"]) == 0
    assert capsys.readouterr().out == to_csv(benchmark_table(read_units(root), by=["task", "model", "harness"]))


def test_a_part_duckdb_cannot_decode_is_left_out_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Its footer is fine, so only reading its pages fails: the report reads through the
    reader's Arrow path, which leaves that part out, names it, and reports the rest."""
    rows = [base_row(run_id="A", eval_id=f"e{i}", seed=i, unit_id=f"u{i}") for i in range(6)]
    root = write_root(tmp_path / "results", rows, per_file=3)
    victim = min((root / "run_id=A" / "model=m").glob("*.parquet"))
    data = bytearray(victim.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little") + 8
    data[4 : len(data) - footer] = b"\xff" * (len(data) - footer - 4)  # every page, not the footer
    victim.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        summary = read_summary(ResultsReader(root))
    assert summary is not None and summary.units == 3
    assert any(str(victim) in message and "unreadable Parquet data" in message for message in caplog.messages)
    assert main(["report", str(root)]) == 0
    out, err = capsys.readouterr()
    assert "3 units done" in out and f"rayeval: warning: skipping {victim}" in err and "Traceback" not in err


def test_a_running_runs_status_line_has_the_units_eta(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The time span for the ETA is read only for a run still going: the same line as the
    units' (a retry's first attempt, started earlier, is not part of it)."""
    rows = [
        base_row(
            run_id="r",
            eval_id=f"e{i}",
            unit_id=f"u{i}",
            seed=i,
            started_at=T0 + timedelta(minutes=i),
            finished_at=T0 + timedelta(minutes=i, seconds=30),
        )
        for i in range(1, 5)
    ]
    rows.append(dict(rows[0], attempt=0, started_at=T0 - timedelta(hours=1), finished_at=T0 - timedelta(minutes=59)))
    root = write_root(tmp_path / "results", rows, per_file=2)
    (root / "run_id=r" / "_manifest.json").write_text(
        json.dumps({"run_id": "r", "status": "running", "total_units": 10})
    )
    units = read_units(root)
    expected = evaluation_stats(units, planned_units={"r": 10}, run_status={"r": {"status": "running"}})
    assert "ETA" in expected.progress
    with run_lease(ResultStore(str(root)), "r").take():  # its driver, still at work
        assert main(["report", str(root)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"status: running; {expected.progress}"
