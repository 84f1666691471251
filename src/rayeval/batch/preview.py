"""``rayeval run --dry-run``: the plan a run would carry out, checked as the run checks it,
without starting Ray, taking the run's lease or writing anything."""

from __future__ import annotations

import math

from pydantic import BaseModel

from ..agents.labels import row_labels
from ..storage import ResultStore
from .engine import (
    BatchConfig,
    RunConflict,
    check_agent,
    check_same_inputs,
    previous_manifest,
    run_evals,
    run_manifest,
    units_to_run,
)
from .plan import Plan, describe_seeds


class PlanPreview(BaseModel):
    run_id: str | None
    evals: int
    evals_loaded: int
    models: list[str]
    seeds: str
    units: int
    to_run: int
    #: of ``to_run``, units stored with an error that run again (``--retry-errors``)
    rerun_errors: int
    #: mean cost per unit of these models in rows already under the results root, times
    #: ``to_run``; None when no such row has a cost
    estimated_cost_usd: float | None
    cost_basis: str

    def text(self) -> str:
        selected = f" (selected from {self.evals_loaded})" if self.evals != self.evals_loaded else ""
        rerun = f", {self.rerun_errors} of them errored before" if self.rerun_errors else ""
        cost = (
            f"${self.estimated_cost_usd:.2f} ({self.cost_basis})"
            if self.estimated_cost_usd is not None
            else f"unknown ({self.cost_basis})"
        )
        return "\n".join([
            f"dry run: nothing started. run: {self.run_id or 'a new run id'}",
            f"evals: {self.evals}{selected}; models: {', '.join(self.models)}; seeds: {self.seeds}",
            f"units: {self.units} planned, {self.units - self.to_run} already stored, {self.to_run} to run{rerun}",
            f"estimated cost: {cost}",
        ])  # fmt: skip


def preview_run(config: BatchConfig) -> PlanPreview:
    """What ``run_batch(config)`` would run, after the same checks (evals, selection, agent,
    resume inputs), reading but never writing the results root."""
    all_evals = run_evals(config.model_copy(update={"sample_ids": [], "filters": [], "limit": None}))
    evals = run_evals(config, all_evals)
    check_agent(config, evals, None)
    plan = Plan(evals, config.models, config.seeds, config.agent)
    store = ResultStore(config.output, s3_endpoint_url=config.s3_endpoint_url)
    to_run, rerun = len(plan), 0
    if config.resume:
        previous, damaged = (None, False) if config.run_id is None else previous_manifest(store, config.run_id, config)
        if config.run_id is None or (previous is None and not damaged):
            raise RunConflict(f"--resume: no run {config.run_id!r} under {config.output}")
        if previous is not None:
            check_same_inputs(config, previous, run_manifest(config, config.run_id, evals, plan, previous))
        todo, earlier = units_to_run(config, store, config.run_id, plan)
        to_run = int(todo.sum())
        rerun = 0 if earlier is None else int((earlier[todo] > 0).sum())
    labels = sorted({row_labels(config.agent, model, config.agent_args)[0] for model in config.models})
    cost, basis = _estimated_cost(store, labels, to_run)
    return PlanPreview(
        run_id=config.run_id,
        evals=len(evals),
        evals_loaded=len(all_evals),
        models=config.models,
        seeds=describe_seeds(config.seeds),
        units=len(plan),
        to_run=to_run,
        rerun_errors=rerun,
        estimated_cost_usd=cost,
        cost_basis=basis,
    )


def _estimated_cost(store: ResultStore, models: list[str], units: int) -> tuple[float | None, str]:
    """Mean recorded cost per unit of ``models`` under the root, times ``units``."""
    costs = [
        c
        for c in store.read_table(models=models, columns=["cost_usd"]).column("cost_usd").to_pylist()
        if c is not None and math.isfinite(c)
    ]
    if not costs:
        return None, f"no earlier unit of these models under {store.root} recorded a cost"
    mean = sum(costs) / len(costs)
    return (
        mean * units,
        f"${mean:.4f} per unit, the mean of {len(costs)} earlier units of these models under {store.root}",
    )
