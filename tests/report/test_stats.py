"""EvaluationStats: evaluator stats by kind, errors and nulls, progress, status, ordering."""

from __future__ import annotations

import json
from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from rayeval.report import (
    ReportError,
    compute_evaluator_stats,
    evaluation_stats,
    evaluator_stats,
    evaluator_stats_table,
    infer_kind,
    judgments_from_metrics,
)
from rayeval.report.stats import (
    EVALUATOR_STATS_ADAPTER,
    EvaluationStats,
    format_duration,
    progress_text,
)
from tests.conftest import read_jsonl, shared_path

from .helpers import T0, base_row


def test_grader_evaluators_on_the_corpus(corpus_units: pd.DataFrame) -> None:
    stats = evaluation_stats(corpus_units)
    assert stats.status == "completed"
    assert stats.progress == "273 units done, 0 errors"
    assert len(stats.run_stats) == 16
    trials = read_jsonl(shared_path("corpus", "scbench", "trials.jsonl"))
    for rs in stats.run_stats:
        mine = [t for t in trials if t["model"] == rs.model and t["harness"] == rs.harness]
        assert rs.version_id == f"{rs.model}/{rs.harness}"
        assert rs.num_logs == len(mine) and rs.batch_id == rs.run_id
        passed, score = rs.evaluator_stats
        assert (passed.kind, passed.evaluator, score.kind, score.evaluator) == (
            "boolean",
            "passed",
            "number",
            "normalized_score",
        )
        assert passed.num_true == sum(t["recorded_passed"] for t in mine)
        assert passed.num_true + passed.num_false == passed.num_judgments == passed.total_logs == len(mine)
        values = np.array(
            [r.normalized_score for r in corpus_units.itertuples() if r.model == rs.model and r.harness == rs.harness]
        )
        assert score.mean == pytest.approx(values.mean()) and score.sum == pytest.approx(values.sum())
        assert score.std == pytest.approx(values.std(ddof=1))
        assert score.percentiles == pytest.approx({f"p{q}": np.percentile(values, q) for q in (5, 25, 50, 75, 95)})
    assert "Accuracy (%)" in stats.report and "count as failures" in stats.report
    assert str(stats) == stats.report


def _judgments() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run": ["r1"] * 8 + ["r2"] * 2,
            "status": [
                "passed",
                "failed",
                "error",
                "timeout",
                "passed",
                "failed",
                "config_error",
                "passed",
                "passed",
                "failed",
            ],
            "flag": [True, False, True, None, None, True, False, "false", "yes", False],
            "num": [1.0, 0.5, 9.0, np.nan, None, 0.25, 3.0, "x", 2.0, 4.0],
            "choice": ["a", "b", "a", "c", None, "a", "b", ["a", "c"], "b", []],
        }
    )


def test_boolean_stats_count_errors_and_nulls_apart() -> None:
    stats = compute_evaluator_stats(_judgments(), "boolean", value="flag", by=["run"])
    r1 = stats[("r1",)]
    # r1: errors = rows 2, 3, 6 (error/timeout/config_error); nulls = row 4 (None); judgments: T, F, T, "false"
    assert (r1.total_logs, r1.num_errors, r1.num_nulls, r1.num_judgments) == (8, 3, 1, 4)
    assert (r1.num_true, r1.num_false) == (2, 2)
    r2 = stats[("r2",)]
    assert (r2.num_true, r2.num_false, r2.num_errors, r2.num_nulls) == (1, 1, 0, 0)


