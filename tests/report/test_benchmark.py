"""The benchmark table against an independent numpy/scipy computation, and its exports."""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from rayeval import load_evals
from rayeval.report import (
    benchmark_table,
    breakdown_table,
    eval_frame,
    to_csv,
    to_json,
    to_json_data,
    to_text,
)
from tests.conftest import read_jsonl, shared_path

from .helpers import base_row, write_root


def _trials() -> list[dict]:
    return read_jsonl(shared_path("corpus", "scbench", "trials.jsonl"))


def _meta() -> dict[str, dict]:
    return {e.id: e.metadata or {} for e in load_evals(shared_path("corpus", "scbench", "evals"))}


def expected_rows(group_of) -> dict[tuple, dict[str, float]]:
    """Independent computation from trials.jsonl (the recorded verdicts), plain numpy/scipy."""
    per_eval: dict[tuple, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    costs: dict[tuple, list[float]] = defaultdict(list)
    durations: dict[tuple, list[float]] = defaultdict(list)
    for t in _trials():
        key = group_of(t)
        per_eval[key][t["eval_id"]].append(bool(t["recorded_passed"]))
        costs[key].append(np.nan if t["cost_usd"] is None else float(t["cost_usd"]))
        durations[key].append(float(t["duration_s"]))
    out = {}
    for key, evals in per_eval.items():
        means = np.array([np.mean(v) * 100 for v in evals.values()])
        n = len(means)
        acc = means.mean()
        half = stats.t.ppf(0.975, n - 1) * means.std(ddof=1) / np.sqrt(n) if n > 1 else np.nan
        cost = np.array(costs[key])
        out[key] = {
            "Accuracy (%)": acc,
            "ci_lower": max(acc - half, 0.0),  # an accuracy's interval stays inside [0, 100]
            "ci_upper": min(acc + half, 100.0),
            "Cost ($)": np.nanmean(cost) if (~np.isnan(cost)).any() else np.nan,
            "Duration (s)": np.mean(durations[key]),
            "N": sum(len(v) for v in evals.values()),
            "n_evals": n,
        }
    return out


def _compare(table: pd.DataFrame, keys: list[str], expected: dict[tuple, dict[str, float]]) -> None:
    assert len(table) == len(expected)
    for _, row in table.iterrows():
        want = expected[tuple(row[k] for k in keys)]
        for column, value in want.items():
            got = row[column]
            if np.isnan(value):
                assert np.isnan(got), (row[keys].tolist(), column)
            else:
                assert got == pytest.approx(value, abs=0.01), (row[keys].tolist(), column)


def test_model_table_matches_independent_computation(corpus_units: pd.DataFrame) -> None:
    table = benchmark_table(corpus_units)
    _compare(table, ["model_name", "harness"], expected_rows(lambda t: (t["model"], t["harness"])))
    assert (table["Errors"] == 0).all()
    assert table["Accuracy (%)"].is_monotonic_decreasing
    # Spot values (hand-checked): gpt-5.5 with openai-codex passed 16 of 18 runs over 6 evals.
    top = table.iloc[0]
    assert (top["model_name"], top["harness"]) == ("gpt-5.5", "openai-codex")
    assert top["Accuracy (%)"] == pytest.approx(88.888, abs=0.01)
    assert np.isnan(top["Cost ($)"])  # that harness recorded no cost


@pytest.mark.parametrize("column", ["task", "kit"])
def test_breakdowns_match_independent_computation(corpus_units: pd.DataFrame, column: str) -> None:
    meta = _meta()
    table = breakdown_table(corpus_units, column)
    expected = expected_rows(lambda t: (meta[t["eval_id"]][column], t["model"], t["harness"]))
    _compare(table, [column, "model_name", "harness"], expected)
    # One eval per category in this corpus: no interval (n = 1), as specified.
    assert table["ci_lower"].isna().all() and (table["n_evals"] == 1).all()


def test_ci_over_several_evals_per_category(corpus_units: pd.DataFrame) -> None:
    """Regroup the 6 evals into 2 categories so n > 1, and check the t-interval."""
    units = corpus_units.assign(task=np.where(corpus_units["eval_id"].astype(str) < "a", "upper", "lower"))
    table = breakdown_table(units, "task")
    expected = expected_rows(lambda t: ("upper" if t["eval_id"] < "a" else "lower", t["model"], t["harness"]))
    _compare(table, ["task", "model_name", "harness"], expected)
    assert table["ci_lower"].notna().any()


def test_replayed_grades_reproduce_recorded_verdicts(corpus_units: pd.DataFrame) -> None:
    recorded = {(t["model"], t["harness"], t["eval_id"], t["trial"]): t["recorded_passed"] for t in _trials()}
    got = {(r.model, r.harness, r.eval_id, r.seed): r.passed for r in corpus_units.itertuples()}
    assert got == recorded


def test_csv_columns_match_the_publication(corpus_units: pd.DataFrame, tmp_path: Path) -> None:
    published = shared_path("corpus", "scbench", "results", "model_results.csv").read_text().splitlines()[0].split(",")
    text = to_csv(benchmark_table(corpus_units), tmp_path / "t.csv")
    header = next(csv.reader(io.StringIO(text)))
    assert header == published + ["Errors", "Refusals"]
    assert (tmp_path / "t.csv").read_text() == text
    back = pd.read_csv(io.StringIO(text))
    assert len(back) == 16
    # Rounded as published: 2 decimals, cost 4.
    assert (back["Accuracy (%)"] * 100).round(6).mod(1).eq(0).all()
    assert (back["Cost ($)"].dropna() * 10000).round(6).mod(1).eq(0).all()


def test_json_records_and_published_breakdown_layout(corpus_units: pd.DataFrame) -> None:
    records = json.loads(to_json(benchmark_table(corpus_units)))
    assert list(records[0]) == [
        "model_name",
        "harness",
        "Accuracy (%)",
        "ci_lower",
        "ci_upper",
        "Cost ($)",
        "Duration (s)",
        "N",
        "Errors",
        "Refusals",
    ]
    assert records[0]["Cost ($)"] is None  # NaN → null
    for column, filename, key in (
        ("task", "category_results.json", "tasks"),
        ("kit", "platform_results.json", "platforms"),
    ):
        published = json.loads(shared_path("corpus", "scbench", "results", filename).read_text())
        ours = to_json_data(breakdown_table(corpus_units, column))
        assert set(ours) == set(published)
        assert set(ours["metadata"]) >= set(published["metadata"])
        pub_group = next(iter(published[key].values()))
        our_group = next(iter(ours[key].values()))
        assert set(our_group) == set(pub_group)  # {"model", "n_evals"}
        assert set(next(iter(our_group["model"].values()))) == set(next(iter(pub_group["model"].values())))
        assert "gpt-5.5-openai-codex" in ours[key][next(iter(ours[key]))]["model"]
    assert set(to_json_data(breakdown_table(corpus_units, "task"))["tasks"]) == set(
        json.loads(shared_path("corpus", "scbench", "results", "category_results.json").read_text())["tasks"]
    )


def _error_rows() -> list[dict]:
    rows = []
    # model a: e1 seeds 1-4 = pass, fail, error (seen by Ray), timeout; e2 seeds 1-2 = pass, config_error
    outcomes = {"e1": ["passed", "failed", "error", "timeout"], "e2": ["passed", "config_error"]}
    for eval_id, statuses in outcomes.items():
        for seed, status in enumerate(statuses, 1):
            rows.append(
                base_row(
                    model="a",
                    harness=None,
                    eval_id=eval_id,
                    seed=seed,
                    status=status,
                    passed=status == "passed",
                    cost_usd=None if status != "passed" else 1.0,
                    # the error: Ray lost the unit's worker (the trusted side's word); the timeout: the agent's
                    metadata_json='{"error_details": {"seen_by": "ray"}}' if status == "error" else "{}",
                )
            )
    return rows


def test_errors_count_as_failures_by_default_and_are_shown(tmp_path: Path) -> None:
    units = pd.DataFrame(_error_rows())
    default = benchmark_table(units).iloc[0]
    assert default["harness"] == ""  # no harness → empty, not dropped
    assert default["Errors"] == 3 and default["N"] == 6
    assert default["Accuracy (%)"] == pytest.approx((1 / 4 + 1 / 2) / 2 * 100)
    assert default["Cost ($)"] == pytest.approx(1.0)  # mean over runs with a known cost
    excluded = benchmark_table(units, errors="exclude").iloc[0]  # the lost unit and the config error left out
    assert excluded["Accuracy (%)"] == pytest.approx((1 / 3 + 1 / 1) / 2 * 100)
    assert excluded["N"] == 6 and excluded["Errors"] == 3
    assert "3 here, 2 of them left out" in to_text(benchmark_table(units, errors="exclude"))
    per_eval = eval_frame(units).set_index("eval_id")
    assert per_eval.loc["e1", "n_errors"] == 2 and per_eval.loc["e2", "n_errors"] == 1
    text = to_text(benchmark_table(units))
    assert "count as failures" in text and "3 here" in text
    # Read back through Parquet: same numbers.
    root = write_root(tmp_path, _error_rows())
    from rayeval.report import read_units

    again = benchmark_table(read_units(root)).iloc[0]
    assert again["Accuracy (%)"] == pytest.approx(default["Accuracy (%)"]) and again["Errors"] == 3


def test_single_eval_has_no_interval_and_unknown_policy_is_rejected() -> None:
    units = pd.DataFrame(
        [
            base_row(eval_id="only", seed=s, passed=s % 2 == 0, status="passed" if s % 2 == 0 else "failed")
            for s in range(4)
        ]
    )
    row = benchmark_table(units).iloc[0]
    assert row["Accuracy (%)"] == pytest.approx(50.0) and np.isnan(row["ci_lower"]) and np.isnan(row["ci_upper"])
    from rayeval.report import ReportError

    with pytest.raises(ReportError):
        benchmark_table(units, errors="ignore")


def test_intervals_stay_inside_0_to_100() -> None:
    """Two evals, one passed and one failed: the t-interval (df = 1) spans about ±635 points;
    an accuracy's bounds are clipped to what an accuracy can be."""
    units = pd.DataFrame(
        [base_row(eval_id="e1", passed=True, status="passed"), base_row(eval_id="e2", passed=False, status="failed")]
    )
    row = benchmark_table(units).iloc[0]
    assert row["Accuracy (%)"] == pytest.approx(50.0)
    assert (row["ci_lower"], row["ci_upper"]) == (0.0, 100.0)
    text = to_text(benchmark_table(units))
    assert "clipped to [0, 100]" in text and "ci_lower and ci_upper in percent" in text
