"""The benchmark table, computed as the scbench/spatialbench publications do.

Per group (model × harness by default): ``Accuracy (%)`` is the mean over evals of the
per-eval pass rate across seeds (trials); the 95% confidence interval comes from the
t-distribution over those per-eval means (n = number of evals, df = n − 1, half-width
``t.ppf(0.975, n − 1) · sd(ddof=1) / √n``; no interval when n = 1), clipped to [0, 100]:
an accuracy cannot leave that range, though the published tables print such bounds (e.g.
104.73); ``Cost ($)`` and ``Duration (s)`` are means per run; ``N`` is the number of
runs. ``Errors`` (status error/timeout/config_error) is shown apart: by default an errored
run counts as a failure, as the references count a run with no answer.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import pandas as pd
from scipy.special import stdtrit

from ..record import SeenBy
from ..storage.attempts import ERRORED_SQL, error_mask, latest_attempts, passed_array
from ._groups import Groups, codes, group_ids, key_groups, sub_groups
from .reader import ReportError

ErrorPolicy = Literal["fail", "exclude"]
ERROR_POLICIES: tuple[str, ...] = ("fail", "exclude")

ACCURACY = "Accuracy (%)"
CI_LOWER = "ci_lower"
CI_UPPER = "ci_upper"
COST = "Cost ($)"
DURATION = "Duration (s)"
N_RUNS = "N"
ERRORS = "Errors"
#: units whose model refused (the rows' ``refusal``); they count as failed, as any wrong answer
REFUSALS = "Refusals"
N_EVALS = "n_evals"

# Published names: the model key column is ``model_name`` (scbench model_results.csv).
COLUMN_NAMES = {"model": "model_name"}
PUBLISHED_COLUMNS = ("model_name", "harness", ACCURACY, CI_LOWER, CI_UPPER, COST, DURATION, N_RUNS)
ROUNDING = {ACCURACY: 2, CI_LOWER: 2, CI_UPPER: 2, COST: 4, DURATION: 2}
MODEL_KEYS = ("model", "harness", "agent", "run_id")
BREAKDOWN_KEYS = {"task": "tasks", "kit": "platforms"}
#: the columns accuracy is broken down by, when rows carry them, and what each names
BREAKDOWNS = {"task": "task category", "kit": "platform"}
CI_METHOD = (
    "ci_lower and ci_upper in percent, as Accuracy (%); t-distribution over per-evaluation means, clipped to [0, 100]"
)


#: who saw an error the trusted side attributes to the infrastructure or a judge, in a row's
#: ``error_details.seen_by`` (never the agent's: the runner drops one it writes)
EXCUSED_SEEN_BY: tuple[str, ...] = get_args(SeenBy)
_SEEN_BY_SQL = ", ".join(f"'{name}'" for name in EXCUSED_SEEN_BY)
#: SQL: the row's unit errored, and not through its agent, as :func:`excused_errors`
EXCUSED_SQL = (
    f"({ERRORED_SQL}) AND (status = 'config_error' OR (json_valid(metadata_json) AND "
    f"json_extract_string(metadata_json, '$.error_details.seen_by') IN ({_SEEN_BY_SQL})))"
)


def excused_errors(units: pd.DataFrame) -> np.ndarray:
    """The errored units ``errors="exclude"`` leaves out of pass rates: a configuration error
    (the eval's), or an error the trusted side saw (``error_details.seen_by`` in
    ``metadata_json``: the gateway's provider failure, the runner's or Ray's lost unit, a
    judge out of reach; see :data:`~rayeval.record.SeenBy`). Never the agent's own error, nor
    its timeout, nor what it may have brought on: its exception's name (``error_type``) is
    anything it chose, and erring on purpose would skip hard evals."""
    excused = error_mask(units)
    if not excused.any():
        return excused
    if "metadata_json" not in units.columns:
        raise ReportError("errors='exclude' needs the units' metadata_json column: it says who saw each error")
    statuses = units["status"].to_numpy(dtype=object)
    for row in np.flatnonzero(excused & (statuses != "config_error")):
        excused[row] = _seen_by(units["metadata_json"].iat[row]) in EXCUSED_SEEN_BY
    return excused


def _seen_by(metadata_json: Any) -> Any:
    try:
        details = json.loads(metadata_json).get("error_details")
    except (TypeError, ValueError, AttributeError):
        return None
    return details.get("seen_by") if isinstance(details, dict) else None


def error_policy_note(errors: str, n_errors: int | None = None, n_excused: int | None = None) -> str:
    """How pass rates treat errored runs (status error/timeout/config_error): ``n_errors`` of
    them here, ``n_excused`` of those left out (``errors="exclude"``)."""
    count = "" if n_errors is None else f": {n_errors} here"
    if errors == "exclude":
        count += "" if n_errors is None or n_excused is None else f", {n_excused} of them left out"
        return (
            f"Errored runs (status error/timeout/config_error{count}) that rayeval saw fail outside the agent "
            "(a configuration error, a provider's failure but a rate limit, a lost worker, a judge out of reach) are "
            "left out of the per-eval pass rates; the agent's own errors and timeouts count as failures."
        )
    return (
        f"Errored runs (status error/timeout/config_error{count}) count as failures in Accuracy, "
        "as the reference benchmarks count a run with no answer."
    )


def isolation_note(units: pd.DataFrame) -> str | None:
    """A warning when units ran without the sandbox (their agents could read answer keys
    and write results), or their rows do not say how they ran; None when all were sandboxed."""
    if "isolation" not in units.columns:
        units = units.assign(isolation=None)
    levels = units["isolation"].astype("object").fillna("not recorded").value_counts()
    return isolation_counts_note({str(level): int(count) for level, count in levels.items()})


def isolation_counts_note(levels: dict[str, int]) -> str | None:
    """:func:`isolation_note` from the units per isolation level (``"not recorded"`` for none)."""
    unsandboxed = {level: count for level, count in levels.items() if level != "sandbox" and count}
    if not unsandboxed:
        return None
    described = ", ".join(f"{level}: {count}" for level, count in sorted(unsandboxed.items()))
    return (
        f"Warning: {sum(unsandboxed.values())} of {sum(levels.values())} units are not known to have run in a sandbox "
        f"({described}); their agents may have read what the worker could (answer keys included) and "
        "written where it could."
    )


def _check_policy(errors: str) -> None:
    if errors not in ERROR_POLICIES:
        raise ReportError(f"unknown error policy {errors!r}: use one of {', '.join(ERROR_POLICIES)}")


def _check_columns(units: pd.DataFrame, by: Sequence[str]) -> None:
    missing = [c for c in (*by, "eval_id") if c not in units.columns and c != "harness"]
    if missing:
        raise ReportError(f"result rows have no column(s) {', '.join(missing)}")


def _numeric(units: pd.DataFrame, name: str) -> np.ndarray:
    if name not in units.columns:
        return np.full(len(units), np.nan)
    return pd.to_numeric(units[name], errors="coerce").to_numpy(dtype=float, na_value=np.nan)


@dataclass(frozen=True)
class _EvalStats:
    keys: pd.DataFrame  # one row per group (raw key values)
    groups: Groups  # units → group
    pairs: Groups  # units → (group, eval)
    parent: np.ndarray  # pair → group
    n_runs: np.ndarray
    n_passed: np.ndarray
    n_errors: np.ndarray
    n_excused: np.ndarray  # errors left out of the pass rates (none unless errors="exclude")
    n_scored: np.ndarray
    pass_rate: np.ndarray  # per pair, NaN when nothing scored


def _eval_stats(units: pd.DataFrame, by: Sequence[str], errors: str) -> _EvalStats:
    """Per group × eval counts over ``units`` (deduplicated to the latest attempt first)."""
    _check_policy(errors)
    units = latest_attempts(units)
    _check_columns(units, by)
    groups, keys = key_groups(units, by)
    pairs, parent = sub_groups(groups, codes(units["eval_id"]))
    is_error = error_mask(units)
    passed = passed_array(units)
    n_runs = pairs.count()
    n_passed = pairs.count(passed)
    n_errors = pairs.count(is_error)
    n_excused = pairs.count(excused_errors(units)) if errors == "exclude" else np.zeros_like(n_errors)
    n_scored = n_runs - n_excused
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(n_scored > 0, n_passed / np.maximum(n_scored, 1), np.nan)
    return _EvalStats(keys, groups, pairs, parent, n_runs, n_passed, n_errors, n_excused, n_scored, rate)


def eval_frame(units: pd.DataFrame, by: Sequence[str] = ("model", "harness"), errors: str = "fail") -> pd.DataFrame:
    """One row per group × eval: ``n_runs, n_passed, n_errors, n_scored, pass_rate, cost_usd,
    duration_s`` (means per run).

    ``pass_rate`` is NaN for an eval with no scored run (only possible with ``errors="exclude"``).
    Group keys keep their missing values (e.g. no harness) as NaN.
    """
    by = list(by)
    units = latest_attempts(units)
    es = _eval_stats(units, by, errors)
    table = es.keys.iloc[es.parent].reset_index(drop=True)
    table["eval_id"] = units["eval_id"].iloc[es.pairs.first].to_numpy()
    table["n_runs"] = es.n_runs
    table["n_passed"] = es.n_passed
    table["n_errors"] = es.n_errors
    table["n_scored"] = es.n_scored
    table["pass_rate"] = es.pass_rate
    table["cost_usd"] = es.pairs.nanmean(_numeric(units, "cost_usd"))
    table["duration_s"] = es.pairs.nanmean(_numeric(units, "duration_s"))
    return table


def t_interval(
    mean: np.ndarray, sd: np.ndarray, n: np.ndarray, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised t-interval over per-eval means; NaN where n < 2."""
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        tcrit = stdtrit(np.where(n > 1, n - 1, np.nan), 0.5 + confidence / 2)  # = scipy.stats.t.ppf
        half = tcrit * np.asarray(sd, dtype=float) / np.sqrt(n)
    half = np.where(n > 1, half, np.nan)
    return mean - half, mean + half


