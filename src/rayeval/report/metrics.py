"""Across-seed metrics: pass@k, pass^k and majority vote, averaged over evals.

For an eval with ``n`` scored seeds of which ``c`` passed:

- pass@k = 1 − C(n−c, k) / C(n, k): the unbiased estimate of "at least one of k samples
  passes" (Chen et al., 2021);
- pass^k = C(c, k) / C(n, k): the unbiased estimate of "all k samples pass" (τ-bench);
- an eval with fewer than ``k`` scored seeds has no estimate and is left out of that k's mean.

Errored runs count as failed seeds by default (``errors="fail"``), as in the benchmark table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from ..storage.attempts import latest_attempts, passed_array
from ._groups import Groups, codes, sub_groups
from .benchmark import _check_policy, _eval_stats, _output_keys
from .reader import ReportError


def _comb_ratio(a: np.ndarray, n: np.ndarray, k: int) -> np.ndarray:
    """C(a, k) / C(n, k) as the product Π_{i<k} (a−i)/(n−i); 0 where a < k."""
    a = np.asarray(a, dtype=float)
    n = np.asarray(n, dtype=float)
    ratio = np.ones(np.broadcast(a, n).shape)
    for i in range(k):
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = ratio * np.clip(a - i, 0, None) / (n - i)
    return ratio


def pass_at_k_estimate(n: Iterable[int] | int, c: Iterable[int] | int, k: int) -> np.ndarray:
    """Unbiased pass@k per eval: 1 − C(n−c, k)/C(n, k); NaN where n < k."""
    _check_k(k)
    n_arr = np.asarray(n, dtype=float)
    c_arr = np.asarray(c, dtype=float)
    value = 1.0 - _comb_ratio(n_arr - c_arr, n_arr, k)
    return np.where(n_arr >= k, value, np.nan)


def pass_hat_k_estimate(n: Iterable[int] | int, c: Iterable[int] | int, k: int) -> np.ndarray:
    """Unbiased pass^k per eval: C(c, k)/C(n, k); NaN where n < k."""
    _check_k(k)
    n_arr = np.asarray(n, dtype=float)
    c_arr = np.asarray(c, dtype=float)
    value = _comb_ratio(c_arr, n_arr, k)
    return np.where(n_arr >= k, value, np.nan)


def _check_k(k: int) -> None:
    if int(k) != k or k < 1:
        raise ReportError(f"k must be a positive integer, got {k!r}")


def pass_at_k(
    units: pd.DataFrame,
    k: int | Sequence[int] = (1,),
    by: Sequence[str] = ("model", "harness"),
    *,
    errors: str = "fail",
) -> pd.DataFrame:
    """Per group: ``n_evals``, ``min_seeds`` (fewest scored seeds of any eval) and, for each k,
    ``pass@k (%)`` and ``pass^k (%)``: percent, as every rate of the reports (mean over the evals
    with at least k seeds)."""
    ks = [k] if isinstance(k, int) else list(k)
    for value in ks:
        _check_k(value)
    by = list(by)
    es = _eval_stats(units, by, errors)
    evals = Groups(es.parent, np.zeros(0, dtype=np.int64), es.groups.n)
    n = es.n_scored
    c = es.n_passed
    table = _output_keys(es.keys, by)
    table["n_evals"] = evals.count(n > 0)
    min_seeds = np.full(es.groups.n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(min_seeds, es.parent, n.astype(np.int64))
    table["min_seeds"] = np.where(min_seeds == np.iinfo(np.int64).max, 0, min_seeds)
    for value in ks:
        table[f"pass@{value} (%)"] = evals.nanmean(pass_at_k_estimate(n, c, value)) * 100.0
        table[f"pass^{value} (%)"] = evals.nanmean(pass_hat_k_estimate(n, c, value)) * 100.0
    table.attrs.update({"by": tuple(by), "errors": errors, "k": tuple(ks)})
    return table


def majority_vote(
    units: pd.DataFrame,
    by: Sequence[str] = ("model", "harness"),
    *,
    on: str = "answer",
    errors: str = "fail",
) -> pd.DataFrame:
    """Majority-vote accuracy per group (percent, mean over evals) as ``majority (%)``.

    ``on="answer"`` (maj@n, self-consistency): per eval, the most frequent submitted answer
    (``answer_json``; runs without an answer abstain; a tie goes to the answer first seen at
    the lowest seed) decides, with that answer's verdict (at its lowest seed). An eval where
    nobody answered fails, or is left out where ``errors="exclude"`` leaves out all its runs
    (see :func:`~rayeval.report.benchmark.excused_errors`).
    ``on="verdict"``: an eval passes when more than half of its scored seeds passed.
    """
    _check_policy(errors)
    if on not in ("answer", "verdict"):
        raise ReportError(f"majority vote on {on!r}: use 'answer' or 'verdict'")
    by = list(by)
    units = latest_attempts(units)
    if on == "answer" and "answer_json" not in units.columns:
        raise ReportError("majority vote on answers needs the 'answer_json' column (read with columns=ALL_COLUMNS)")
    es = _eval_stats(units, by, errors)
    evals = Groups(es.parent, np.zeros(0, dtype=np.int64), es.groups.n)
    if on == "verdict":
        with np.errstate(invalid="ignore"):
            verdict = np.where(es.n_scored > 0, (2 * es.n_passed > es.n_scored).astype(float), np.nan)
    else:
        answer = units["answer_json"]
        has_answer = answer.notna().to_numpy(dtype=bool)
        if answer.dtype == object:
            has_answer &= ~answer.isin(("", "null")).to_numpy(dtype=bool)
        passed = passed_array(units)
        seeds = (
            pd.to_numeric(units["seed"], errors="coerce").fillna(0).to_numpy(dtype=np.int64)
            if "seed" in units.columns
            else np.zeros(len(units), np.int64)
        )
        rows = np.flatnonzero(has_answer)
        votes, vote_pair = sub_groups(Groups(es.pairs.ids[rows], es.pairs.first, es.pairs.n), codes(answer.iloc[rows]))
        count = votes.count()
        # Verdict and seed of each answer at its lowest seed.
        order = np.lexsort((seeds[rows], votes.ids))
        first_of_vote = order[_starts(votes.ids[order])]
        vote_seed = seeds[rows][first_of_vote]
        vote_passed = passed[rows][first_of_vote]
        # The winner per pair: most votes, then lowest seed.
        pick = np.lexsort((vote_seed, -count, vote_pair))
        best = pick[_starts(vote_pair[pick])]
        winner = np.full(es.pairs.n, -1, dtype=np.int64)
        winner[vote_pair[best]] = best
        # nobody answered: a failure, unless every run errored through no fault of the agent's (left out)
        verdict = np.where(es.n_scored > 0, 0.0, np.nan)
        answered = winner >= 0
        verdict[answered] = vote_passed[winner[answered]]
    table = _output_keys(es.keys, by)
    table["n_evals"] = evals.count(~np.isnan(verdict))
    table["majority (%)"] = evals.nanmean(verdict) * 100.0
    table.attrs.update({"by": tuple(by), "errors": errors, "on": on})
    return table


def _starts(sorted_keys: np.ndarray) -> np.ndarray:
    """Positions where a run of equal keys begins in a sorted key array."""
    if not len(sorted_keys):
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1])))


__all__ = [
    "majority_vote",
    "pass_at_k",
    "pass_at_k_estimate",
    "pass_hat_k_estimate",
]
