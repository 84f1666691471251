"""EvaluationStats: the Humanloop shape, with ``kind`` as the evaluator-stats discriminator.

One function, :func:`compute_evaluator_stats`, turns a frame of judgments (one row per log,
a value column, an optional error flag) into per-group evaluator stats of a given kind. The
grader rows use it for their two evaluators (``passed``: boolean, ``normalized_score``:
number); the Humanloop-style ``evaluations.run`` uses it for its own evaluators, whose
judgments live in ``metrics_json`` under ``"evaluators"`` → ``{path: value}``
(:func:`judgments_from_metrics`).

Counting rule, per evaluator and group: ``total_logs = num_judgments + num_nulls +
num_errors``. A log whose unit errored (status error/timeout/config_error, or a judgment
stored as ``{"error": ...}``) is an error, never a ``false``; a missing/NaN value on a log
that did not error is a null; the rest are judgments, and only judgments enter
``num_true``/``num_false``, the number statistics and the option counts. A judgment stored
as ``{"not_applicable": why}`` (an evaluator that needs a target, on a datapoint without
one) is a null, also counted in ``num_not_applicable``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from .._json import object_at
from ..storage.attempts import error_mask, latest_attempts
from ._groups import Groups, group_ids, key_groups
from .benchmark import benchmark_table, error_policy_note, to_text
from .reader import ReportError, normalise_status

EvaluatorKind = Literal["boolean", "number", "select", "text"]
EVALUATOR_KINDS: tuple[str, ...] = ("boolean", "number", "select", "text")
# Where evaluator values come from: "auto" reads a column of that name when there is one.
EvaluatorSource = Literal["auto", "metrics"]
# An evaluation's progress as Humanloop reports it, not a manifest's RunStatus: "pending" has no
# unit done yet, and a run stopped before the end ("failed" or "cancelled" in its manifest) is
# "cancelled" (``--resume`` finishes it).
EvaluationStatus = Literal["pending", "running", "completed", "cancelled"]
PERCENTILES: dict[str, float] = {"p5": 0.05, "p25": 0.25, "p50": 0.50, "p75": 0.75, "p95": 0.95}

# The evaluators every grader row carries.
GRADER_EVALUATORS: dict[str, str] = {"passed": "boolean", "normalized_score": "number"}
METRICS_EVALUATORS_KEY = "evaluators"
# ``{"not_applicable": why}``: a judgment not made (see rayeval.evaluations.runtime), and its flag column
NOT_APPLICABLE_KEY = "not_applicable"
NOT_APPLICABLE_COLUMN = "not_applicable"


# -- models --------------------------------------------------------------------------------
class _EvaluatorStatsBase(BaseModel):
    model_config = ConfigDict(frozen=True)

    evaluator: str
    total_logs: int
    num_judgments: int
    num_nulls: int
    num_errors: int
    #: of the nulls, the logs the evaluator could not judge (it needs a target the datapoint lacks)
    num_not_applicable: int = 0


class BooleanEvaluatorStats(_EvaluatorStatsBase):
    kind: Literal["boolean"] = "boolean"
    num_true: int
    num_false: int


class NumberEvaluatorStats(_EvaluatorStatsBase):
    kind: Literal["number"] = "number"
    mean: float | None = None
    sum: float | None = None
    std: float | None = None  # sample standard deviation (ddof = 1); None below 2 judgments
    percentiles: dict[str, float] | None = None  # p5, p25, p50, p75, p95 (linear interpolation)


class SelectEvaluatorStats(_EvaluatorStatsBase):
    kind: Literal["select"] = "select"
    num_judgments_per_option: dict[str, int] = Field(default_factory=dict)


class TextEvaluatorStats(_EvaluatorStatsBase):
    kind: Literal["text"] = "text"


EvaluatorStats = Annotated[
    BooleanEvaluatorStats | NumberEvaluatorStats | SelectEvaluatorStats | TextEvaluatorStats,
    Field(discriminator="kind"),
]
EVALUATOR_STATS_ADAPTER: TypeAdapter[EvaluatorStats] = TypeAdapter(EvaluatorStats)


class RunStats(BaseModel):
    """One version (model × harness) within one run."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    version_id: str  # model/harness identity: "<model>/<harness>" (or "<model>")
    batch_id: str | None = None  # the ``batch_id`` column when rows carry one, else the run id
    num_logs: int
    status: EvaluationStatus
    evaluator_stats: list[EvaluatorStats]
    model: str | None = None
    harness: str | None = None
    num_errors: int = 0
    created_at: datetime | None = None  # first started_at
    updated_at: datetime | None = None  # last finished_at


