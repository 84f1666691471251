"""The end-of-run summary: per model units, verdicts, errors, mean score and cost."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel

from .._messages import shown
from ..record import ERROR_STATUSES
from ..storage import ResultStore
from ..storage.attempts import ATTEMPT_COLUMNS, UNIT_KEY, count_outcomes, latest_attempts
from ..storage.spend import with_earlier_spend

if TYPE_CHECKING:
    import pandas as pd


class ModelSummary(BaseModel):
    """One model × harness of a run, counted as the report counts it: errors are failures."""

    model: str
    harness: str
    units: int
    passed: int
    failed: int
    errors: int
    #: passed units in percent of all units, errored ones included (as ``rayeval report``)
    accuracy_pct: float
    #: mean cost per unit (as the report's ``Cost ($)``: its stored attempt's), and what the
    #: run spent in all (every attempt's: those stored and those the run retried); None when
    #: unreported. A unit's cost is its agent's and its LLM judges' together
    mean_cost_usd: float | None
    total_cost_usd: float | None
    #: of ``total_cost_usd``, what the judge calls cost (None: no judge call was priced)
    judge_cost_usd: float | None = None


class RunSummary(BaseModel):
    run_id: str
    results_path: str
    total_units: int
    skipped: int
    ran: int
    stored_rows: int
    models: list[ModelSummary]
    duration_s: float
    #: the most common ``error_type: message`` (its first line) of the errored units, and how
    #: many units ended in it
    common_error: str | None = None
    common_error_units: int = 0

    @property
    def errors(self) -> int:
        return sum(m.errors for m in self.models)

    def text(self) -> str:
        # names are printed whole: the columns are as wide as the longest (two models that
        # differ only past a fixed width would otherwise read as one)
        wide = max([32, *(len(m.model) for m in self.models)])
        narrow = max([16, *(len(m.harness) for m in self.models)])
        header = (
            f"{'model':{wide}} {'harness':{narrow}} {'units':>6} {'passed':>7} {'failed':>7} {'errors':>7} "
            f"{'accuracy %':>10} {'cost $/unit':>11}"
        )
        lines = [header, "-" * len(header)]
        for m in self.models:
            cost = f"{m.mean_cost_usd:11.4f}" if m.mean_cost_usd is not None else f"{'-':>11}"
            lines.append(
                f"{m.model:{wide}} {m.harness:{narrow}} {m.units:6d} {m.passed:7d} {m.failed:7d} {m.errors:7d} "
                f"{m.accuracy_pct:10.2f} {cost}"
            )
        costs = [m.total_cost_usd for m in self.models if m.total_cost_usd is not None]
        judges = [m.judge_cost_usd for m in self.models if m.judge_cost_usd is not None]
        total = f"; total cost {_usd(sum(costs))}" if costs else ""
        if judges:
            total += f" (of which LLM judges {_usd(sum(judges))})"
        lines.append(
            f"run {self.run_id}: {self.stored_rows}/{self.total_units} units stored "
            f"({self.ran} run now, {self.skipped} already done) in {self.duration_s:.1f}s{total}"
        )
        lines.append(f"accuracy counts errored units as failures; results: {self.results_path}")
        if self.common_error is not None:
            lines.append(
                f"most common error ({self.common_error_units} of {self.errors} errored units): {self.common_error}"
            )
        return "\n".join(lines)


def _usd(amount: float) -> str:
    """Dollars and cents, or four decimals below a dollar (a judge's calls for a few units)."""
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.4f}"


def summarize(
    store: ResultStore, run_id: str, *, total_units: int, skipped: int, ran: int, started: datetime
) -> RunSummary:
    # only the columns it needs: a run's answers and artifacts can be most of its bytes
    columns = [*ATTEMPT_COLUMNS, "model", "harness", "status", "passed", "cost_usd", "judge_cost_usd"]
    columns += ["error_type", "error_message", "metadata_json"]
    rows = with_earlier_spend(store.read_table(run_id, columns=columns)).to_pandas()
    rows["harness"] = rows["harness"].astype(object).fillna("")
    frame = latest_attempts(rows)
    spent = _spent(rows)
    models = []
    for (model, harness), group in frame.groupby(["model", "harness"], sort=True, observed=True):
        cost, (total, judge_total) = group["cost_usd"].dropna(), spent[(model, harness)]
        counts = count_outcomes(group)
        models.append(
            ModelSummary(
                model=str(model),
                harness=str(harness),
                units=len(group),
                passed=counts.passed,
                failed=counts.failed,
                errors=counts.errors,
                accuracy_pct=100.0 * counts.passed / len(group),
                mean_cost_usd=float(cost.mean()) if len(cost) else None,
                total_cost_usd=total,
                judge_cost_usd=judge_total,
            )
        )
    common, common_units = _most_common_error(frame)
    return RunSummary(
        common_error=common,
        common_error_units=common_units,
        run_id=run_id,
        results_path=store.run_uri(run_id),
        total_units=total_units,
        skipped=skipped,
        ran=ran,
        stored_rows=len(frame),
        models=models,
        duration_s=(datetime.now(timezone.utc) - started).total_seconds(),
    )


def _spent(rows: pd.DataFrame) -> dict[tuple[str, str], tuple[float | None, float | None]]:
    """Per model and harness, what every attempt of its units cost (each stored attempt once,
    and the retried ones its rows list) and of that its judges (None: none was priced)."""
    attempts = rows.drop_duplicates(subset=[*UNIT_KEY, "attempt"], keep="last")  # a row stored twice counts once
    spent = {}
    for key, group in attempts.groupby(["model", "harness"], sort=False, observed=True):
        sums = []
        for columns in (["cost_usd", "earlier_cost_usd"], ["judge_cost_usd", "earlier_judge_cost_usd"]):
            amounts = group[columns].to_numpy(dtype=float).ravel()
            known = amounts[~np.isnan(amounts)]
            sums.append(float(known.sum()) if len(known) else None)
        spent[key] = (sums[0], sums[1])
    return spent


def _most_common_error(frame: pd.DataFrame) -> tuple[str | None, int]:
    """The errored units' most common ``error_type: message`` (the message's first line, cut
    to 200 characters), and how many units ended in it; (None, 0) without errors."""
    errored = frame[frame["status"].isin(list(ERROR_STATUSES))]
    if errored.empty:
        return None, 0
    said = [
        f"{kind}: {line}" if line else str(kind)
        for kind, line in zip(
            errored["error_type"].fillna(errored["status"]),
            errored["error_message"].fillna("").astype(str).map(lambda text: text.strip().split("\n", 1)[0][:200]),
        )
    ]
    (common, units), *_ = Counter(said).most_common(1)
    return shown(common), units  # the agent's words, printed to a terminal
