"""pass@k, pass^k and majority vote."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy.special import comb

from rayeval.report import (
    ReportError,
    majority_vote,
    pass_at_k,
    pass_at_k_estimate,
    pass_hat_k_estimate,
)

from .helpers import base_row


def test_estimators_against_hand_computed_values() -> None:
    # n = 5 seeds, c = 2 passed
    assert pass_at_k_estimate(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k_estimate(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 − C(3,2)/C(5,2)
    assert pass_at_k_estimate(5, 2, 3) == pytest.approx(1 - 1 / 10)  # 1 − C(3,3)/C(5,3)
    assert pass_at_k_estimate(5, 2, 4) == pytest.approx(1.0)  # n − c < k
    assert pass_hat_k_estimate(5, 2, 2) == pytest.approx(1 / 10)  # C(2,2)/C(5,2)
    assert pass_hat_k_estimate(5, 2, 3) == pytest.approx(0.0)
    assert pass_at_k_estimate(3, 1, 2) == pytest.approx(2 / 3)
    assert pass_at_k_estimate(3, 0, 3) == 0.0 and pass_at_k_estimate(3, 3, 1) == 1.0
    assert np.isnan(pass_at_k_estimate(2, 1, 3)) and np.isnan(pass_hat_k_estimate(2, 1, 3))
    with pytest.raises(ReportError):
        pass_at_k_estimate(3, 1, 0)


def test_estimators_match_exact_binomials_on_a_grid() -> None:
    grid = [(n, c, k) for n in range(1, 12) for c in range(n + 1) for k in range(1, n + 1)]
    n, c, k = (np.array(v) for v in zip(*grid))
    for kk in range(1, 12):
        sel = k == kk
        want_at = 1 - comb(n[sel] - c[sel], kk, exact=False) / comb(n[sel], kk, exact=False)
        want_hat = comb(c[sel], kk, exact=False) / comb(n[sel], kk, exact=False)
        np.testing.assert_allclose(pass_at_k_estimate(n[sel], c[sel], kk), want_at, atol=1e-12)
        np.testing.assert_allclose(pass_hat_k_estimate(n[sel], c[sel], kk), want_hat, atol=1e-12)


def _units(outcomes: dict[str, list[bool]], model: str = "m") -> pd.DataFrame:
    rows = [
        base_row(model=model, eval_id=e, seed=s, passed=p, status="passed" if p else "failed")
        for e, seq in outcomes.items()
        for s, p in enumerate(seq, 1)
    ]
    return pd.DataFrame(rows)


def test_pass_at_k_table_averages_over_evals() -> None:
    units = _units({"e1": [True, False, True, False, False], "e2": [False, True, False]})
    table = pass_at_k(units, k=[1, 2, 5]).iloc[0]
    assert (table["n_evals"], table["min_seeds"]) == (2, 3)
    assert table["pass@1 (%)"] == pytest.approx((0.4 + 1 / 3) / 2 * 100)
    assert table["pass@2 (%)"] == pytest.approx((0.7 + 2 / 3) / 2 * 100)
    assert table["pass^2 (%)"] == pytest.approx((0.1 + 0.0) / 2 * 100)
    assert table["pass@5 (%)"] == pytest.approx(100.0)  # e2 has only 3 seeds: left out for k = 5
    assert table["pass^5 (%)"] == pytest.approx(0.0)


def test_pass_at_1_equals_accuracy_on_the_corpus(corpus_units: pd.DataFrame) -> None:
    from rayeval.report import benchmark_table

    merged = pass_at_k(corpus_units, k=[1, 3]).merge(benchmark_table(corpus_units), on=["model_name", "harness"])
    np.testing.assert_allclose(merged["pass@1 (%)"], merged["Accuracy (%)"])
    assert (merged["pass@3 (%)"] >= merged["pass@1 (%)"] - 1e-9).all() and (
        merged["pass^3 (%)"] <= merged["pass^1 (%)"] + 1e-9
    ).all()


def test_majority_vote_on_answers_and_verdicts() -> None:
    rows = []
    # e1: answers A, A, B → A wins (passes). e2: B (fail, seed 1), C (pass, seed 2) → tie → lowest seed: B fails.
    # e3: nobody answered (errors).
    for seed, (answer, ok) in enumerate([('{"x": 1}', True), ('{"x": 1}', True), ('{"x": 2}', False)], 1):
        rows.append(
            base_row(eval_id="e1", seed=seed, answer_json=answer, passed=ok, status="passed" if ok else "failed")
        )
    for seed, (answer, ok) in zip((2, 1), [('{"x": 3}', True), ('{"x": 4}', False)]):
        rows.append(
            base_row(eval_id="e2", seed=seed, answer_json=answer, passed=ok, status="passed" if ok else "failed")
        )
    lost = '{"error_details": {"seen_by": "ray"}}'  # Ray lost their workers: left out with errors="exclude"
    for seed in (1, 2):
        rows.append(
            base_row(eval_id="e3", seed=seed, answer_json=None, passed=False, status="error", metadata_json=lost)
        )
    units = pd.DataFrame(rows)
    by_answer = majority_vote(units).iloc[0]
    assert (by_answer["n_evals"], by_answer["majority (%)"]) == (3, pytest.approx(100 / 3))
    excluded = majority_vote(units, errors="exclude").iloc[0]
    assert (excluded["n_evals"], excluded["majority (%)"]) == (2, pytest.approx(50.0))
    by_verdict = majority_vote(units, on="verdict").iloc[0]  # e1 2/3 → pass; e2 1/2 → not a majority; e3 0/2
    assert by_verdict["majority (%)"] == pytest.approx(100 / 3)
    with pytest.raises(ReportError):
        majority_vote(units.drop(columns="answer_json"))
    with pytest.raises(ReportError):
        majority_vote(units, on="vibes")


def test_majority_vote_answer_ties_do_not_depend_on_row_order() -> None:
    rows = [
        base_row(eval_id="e", seed=3, answer_json="a", passed=True, status="passed"),
        base_row(eval_id="e", seed=1, answer_json="b", passed=False, status="failed"),
        base_row(eval_id="e", seed=2, answer_json="a", passed=True, status="passed"),
        base_row(eval_id="e", seed=4, answer_json="b", passed=False, status="failed"),
    ]
    results = {majority_vote(pd.DataFrame(list(p))).iloc[0]["majority (%)"] for p in itertools.permutations(rows)}
    assert results == {0.0}  # 2–2 tie: answer "b" was seen at the lowest seed