class EvaluationStats(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_stats: list[RunStats]  # newest first
    progress: str
    report: str
    status: EvaluationStatus
    units_done: int = 0
    planned_units: int | None = None
    num_errors: int = 0
    eta_s: float | None = None
    errors_policy: str = "fail"

    def __str__(self) -> str:
        return self.report


# -- the shared evaluator-stats computation ------------------------------------------------
def _error_flags(judgments: pd.DataFrame, error: str | None) -> np.ndarray:
    if error is not None:
        if error not in judgments.columns:
            raise ReportError(f"judgments have no error column {error!r}")
        return judgments[error].fillna(False).to_numpy(dtype=bool)
    if "error" in judgments.columns:
        return judgments["error"].fillna(False).to_numpy(dtype=bool)
    return error_mask(judgments)


_TRUE_STRINGS = ("true", "1", "yes", "y", "pass", "passed")
_FALSE_STRINGS = ("false", "0", "no", "n", "fail", "failed")


def _boolean_values(series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(truthy, null) arrays. Strings 'true'/'false' (and yes/no, pass/fail, 1/0) are read."""
    if series.dtype == bool:
        return series.to_numpy(dtype=bool), np.zeros(len(series), dtype=bool)
    if pd.api.types.is_numeric_dtype(series.dtype) or isinstance(series.dtype, pd.BooleanDtype):
        null = series.isna().to_numpy(dtype=bool)
        return (series.fillna(0).to_numpy(dtype=float) != 0), null
    null = series.isna().to_numpy(dtype=bool)
    is_bool = series.map(type).isin((bool, np.bool_)).to_numpy(dtype=bool)
    text = series.astype(str).str.strip().str.lower()
    truthy = np.where(is_bool, series.where(is_bool, False).astype(bool), text.isin(_TRUE_STRINGS)).astype(bool)
    unknown = ~null & ~is_bool & ~text.isin(_TRUE_STRINGS).to_numpy() & ~text.isin(_FALSE_STRINGS).to_numpy()
    return truthy & ~null, null | unknown


def _grouped_percentiles(ids: np.ndarray, values: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """Linear-interpolation percentiles per group, fully vectorised (one lexsort)."""
    order = np.lexsort((values, ids))
    sorted_vals = values[order]
    count = np.bincount(ids, minlength=n)
    offset = np.concatenate(([0], np.cumsum(count)[:-1]))
    out = {}
    for name, q in PERCENTILES.items():
        pos = q * np.maximum(count - 1, 0)
        lo = np.floor(pos).astype(np.int64)
        hi = np.ceil(pos).astype(np.int64)
        has = count > 0
        lo_idx = np.where(has, offset + lo, 0)
        hi_idx = np.where(has, offset + hi, 0)
        if len(sorted_vals):
            v = sorted_vals[lo_idx] + (sorted_vals[hi_idx] - sorted_vals[lo_idx]) * (pos - lo)
        else:
            v = np.zeros(n)
        out[name] = np.where(has, v, np.nan)
    return out


def evaluator_stats_table(
    judgments: pd.DataFrame,
    kind: str,
    *,
    by: Sequence[str] = (),
    value: str = "value",
    error: str | None = None,
) -> pd.DataFrame:
    """Evaluator statistics per group as a frame (one row per group, vectorised).

    ``judgments`` has one row per log: the judgment in ``value``; errors from the bool column
    ``error`` (default: an ``error`` column if present, else ``status`` in
    error/timeout/config_error). Columns: the ``by`` keys, ``total_logs, num_judgments,
    num_nulls, num_errors`` and, by kind, ``num_true, num_false`` | ``mean, sum, std,
    p5..p95`` | ``num_judgments_per_option`` (a dict).
    """
    if kind not in EVALUATOR_KINDS:
        raise ReportError(f"unknown evaluator kind {kind!r}: use one of {', '.join(EVALUATOR_KINDS)}")
    if value not in judgments.columns:
        raise ReportError(f"judgments have no value column {value!r}")
    by = list(by)
    groups = group_ids(judgments, by)
    err = _error_flags(judgments, error)
    series = judgments[value]
    out = groups.keys(judgments, by) if by else pd.DataFrame(index=range(groups.n))
    if kind == "boolean":
        truthy, null = _boolean_values(series)
    elif kind == "number":
        numbers = pd.to_numeric(series, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        null = np.isnan(numbers)
    else:
        null = series.isna().to_numpy(dtype=bool)
        if kind == "select" and series.dtype == object:  # an empty multi-select list is a null
            null = null | series.map(lambda v: isinstance(v, (list, tuple)) and not v).to_numpy(dtype=bool)
    valid = ~err & ~null
    out["total_logs"] = groups.count()
    out["num_judgments"] = groups.count(valid)
    out["num_nulls"] = groups.count(~err & null)
    out["num_errors"] = groups.count(err)
    if NOT_APPLICABLE_COLUMN in judgments.columns:
        out["num_not_applicable"] = groups.count(~err & judgments[NOT_APPLICABLE_COLUMN].to_numpy(dtype=bool))
    if kind == "boolean":
        out["num_true"] = groups.count(valid & truthy)
        out["num_false"] = groups.count(valid & ~truthy)
    elif kind == "number":
        sub = Groups(groups.ids[valid], groups.first, groups.n)
        vals = numbers[valid]
        out["mean"] = sub.nanmean(vals)
        total = sub.sum(vals)
        out["sum"] = np.where(out["num_judgments"].to_numpy() > 0, total, np.nan)
        out["std"] = sub.nanstd(vals, ddof=1)
        for name, arr in _grouped_percentiles(sub.ids, vals, groups.n).items():
            out[name] = arr
    elif kind == "select":
        picked = pd.DataFrame({"g": groups.ids[valid], "o": series[valid].to_numpy()})
        if picked["o"].dtype == object:
            picked = picked.explode("o").dropna(subset=["o"])
        picked["o"] = picked["o"].astype(str)
        counts = picked.groupby(["g", "o"], sort=True).size()
        per_group: list[dict[str, int]] = [{} for _ in range(groups.n)]
        for (g, option), count in counts.items():  # one entry per (group, option), not per row
            per_group[int(g)][option] = int(count)
        out["num_judgments_per_option"] = per_group
    return out


def _none_if_nan(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _stats_model(row: Mapping[str, Any], kind: str, evaluator: str) -> Any:
    common = {
        "evaluator": evaluator,
        "total_logs": int(row["total_logs"]),
        "num_judgments": int(row["num_judgments"]),
        "num_nulls": int(row["num_nulls"]),
        "num_errors": int(row["num_errors"]),
        "num_not_applicable": int(row.get("num_not_applicable", 0)),
    }
    if kind == "boolean":
        return BooleanEvaluatorStats(**common, num_true=int(row["num_true"]), num_false=int(row["num_false"]))
    if kind == "number":
        pct = {name: _none_if_nan(row[name]) for name in PERCENTILES}
        return NumberEvaluatorStats(
            **common,
            mean=_none_if_nan(row["mean"]),
            sum=_none_if_nan(row["sum"]),
            std=_none_if_nan(row["std"]),
            percentiles=None if any(v is None for v in pct.values()) else pct,  # type: ignore[misc]
        )
    if kind == "select":
        return SelectEvaluatorStats(**common, num_judgments_per_option=dict(row["num_judgments_per_option"]))
    return TextEvaluatorStats(**common)


def compute_evaluator_stats(
    judgments: pd.DataFrame,
    kind: str,
    *,
    evaluator: str | None = None,
    by: Sequence[str] = (),
    value: str = "value",
    error: str | None = None,
) -> dict[tuple, EvaluatorStats]:
    """Evaluator stats of ``kind`` per group of ``by`` (the key tuple; ``()`` without ``by``).

    The evaluator's name is ``evaluator``, else the group's ``evaluator`` key when ``by``
    holds an ``evaluator`` column, else ``value``.
    """
    by = list(by)
    table = evaluator_stats_table(judgments, kind, by=by, value=value, error=error)
    result: dict[tuple, Any] = {}
    for row in table.to_dict(orient="records"):
        key = tuple(row[c] for c in by)
        name = evaluator or (str(row["evaluator"]) if "evaluator" in by else value)
        result[key] = _stats_model(row, kind, name)
    return result


def evaluator_stats(
    judgments: pd.DataFrame, kind: str, *, evaluator: str | None = None, value: str = "value", error: str | None = None
) -> EvaluatorStats:
    """Stats of one evaluator over all of ``judgments`` (no grouping)."""
    stats = compute_evaluator_stats(judgments, kind, evaluator=evaluator, value=value, error=error)
    if not stats:
        return _stats_model(
            {
                "total_logs": 0,
                "num_judgments": 0,
                "num_nulls": 0,
                "num_errors": 0,
                "num_true": 0,
                "num_false": 0,
                "mean": None,
                "sum": None,
                "std": None,
                **{p: None for p in PERCENTILES},
                "num_judgments_per_option": {},
            },
            kind,
            evaluator or value,
        )
    return next(iter(stats.values()))


def infer_kind(series: pd.Series, max_options: int = 20) -> str:
    """A guess at an evaluator's kind from its values (bool → boolean, numbers → number,
    lists or few distinct strings → select, else text)."""
    values = series.dropna()
    if values.empty:
        return "text"
    if (
        series.dtype == bool
        or isinstance(series.dtype, pd.BooleanDtype)
        or values.map(type).isin((bool, np.bool_)).all()
    ):
        return "boolean"
    if pd.api.types.is_numeric_dtype(series.dtype):
        return "number"
    if values.map(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)).all():
        return "number"
    if values.map(lambda v: isinstance(v, (list, tuple))).any():
        return "select"
    return "select" if values.astype(str).nunique() <= max_options else "text"


def _metrics(text: object) -> object:
    """A row's stored metrics; nothing where they are not JSON this reader can parse (too
    deep for its recursion limit, or damaged: an older writer's, or another tool's)."""
    if not isinstance(text, str) or not text:
        return {}
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return {}


def judgments_from_metrics(
    units: pd.DataFrame,
    paths: Sequence[str] | None = None,
    *,
    key: str = METRICS_EVALUATORS_KEY,
    keep: Sequence[str] = ("run_id", "model", "harness", "unit_id", "status"),
) -> pd.DataFrame:
    """Long judgments frame ``[keep..., evaluator, value, error, not_applicable]`` from ``metrics_json``.

    Reads ``metrics[key][path]`` for every unit and evaluator path (all paths seen when
    ``paths`` is None). A missing path is a null; a judgment stored as ``{"error": msg}``
    and any unit whose status is an error are errors; one stored as ``{"not_applicable":
    why}`` is a null marked ``not_applicable``. JSON parsing is once per row.
    """
    if "metrics_json" not in units.columns:
        raise ReportError("the rows were read without 'metrics_json': read them with columns=ALL_COLUMNS")
    blocks = [object_at(_metrics(text), key) for text in units["metrics_json"]]
    if paths is None:
        seen: dict[str, None] = {}
        for block in blocks:
            seen.update(dict.fromkeys(block))
        paths = list(seen)
    base = units[[c for c in keep if c in units.columns]].reset_index(drop=True)
    unit_errors = error_mask(units)
    frames = []
    for path in paths:
        raw = [block.get(path) for block in blocks]
        is_err = np.array([isinstance(v, dict) and "error" in v for v in raw], dtype=bool) | unit_errors
        unjudged = np.array([isinstance(v, dict) and NOT_APPLICABLE_KEY in v for v in raw], dtype=bool)
        values = pd.Series([None if flag else v for v, flag in zip(raw, is_err | unjudged)], dtype=object)
        frame = base.copy()
        frame["evaluator"] = path
        frame["value"] = values
        frame["error"] = is_err
        frame[NOT_APPLICABLE_COLUMN] = unjudged
        frames.append(frame)
    if not frames:
        return base.assign(
            evaluator=pd.Series(dtype=object),
            value=pd.Series(dtype=object),
            error=pd.Series(dtype=bool),
            not_applicable=pd.Series(dtype=bool),
        )
    return pd.concat(frames, ignore_index=True)


# -- run status, progress ------------------------------------------------------------------
def _combine_statuses(statuses: Sequence[str]) -> str:
    found = set(statuses)
    if not found:
        return "pending"
    if len(found) == 1:
        return next(iter(found))
    if "running" in found or ("pending" in found and "completed" in found):
        return "running"
    if "cancelled" in found:
        return "cancelled"
    return "completed" if found == {"completed"} else "running"


def format_duration(seconds: float) -> str:
    """Short human duration: 45s, 4m, 2h05m, 3d04h."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 86400:
        hours, rest = divmod(round(seconds), 3600)
        return f"{hours}h{rest // 60:02d}m"
    days, rest = divmod(round(seconds), 86400)
    return f"{days}d{rest // 3600:02d}h"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def progress_text(done: int, planned: int | None, errors: int, eta_s: float | None, show_eta: bool = True) -> str:
    """ "812/1000 units done (81.2%), 3 errors, ETA 4m" (no plan: "812 units done, 3 errors";
    more stored than planned, as after a --resume --force with fewer evals: "12 units done
    (10 planned), 0 errors"; no ETA once the run is completed or cancelled)."""
    if planned is None:
        return f"{_plural(done, 'unit')} done, {_plural(errors, 'error')}"
    if done > planned:
        return f"{_plural(done, 'unit')} done ({planned} planned), {_plural(errors, 'error')}"
    pct = 100.0 * done / planned if planned else 100.0
    text = f"{done}/{planned} units done ({pct:.1f}%), {_plural(errors, 'error')}"
    if done < planned and show_eta:
        text += f", ETA {format_duration(eta_s)}" if eta_s is not None else ", ETA unknown"
    return text


