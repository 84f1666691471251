"""The summary ``rayeval run`` prints counts as ``rayeval report`` does: per model × harness,
the units, errors counted as failures in the accuracy (percent) and shown apart, the mean cost
per unit; then the run's total cost."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rayeval.cli import main
from rayeval.report import benchmark_table, read_units
from tests.conftest import read_jsonl, shared_path


def test_the_run_summary_counts_as_the_report_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trials = shared_path("corpus", "scbench", "trials.jsonl")
    pairs = sorted({(r["model"], r["harness"]) for r in read_jsonl(trials)})[:2]
    out = tmp_path / "out"
    # the corpus has no 4th trial: every eval's seed-4 units are errors, its seed-1 units a verdict
    code = main(["run", str(shared_path("corpus", "scbench", "evals")), "--agent", "replay",
                 "--agent-arg", f"trials={trials}", "--models", ",".join(f"{m}@{h}" for m, h in pairs),
                 "--seeds", "1,4", "--retries", "0", "--output", str(out), "--run-id", "s", "--no-progress"])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    units = read_units(out, runs="s")
    table = benchmark_table(units)
    lines = {tuple(line.split()[:2]): line.split()[2:] for line in printed.splitlines()[2:] if line.count(" ") > 5}
    assert len(table) == len(pairs) and table["Errors"].gt(0).all()
    for row in table.to_dict("records"):
        count, passed, failed, errors, accuracy, cost = lines[(row["model_name"], row["harness"])]
        assert (
            int(count) == row["N"]
            and int(errors) == row["Errors"]
            and int(passed) + int(failed) + int(errors) == row["N"]
        )
        assert float(accuracy) == pytest.approx(row["Accuracy (%)"], abs=0.005)
        assert cost == "-" if math.isnan(row["Cost ($)"]) else float(cost) == pytest.approx(row["Cost ($)"], abs=5e-5)
    total = units["cost_usd"].sum()
    said = f"total cost ${total:,.2f}" if total >= 1 else f"total cost ${total:.4f}"
    assert said in printed
