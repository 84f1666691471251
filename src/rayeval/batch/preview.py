"""``rayeval run --dry-run``: the plan a run would carry out, checked as the run checks it,
without starting Ray (a cluster's is joined for a moment, to read its nodes), taking the run's
lease or writing anything."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import ray
from pydantic import BaseModel

from .._messages import option
from ..agents.labels import row_labels
from ..agents.resolve import agent_ref
from ..data.cache import default_cache_dir
from ..evals import Eval
from ..storage import ResultStore
from ..unit.runner import check_agent_loads
from ..unit.workspace import default_work_root
from .budget import stored_spend
from .capacity import NodeResources, local_node_resources, run_capacity
from .cluster import connect, live_nodes
from .config import BatchConfig, RayConfig
from .plan import describe_seeds
from .prepare import PreparedRun, prepare_run, run_evals
from .resume import rerun_text, resumed_run_id, starting_manifest, units_run_again, units_to_run
from .worker import sandbox_config


class PlanPreview(BaseModel):
    run_id: str | None
    evals: int
    evals_loaded: int
    #: the ids of the evals chosen, in plan order, when --sample-id, --filter or --limit chose them
    selected: list[str] = []
    models: list[str]
    seeds: str
    units: int
    to_run: int
    #: of ``to_run``, units stored before that run again: cut short by the run's budget, or
    #: (``--retry-errors``) stored with an error
    rerun: int
    #: per model, the mean cost per unit of its rows already under the results root times its
    #: units to run, summed over the models with such rows; None when none has one
    estimated_cost_usd: float | None
    #: units to run of models no earlier row gives a cost for (not in the estimate)
    unpriced_units: int
    cost_basis: str
    #: how many units can run at once, and what limits it (as the run says at start)
    capacity: str
    #: the run's budget (``--max-cost``), and what its stored rows spent of it already
    max_cost_usd: float | None = None
    spent_usd: float = 0.0
    #: what the start-up checks could not check from here (a cluster's judge keys)
    notes: list[str] = []

    def text(self) -> str:
        selected = f" (selected from {self.evals_loaded})" if self.evals != self.evals_loaded else ""
        rerun = rerun_text(self.rerun)
        if self.estimated_cost_usd is None:
            cost = f"unknown ({self.cost_basis})"
        elif self.unpriced_units:
            priced = self.to_run - self.unpriced_units
            cost = f"${self.estimated_cost_usd:.2f} for {priced} of the {self.to_run} units, the others unknown ({self.cost_basis})"
        else:
            cost = f"${self.estimated_cost_usd:.2f} ({self.cost_basis})"
        chosen = [f"selected evals: {', '.join(self.selected)}"] if self.selected else []
        return "\n".join([
            f"dry run: nothing started. run: {self.run_id or 'a new run id'}",
            f"evals: {self.evals}{selected}; models: {', '.join(self.models)}; seeds: {self.seeds}",
            *chosen,
            f"units: {self.units} planned, {self.units - self.to_run} already done, {self.to_run} to run{rerun}",
            f"estimated cost: {cost}",
            *([self._budget()] if self.max_cost_usd is not None else []),
            self.capacity,
            *self.notes,
        ])  # fmt: skip

    def _budget(self) -> str:
        assert self.max_cost_usd is not None
        spent = f", ${self.spent_usd:.2f} of it spent by the run's stored rows" if self.spent_usd else ""
        left = self.max_cost_usd - self.spent_usd
        if self.estimated_cost_usd is None:
            verdict = "the estimate is unknown"
        elif self.estimated_cost_usd <= left:
            verdict = f"the estimate fits in the ${left:.2f} left"
        else:
            verdict = f"the estimate is over the ${left:.2f} left: the run would stop when it is spent"
        return f"budget ({option('--max-cost')}): ${self.max_cost_usd:.2f}{spent}; {verdict}"


def preview_run(config: BatchConfig) -> PlanPreview:
    """What ``run_batch(config)`` would run, after the same checks (evals, selection, agent,
    resume inputs), reading but never writing the results root."""
    run_id = resumed_run_id(config.storage)
    all_evals = run_evals(config.model_copy(update={"sample_ids": [], "filters": [], "limit": None}))
    prepared = prepare_run(config, all_evals)
    evals, plan, embedded = prepared.evals, prepared.plan, prepared.embedded
    check_agent_loads_here(config, evals, embedded=embedded)
    storage = config.storage
    store = ResultStore(storage.output, s3_endpoint_url=storage.s3_endpoint_url)
    todo, rerun = np.ones(len(plan), dtype=bool), 0
    if run_id is not None:
        starting_manifest(store, run_id, config, prepared)
        todo, earlier, _ = units_to_run(storage, store, run_id, plan)
        rerun = units_run_again(todo, earlier)
    # the plan's order is eval, model, seed: a position's model is (position // seeds) % models
    per_model = np.bincount((np.flatnonzero(todo) // len(plan.seeds)) % len(plan.models), minlength=len(plan.models))
    to_run_of: dict[str, int] = {}
    for model, count in zip(config.models, per_model):  # rows name the model as row_labels does
        label = row_labels(config.agent, model, config.agent_args)[0]
        to_run_of[label] = to_run_of.get(label, 0) + int(count)
    cost, unpriced, basis = _estimated_cost(store, to_run_of)
    spent = stored_spend(store, run_id) if run_id is not None and config.scheduling.max_cost_usd else 0.0
    return PlanPreview(
        run_id=storage.run_id,
        evals=len(evals),
        evals_loaded=len(all_evals),
        selected=[e.id for e in evals] if config.sample_ids or config.filters or config.limit is not None else [],
        models=config.models,
        seeds=describe_seeds(config.seeds),
        units=len(plan),
        to_run=int(todo.sum()),
        rerun=rerun,
        estimated_cost_usd=cost,
        unpriced_units=unpriced,
        cost_basis=basis,
        capacity=_capacity(config, prepared, int(todo.sum())),
        notes=prepared.notes,
        max_cost_usd=config.scheduling.max_cost_usd,
        spent_usd=spent,
    )


def check_agent_loads_here(config: BatchConfig, evals: list[Eval], *, embedded: bool) -> None:
    """A sandboxed or ``process`` agent's look-up in a unit runner on this machine (its module
    is never imported here), which tells whether the sandbox starts: what a run's workers check
    where units run."""
    execution = config.execution
    if execution.isolation == "inline":
        return
    work_root = Path(execution.work_root) if execution.work_root else default_work_root()
    cache_dir = Path(execution.cache_dir) if execution.cache_dir else default_cache_dir()
    # options name files as the units' nodes see them: checked only where units run on this machine
    args = config.agent_args if embedded else {}
    sandbox = sandbox_config(execution.sandbox, config.storage.output, evals)
    check_agent_loads(
        agent_ref(config.agent), args, isolation=execution.isolation, sandbox=sandbox, runner_root=work_root,
        cache_dir=cache_dir, keep=False,
    )  # fmt: skip


def _capacity(config: BatchConfig, run: PreparedRun, to_run: int) -> str:
    """What the run would say at start of how many units run at once: from the resources Ray
    would find on this machine (embedded), or from the cluster's nodes now."""
    if not to_run:
        return "units at once: none, nothing to run"
    try:
        nodes = [local_node_resources(config.ray.object_store_memory)] if run.embedded else _cluster_nodes(config.ray)
    except (ImportError, AttributeError, TypeError) as exc:  # Ray's own reckoning, not a public API
        return f"units at once: said when the run starts (Ray does not tell it beforehand here: {exc})"
    _, capacity = run_capacity(config, run.resources, nodes, planned=to_run, embedded=run.embedded)
    return capacity(to_run)