def _timestamps_ns(units: pd.DataFrame, column: str) -> np.ndarray | None:
    if column not in units.columns:
        return None
    values = pd.to_datetime(units[column], utc=True).to_numpy(dtype="datetime64[ns]").view(np.int64)
    values = values[values != np.iinfo(np.int64).min]  # NaT
    return values if len(values) else None


def time_span(units: pd.DataFrame) -> tuple[int, int] | None:
    """(first start, last finish) in ns since the epoch: the first ``started_at`` (or the first
    ``finished_at`` when earlier or there are no start times) and the last ``finished_at``."""
    finished = _timestamps_ns(units, "finished_at")
    if finished is None:
        return None
    started = _timestamps_ns(units, "started_at")
    start = min(int(started.min()), int(finished.min())) if started is not None else int(finished.min())
    return start, int(finished.max())


def eta_from_span(done: int, remaining: int, span: tuple[int, int] | None) -> float | None:
    """Seconds left at the throughput observed over ``span`` (see :func:`time_span`)."""
    if remaining <= 0:
        return 0.0
    if span is None:
        return None
    span_s = (span[1] - span[0]) / 1e9
    if span_s <= 0:
        return None
    return remaining / (done / span_s)


@dataclass(frozen=True)
class Progress:
    """A report's status line: overall status, progress text, planned total and ETA."""

    status: str
    text: str
    planned: int | None
    eta_s: float | None
    statuses: dict[str, str]  # per run


