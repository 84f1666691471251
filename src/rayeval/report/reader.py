"""Reading result rows back: hive-partitioned Parquet under a local or S3 results root.

The layout (run folders, visible part files, the manifest, partitioning) belongs to
:class:`rayeval.storage.ResultStore`; this reader adds what reports need on top: whole run
folders are pruned when runs are asked for, the model/eval filters are pushed down to pyarrow,
problems become :class:`ReportError` messages, and pandas frames come back with categorical key
columns. Everything after the read is vectorised (no per-row Python).

A file that is no part, a part that cannot be read (checked from its footer, see
:meth:`ResultStore.parts`), or a run manifest that is not one (not JSON, a status or unit count
of the wrong kind) is left out with a warning naming it (``logging``; ``rayeval report`` prints
it on stderr) and listed in :attr:`ResultsReader.skipped`: one damaged run never stops the
report of the others.  The reader never modifies the root (only ``--resume`` moves such parts aside).

A unit is never counted twice: :meth:`ResultsReader.units` keeps its latest attempt, by the
rule of :mod:`rayeval.storage.attempts`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import RayevalError
from ..record import LABEL, REPORT_COLUMNS, columns_marked
from ..storage.attempts import ATTEMPT_COLUMNS, latest_attempts
from ..storage.lease import driver_gone
from ..storage.store import MANIFEST_NAME, TABLE_SCHEMA, Parts, ResultStore, SkippedFile, isin_filter

log = logging.getLogger(__name__)

ALL_COLUMNS: tuple[str, ...] = tuple(TABLE_SCHEMA.names)
# Read whenever a writer stored them (not in the canonical schema).
OPTIONAL_COLUMNS: tuple[str, ...] = ("batch_id",)

# Low-cardinality (or key) string columns turned into pandas categoricals: fast groupbys.
CATEGORY_COLUMNS: frozenset[str] = frozenset({*columns_marked(LABEL), *OPTIONAL_COLUMNS})


#: a run name standing for the newest run under a results root
LATEST = "latest"
Attempts = Literal["latest", "all"]

# A run status as rayeval's manifests and other tools spell it → the report's four (EvaluationStatus).
_STATUS_ALIASES: dict[str, str] = {
    "pending": "pending",
    "queued": "pending",
    "created": "pending",
    "planned": "pending",
    "running": "running",
    "in_progress": "running",
    "started": "running",
    "completed": "completed",
    "complete": "completed",
    "done": "completed",
    "finished": "completed",
    "succeeded": "completed",
    "success": "completed",
    "cancelled": "cancelled",
    "canceled": "cancelled",
    "aborted": "cancelled",
    "stopped": "cancelled",
    "interrupted": "cancelled",
    "failed": "cancelled",
}


class ReportError(RayevalError, ValueError):
    """A user-facing problem with the results root or a selection (bad input, exit code 2)."""


def _as_list(value: str | Iterable[str] | None) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    items = [str(v) for v in value]
    return items or None


def normalise_status(value: Any) -> str | None:
    """A manifest's status (a string, a dict with "status", or an object with .status)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        value = value.get("status")
    elif not isinstance(value, str):
        value = getattr(value, "status", None)
    if value is None:
        return None
    value = getattr(value, "value", value)  # enums
    text = str(value).strip().lower().replace("-", "_").replace(" ", "_")
    if text not in _STATUS_ALIASES:
        raise ReportError(f"unknown run status {value!r}: use pending, running, completed or cancelled")
    return _STATUS_ALIASES[text]


def _manifest_problem(data: dict) -> str | None:
    """Why the fields of a manifest that reports use (``status``, ``total_units``) cannot be
    used, or None (either may be missing: manifests of other writers)."""
    total, status = data.get("total_units"), data.get("status")
    if "total_units" in data and (type(total) is not int or total < 0):
        return f"total_units is {json.dumps(total)[:60]}, not a number of units"
    if status is not None and not isinstance(status, str):
        return f"status is {json.dumps(status)[:60]}, not a run status"
    try:
        normalise_status(status)
    except ReportError as exc:
        return str(exc)
    return None


