"""Vectorised group-by helpers: integer group ids and ``np.bincount`` reductions.

pandas' groupby is general but pays per-call overhead; every report aggregate here is a sum,
count, mean or variance over integer-coded groups, which ``np.bincount`` does in one pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd


def codes(series: pd.Series) -> np.ndarray:
    """Integer codes for a column (categorical codes or factorized); -1 for missing."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        return series.cat.codes.to_numpy(dtype=np.int64)
    return pd.factorize(series, use_na_sentinel=True)[0].astype(np.int64, copy=False)


@dataclass(frozen=True)
class Groups:
    ids: np.ndarray  # group id of each row, 0..n-1
    first: np.ndarray  # index of the first row of each group
    n: int

    def keys(self, frame: pd.DataFrame, cols: Sequence[str]) -> pd.DataFrame:
        """The key values of each group (one row per group, in group-id order)."""
        return frame[list(cols)].iloc[self.first].reset_index(drop=True)

    def count(self, mask: np.ndarray | None = None) -> np.ndarray:
        if mask is None:
            return np.bincount(self.ids, minlength=self.n)
        return np.bincount(self.ids[mask], minlength=self.n)

    def sum(self, values: np.ndarray) -> np.ndarray:
        return np.bincount(self.ids, weights=values, minlength=self.n)

    def nanmean(self, values: np.ndarray) -> np.ndarray:
        """Mean of the non-NaN values per group (NaN where none)."""
        values = np.asarray(values, dtype=float)
        valid = ~np.isnan(values)
        total = np.bincount(self.ids[valid], weights=values[valid], minlength=self.n)
        count = np.bincount(self.ids[valid], minlength=self.n)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, total / np.maximum(count, 1), np.nan)

    def nanstd(self, values: np.ndarray, ddof: int = 1) -> np.ndarray:
        """Standard deviation (two-pass) of the non-NaN values per group; NaN where count <= ddof."""
        values = np.asarray(values, dtype=float)
        valid = ~np.isnan(values)
        ids, vals = self.ids[valid], values[valid]
        count = np.bincount(ids, minlength=self.n)
        mean = np.bincount(ids, weights=vals, minlength=self.n) / np.maximum(count, 1)
        sq = np.bincount(ids, weights=(vals - mean[ids]) ** 2, minlength=self.n)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > ddof, np.sqrt(sq / np.maximum(count - ddof, 1)), np.nan)


def group_ids(frame: pd.DataFrame, cols: Sequence[str]) -> Groups:
    """Groups over ``cols`` (missing values form their own group), ids in sorted-code order."""
    n = len(frame)
    if not cols:
        return Groups(np.zeros(n, dtype=np.int64), np.zeros(1 if n else 0, dtype=np.int64), 1 if n else 0)
    key = np.zeros(n, dtype=np.int64)
    for col in cols:
        code = codes(frame[col]) + 1  # missing (-1) → 0
        radix = int(code.max()) + 1 if n else 1
        if n and int(key.max()) * radix + radix >= 2**62:  # keep the mixed-radix key in int64
            key = np.unique(key, return_inverse=True)[1].astype(np.int64).reshape(-1)
        key = key * radix + code
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return Groups(inverse.astype(np.int64).reshape(-1), first.astype(np.int64), len(uniq))


def key_groups(units: pd.DataFrame, cols: Sequence[str]) -> tuple[Groups, pd.DataFrame]:
    """Groups of ``units`` over the key columns ``cols``, and each group's key values; a key
    column ``units`` lacks (no harness) is all missing, one group."""
    missing = pd.Series(pd.NA, index=units.index, dtype="string")
    work = pd.DataFrame({col: units[col] if col in units.columns else missing for col in cols}, index=units.index)
    groups = group_ids(work, cols)
    return groups, groups.keys(work, cols)


def sub_groups(parent: Groups, child: np.ndarray) -> tuple[Groups, np.ndarray]:
    """Refine ``parent`` by integer ``child`` codes: (groups, parent id of each new group)."""
    radix = int(child.max()) + 2 if len(child) else 1
    key = parent.ids * radix + (child + 1)
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return Groups(inverse.astype(np.int64).reshape(-1), first.astype(np.int64), len(uniq)), (uniq // radix).astype(
        np.int64
    )
