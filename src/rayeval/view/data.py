"""What the viewer shows, as JSON-ready values, read through :class:`ResultsReader` only.

Per run, the unit index (the light report columns of the latest attempt of each unit) is read
once and kept: the units table is filtered, sorted and paged over its numpy arrays, so a page
of a 100k-unit run costs milliseconds.  The heavy text columns (answer, reasoning, metrics,
artifacts, error message and traceback) are read only for the unit shown, pruned to its model partition and
eval.  Whatever the agent could have written (answers, metadata, metrics, trajectories, logs,
error texts) is shown through :mod:`.bounded`: clipped (:data:`MAX_TEXT_CHARS`), nested JSON cut
at a depth, with a note saying what is left out, at a cost bounded whatever its size, depth
or shape; and should a unit's page fail all the same, that page says so, and only it.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import logging
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._messages import field_problems
from ..errors import RayevalError
from ..evals import EvalFileError, load_eval
from ..gateway.transcript import MODEL_CALLS_ARTIFACT
from ..record import DETAIL, columns_marked
from ..report.benchmark import (
    BREAKDOWNS,
    CI_METHOD,
    ERRORS,
    benchmark_table,
    breakdown_table,
    error_policy_note,
    rounded,
)
from ..report.reader import ReportError, ResultsReader
from ..storage.attempts import error_mask, passed_array
from ..unit.workspace import REFUSAL_VERDICT_NAME
from .bounded import (
    MAX_LABEL_CHARS,
    MAX_TEXT_CHARS,
    TextField,
    Unreadable,
    json_field,
    label,
    loads,
    render_json,
    stored_json_field,
    text_field,
    unicode,
)
from .trajectory import stored_conversation

log = logging.getLogger(__name__)

MAX_METRICS = 500
MAX_METRIC_CHARS = 2000
MAX_METRIC_NAME_CHARS = 500
MAX_ARTIFACTS = 20
PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
# A run that is still running is read again when its index is older than this.
REFRESH_S = 10.0

Verdict = Literal["passed", "failed", "error"]
SortKey = Literal["eval", "model", "seed", "duration", "cost", "tokens", "score", "turns"]
SORT_COLUMNS: dict[str, str] = {
    "eval": "eval_id",
    "model": "model",
    "seed": "seed",
    "duration": "duration_s",
    "cost": "cost_usd",
    "tokens": "tokens",
    "score": "normalized_score",
    "turns": "n_turns",
}
# The units table's columns, in the order the page shows them.
TABLE_COLUMNS: tuple[str, ...] = (
    "unit_id",
    "eval_id",
    "model",
    "harness",
    "seed",
    "verdict",
    "status",
    "normalized_score",
    "duration_s",
    "cost_usd",
    "tokens",
    "n_turns",
    "error_type",
    "attempt",
)
#: what a unit's detail reads: its text and JSON columns, by its id
DETAIL_COLUMNS: tuple[str, ...] = ("unit_id", *columns_marked(DETAIL))
TRAJECTORY_ARTIFACT = "trajectory.json"


class NotFound(RayevalError, LookupError):
    """A run or unit the viewer does not have (HTTP 404)."""


class UnitQuery(BaseModel):
    """The units table's state: filters, sort and page (the page's URL carries the same keys)."""

    model_config = ConfigDict(extra="forbid")

    eval: str | None = None
    model: str | None = None
    seed: int | None = None
    verdict: Verdict | None = None
    error: str | None = None
    sort: SortKey = "eval"
    order: Literal["asc", "desc"] = "asc"
    page: int = Field(1, ge=1)
    size: int = Field(PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE)

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> UnitQuery:
        """From URL parameters (empty values mean no filter); a bad value is a ValueError
        naming the parameter."""
        values = {k: v for k, v in params.items() if k != "run" and v != ""}
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise ValueError("; ".join(map(str, field_problems(exc)))) from None


_HTML_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def json_text(value: Any) -> str:
    """Compact ASCII JSON with ``<``, ``>`` and ``&`` escaped: no agent text in it can read as
    markup, whatever a client takes it for."""
    return json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":")).translate(_HTML_SAFE)


def json_value(value: Any) -> Any:
    """A numpy/pandas scalar as a JSON value (NaN and NaT → None, an infinity as ``"inf"`` or
    ``"-inf"``: JSON has no number for it)."""
    if value is None or value is pd.NaT:
        return None
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            return None
        return float(value) if math.isfinite(value) else str(float(value))
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return value if isinstance(value, (str, int)) else str(value)


def json_rows(frame: pd.DataFrame) -> list[list[Any]]:
    """A frame's rows as lists of JSON values (see :func:`json_value`)."""
    return [[json_value(v) for v in record] for record in frame.itertuples(index=False)]