class ResultsReader:
    """Result rows under one results root (a local folder or ``s3://bucket/prefix``)."""

    def __init__(self, root: str | Path, s3_endpoint_url: str | None = None):
        self.root = str(root)
        #: Files left out of what was read so far (each also logged as a warning), by path.
        self.skipped: list[SkippedFile] = []
        try:
            self.store = ResultStore(root, s3_endpoint_url=s3_endpoint_url)
        except ValueError as exc:
            raise ReportError(str(exc)) from None

    def _note(self, skipped: Iterable[SkippedFile]) -> list[SkippedFile]:
        """Add the files not listed in :attr:`skipped` yet to it; returns those."""
        known = {item.path for item in self.skipped}
        added = [item for item in skipped if item.path not in known]
        self.skipped += added
        return added

    # -- listing -----------------------------------------------------------------------
    def _check_root(self) -> None:
        try:
            kind = self.store.root_kind()
        except OSError as exc:
            raise ReportError(f"cannot open results root {self.root!r}: {exc}") from None
        if kind == "file":
            raise ReportError(f"results root {self.root!r} is a file, not a folder")
        if kind == "missing":
            raise ReportError(f"results root {self.root!r} does not exist")

    def run_ids(self) -> list[str]:
        """Every run under the root (decoded ``run_id=`` folder names), sorted."""
        self._check_root()
        try:
            return self.store.list_runs()
        except OSError as exc:
            raise ReportError(f"cannot list results root {self.root!r}: {exc}") from None

    def resolve_runs(self, runs: str | Iterable[str] | None) -> list[str] | None:
        """``runs`` with ``latest`` standing for the newest run under the root (by its
        manifest's creation time, else by its id)."""
        wanted = _as_list(runs)
        if not wanted or LATEST not in wanted:
            return wanted
        manifests = self.manifests()
        candidates = sorted(self.run_ids(), key=lambda run: (str(manifests.get(run, {}).get("created_at", "")), run))
        if not candidates:
            raise ReportError(f"run {LATEST!r}: no runs under {self.root}")
        return [candidates[-1] if run == LATEST else run for run in wanted]

    def manifests(self, runs: str | Iterable[str] | None = None) -> dict[str, dict]:
        """Each run's ``_manifest.json`` (written by the batch engine) as a plain dict, for the
        runs that have one. Only ``status`` and ``total_units`` are used by the reports."""
        wanted = _as_list(runs)
        found: dict[str, dict] = {}
        for run in self.run_ids():
            if wanted is not None and run not in wanted:
                continue
            try:
                data = self.store.read_manifest_data(run)
            except OSError as exc:  # the storage failing, not the file
                raise ReportError(f"run {run!r}: cannot read {MANIFEST_NAME}: {exc}") from None
            except ValueError as exc:  # damaged: the run's rows are reported without its plan
                self._skip_manifest(run, f"not JSON: {exc}")
                continue
            problem = None if data is None else _manifest_problem(data)
            if problem is not None:
                self._skip_manifest(run, problem)
            elif data is not None:
                found[run] = self._as_left(run, data)
        return found

    def _as_left(self, run: str, manifest: dict) -> dict:
        """A manifest that says ``running`` while no driver holds its run says ``interrupted``:
        its driver stopped without marking it (killed, or its disk full)."""
        if manifest.get("status") != "running":
            return manifest
        try:
            gone = driver_gone(self.store, run)
        except (OSError, ValueError):  # the lease cannot be read: the manifest's word stands
            return manifest
        return {**manifest, "status": "interrupted"} if gone else manifest

    def _skip_manifest(self, run: str, why: str) -> None:
        """Leave out a run's damaged manifest with a warning naming it: its rows are still
        reported (without the run's status and planned units), and other runs are not touched."""
        problem = f"unusable {MANIFEST_NAME} ({why}): run {run!r} is reported without its status and planned units"
        for item in self._note([SkippedFile(f"{self.store.run_uri(run)}/{MANIFEST_NAME}", problem, part=False)]):
            log.warning("skipping %s", item)

    # -- reading -----------------------------------------------------------------------
    def parts(self, runs: str | Iterable[str] | None = None) -> Parts:
        """The selected runs' readable parts (checked from their footers; the others are left
        out with a warning and added to :attr:`skipped`), with the canonical columns plus any a
        writer added (e.g. ``batch_id``)."""
        wanted = _as_list(runs)
        self._check_root()
        try:
            parts = self.store.parts(wanted, extra_columns=True)
        except (OSError, ValueError) as exc:  # the storage failing, or Arrow refusing a path
            raise ReportError(f"cannot read results under {self.root!r}: {exc}") from None
        self._note(parts.skipped)
        return parts

    def table(
        self,
        runs: str | Iterable[str] | None = None,
        models: str | Iterable[str] | None = None,
        evals: str | Iterable[str] | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """The selected rows as an Arrow table (all attempts, no deduplication)."""
        run_list, model_list, eval_list = _as_list(runs), _as_list(models), _as_list(evals)
        parts = self.parts(run_list)
        wanted = list(columns) if columns is not None else list(REPORT_COLUMNS)
        wanted += [c for c in OPTIONAL_COLUMNS if c in parts.schema.names and c not in wanted]
        wanted += [key for key in ATTEMPT_COLUMNS if key not in wanted]  # needed to deduplicate
        if not parts.fragments:
            return TABLE_SCHEMA.empty_table().select([c for c in wanted if c in TABLE_SCHEMA.names])
        unknown = [c for c in wanted if c not in parts.schema.names]
        if unknown:
            raise ReportError(f"unknown column(s) {', '.join(unknown)}; known: {', '.join(parts.schema.names)}")
        expr = isin_filter({"run_id": run_list, "model": model_list, "eval_id": eval_list})
        try:
            # a part whose data cannot be decoded is left out there, with a warning
            return parts.to_table(columns=wanted, filter=expr)
        except (OSError, pa.ArrowInvalid) as exc:  # the storage failing
            raise ReportError(f"cannot read results under {self.root!r}: {exc}") from None
        finally:
            self._note(parts.skipped)

    def all_attempts(
        self,
        runs: str | Iterable[str] | None = None,
        models: str | Iterable[str] | None = None,
        evals: str | Iterable[str] | None = None,
        columns: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """Every stored row (retries included) as a pandas frame."""
        return table_to_frame(self.table(runs, models, evals, columns))

    def units(
        self,
        runs: str | Iterable[str] | None = None,
        models: str | Iterable[str] | None = None,
        evals: str | Iterable[str] | None = None,
        columns: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """One row per unit: the latest attempt per ``(run_id, unit_id)``."""
        return latest_attempts(self.all_attempts(runs, models, evals, columns))


def table_to_frame(table: pa.Table) -> pd.DataFrame:
    """Arrow → pandas with key string columns as categoricals (dictionary-encoded in Arrow), and
    the ``metrics`` map as one float column per metric, ``metric.<name>`` (NaN where a row's
    grader has no such metric), sorted by name after the other columns."""
    arrays, names = [], []
    metric_columns: dict[str, pa.Array] = {}
    for name, column in zip(table.column_names, table.columns):
        kind = column.type
        if name == "metrics" and pa.types.is_map(kind):
            metric_columns = metric_arrays(column)
            continue
        text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
        column = unicode_text(column) if text else column
        if name in CATEGORY_COLUMNS and text:
            column = pc.dictionary_encode(column)
        arrays.append(column)
        names.append(name)
    for metric in sorted(metric_columns):
        arrays.append(metric_columns[metric])
        names.append(f"metric.{metric}")
    return pa.table(arrays, names=names).to_pandas(split_blocks=True, self_destruct=True)


def unicode_text(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A text column as valid UTF-8: a part another writer made may hold bytes that are not
    (Arrow takes them unchecked, Python cannot), read with each invalid sequence as U+FFFD."""
    chunks, repaired = [], False
    for chunk in column.chunks:
        try:
            chunk.validate(full=True)
        except pa.ArrowInvalid:
            texts = chunk.cast(pa.large_binary()).to_pylist()
            chunk = pa.array([t if t is None else t.decode("utf-8", "replace") for t in texts], type=chunk.type)
            repaired = True
        chunks.append(chunk)
    return pa.chunked_array(chunks, type=column.type) if repaired else column


def metric_arrays(metrics: pa.ChunkedArray) -> dict[str, pa.Array]:
    """A ``metrics`` map column as one float array per metric name (null where a row has none)."""
    column = metrics.combine_chunks()
    offsets = column.offsets.to_numpy()
    start, end = int(offsets[0]), int(offsets[-1])
    if end == start:
        return {}
    keys = column.keys.slice(start, end - start).to_numpy(zero_copy_only=False)
    values = column.items.slice(start, end - start).to_numpy(zero_copy_only=False)
    rows = np.repeat(np.arange(len(column)), np.diff(offsets))  # each entry's row
    names, which = np.unique(keys, return_inverse=True)
    out = {}
    for index, name in enumerate(names):
        picked = which == index
        dense = np.full(len(column), np.nan)
        dense[rows[picked]] = values[picked]
        present = np.zeros(len(column), dtype=bool)
        present[rows[picked]] = True
        out[str(name)] = pa.array(dense, mask=~present)
    return out


def read_units(
    root: str | Path,
    runs: str | Iterable[str] | None = None,
    models: str | Iterable[str] | None = None,
    evals: str | Iterable[str] | None = None,
    *,
    columns: Sequence[str] | None = None,
    s3_endpoint_url: str | None = None,
) -> pd.DataFrame:
    """The units (latest attempt of each) under ``root``, optionally filtered."""
    return ResultsReader(root, s3_endpoint_url).units(runs, models, evals, columns)


def read_results(
    root: str | Path,
    run: str | Iterable[str] | None = None,
    *,
    models: str | Iterable[str] | None = None,
    evals: str | Iterable[str] | None = None,
    columns: Sequence[str] | None = ALL_COLUMNS,
    attempts: Attempts = "latest",
    s3_endpoint_url: str | None = None,
) -> pd.DataFrame:
    """The rows under a results root (a folder or ``s3://bucket/prefix``) as a pandas frame,
    ``run_id`` and ``model`` among its columns (they are in the folder names, which reading one
    run's folder with ``pd.read_parquet`` leaves out).

    ``run``: a run id, several, ``"latest"`` (the newest run), or None for every run;
    ``models``/``evals`` keep those; ``columns``: every column by default (the ``metrics`` map
    as one float column per metric, ``metric.<name>``); ``attempts``: ``"latest"`` keeps one
    row per unit (its latest attempt, as every report counts), ``"all"`` every attempt.
    Unreadable parts are left out with a warning, as the reports do."""
    if attempts not in get_args(Attempts):
        raise ReportError(f"attempts must be one of {', '.join(get_args(Attempts))}, got {attempts!r}")
    reader = ResultsReader(root, s3_endpoint_url)
    runs = reader.resolve_runs(run)
    read = reader.units if attempts == "latest" else reader.all_attempts
    return read(runs, models, evals, columns)


__all__ = [
    "ALL_COLUMNS",
    "REPORT_COLUMNS",
    "ReportError",
    "ResultsReader",
    "normalise_status",
    "read_results",
    "read_units",
    "table_to_frame",
]
