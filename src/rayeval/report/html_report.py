"""A single self-contained HTML report: plots as base64 PNG data URIs, inline CSS, no
external CSS, JavaScript, fonts or images (it opens from one file, offline).

Plots (matplotlib, object API only: the global pyplot state and backend are not touched):
accuracy with its 95% CI per model × harness, cost vs accuracy, and accuracy heatmaps per
task category and per platform. Then the tables.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from ..storage.attempts import latest_attempts
from .benchmark import (
    ACCURACY,
    BREAKDOWNS,
    CI_LOWER,
    CI_METHOD,
    CI_UPPER,
    COST,
    benchmark_table,
    breakdown_table,
    error_policy_note,
    format_cell,
    isolation_note,
    rounded,
)
from .metrics import majority_vote, pass_at_k
from .reader import ReportError
from .stats import EvaluationStats, evaluation_stats

_CSS = """
body{font-family:-apple-system,BlinkMacSystemFont,"Segoe UI",Helvetica,Arial,sans-serif;margin:2rem auto;max-width:1200px;color:#1f2328;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #d0d7de;padding-bottom:.3rem}
.meta{color:#57606a;font-size:.9rem}.note{color:#57606a;font-size:.85rem;margin:.4rem 0}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}th,td{border:1px solid #d0d7de;padding:.25rem .5rem}
th{background:#f6f8fa;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%;height:auto;display:block;margin:.5rem 0}.status{font-weight:600}
.warning{background:#fff8c5;border:1px solid #d4a72c;padding:.4rem .6rem;font-size:.9rem}
"""


def _matplotlib() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ReportError("the HTML report needs matplotlib: pip install 'rayeval[report]' (or matplotlib)") from None
    return Figure


def figure_bytes(fig: Any, fmt: Literal["png", "svg"] = "png") -> bytes:
    """A figure as a PNG or SVG file's bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=100, bbox_inches="tight")
    return buffer.getvalue()


def plot_labels(table: pd.DataFrame) -> list[str]:
    """One label per model × harness row of a benchmark table."""
    keys = [c for c in ("model_name", "harness") if c in table.columns]
    return ["/".join(str(row[k]) for k in keys if str(row[k])) or "all" for _, row in table[keys].iterrows()]


def accuracy_figure(table: pd.DataFrame) -> Any:
    """Horizontal bars of Accuracy (%) with CI error bars, best at the top."""
    Figure = _matplotlib()
    labels = plot_labels(table)
    acc = table[ACCURACY].to_numpy(dtype=float)
    low = acc - table[CI_LOWER].to_numpy(dtype=float)
    high = table[CI_UPPER].to_numpy(dtype=float) - acc
    err = np.vstack([np.nan_to_num(low), np.nan_to_num(high)])
    fig = Figure(figsize=(8, 0.38 * len(labels) + 1.2))
    ax = fig.subplots()
    y = np.arange(len(labels))[::-1]
    ax.barh(y, np.nan_to_num(acc), color="#4c78a8")
    has_ci = ~np.isnan(low) & ~np.isnan(high)  # no interval with a single eval
    if has_ci.any():
        ax.errorbar(acc[has_ci], y[has_ci], xerr=err[:, has_ci], fmt="none", ecolor="#333333", capsize=3)
    ax.set_yticks(y, labels)
    ax.set_xlabel("Accuracy (%) with 95% CI (t over per-eval means)")
    right = np.nanmax(np.concatenate([acc + np.nan_to_num(high), [100.0]]))
    ax.set_xlim(0, max(100.0, float(right) + 2))
    ax.axvline(100, color="#bbbbbb", lw=0.8, ls="--")
    ax.grid(axis="x", alpha=0.3)
    return fig


def cost_figure(table: pd.DataFrame) -> Any:
    """Cost ($ per run) vs Accuracy (%); None when no row has a cost."""
    Figure = _matplotlib()
    cost = table[COST].to_numpy(dtype=float)
    keep = ~np.isnan(cost) & ~np.isnan(table[ACCURACY].to_numpy(dtype=float))
    if not keep.any():
        return None
    labels = [label for label, k in zip(plot_labels(table), keep) if k]
    acc = table[ACCURACY].to_numpy(dtype=float)[keep]
    fig = Figure(figsize=(8, 5.5))
    ax = fig.subplots()
    ax.scatter(cost[keep], acc, color="#f58518", zorder=3)
    for x, y, label in zip(cost[keep], acc, labels):
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
    ax.set_xlabel("Cost ($ per run, mean)")
    ax.set_ylabel("Accuracy (%)")
    ax.grid(alpha=0.3)
    return fig


def heatmap_figure(table: pd.DataFrame, column: str, title: str, order: Sequence[str] | None = None) -> Any:
    """Accuracy (%) per model × harness (rows, in ``order`` when given) and ``column`` value."""
    if table.empty:
        return None
    Figure = _matplotlib()
    frame = table.assign(_label=plot_labels(table))
    grid = frame.pivot_table(index="_label", columns=column, values=ACCURACY, aggfunc="mean", sort=True)
    if order is None:
        order = list(frame.groupby("_label")[ACCURACY].mean().sort_values(ascending=False).index)
    grid = grid.reindex([label for label in order if label in grid.index])
    values = grid.to_numpy(dtype=float)
    fig = Figure(figsize=(max(6.0, 1.1 * grid.shape[1] + 3.5), 0.38 * grid.shape[0] + 1.8))
    ax = fig.subplots()
    image = ax.imshow(np.ma.masked_invalid(values), cmap="viridis", vmin=0, vmax=100, aspect="auto")
    ax.set_xticks(range(grid.shape[1]), [str(c) for c in grid.columns], rotation=35, ha="right")
    ax.set_yticks(range(grid.shape[0]), [str(i) for i in grid.index])
    for (i, j), v in np.ndenumerate(values):
        if not math.isnan(v):
            ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=7, color="white" if v < 60 else "black")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label="Accuracy (%)")
    return fig


def _cell(value: Any, column: str) -> tuple[str, bool]:
    """A value as the text table shows it, and whether it is a number (right-aligned)."""
    text = format_cell(value, column)
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    return text, number and text != "-"


def html_table(frame: pd.DataFrame, columns: Sequence[str] | None = None) -> str:
    columns = list(columns) if columns is not None else list(frame.columns)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    rows = []
    for record in frame[columns].itertuples(index=False):
        cells = []
        for value, column in zip(record, columns):
            text, numeric = _cell(value, column)
            cells.append(f'<td class="num">{html.escape(text)}</td>' if numeric else f"<td>{html.escape(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _img(fig: Any, alt: str) -> str:
    """A figure as an image inlined as a PNG data URI (None: a note that there is no data)."""
    if fig is None:
        return f'<p class="note">{html.escape(alt)}: no data to plot.</p>'
    uri = "data:image/png;base64," + base64.b64encode(figure_bytes(fig)).decode("ascii")
    return f'<img src="{uri}" alt="{html.escape(alt)}">'


def _run_table(stats: EvaluationStats) -> pd.DataFrame:
    rows = []
    for rs in stats.run_stats:
        row: dict[str, Any] = {
            "run_id": rs.run_id,
            "version": rs.version_id,
            "status": rs.status,
            "units": rs.num_logs,
            "errors": rs.num_errors,
        }
        for ev in rs.evaluator_stats:
            if ev.kind == "boolean":
                row[f"{ev.evaluator} true"] = ev.num_true
                row[f"{ev.evaluator} false"] = ev.num_false
            elif ev.kind == "number":
                row[f"{ev.evaluator} mean"] = ev.mean
                row[f"{ev.evaluator} p50"] = (ev.percentiles or {}).get("p50")
        rows.append(row)
    return pd.DataFrame(rows)


def render_html(
    units: pd.DataFrame,
    *,
    title: str = "rayeval report",
    source: str = "",
    errors: str = "fail",
    ks: Sequence[int] = (1, 3),
    planned_units: int | Mapping[str, int] | None = None,
    run_status: Any = None,
    stats: EvaluationStats | None = None,
) -> str:
    """The whole report as one HTML string."""
    units = latest_attempts(units)
    if units.empty:
        raise ReportError("no results to report")
    stats = stats or evaluation_stats(
        units, planned_units=planned_units, run_status=run_status, errors=errors, report=False
    )
    main = benchmark_table(units, errors=errors)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        (
            f'<p class="meta">{html.escape(source)} · generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC} · '
            f'status <span class="status">{html.escape(stats.status)}</span> · {html.escape(stats.progress)}</p>'
        ),
        *([f'<p class="warning">{html.escape(note)}</p>'] if (note := isolation_note(units)) else []),
        (
            f'<p class="note">{html.escape(error_policy_note(errors, int(main["Errors"].sum()), main.attrs.get("n_excused")))} '
            f"Confidence intervals: 95%, {CI_METHOD} (none with a single eval).</p>"
        ),
        "<h2>Accuracy by model</h2>",
        _img(accuracy_figure(main), "Accuracy with 95% CI per model and harness"),
        html_table(rounded(main)),
        "<h2>Cost vs accuracy</h2>",
        _img(cost_figure(main), "Cost per run vs accuracy"),
    ]
    for column, label in BREAKDOWNS.items():
        if column in units.columns and units[column].notna().any():
            table = breakdown_table(units, column, errors=errors)
            parts += [
                f"<h2>Accuracy by {label}</h2>",
                _img(
                    heatmap_figure(table, column, f"Accuracy (%) by {label}", order=plot_labels(main)),
                    f"Accuracy heatmap by {label}",
                ),
                html_table(rounded(table)),
            ]
    seeds = pass_at_k(units, k=list(ks), errors=errors)
    by_seed = seeds.merge(majority_vote(units, on="verdict", errors=errors).drop(columns="n_evals"), how="left")
    if "answer_json" in units.columns:
        by_seed = by_seed.merge(
            majority_vote(units, on="answer", errors=errors)
            .drop(columns="n_evals")
            .rename(columns={"majority (%)": "maj@answer (%)"}),
            how="left",
        )
    parts += [
        "<h2>Across seeds</h2>",
        '<p class="note">pass@k = 1 − C(n−c,k)/C(n,k) and pass^k = C(c,k)/C(n,k) per eval (unbiased), averaged over '
        "evals with at least k seeds; majority (%): an eval passes when more than half its seeds pass"
        + ("; maj@answer: the most frequent answer decides." if "answer_json" in units.columns else ".")
        + "</p>",
        html_table(by_seed),
        "<h2>Runs</h2>",
        html_table(_run_table(stats)),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def write_html(path: str | Path, units: pd.DataFrame, **kwargs: Any) -> Path:
    target = Path(path)
    target.write_text(render_html(units, **kwargs), encoding="utf-8")
    return target


__all__ = [
    "accuracy_figure",
    "cost_figure",
    "figure_bytes",
    "heatmap_figure",
    "html_table",
    "plot_labels",
    "render_html",
    "write_html",
]