def newest_first(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run summaries sorted by creation time, newest first (then by run id)."""
    return sorted(summaries, key=lambda s: (str(s.get("created_at") or ""), s["run_id"]), reverse=True)


def _text(value: Any) -> TextField | None:
    """A stored text column (None when missing)."""
    return text_field(value) if isinstance(value, str) else None


def metric_rows(metrics_json: Any) -> list[list[Any]]:
    """The grader's metrics as ``[name, value]`` rows (dotted names; values deeper than 3
    levels, lists and numbers JSON has none for as text), at most :data:`MAX_METRICS`; a stored
    text that is not JSON (or nests too deep to read) as one row, as stored."""
    if not isinstance(metrics_json, str):
        return []
    try:
        metrics = loads(metrics_json)
    except Unreadable as exc:
        return [[str(exc), metrics_json[:MAX_METRIC_CHARS]]]
    if metrics in (None, {}):
        return []
    rows: list[list[Any]] = []
    _metric_rows(metrics, "", 0, rows)
    return rows


def _metric_rows(metrics: Any, prefix: str, depth: int, rows: list[list[Any]]) -> None:
    if not isinstance(metrics, dict):
        rows.append([prefix or "value", _metric_value(metrics)])
        return
    for key, value in metrics.items():
        if len(rows) >= MAX_METRICS:
            return
        name = label(f"{prefix}.{key}" if prefix else key, MAX_METRIC_NAME_CHARS)
        if isinstance(value, dict) and value and depth < 3:
            _metric_rows(value, name, depth + 1, rows)
        else:
            rows.append([name, _metric_value(value)])


def _metric_value(value: Any) -> Any:
    """A metric's value as the page shows it: a JSON scalar, else (a list or object, a number
    JSON or a browser cannot hold exactly) its JSON text."""
    if isinstance(value, str):
        return unicode(value[:MAX_METRIC_CHARS])
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value) or isinstance(value, int) and abs(value) <= 2**53:
        return value
    return unicode(render_json(value, MAX_METRIC_CHARS, indent=False)[0])


def artifacts_view(artifacts_json: Any) -> tuple[list[dict[str, Any]], int, dict[str, Any] | None]:
    """The artifacts (name and text; at most :data:`MAX_ARTIFACTS`), how many more there are, and
    the trajectory as a conversation, if any."""
    if not isinstance(artifacts_json, str):
        return [], 0, None
    try:
        artifacts = loads(artifacts_json)
    except Unreadable as exc:
        return [{"name": "artifacts", **text_field(artifacts_json, note=str(exc))}], 0, None
    if not isinstance(artifacts, dict):
        return [{"name": "artifacts", **json_field(artifacts, stored=len(artifacts_json))}], 0, None
    listed, trajectory = [], None
    for name, content in itertools.islice(artifacts.items(), MAX_ARTIFACTS):
        listed.append({"name": label(name), **json_field(content)})  # a null artifact shows as null
    # the conversation: from the gateway's record of the calls where there is one with calls in it
    for name in (MODEL_CALLS_ARTIFACT, TRAJECTORY_ARTIFACT):
        if name in artifacts and trajectory is None:
            fmt, steps, total = stored_conversation(artifacts[name], gateways=name == MODEL_CALLS_ARTIFACT)
            if name == TRAJECTORY_ARTIFACT or (fmt == "model-calls" and total > 0):
                trajectory = {"format": fmt, "steps": [s._asdict() for s in steps], "total": total}
    return listed, max(0, len(artifacts) - MAX_ARTIFACTS), trajectory


def unit_detail(light: Mapping[str, Any], heavy: Mapping[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    """The unit page's data: the index row, its heavy columns made readable, and its task.
    Should showing what a unit stored fail all the same, the page says so with the index row:
    one unit's artifacts never fail another's page, nor an export."""
    shown = {k: json_value(v) for k, v in light.items()}
    refused = shown.get("refusal") is True
    try:
        return {**shown, **_heavy_detail(heavy, refused), "task_prompt": task}
    except Exception as exc:  # any shape of stored data: this unit's page says so, and only it
        log.warning("rayeval view: cannot show unit %s: %s", shown.get("unit_id"), exc, exc_info=True)
        failure = f"this unit's stored data cannot be shown ({type(exc).__name__}); see the viewer's log"
        return {**shown, **_heavy_detail({}, refused), "task_prompt": task, "failure": failure}


def _heavy_detail(heavy: Mapping[str, Any], refused: bool) -> dict[str, Any]:
    """The heavy columns made readable; the harness's refusal verdict only where the row's
    refusal column says the model refused (``refused``; the gateway's word where it relayed the calls):
    an agent can write that file, and no box says a model refused that did not."""
    artifacts, more, trajectory = artifacts_view(heavy.get("artifacts_json"))
    return {
        "answer": stored_json_field(heavy.get("answer_json")),
        "answer_source": json_value(heavy.get("answer_source")),
        "reasoning": _text(heavy.get("reasoning")),
        "metrics": metric_rows(heavy.get("metrics_json")),
        "error_message": _text(heavy.get("error_message")),
        "error_traceback": _text(heavy.get("error_traceback")),
        "metadata": stored_json_field(heavy.get("metadata_json")),
        "artifacts": artifacts,
        "artifacts_left_out": more,
        # the model's refusal, as the harness that found it wrote it (``null``: none found)
        "refusal_verdict": next(
            (a for a in artifacts if refused and a["name"] == REFUSAL_VERDICT_NAME and a.get("text") != "null"), None
        ),
        "trajectory": trajectory,
        "failure": None,
    }


def verdicts(units: pd.DataFrame) -> np.ndarray:
    """``passed`` / ``failed`` / ``error`` per unit (an error status is never a pass)."""
    return np.where(error_mask(units), "error", np.where(passed_array(units), "passed", "failed"))


def index_frame(units: pd.DataFrame) -> pd.DataFrame:
    """The report columns of a run's units plus ``verdict`` and ``tokens`` (input + output);
    an error kind (the name of the agent's exception: anything it chose) cut to a label's
    length, for the table, its filter and the filter's choices alike."""
    units = units.reset_index(drop=True)
    tokens = units[["input_tokens", "output_tokens"]].astype("float64")
    return units.assign(
        verdict=verdicts(units),
        tokens=tokens.sum(axis=1, min_count=1),
        seed=units["seed"].astype("Int64"),
        error_type=_labels(units["error_type"]),
    )


def _labels(column: pd.Series) -> pd.Series:
    """A text column with its values longer than a label cut to one."""
    values = column.astype("object")
    long = (values.str.len() > MAX_LABEL_CHARS).fillna(False).to_numpy(dtype=bool)
    if not long.any():
        return column
    return values.where(~long, values.map(label, na_action="ignore"))


def _leaderboard_table(title: str, table: pd.DataFrame) -> dict[str, Any]:
    shown = rounded(table)
    return {"title": title, "columns": [str(c) for c in shown.columns], "rows": json_rows(shown)}


def leaderboard(units: pd.DataFrame) -> dict[str, Any]:
    """The benchmark table (accuracy with its 95% CI, cost, duration, N, errors) and, when rows
    carry them, the by-task and by-platform tables; ``plots`` names the plots there are;
    ``method`` says how accuracy and its interval are computed, as ``rayeval report`` does."""
    main = benchmark_table(units)
    tables = [_leaderboard_table("Accuracy by model", main)]
    method = (
        "Accuracy (%): mean over evals of per-eval pass rates over seeds; 95% CI: "
        f"{CI_METHOD} (none with a single eval). {error_policy_note('fail', int(main[ERRORS].sum()))}"
    )
    plots = ["accuracy"]
    if units["cost_usd"].notna().any():
        plots.append("cost")
    for column, what in BREAKDOWNS.items():
        if column in units.columns and units[column].notna().any():
            tables.append(_leaderboard_table(f"Accuracy by {what}", breakdown_table(units, column)))
            plots.append(column)
    if importlib.util.find_spec("matplotlib") is None:
        return {
            "tables": tables,
            "method": method,
            "plots": [],
            "note": "plots need matplotlib: pip install 'rayeval[report]'",
        }
    return {"tables": tables, "method": method, "plots": plots, "note": None}


def plot_svg(units: pd.DataFrame, name: str) -> bytes:
    """One leaderboard plot as SVG (``accuracy``, ``cost``, ``task``, ``kit``)."""
    from ..report import html_report

    main = benchmark_table(units)
    if name == "accuracy":
        figure = html_report.accuracy_figure(main)
    elif name == "cost":
        figure = html_report.cost_figure(main)
    elif name in BREAKDOWNS:
        table = breakdown_table(units, name)
        figure = html_report.heatmap_figure(
            table,
            name,
            f"Accuracy (%) by {BREAKDOWNS[name]}",
            order=html_report.plot_labels(main),
        )
    else:
        raise NotFound(f"no plot {name!r}")
    if figure is None:
        raise NotFound(f"no data for the {name} plot")
    return html_report.figure_bytes(figure, "svg")


@dataclass
class RunIndex:
    """One run's unit index and what is derived from it once."""

    run_id: str
    manifest: dict[str, Any]
    units: pd.DataFrame
    loaded_at: float = field(default_factory=time.monotonic)
    _orders: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    _positions: dict[str, int] | None = None
    _facets: dict[str, list[Any]] | None = None

    @property
    def finished(self) -> bool:
        return self.manifest.get("status") in ("completed", "failed", "cancelled", "interrupted")

    def summary(self) -> dict[str, Any]:
        counts = self.units["verdict"].value_counts()
        keys = (
            "status",
            "created_at",
            "finished_at",
            "agent",
            "models",
            "seeds",
            "total_units",
        )
        return {
            "run_id": self.run_id,
            **{k: self.manifest.get(k) for k in keys},
            "units": len(self.units),
            **{v: int(counts.get(v, 0)) for v in ("passed", "failed", "error")},
        }

    def facets(self) -> dict[str, list[Any]]:
        """The values each filter can take (computed once)."""
        if self._facets is None:
            units = self.units
            self._facets = {
                "eval": sorted(map(str, units["eval_id"].dropna().unique())),
                "model": sorted(map(str, units["model"].dropna().unique())),
                "seed": sorted(int(s) for s in units["seed"].dropna().unique()),
                "error": sorted(map(str, units["error_type"].dropna().unique())),
            }
        return self._facets

    def position(self, unit_id: str) -> int:
        if self._positions is None:
            self._positions = {str(u): i for i, u in enumerate(self.units["unit_id"])}
        try:
            return self._positions[unit_id]
        except KeyError:
            raise NotFound(f"run {self.run_id!r} has no unit {unit_id!r}") from None

    def order(self, sort: str, direction: str) -> np.ndarray:
        """Row positions sorted by ``sort`` (missing values last, ties by eval, model, seed)."""
        key = (sort, direction)
        if key not in self._orders:
            units = self.units
            ties = [_sortable(units[c]) for c in ("seed", "model", "eval_id")]
            if sort == "eval":
                order = np.lexsort(ties)
                order = order[::-1] if direction == "desc" else order
            else:
                column = units[SORT_COLUMNS[sort]]
                values = _sortable(column).astype("float64")
                values = -values if direction == "desc" else values
                order = np.lexsort([*ties, values, pd.isna(column).to_numpy()])
            self._orders[key] = order
        return self._orders[key]

    def query(self, query: UnitQuery) -> dict[str, Any]:
        units = self.units
        mask = np.ones(len(units), dtype=bool)
        for name, column in (
            ("eval", "eval_id"),
            ("model", "model"),
            ("verdict", "verdict"),
            ("error", "error_type"),
        ):
            value = getattr(query, name)
            if value is not None:
                mask &= (units[column].astype("object") == value).to_numpy(dtype=bool)
        if query.seed is not None:
            mask &= (units["seed"] == query.seed).fillna(False).to_numpy(dtype=bool)
        order = self.order(query.sort, query.order)
        matched = order[mask[order]]
        start = (query.page - 1) * query.size
        page = units.iloc[matched[start : start + query.size]]
        counts = units["verdict"][mask].value_counts()
        return {
            "run_id": self.run_id,
            "total": len(units),
            "matched": int(mask.sum()),
            "counts": {v: int(counts.get(v, 0)) for v in ("passed", "failed", "error")},
            "page": query.page,
            "pages": max(1, -(-int(mask.sum()) // query.size)),
            "size": query.size,
            "columns": list(TABLE_COLUMNS),
            "rows": json_rows(page[list(TABLE_COLUMNS)]),
            "facets": self.facets(),
        }


def _sortable(column: pd.Series) -> np.ndarray:
    """A column as an array ``np.lexsort`` can order (categories by their text, NaN last)."""
    if isinstance(column.dtype, pd.CategoricalDtype) or column.dtype == object:
        return pd.factorize(column.astype("object").fillna(""), sort=True)[0]
    return column.astype("float64").to_numpy()


class ViewData:
    """The runs under one results root, as the viewer shows them (thread-safe, cached)."""

    def __init__(self, reader: ResultsReader, runs: list[str] | None = None):
        self.reader = reader
        self.only = runs
        self._lock = threading.Lock()
        self._runs: dict[str, RunIndex] = {}
        self._tasks: dict[tuple[str, str], dict[str, Any]] = {}

    def run_ids(self) -> list[str]:
        found = self.reader.run_ids()
        if self.only is None:
            return found
        missing = [run for run in self.only if run not in found]
        if missing:
            raise ReportError(f"no run {', '.join(map(repr, missing))} under {self.reader.root}")
        return list(self.only)

    def run(self, run_id: str) -> RunIndex:
        with self._lock:
            cached = self._runs.get(run_id)
            if cached is not None and (cached.finished or time.monotonic() - cached.loaded_at < REFRESH_S):
                return cached
            if run_id not in self.run_ids():
                raise NotFound(f"no run {run_id!r}")
            manifest = self.reader.manifests(run_id).get(run_id, {})
            units = self.reader.units(runs=[run_id])
            self._runs[run_id] = RunIndex(run_id, manifest, index_frame(units))
            return self._runs[run_id]

    def runs(self) -> list[dict[str, Any]]:
        """Every run's summary, newest first."""
        return newest_first([self.run(run).summary() for run in self.run_ids()])

    def units(self, run_id: str, query: UnitQuery) -> dict[str, Any]:
        return self.run(run_id).query(query)

    def unit(self, run_id: str, unit_id: str) -> dict[str, Any]:
        index = self.run(run_id)
        light = index.units.iloc[index.position(unit_id)]
        heavy = self.heavy_rows(run_id, str(light["model"]), [str(light["eval_id"])], {unit_id})
        return unit_detail(
            light.to_dict(),
            heavy.get(unit_id, {}),
            self.task(index, str(light["eval_id"]), heavy.get(unit_id, {})),
        )

    def heavy_rows(
        self,
        run_id: str,
        model: str,
        evals: list[str] | None,
        unit_ids: set[str] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """The heavy columns of the latest attempt of each unit (pruned to one model and, when
        given, some evals), by unit id."""
        frame = self.reader.units(runs=[run_id], models=[model], evals=evals, columns=list(DETAIL_COLUMNS))
        if unit_ids is not None:
            frame = frame[frame["unit_id"].astype("object").isin(unit_ids)]
        return {str(row["unit_id"]): row for row in frame.to_dict("records")}

    def task(self, index: RunIndex, eval_id: str, heavy: Mapping[str, Any]) -> dict[str, Any]:
        """The eval's task text, from the eval file the run's manifest names, when it is still
        there and unchanged (same content hash as the row's); else a note why not."""
        key = (index.run_id, eval_id)
        if key not in self._tasks:
            self._tasks[key] = _task_from_manifest(index.manifest, eval_id, heavy.get("eval_hash"))
        return self._tasks[key]

    def compare(self, run_id: str, eval_id: str, seed: int, models: tuple[str, str]) -> dict[str, Any]:
        """The units of two models on one eval and seed, side by side (None where missing)."""
        units = self.run(run_id).units
        same = (units["eval_id"].astype("object") == eval_id) & (units["seed"] == seed).fillna(False)
        sides: dict[str, Any] = {}
        for side, model in zip(("a", "b"), models):
            found = units["unit_id"][same & (units["model"].astype("object") == model)]
            sides[side] = self.unit(run_id, str(found.iloc[0])) if len(found) else None
        return {
            "run_id": run_id,
            "eval": eval_id,
            "seed": seed,
            "models": list(models),
            **sides,
        }

    def leaderboard(self, run_id: str) -> dict[str, Any]:
        return {"run_id": run_id, **leaderboard(self.run(run_id).units)}

    def plot(self, run_id: str, name: str) -> bytes:
        return plot_svg(self.run(run_id).units, name)


def _task_from_manifest(manifest: Mapping[str, Any], eval_id: str, eval_hash: Any) -> dict[str, Any]:
    refs = [ref for ref in manifest.get("eval_files") or [] if isinstance(ref, dict) and ref.get("id") == eval_id]
    if not refs:
        return {
            "text": None,
            "note": "the run's manifest names no eval file for this eval",
        }
    path = str(refs[0].get("path") or "")
    if not path or not Path(path).is_file():
        return {
            "text": None,
            "note": f"eval file {path or '(none)'} is not on this machine",
        }
    try:
        eval_ = load_eval(path, check_data_nodes=False)
    except (EvalFileError, OSError) as exc:
        return {"text": None, "note": f"eval file {path} cannot be read: {exc}"}
    if eval_hash is not None and eval_.content_hash() != eval_hash:
        return {
            "text": None,
            "note": f"eval file {path} changed since the run (its content hash differs)",
        }
    return {"text": text_field(eval_.task), "note": f"from {path}"}


__all__ = [
    "DETAIL_COLUMNS",
    "MAX_TEXT_CHARS",
    "TABLE_COLUMNS",
    "NotFound",
    "RunIndex",
    "UnitQuery",
    "ViewData",
    "index_frame",
    "json_text",
    "leaderboard",
    "plot_svg",
    "unit_detail",
]
