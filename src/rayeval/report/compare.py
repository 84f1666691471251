"""Paired comparison of two models or two runs on the evals both ran.

Per common eval, each side's pass rate across its seeds (errored runs count as failures by
default). Reported: the mean difference A − B in percentage points, a paired-bootstrap
confidence interval (evals resampled with replacement, fixed seed), the exact two-sided sign
test on the evals where one side did better, and — when both sides have one unit per
(eval, seed) — the exact McNemar test on the discordant (eval, seed) pairs. Both exact tests
are ``scipy.stats.binomtest(k, n, 0.5)`` on the discordant counts.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

from ..storage.attempts import latest_attempts, passed_array
from .benchmark import eval_frame
from .reader import ReportError

SELECTOR_KEYS = {
    "run": "run_id",
    "run_id": "run_id",
    "model": "model",
    "harness": "harness",
    "eval": "eval_id",
    "kit": "kit",
    "task": "task",
}


class PairedComparison(BaseModel):
    model_config = ConfigDict(frozen=True)

    a: str
    b: str
    n_evals: int  # evals both sides ran
    only_a: int  # evals only A ran (left out)
    only_b: int
    accuracy_a: float | None  # percent, mean over the common evals
    accuracy_b: float | None
    mean_diff: float | None  # A − B, percentage points
    ci_lower: float | None  # paired bootstrap
    ci_upper: float | None
    confidence: float = 0.95
    n_boot: int = 10000
    seed: int = 0
    wins_a: int = 0  # common evals where A's pass rate is higher
    wins_b: int = 0
    ties: int = 0
    sign_test_p: float | None = None
    mcnemar_pairs: int | None = None  # (eval, seed) pairs both sides ran
    mcnemar_a_only: int | None = None  # A passed, B failed
    mcnemar_b_only: int | None = None
    mcnemar_p: float | None = None
    errors: str = "fail"
    note: str = ""

    def to_text(self) -> str:
        def pct(v: float | None, signed: bool = False) -> str:
            return "-" if v is None else (f"{v:+.2f}" if signed else f"{v:.2f}")

        def p(v: float | None) -> str:
            return "-" if v is None else f"{v:.4g}"

        conf = round(self.confidence * 100)
        lines = [
            f"A: {self.a}",
            f"B: {self.b}",
            f"common evals: {self.n_evals} (only A: {self.only_a}, only B: {self.only_b})",
            f"accuracy A: {pct(self.accuracy_a)}%   accuracy B: {pct(self.accuracy_b)}%",
            (
                f"mean difference A − B: {pct(self.mean_diff, True)} pp, {conf}% paired-bootstrap CI "
                f"[{pct(self.ci_lower, True)}, {pct(self.ci_upper, True)}] ({self.n_boot} resamples, seed {self.seed})"
            ),
            f"per eval: A better {self.wins_a}, B better {self.wins_b}, ties {self.ties}; exact sign test p = {p(self.sign_test_p)}",
        ]
        if self.mcnemar_p is not None:
            lines.append(
                f"per (eval, seed): {self.mcnemar_pairs} pairs, A-only passes {self.mcnemar_a_only}, "
                f"B-only passes {self.mcnemar_b_only}; exact McNemar p = {p(self.mcnemar_p)}"
            )
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)


def _values(series: pd.Series) -> set[str]:
    return {str(v) for v in series.dropna().unique()} if len(series) else set()


def select(units: pd.DataFrame, selector: str) -> tuple[pd.DataFrame, str]:
    """The units a selector names, and its label.

    ``key=value[,key=value...]`` with keys run (run_id), model, harness, task, kit, eval; or a
    plain value: a run id, else a model, else ``model/harness``. A value that is both a run
    and a model is ambiguous (use ``run=`` or ``model=``).
    """
    text = selector.strip()
    if not text:
        raise ReportError("empty selector")
    if "=" in text:
        mask = np.ones(len(units), dtype=bool)
        for part in text.split(","):
            key, _, value = part.partition("=")
            column = SELECTOR_KEYS.get(key.strip())
            if column is None:
                raise ReportError(
                    f"selector {selector!r}: unknown key {key.strip()!r} (use {', '.join(sorted(SELECTOR_KEYS))})"
                )
            if column not in units.columns:
                raise ReportError(f"selector {selector!r}: the results have no {column!r} column")
            mask &= (units[column].astype(object) == value.strip()).to_numpy(dtype=bool)
        chosen = units[mask]
    else:
        runs = _values(units["run_id"]) if "run_id" in units.columns else set()
        models = _values(units["model"]) if "model" in units.columns else set()
        if text in runs and text in models:
            raise ReportError(f"{text!r} is both a run and a model: write run={text} or model={text}")
        if text in runs:
            chosen = units[(units["run_id"].astype(object) == text).to_numpy(dtype=bool)]
        elif text in models:
            chosen = units[(units["model"].astype(object) == text).to_numpy(dtype=bool)]
        elif "/" in text and "harness" in units.columns:
            model, _, harness = text.rpartition("/")
            mask = (units["model"].astype(object) == model).to_numpy(dtype=bool) & (
                units["harness"].astype(object) == harness
            ).to_numpy(dtype=bool)
            chosen = units[mask]
        else:
            chosen = units.iloc[0:0]
        if chosen.empty:
            raise ReportError(
                f"{text!r} names no run or model here (runs: {', '.join(sorted(runs)) or 'none'}; "
                f"models: {', '.join(sorted(models)) or 'none'})"
            )
    if chosen.empty:
        raise ReportError(f"selector {selector!r} matches no results")
    _check_one_source_per_eval(chosen, text)
    return chosen, text


def _check_one_source_per_eval(chosen: pd.DataFrame, selector: str) -> None:
    """A side must not pool an eval's units from several runs or harnesses (two runs of one
    model, one at 100 %, one at 0 %, would read as 50 %): it is refused, with the runs and
    harnesses named and how to pick one. Runs of distinct evals (one per benchmark) pool."""
    keys = [column for column in ("run_id", "harness") if column in chosen.columns]
    if not keys or "eval_id" not in chosen.columns:
        return
    sources = chosen[["eval_id", *keys]].astype(str).drop_duplicates()
    shared = sources["eval_id"].duplicated(keep=False)
    if not shared.any():
        return
    clashing = sources[shared].drop_duplicates(keys).sort_values(keys)
    named = "; ".join(
        ", ".join(f"{key.removesuffix('_id')} {value}" for key, value in zip(keys, row))
        for row in clashing[keys].values
    )
    first = clashing.iloc[0]
    pick = [f"{key.removesuffix('_id')}={first[key]}" for key in keys if clashing[key].nunique() > 1]
    if "model" in chosen.columns and chosen["model"].nunique() == 1:
        pick.append(f"model={chosen['model'].iloc[0]}")
    evals = sources.loc[shared, "eval_id"].nunique()
    raise ReportError(
        f"{selector!r} would pool {evals} evals' units from {len(clashing)} runs or harnesses ({named}); "
        f"pick one with --run ID or a selector such as {','.join(pick)}"
    )


def _per_eval(units: pd.DataFrame, errors: str) -> pd.Series:
    table = eval_frame(units, by=(), errors=errors)
    rates = pd.Series(table["pass_rate"].to_numpy(dtype=float), index=table["eval_id"].astype(str).to_numpy())
    return rates.dropna()


def _outcomes_by_seed(units: pd.DataFrame) -> pd.Series | None:
    """Pass flags indexed by (eval_id, seed); None when a side has several units per key."""
    if "seed" not in units.columns:
        return None
    index = pd.MultiIndex.from_arrays([units["eval_id"].astype(str).to_numpy(), units["seed"].to_numpy()])
    if index.has_duplicates:
        return None
    return pd.Series(passed_array(units), index=index)


def bootstrap_mean_ci(
    diffs: np.ndarray, n_boot: int = 10000, seed: int = 0, confidence: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of paired differences (chunked, fixed seed)."""
    diffs = np.asarray(diffs, dtype=float)
    rng = np.random.default_rng(seed)
    n = len(diffs)
    means = np.empty(n_boot)
    chunk = max(1, 2_000_000 // max(n, 1))
    for start in range(0, n_boot, chunk):
        size = min(chunk, n_boot - start)
        means[start : start + size] = diffs[rng.integers(0, n, size=(size, n))].mean(axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return float(low), float(high)


def exact_binomial_p(k: int, n: int) -> float:
    """Exact two-sided p-value of ``k`` successes in ``n`` fair trials (1.0 when n = 0)."""
    if n == 0:
        return 1.0
    from scipy import stats as sps  # heavy import: only when comparing

    return float(sps.binomtest(int(k), int(n), 0.5, alternative="two-sided").pvalue)


def paired_comparison(
    units: pd.DataFrame,
    a: str,
    b: str,
    *,
    errors: str = "fail",
    n_boot: int = 10000,
    seed: int = 0,
    confidence: float = 0.95,
) -> PairedComparison:
    """Compare the units selected by ``a`` and ``b`` (see :func:`select`) on their common evals."""
    units = latest_attempts(units)
    side_a, label_a = select(units, a)
    side_b, label_b = select(units, b)
    rates_a = _per_eval(side_a, errors)
    rates_b = _per_eval(side_b, errors)
    common = rates_a.index.intersection(rates_b.index).sort_values()
    only_a = len(rates_a.index.difference(rates_b.index))
    only_b = len(rates_b.index.difference(rates_a.index))
    notes = []
    if len(common) == 0:
        return PairedComparison(
            a=label_a,
            b=label_b,
            n_evals=0,
            only_a=only_a,
            only_b=only_b,
            accuracy_a=None,
            accuracy_b=None,
            mean_diff=None,
            ci_lower=None,
            ci_upper=None,
            confidence=confidence,
            n_boot=n_boot,
            seed=seed,
            errors=errors,
            note="no common evals: nothing to compare",
        )
    ra = rates_a.loc[common].to_numpy()
    rb = rates_b.loc[common].to_numpy()
    diffs = (ra - rb) * 100.0
    low: float | None
    high: float | None
    if len(common) >= 2:
        low, high = bootstrap_mean_ci(diffs, n_boot=n_boot, seed=seed, confidence=confidence)
    else:
        low = high = None
        notes.append("one common eval: no bootstrap interval")
    wins_a = int((diffs > 0).sum())
    wins_b = int((diffs < 0).sum())

    mc_pairs = mc_a = mc_b = None
    mc_p = None
    seeds_a, seeds_b = _outcomes_by_seed(side_a), _outcomes_by_seed(side_b)
    if seeds_a is None or seeds_b is None:
        notes.append("McNemar skipped: a side has several units per (eval, seed)")
    else:
        joined = pd.concat([seeds_a.rename("a"), seeds_b.rename("b")], axis=1, join="inner")
        joined = joined[joined.index.get_level_values(0).isin(common)]
        if len(joined):
            mc_pairs = len(joined)
            mc_a = int((joined["a"] & ~joined["b"]).sum())
            mc_b = int((~joined["a"] & joined["b"]).sum())
            mc_p = exact_binomial_p(mc_a, mc_a + mc_b)
        else:
            notes.append("McNemar skipped: no (eval, seed) pair in common")
    return PairedComparison(
        a=label_a,
        b=label_b,
        n_evals=len(common),
        only_a=only_a,
        only_b=only_b,
        accuracy_a=float(ra.mean() * 100.0),
        accuracy_b=float(rb.mean() * 100.0),
        mean_diff=float(diffs.mean()),
        ci_lower=low,
        ci_upper=high,
        confidence=confidence,
        n_boot=n_boot,
        seed=seed,
        wins_a=wins_a,
        wins_b=wins_b,
        ties=len(common) - wins_a - wins_b,
        sign_test_p=exact_binomial_p(wins_a, wins_a + wins_b),
        mcnemar_pairs=mc_pairs,
        mcnemar_a_only=mc_a,
        mcnemar_b_only=mc_b,
        mcnemar_p=mc_p,
        errors=errors,
        note="; ".join(notes),
    )


__all__ = ["PairedComparison", "bootstrap_mean_ci", "exact_binomial_p", "paired_comparison", "select"]