def test_number_stats_with_errors_and_nulls() -> None:
    one = evaluator_stats(_judgments(), "number", value="num", evaluator="score")
    # errors: 9.0 (error), NaN (timeout), 3.0 (config_error); nulls: None, "x"; judgments: 1.0, 0.5, 0.25, 2.0, 4.0
    values = np.array([1.0, 0.5, 0.25, 2.0, 4.0])
    assert (one.evaluator, one.total_logs, one.num_errors, one.num_nulls, one.num_judgments) == ("score", 10, 3, 2, 5)
    assert one.mean == pytest.approx(values.mean()) and one.sum == pytest.approx(values.sum())
    assert one.std == pytest.approx(values.std(ddof=1))
    assert one.percentiles == pytest.approx({f"p{q}": np.percentile(values, q) for q in (5, 25, 50, 75, 95)})
    lone = evaluator_stats(pd.DataFrame({"value": [3.0, None]}), "number")
    assert lone.std is None and lone.percentiles == {"p5": 3.0, "p25": 3.0, "p50": 3.0, "p75": 3.0, "p95": 3.0}
    empty = evaluator_stats(pd.DataFrame({"value": [None], "status": ["error"]}), "number")
    assert (empty.num_errors, empty.mean, empty.sum, empty.percentiles) == (1, None, None, None)


def test_select_and_text_stats() -> None:
    select = evaluator_stats(_judgments(), "select", value="choice")
    # judgments (non-error, non-null): a, b, None→null, a, [a, c], b; [] is a null; the error rows are left out
    assert select.num_judgments_per_option == {"a": 3, "b": 2, "c": 1}
    assert (select.num_judgments, select.num_nulls, select.num_errors) == (5, 2, 3)
    text = evaluator_stats(pd.DataFrame({"value": ["fine", None, "ok"], "error": [False, False, True]}), "text")
    assert (text.kind, text.num_judgments, text.num_nulls, text.num_errors) == ("text", 1, 1, 1)
    with pytest.raises(ReportError):
        evaluator_stats_table(_judgments(), "multi", value="flag")


def test_kind_is_a_discriminator() -> None:
    stats = evaluation_stats(
        pd.DataFrame([base_row(), base_row(seed=2, passed=False, status="failed", normalized_score=0.0)])
    )
    dumped = stats.model_dump(mode="json")
    again = EvaluationStats.model_validate(dumped)
    assert again == stats
    kinds = [
        type(EVALUATOR_STATS_ADAPTER.validate_python(e)).__name__ for e in dumped["run_stats"][0]["evaluator_stats"]
    ]
    assert kinds == ["BooleanEvaluatorStats", "NumberEvaluatorStats"]


def test_custom_evaluators_from_metrics_json() -> None:
    metrics = [
        {"evaluators": {"exact": True, "len": 12, "tone": "polite"}},
        {"evaluators": {"exact": False, "len": 30, "tone": "rude"}},
        {"evaluators": {"exact": {"error": "ZeroDivisionError"}, "len": None, "tone": "polite"}},
        {"evaluators": {"exact": True}},
    ]
    rows = [base_row(run_id="ev", unit_id=f"u{i}", seed=i, metrics_json=json.dumps(m)) for i, m in enumerate(metrics)]
    rows.append(base_row(run_id="ev", unit_id="u9", seed=9, status="error", passed=False, metrics_json="{}"))
    units = pd.DataFrame(rows)
    long = judgments_from_metrics(units)
    assert set(long["evaluator"]) == {"exact", "len", "tone"} and len(long) == 15
    by_eval = compute_evaluator_stats(long[long["evaluator"] == "exact"], "boolean", by=["evaluator"])
    exact = by_eval[("exact",)]
    assert (exact.num_true, exact.num_false, exact.num_errors, exact.num_nulls) == (2, 1, 2, 0)
    stats = evaluation_stats(
        units, evaluators={"exact": "boolean", "len": "number", "tone": "select", "passed": "boolean"}
    )
    ex, ln, tone, passed = stats.run_stats[0].evaluator_stats
    assert (ex.evaluator, ex.num_true, ex.num_false, ex.num_errors) == ("exact", 2, 1, 2)
    assert (ln.num_judgments, ln.num_nulls, ln.num_errors, ln.mean) == (2, 2, 1, 21.0)
    assert tone.num_judgments_per_option == {"polite": 2, "rude": 1}
    assert (passed.num_true, passed.num_errors) == (4, 1)
    assert infer_kind(pd.Series([True, None])) == "boolean" and infer_kind(pd.Series([1, 2.5])) == "number"
    assert infer_kind(pd.Series(["a", "b"])) == "select" and infer_kind(pd.Series([["a"], None])) == "select"
    assert infer_kind(pd.Series([f"t{i}" for i in range(50)])) == "text"