def _output_keys(frame: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Group keys as plain strings (missing → ""), renamed as published."""
    out = pd.DataFrame(index=frame.index)
    for name in by:
        col = frame[name]
        if isinstance(col.dtype, pd.CategoricalDtype):
            col = col.astype(object)
        out[COLUMN_NAMES.get(name, name)] = col.where(col.notna(), "").astype(str) if col.dtype == object else col
    return out


# Per group × eval counts, the table's input (see :func:`pair_counts`).
PAIR_COUNTS = (
    "n_runs", "n_passed", "n_errors", "n_excused", "n_refusals", "cost_sum", "cost_n", "duration_sum", "duration_n"
)  # fmt: skip


def pair_counts(units: pd.DataFrame, by: Sequence[str] = ("model", "harness"), errors: str = "fail") -> pd.DataFrame:
    """One row per group × eval (latest attempt per unit): the group keys, ``eval_id`` and
    :data:`PAIR_COUNTS` (units, passed, errored, errored and left out by ``errors``; sum and
    count of the known costs and durations). The same counts :mod:`rayeval.report.summary` has
    duckdb compute over the part files."""
    by = list(by)
    units = latest_attempts(units)
    es = _eval_stats(units, by, errors)
    table = es.keys.iloc[es.parent].reset_index(drop=True)
    table["eval_id"] = units["eval_id"].iloc[es.pairs.first].to_numpy()
    table["n_runs"] = es.n_runs
    table["n_passed"] = es.n_passed
    table["n_errors"] = es.n_errors
    table["n_excused"] = es.n_excused
    table["n_refusals"] = es.pairs.count(refused(units))
    for name, column in (("cost", "cost_usd"), ("duration", "duration_s")):
        values = _numeric(units, column)
        known = ~np.isnan(values)
        table[f"{name}_sum"] = np.bincount(es.pairs.ids[known], weights=values[known], minlength=es.pairs.n)
        table[f"{name}_n"] = es.pairs.count(known)
    return table


def refused(units: pd.DataFrame) -> np.ndarray:
    """Which units' model refused (False where not known: the column is null or absent)."""
    if "refusal" not in units.columns:
        return np.zeros(len(units), dtype=bool)
    return units["refusal"].astype("boolean").fillna(False).to_numpy(dtype=bool)


def benchmark_table(
    units: pd.DataFrame,
    by: Sequence[str] = ("model", "harness"),
    *,
    errors: str = "fail",
    confidence: float = 0.95,
) -> pd.DataFrame:
    """The published benchmark table (full precision; round with :data:`ROUNDING` on export).

    Columns: the group keys (``model`` → ``model_name``), ``Accuracy (%)``, ``ci_lower``,
    ``ci_upper``, ``Cost ($)``, ``Duration (s)``, ``N``, ``Errors``, ``n_evals``. Sorted by
    accuracy (descending), within each breakdown value when ``by`` starts with one (e.g.
    ``("task", "model", "harness")``).
    """
    by = list(by)
    if not by:
        raise ReportError("benchmark_table needs at least one group column")
    _check_policy(errors)
    units = latest_attempts(units)
    _check_columns(units, by)
    return table_from_pairs(pair_counts(units, by, errors), by, errors=errors, confidence=confidence)


def table_from_pairs(
    pairs: pd.DataFrame, by: Sequence[str], *, errors: str = "fail", confidence: float = 0.95
) -> pd.DataFrame:
    """:func:`benchmark_table` from its per group × eval counts (:func:`pair_counts`)."""
    by = list(by)
    _check_policy(errors)
    groups = group_ids(pairs, by)
    n_runs, n_errors = pairs["n_runs"].to_numpy(np.int64), pairs["n_errors"].to_numpy(np.int64)
    n_excused = pairs["n_excused"].to_numpy(np.int64)
    n_scored = n_runs - n_excused if errors == "exclude" else n_runs
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(n_scored > 0, pairs["n_passed"].to_numpy(float) / np.maximum(n_scored, 1), np.nan)
    mean = groups.nanmean(rate) * 100.0
    sd = groups.nanstd(rate) * 100.0
    n = groups.count(~np.isnan(rate)).astype(float)
    lower, upper = t_interval(mean, sd, n, confidence)

    def ratio(total: str, count: str) -> np.ndarray:
        known = groups.sum(pairs[count].to_numpy(float))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(known > 0, groups.sum(pairs[total].to_numpy(float)) / np.maximum(known, 1), np.nan)

    table = _output_keys(groups.keys(pairs, by), by)
    table[ACCURACY] = mean
    table[CI_LOWER] = np.clip(lower, 0.0, 100.0)
    table[CI_UPPER] = np.clip(upper, 0.0, 100.0)
    table[COST] = ratio("cost_sum", "cost_n")
    table[DURATION] = ratio("duration_sum", "duration_n")
    table[N_RUNS] = groups.sum(n_runs.astype(float)).astype(np.int64)
    table[ERRORS] = groups.sum(n_errors.astype(float)).astype(np.int64)
    table[REFUSALS] = groups.sum(pairs["n_refusals"].to_numpy(float)).astype(np.int64)
    table[N_EVALS] = n.astype(np.int64)

    key_names = [COLUMN_NAMES.get(c, c) for c in by]
    lead = [k for k in key_names if k not in ("model_name", *MODEL_KEYS)]
    breakdown = lead[:1] if key_names[0] in lead else []
    # Accuracy rounded for the order: equal accuracies summed in another order (the pairs come
    # from duckdb in any order) still tie, and ties go by name.
    rank = "_accuracy_rank"
    table[rank] = table[ACCURACY].round(9)
    order = [*breakdown, rank, *key_names]
    ascending = [True] * len(breakdown) + [False] + [True] * len(key_names)
    table = table.sort_values(order, ascending=ascending, na_position="last", kind="mergesort")
    table = table.drop(columns=rank).reset_index(drop=True)
    table.attrs.update(
        {
            "by": tuple(by),
            "errors": errors,
            "confidence": confidence,
            "n_runs_per_eval": int(n_runs.max()) if len(n_runs) else 0,
            "n_excused": int(n_excused.sum()) if errors == "exclude" else 0,
            "breakdown": by[0] if breakdown else None,
        }
    )
    return table


def breakdown_table(
    units: pd.DataFrame, column: str = "task", *, errors: str = "fail", confidence: float = 0.95
) -> pd.DataFrame:
    """Accuracy by task category (``task``) or platform (``kit``) for every model × harness."""
    return benchmark_table(units, by=(column, "model", "harness"), errors=errors, confidence=confidence)


# -- export --------------------------------------------------------------------------------
def _export_columns(table: pd.DataFrame) -> list[str]:
    keys = [
        c
        for c in table.columns
        if c not in (ACCURACY, CI_LOWER, CI_UPPER, COST, DURATION, N_RUNS, ERRORS, REFUSALS, N_EVALS)
    ]
    cols = [*keys, ACCURACY, CI_LOWER, CI_UPPER, COST, DURATION, N_RUNS, ERRORS, REFUSALS]
    if table.attrs.get("breakdown"):
        cols.append(N_EVALS)
    return cols


def rounded(table: pd.DataFrame) -> pd.DataFrame:
    """The table as published: the chosen columns, rounded (2 dp; cost 4 dp)."""
    out = table[_export_columns(table)].round(ROUNDING)
    out.attrs = dict(table.attrs)
    return out


def _write(text: str, path: str | Path | None) -> str:
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text


def to_csv(table: pd.DataFrame, path: str | Path | None = None) -> str:
    """CSV with the published column names (``model_name,harness,Accuracy (%),...,N``, ``Errors``)."""
    buffer = io.StringIO()
    rounded(table).to_csv(buffer, index=False, lineterminator="\n")
    return _write(buffer.getvalue(), path)


def _json_number(value: Any) -> Any:
    """A table's value as JSON has it: NaN and the infinities (a cost an agent reported as
    such, in rows stored before rayeval refused them) have no JSON number, so are null."""
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def _model_key(row: pd.Series) -> str:
    parts = [str(row[c]) for c in ("model_name", "harness") if c in row.index and str(row[c])]
    return "-".join(parts)


def to_json_data(table: pd.DataFrame) -> Any:
    """JSON-ready data: a list of records (CSV column names) for a model table; for a
    task/platform breakdown, the scbench layout
    ``{"metadata": {...}, "tasks"|"platforms": {value: {"model": {"<model>-<harness>":
    {"ci_high", "ci_low", "passed"}}, "n_evals": n}}}``."""
    out = rounded(table)
    breakdown = table.attrs.get("breakdown")
    if not breakdown:
        return [{k: _json_number(v) for k, v in rec.items()} for rec in out.to_dict(orient="records")]
    label = BREAKDOWNS.get(breakdown, breakdown)
    groups: dict[str, Any] = {}
    for value, part in out.groupby(breakdown, sort=True):
        models = {
            _model_key(row): {
                "ci_high": _json_number(row[CI_UPPER]),
                "ci_low": _json_number(row[CI_LOWER]),
                "passed": _json_number(row[ACCURACY]),
            }
            for _, row in part.iterrows()
        }
        groups[str(value)] = {"model": models, "n_evals": int(part[N_EVALS].max())}
    return {
        "metadata": {
            "ci_method": CI_METHOD,
            "description": f"Accuracy by {label} with {round(table.attrs.get('confidence', 0.95) * 100)}% confidence intervals",
            "n_runs": table.attrs.get("n_runs_per_eval", 0),
            "errors": error_policy_note(table.attrs.get("errors", "fail")),
        },
        BREAKDOWN_KEYS.get(breakdown, breakdown): groups,
    }


def to_json(table: pd.DataFrame, path: str | Path | None = None, indent: int = 2) -> str:
    return _write(json.dumps(to_json_data(table), indent=indent) + "\n", path)


def format_cell(value: Any, column: str) -> str:
    """A table's value as text: missing as ``-``, floats rounded as :data:`ROUNDING` (else 2 dp)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, (float, np.floating)):
        return f"{value:.{ROUNDING.get(column, 2)}f}"
    return str(value)


def format_text(frame: pd.DataFrame, columns: Sequence[str] | None = None) -> str:
    """An aligned plain-text table (numbers right-aligned)."""
    columns = list(columns) if columns is not None else list(frame.columns)
    cells = [[format_cell(v, c) for v, c in zip(row, columns)] for row in frame[columns].itertuples(index=False)]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [pd.api.types.is_numeric_dtype(frame[c]) for c in columns]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(columns), rule, *(line(r) for r in cells)])


def to_text(table: pd.DataFrame) -> str:
    cols = [c for c in _export_columns(table)]
    text = format_text(table, cols)
    n_errors = int(table[ERRORS].sum()) if ERRORS in table else None
    note = error_policy_note(table.attrs.get("errors", "fail"), n_errors, table.attrs.get("n_excused"))
    conf = round(table.attrs.get("confidence", 0.95) * 100)
    return f"{text}\n\n{conf}% CI: {CI_METHOD} (none with a single eval). {note}"


__all__ = [
    "ACCURACY",
    "BREAKDOWNS",
    "CI_LOWER",
    "CI_UPPER",
    "COST",
    "DURATION",
    "ERRORS",
    "N_EVALS",
    "N_RUNS",
    "PUBLISHED_COLUMNS",
    "benchmark_table",
    "breakdown_table",
    "error_policy_note",
    "eval_frame",
    "format_text",
    "pair_counts",
    "rounded",
    "t_interval",
    "table_from_pairs",
    "to_csv",
    "to_json",
    "to_json_data",
    "to_text",
]
