"""Paired comparison: exact sign/McNemar p-values on constructed cases, bootstrap CI."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rayeval.report import ReportError, bootstrap_mean_ci, paired_comparison, select

from .helpers import base_row


def _row(model: str, eval_id: str, seed: int, ok: bool, run_id: str = "r") -> dict:
    return base_row(
        run_id=run_id, model=model, eval_id=eval_id, seed=seed, passed=ok, status="passed" if ok else "failed"
    )


def test_known_exact_p_value_one_seed() -> None:
    rows = []
    for i in range(10):
        a_ok, b_ok = (True, False) if i < 8 else ((False, True) if i == 8 else (True, True))
        rows += [_row("A", f"e{i}", 1, a_ok), _row("B", f"e{i}", 1, b_ok)]
    rows.append(_row("A", "only-a", 1, True))  # not common: left out
    result = paired_comparison(pd.DataFrame(rows), "A", "B", n_boot=2000, seed=3)
    assert (result.n_evals, result.only_a, result.only_b) == (10, 1, 0)
    assert (result.wins_a, result.wins_b, result.ties) == (8, 1, 1)
    assert result.mean_diff == pytest.approx(70.0)
    assert result.accuracy_a == pytest.approx(90.0) and result.accuracy_b == pytest.approx(20.0)
    exact = 2 * (9 + 1) / 2**9  # two-sided binomial, 8 of 9 discordant
    assert result.sign_test_p == pytest.approx(exact, rel=1e-12) == 0.0390625
    assert (result.mcnemar_pairs, result.mcnemar_a_only, result.mcnemar_b_only) == (10, 8, 1)
    assert result.mcnemar_p == pytest.approx(exact, rel=1e-12)
    # The bootstrap interval: the same resampling done by hand.
    diffs = np.array([100.0] * 8 + [-100.0, 0.0])
    rng = np.random.default_rng(3)
    means = diffs[rng.integers(0, 10, size=(2000, 10))].mean(axis=1)
    assert (result.ci_lower, result.ci_upper) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])))
    assert result.ci_lower <= 70.0 <= result.ci_upper
    again = paired_comparison(pd.DataFrame(rows), "A", "B", n_boot=2000, seed=3)
    assert again == result  # fixed seed: reproducible
    assert "exact sign test p = 0.03906" in result.to_text()


def test_known_exact_p_values_several_seeds_between_runs() -> None:
    rows = []
    for i in range(4):
        for seed in (1, 2, 3):
            rows.append(_row("m", f"e{i}", seed, True, run_id="new"))
            rows.append(_row("m", f"e{i}", seed, seed == 1, run_id="old"))
    result = paired_comparison(pd.DataFrame(rows), "new", "old")
    assert result.mean_diff == pytest.approx(200 / 3)
    assert (result.wins_a, result.wins_b) == (4, 0)
    assert result.sign_test_p == pytest.approx(2 / 2**4)  # 0.125
    assert (result.mcnemar_a_only, result.mcnemar_b_only) == (8, 0)
    assert result.mcnemar_p == pytest.approx(2 / 2**8)  # 0.0078125


def test_no_discordant_pairs_and_no_common_evals() -> None:
    same = pd.DataFrame(
        [_row("A", "e1", 1, True), _row("B", "e1", 1, True), _row("A", "e2", 1, False), _row("B", "e2", 1, False)]
    )
    result = paired_comparison(same, "A", "B")
    assert result.mean_diff == 0.0 and result.sign_test_p == 1.0 and result.mcnemar_p == 1.0
    apart = pd.DataFrame([_row("A", "e1", 1, True), _row("B", "e2", 1, True)])
    none = paired_comparison(apart, "A", "B")
    assert none.n_evals == 0 and none.mean_diff is None and "no common evals" in none.note


def test_selectors() -> None:
    rows = [
        _row("m1", "e", 1, True, run_id="r1"),
        _row("m2", "e", 1, False, run_id="r1"),
        _row("r1", "e", 1, True, run_id="r2"),
    ]
    units = pd.DataFrame(rows)
    with pytest.raises(ReportError, match="both a run and a model"):
        select(units, "r1")
    assert len(select(units, "run=r1")[0]) == 2
    assert len(select(units, "model=r1")[0]) == 1
    assert len(select(units, "m1/h1")[0]) == 1
    assert len(select(units, "run=r1,model=m2")[0]) == 1
    with pytest.raises(ReportError, match="names no run or model"):
        select(units, "zzz")
    with pytest.raises(ReportError, match="unknown key"):
        select(units, "colour=red")
    with pytest.raises(ReportError, match="matches no results"):
        select(units, "run=r9")


def test_mcnemar_skipped_when_a_side_has_several_units_per_seed(corpus_units: pd.DataFrame) -> None:
    with pytest.raises(ReportError, match="'gpt-5.5' would pool 5 evals' units from 2 runs or harnesses"):
        paired_comparison(corpus_units, "gpt-5.5", "claude-opus-4-5")  # gpt-5.5 ran under two harnesses
    # a side of every model of one harness (pooled on purpose): several units per (eval, seed)
    result = paired_comparison(corpus_units, "harness=openai-codex", "harness=mini-swe-agent")
    assert result.mcnemar_p is None and "McNemar skipped" in result.note
    one = paired_comparison(corpus_units, "gpt-5.5/openai-codex", "claude-opus-4-5/mini-swe-agent")
    assert one.mcnemar_p is not None and one.n_evals == 6


def test_bootstrap_is_chunked_identically() -> None:
    diffs = np.arange(50, dtype=float)
    assert bootstrap_mean_ci(diffs, n_boot=500, seed=1) == bootstrap_mean_ci(diffs, n_boot=500, seed=1)
    low, high = bootstrap_mean_ci(diffs, n_boot=500, seed=1)
    assert low < diffs.mean() < high