def test_metrics_no_reader_can_parse_give_no_judgments() -> None:
    """Rows another writer left: metrics nested past the parser's limit, or damaged JSON."""
    deep = '{"evaluators": {"exact": ' + "[" * 5000 + "]" * 5000 + "}}"
    rows = [
        base_row(run_id="ev", unit_id=f"u{i}", seed=i, metrics_json=text) for i, text in enumerate([deep, "{not json"])
    ]
    rows.append(base_row(run_id="ev", unit_id="u9", seed=9, metrics_json=json.dumps({"evaluators": {"exact": True}})))
    long = judgments_from_metrics(pd.DataFrame(rows))
    assert long["value"].tolist() == [None, None, True]


def _progress_rows(done: int, errors: int) -> list[dict]:
    rows = []
    for i in range(done):
        rows.append(
            base_row(
                run_id="p",
                unit_id=f"u{i}",
                seed=i,
                status="error" if i < errors else "passed",
                passed=i >= errors,
                started_at=T0 + timedelta(seconds=i),
                finished_at=T0 + timedelta(seconds=i + 1),
            )
        )
    return rows


def test_progress_eta_and_status() -> None:
    units = pd.DataFrame(_progress_rows(812, 3))  # 812 units in 812 s → 1 unit/s
    stats = evaluation_stats(units, planned_units=1000)
    assert stats.progress == "812/1000 units done (81.2%), 3 errors, ETA 3m"
    assert stats.eta_s == pytest.approx(188.0)
    assert stats.status == "running" and stats.run_stats[0].status == "running"
    assert stats.run_stats[0].evaluator_stats[0].num_errors == 3
    done = evaluation_stats(units, planned_units=812)
    assert done.progress == "812/812 units done (100.0%), 3 errors" and done.status == "completed"
    assert evaluation_stats(units).status == "completed"
    assert evaluation_stats(units, planned_units=1000, run_status="cancelled").status == "cancelled"
    assert evaluation_stats(units, run_status={"status": "in_progress"}).status == "running"
    assert evaluation_stats(units, run_status={"p": "done"}).run_stats[0].status == "completed"
    empty = evaluation_stats(units.iloc[0:0], planned_units=10)
    assert empty.status == "pending" and empty.progress == "0/10 units done (0.0%), 0 errors, ETA unknown"
    with pytest.raises(ReportError):
        evaluation_stats(units, run_status="exploded")
    assert progress_text(1, 3, 1, 7322.0) == "1/3 units done (33.3%), 1 error, ETA 2h02m"
    assert progress_text(1, 0, 0, None) == "1 unit done (0 planned), 0 errors"
    assert progress_text(12, 10, 2, 5.0) == "12 units done (10 planned), 2 errors"
    assert [format_duration(s) for s in (5, 240, 3600, 90000)] == ["5s", "4m", "1h00m", "1d01h"]


def test_run_stats_newest_first() -> None:
    old = [
        base_row(run_id="old", model=m, unit_id=f"o{m}", started_at=T0, finished_at=T0 + timedelta(seconds=5))
        for m in ("b", "a")
    ]
    new = [
        base_row(
            run_id="new",
            model="z",
            unit_id="n",
            started_at=T0 + timedelta(days=1),
            finished_at=T0 + timedelta(days=1, seconds=3),
        )
    ]
    stats = evaluation_stats(pd.DataFrame(old + new), run_status={"old": "completed", "new": "running"})
    assert [(rs.run_id, rs.version_id) for rs in stats.run_stats] == [("new", "z/h1"), ("old", "a/h1"), ("old", "b/h1")]
    assert stats.status == "running"
    assert stats.run_stats[0].created_at == T0 + timedelta(days=1)
