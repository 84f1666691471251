"""The end-of-run summary: per model units, verdicts, errors, mean score and cost."""
from __future__ import annotations

from datetime import datetime, timezone

from pydantic import BaseModel

from ..storage import ResultStore


class ModelSummary(BaseModel):
    model: str
    units: int
    passed: int
    failed: int
    errors: int
    mean_score: float
    cost_usd: float | None


class RunSummary(BaseModel):
    run_id: str
    results_path: str
    total_units: int
    skipped: int
    ran: int
    stored_rows: int
    models: list[ModelSummary]
    duration_s: float

    def text(self) -> str:
        header = f"{'model':32} {'units':>6} {'passed':>7} {'failed':>7} {'errors':>7} {'score':>7} {'cost $':>9}"
        lines = [header, "-" * len(header)]
        for m in self.models:
            cost = f"{m.cost_usd:9.2f}" if m.cost_usd is not None else f"{'-':>9}"
            lines.append(f"{m.model[:32]:32} {m.units:6d} {m.passed:7d} {m.failed:7d} {m.errors:7d} {m.mean_score:7.3f} {cost}")
        lines.append(
            f"run {self.run_id}: {self.stored_rows}/{self.total_units} units stored "
            f"({self.ran} run now, {self.skipped} already done) in {self.duration_s:.1f}s"
        )
        lines.append(f"results: {self.results_path}")
        return "\n".join(lines)


def summarize(store: ResultStore, run_id: str, *, total_units: int, skipped: int, ran: int, started: datetime) -> RunSummary:
    # only the columns it needs: a run's answers and artifacts can be most of its bytes
    columns = ["model", "unit_id", "status", "normalized_score", "cost_usd", "attempt"]
    frame = store.read_table(run_id, columns=columns).to_pandas()
    frame = frame.sort_values("attempt").drop_duplicates("unit_id", keep="last")
    models = []
    for model, group in frame.groupby("model", sort=True, observed=True):
        cost = group["cost_usd"].dropna()
        models.append(
            ModelSummary(
                model=str(model),
                units=len(group),
                passed=int((group["status"] == "passed").sum()),
                failed=int((group["status"] == "failed").sum()),
                errors=int(group["status"].isin(["error", "timeout", "config_error"]).sum()),
                mean_score=float(group["normalized_score"].mean()) if len(group) else 0.0,
                cost_usd=float(cost.sum()) if len(cost) else None,
            )
        )
    return RunSummary(
        run_id=run_id,
        results_path=store.run_uri(run_id),
        total_units=total_units,
        skipped=skipped,
        ran=ran,
        stored_rows=len(frame),
        models=models,
        duration_s=(datetime.now(timezone.utc) - started).total_seconds(),
    )
