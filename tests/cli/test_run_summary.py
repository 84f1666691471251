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


@pytest.mark.usefixtures("shared_ray")
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


def test_the_summary_prints_whole_model_and_harness_names() -> None:
    """Two models alike in their first 32 characters, and a harness longer than 16, each on a
    line of its own, whole and aligned (cut, the two models read as one)."""
    from rayeval.batch.summary import ModelSummary, RunSummary

    names = [
        "openai-compatible/meta-llama/Llama-3.1-70B-Instruct",
        "openai-compatible/meta-llama/Llama-3.1-8B-Instruct",
    ]
    harness = "my_agents.harnesses:tool_calling_loop"
    summary = RunSummary(
        run_id="r", results_path="/tmp/r", total_units=4, skipped=0, ran=4, stored_rows=4, duration_s=1.0,
        models=[
            ModelSummary(model=name, harness=harness, units=2, passed=n, failed=2 - n, errors=0,
                         accuracy_pct=50.0 * n, mean_cost_usd=None, total_cost_usd=None)
            for n, name in enumerate(names)
        ],
    )  # fmt: skip
    lines = summary.text().splitlines()
    rows = [line for line in lines if line.startswith("openai-compatible/")]
    assert [row.split()[:2] for row in rows] == [[name, harness] for name in names]
    assert len({len(line) for line in lines[:2] + rows}) == 1  # header, rule and rows line up
    assert [row.split()[3] for row in rows] == ["0", "1"]  # each model's own counts


@pytest.mark.slow
def test_a_run_whose_every_unit_raises_says_why_and_runs_none_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three units whose agent raises, the default --retries: the agent's own error is not run
    again (a second try would raise the same), and both the summary and the error line say
    which error it was, with its count."""
    import pandas as pd

    from rayeval.cli import EXIT_FAILED
    from tests.batch.conftest import write_mc_evals

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    evals = write_mc_evals(tmp_path / "evals", ["raise_1", "raise_2", "raise_3"])
    out = tmp_path / "out"
    code = main(["run", str(evals), "--agent", "tests.batch.agents:misbehaving", "--output", str(out), "--no-progress"])
    captured = capsys.readouterr()
    assert code == EXIT_FAILED, captured.err
    assert "most common error (3 of 3 errored units): RuntimeError: agent exploded" in captured.out
    assert "nothing was evaluated; most common (3 units): RuntimeError: agent exploded" in captured.err
    assert "time limit per unit: 6000 s (the default" in captured.err  # the start lines say each unit's bound
    rows = pd.read_parquet(out)
    assert len(rows) == 3 and set(rows["attempt"]) == {1} and set(rows["status"]) == {"error"}


def test_the_most_common_error_is_printed_without_what_a_terminal_would_act_on() -> None:
    """An agent's error text reaches the terminal in the summary and the error line: its
    escapes (erase the line, a fake count in green, the window's title, a link, reordered
    text) are shown as escapes, not carried out."""
    import pandas as pd

    from rayeval.batch.summary import _most_common_error

    message = "boom\x1b[2K\r\x1b[32m0 errors\x1b[0m\x1b]0;title\x07\x1b]8;;http://x\x1b\\ \u202eevil\x9b"
    frame = pd.DataFrame(
        {"status": ["error"] * 2, "error_type": ["Bad\x1b[1m", "Bad\x1b[1m"], "error_message": [message] * 2}
    )
    said, units = _most_common_error(frame)
    assert units == 2 and said.isprintable()
    assert said == (
        "Bad\\x1b[1m: boom\\x1b[2K\\r\\x1b[32m0 errors\\x1b[0m\\x1b]0;title\\x07\\x1b]8;;http://x\\x1b\\ \\u202eevil\\x9b"
    )