def _cluster_nodes(config: RayConfig) -> list[NodeResources]:
    """The nodes of the cluster the run would join: read by joining it as a driver, for the
    moment it takes (nothing starts on it)."""
    if ray.is_initialized():
        return live_nodes()
    connect(config)
    try:
        return live_nodes()
    finally:
        ray.shutdown()


def _estimated_cost(store: ResultStore, to_run_of: dict[str, int]) -> tuple[float | None, int, str]:
    """Per model, its mean recorded cost per unit under the root times its units to run: the
    sum over the models with a recorded cost (None: no model has one), the units of the others,
    and how each model's part was found.  Models are priced apart: one model's cost says
    nothing of another's."""
    table = store.read_table(models=list(to_run_of), columns=["model", "cost_usd"])
    costs: dict[str, list[float]] = {model: [] for model in to_run_of}
    for model, cost in zip(table.column("model").to_pylist(), table.column("cost_usd").to_pylist()):
        if cost is not None and math.isfinite(cost) and model in costs:
            costs[model].append(cost)
    total, unpriced, basis = None, 0, []
    for model, units in to_run_of.items():
        known = costs[model]
        if not known:
            unpriced += units
            basis.append(f"{model}: no earlier unit recorded a cost")
            continue
        mean = sum(known) / len(known)
        total = (total or 0.0) + mean * units
        basis.append(f"{model}: ${mean:.4f} per unit, the mean of {len(known)} earlier units")
    return total, unpriced, f"{'; '.join(basis)}; under {store.root}"