def run_progress(
    run_totals: Mapping[str, int],
    num_errors: int,
    *,
    planned_units: int | Mapping[str, int] | None,
    run_status: Any,
    span: Callable[[], tuple[int, int] | None],
) -> Progress:
    """Status and progress from the units done per run (see :func:`evaluation_stats` for
    ``planned_units`` and ``run_status``); ``span`` gives the time span for the ETA, asked
    only while a run is pending or running."""
    done = sum(run_totals.values())
    statuses = _statuses(run_totals, planned_units, run_status)
    planned_total = _planned_total(planned_units, run_totals)
    overall = _overall_status(run_status, planned_units, statuses, done, planned_total)
    live = overall in ("running", "pending")
    eta = None
    if planned_total is not None and done < planned_total and live:
        eta = eta_from_span(done, planned_total - done, span())
    text = progress_text(done, planned_total, num_errors, eta, show_eta=live)
    return Progress(overall, text, planned_total, eta, statuses)


# -- EvaluationStats -----------------------------------------------------------------------
def _evaluator_frames(
    units: pd.DataFrame, evaluators: Mapping[str, str], key: str, source: EvaluatorSource
) -> list[tuple[str, str, pd.Series, pd.DataFrame | None]]:
    """(name, kind, values aligned with units, per-judgment ``error`` and ``not_applicable``
    flags or None) per evaluator."""
    out: list[tuple[str, str, pd.Series, pd.DataFrame | None]] = []
    from_metrics = [name for name in evaluators if source == "metrics" or name not in units.columns]
    long = judgments_from_metrics(units, from_metrics, key=key, keep=()) if from_metrics else None
    for name, kind in evaluators.items():
        if kind not in EVALUATOR_KINDS:
            raise ReportError(f"evaluator {name!r}: unknown kind {kind!r} (use {', '.join(EVALUATOR_KINDS)})")
        if name not in from_metrics:
            out.append((name, kind, units[name].reset_index(drop=True), None))
        else:
            part = long[long["evaluator"] == name]  # type: ignore[index]
            flags = part[["error", NOT_APPLICABLE_COLUMN]].reset_index(drop=True)
            out.append((name, kind, part["value"].reset_index(drop=True), flags))
    return out


def evaluation_stats(
    units: pd.DataFrame,
    *,
    evaluators: Mapping[str, str] | None = None,
    planned_units: int | Mapping[str, int] | None = None,
    run_status: Any = None,
    errors: str = "fail",
    metrics_key: str = METRICS_EVALUATORS_KEY,
    evaluator_source: EvaluatorSource = "auto",
    report: bool = True,
) -> EvaluationStats:
    """EvaluationStats over result units (the latest attempt per unit is kept).

    ``evaluators`` maps an evaluator name to its kind. With ``evaluator_source="auto"`` a name
    that is a column of ``units`` is read from it, any other from
    ``metrics_json[metrics_key][name]``; with ``"metrics"`` every evaluator is read from
    ``metrics_json``, so evaluator names may equal column names. Default: the grader's
    ``passed`` (boolean) and ``normalized_score`` (number). ``planned_units`` is the planned
    total (or a mapping run_id → planned count) for the progress line and the inferred
    status; ``run_status`` is a manifest status (string, dict/object with ``status``) or a
    mapping run_id → status; without it the status is inferred (no rows → pending; fewer
    rows than planned → running; otherwise completed).
    """
    units = latest_attempts(units)
    evaluators = dict(evaluators or GRADER_EVALUATORS)
    n = len(units)
    groups, key_frame = key_groups(units, ["run_id", "model", "harness"])
    is_error = error_mask(units)

    per_evaluator: list[list[Any]] = []
    for name, kind, values, flags in _evaluator_frames(units, evaluators, metrics_key, evaluator_source):
        err = is_error if flags is None else (is_error | flags["error"].to_numpy(dtype=bool))
        frame = pd.DataFrame({"g": groups.ids, "value": values.to_numpy(), "error": err})
        if flags is not None:
            frame[NOT_APPLICABLE_COLUMN] = flags[NOT_APPLICABLE_COLUMN].to_numpy(dtype=bool)
        stats = compute_evaluator_stats(frame, kind, evaluator=name, by=["g"], error="error")
        per_evaluator.append([stats.get((g,)) for g in range(groups.n)])

    started = _group_times(units, groups, "started_at", np.minimum)
    finished = _group_times(units, groups, "finished_at", np.maximum)
    counts = groups.count()
    err_counts = groups.count(is_error)
    batch = units["batch_id"].astype(object).to_numpy()[groups.first] if "batch_id" in units.columns else None

    run_ids = [str(r) for r in key_frame["run_id"].astype(object)]
    run_totals: dict[str, int] = {}
    for run, count in zip(run_ids, counts):
        run_totals[run] = run_totals.get(run, 0) + int(count)
    num_errors = int(is_error.sum())
    state = run_progress(
        run_totals, num_errors, planned_units=planned_units, run_status=run_status, span=lambda: time_span(units)
    )
    statuses = state.statuses

    run_stats = []
    for g in range(groups.n):
        model = key_frame["model"].iloc[g]
        harness = key_frame["harness"].iloc[g]
        model = None if pd.isna(model) else str(model)
        harness = None if pd.isna(harness) or harness == "" else str(harness)
        version = "/".join(p for p in (model, harness) if p) or "unknown"
        batch_id = batch[g] if batch is not None and not pd.isna(batch[g]) else run_ids[g]
        run_stats.append(
            RunStats(
                run_id=run_ids[g],
                version_id=version,
                batch_id=str(batch_id),
                num_logs=int(counts[g]),
                status=statuses[run_ids[g]],
                evaluator_stats=[models[g] for models in per_evaluator],
                model=model,
                harness=harness,
                num_errors=int(err_counts[g]),
                created_at=started[g],
                updated_at=finished[g],
            )
        )
    # Newest first: runs by their first start time (descending), versions by name.
    run_start: dict[str, float] = {}
    for rs in run_stats:
        t = rs.created_at.timestamp() if rs.created_at else float("-inf")
        run_start[rs.run_id] = min(run_start.get(rs.run_id, t), t)
    run_stats.sort(key=lambda rs: rs.version_id)
    run_stats.sort(key=lambda rs: (run_start[rs.run_id], rs.run_id), reverse=True)

    overall, progress, planned_total, eta = state.status, state.text, state.planned, state.eta_s
    text = ""
    if report:
        text = f"status: {overall}; {progress}"
        if n:
            text += "\n\n" + to_text(benchmark_table(units, errors=errors))
        else:
            text += "\n\nno results yet. " + error_policy_note(errors)
    return EvaluationStats(
        run_stats=run_stats,
        progress=progress,
        report=text,
        status=overall,
        units_done=n,
        planned_units=planned_total,
        num_errors=num_errors,
        eta_s=eta,
        errors_policy=errors,
    )


def _group_times(units: pd.DataFrame, groups: Groups, column: str, reducer: Any) -> list[datetime | None]:
    if column not in units.columns or not len(units):
        return [None] * groups.n
    values = pd.to_datetime(units[column], utc=True).to_numpy(dtype="datetime64[ns]").view(np.int64)
    nat = values == np.iinfo(np.int64).min
    fill = np.iinfo(np.int64).max if reducer is np.minimum else np.iinfo(np.int64).min
    acc = np.full(groups.n, fill, dtype=np.int64)
    reducer.at(acc, groups.ids[~nat], values[~nat])
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    return [
        None
        if v in (np.iinfo(np.int64).max, np.iinfo(np.int64).min)
        else epoch + timedelta(microseconds=int(v) // 1000)
        for v in acc
    ]


def _statuses(run_totals: Mapping[str, int], planned: Any, run_status: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    per_run_status = isinstance(run_status, Mapping) and "status" not in run_status
    for run, done in run_totals.items():
        given = normalise_status(run_status.get(run)) if per_run_status else normalise_status(run_status)
        if given is not None:
            out[run] = given
            continue
        plan = None
        if isinstance(planned, Mapping):
            plan = planned.get(run)
        elif planned is not None and len(run_totals) == 1:
            plan = int(planned)
        out[run] = "pending" if done == 0 else ("running" if plan is not None and done < plan else "completed")
    return out


def _planned_total(planned: Any, run_totals: Mapping[str, int]) -> int | None:
    if planned is None:
        return None
    if isinstance(planned, Mapping):
        return int(sum(int(v) for v in planned.values()))
    planned = int(planned)
    if planned < 0:
        raise ReportError(f"planned_units must be >= 0, got {planned}")
    return planned


def _overall_status(
    run_status: Any, planned_units: Any, statuses: Mapping[str, str], done: int, planned: int | None
) -> str:
    per_run = isinstance(run_status, Mapping) and "status" not in run_status
    if run_status is not None and not per_run:
        return normalise_status(run_status) or "pending"
    if not statuses:  # no rows yet
        given = [s for s in (normalise_status(v) for v in run_status.values()) if s] if per_run else []
        return _combine_statuses(given) if given else "pending"
    all_given = per_run and all(normalise_status(run_status.get(run)) for run in statuses)
    # A single planned total over several runs cannot be split per run: compare it overall.
    if not all_given and planned is not None and not isinstance(planned_units, Mapping) and done < planned:
        return "running"
    return _combine_statuses(list(statuses.values()))


__all__ = [
    "EVALUATOR_KINDS",
    "EVALUATOR_STATS_ADAPTER",
    "GRADER_EVALUATORS",
    "BooleanEvaluatorStats",
    "EvaluationStats",
    "EvaluatorStats",
    "NumberEvaluatorStats",
    "Progress",
    "RunStats",
    "SelectEvaluatorStats",
    "TextEvaluatorStats",
    "compute_evaluator_stats",
    "evaluation_stats",
    "evaluator_stats",
    "evaluator_stats_table",
    "format_duration",
    "infer_kind",
    "judgments_from_metrics",
    "progress_text",
    "run_progress",
    "time_span",
]
