"""The batch driver: fans units out to Ray actors, grades in batches, streams rows to storage."""
from __future__ import annotations

import math
import os
import secrets
import time
from datetime import datetime, timezone
from typing import Any, Literal

import ray
from pydantic import BaseModel, Field

from ..agents.resolve import INLINE_AGENTS, resolve_agent
from ..evals import Eval, load_evals
from ..harness.context import AgentFunction
from ..harness.execution import Execution, grade_execution
from ..storage import EvalFileRef, PlanEntry, ResultRow, ResultStore, RunManifest
from .plan import Unit, plan_units
from .progress import Progress
from .rows import row_from_result
from .scheduler import ChunkSizer, Scheduler
from .summary import RunSummary, summarize
from .worker import SERIAL_GROUP, GradeFunction, WorkerConfig, start_workers

ERROR_STATUSES = frozenset({"error", "timeout", "config_error"})


class BatchConfig(BaseModel):
    """Everything a run needs; the CLI and the Python API both build one."""

    evals: list[str]
    agent: str
    agent_args: dict[str, str] = Field(default_factory=dict)
    models: list[str] = Field(default_factory=lambda: ["default"])
    seeds: list[int] = Field(default_factory=lambda: [1])
    output: str
    run_id: str | None = None
    resume: bool = False
    max_concurrency: int = Field(32, ge=1)
    model_concurrency: dict[str, int] = Field(default_factory=dict)
    address: str | None = None
    retries: int = Field(2, ge=0)
    retry_backoff_s: float = Field(2.0, ge=0)
    timeout: float | None = Field(None, gt=0)
    isolation: Literal["auto", "process", "inline"] = "auto"
    workers: int | None = Field(None, ge=1)
    s3_endpoint_url: str | None = None
    work_root: str | None = None
    cache_dir: str | None = None
    flush_rows: int = Field(1000, ge=1)
    flush_seconds: float = Field(5.0, gt=0)
    show_progress: bool = True
    object_store_memory: int = 512 * 1024 * 1024


class RunConflict(ValueError):
    """The run id already holds results (without --resume), or --resume has nothing to resume."""


def new_run_id() -> str:
    return f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def _stay_on_loopback() -> None:
    """An embedded, single-node Ray has no reason to listen or connect beyond 127.0.0.1.

    Ray replaces a loopback node address by the machine's routable one unless cluster mode is
    off; the environment variable carries the setting to the processes Ray starts.
    """
    from ray._private import ray_constants

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


def connect(config: BatchConfig) -> bool:
    """Join the given cluster (or the job's, under ``ray job submit``), else start an embedded Ray.

    Returns True when this call started Ray and should shut it down.
    """
    if ray.is_initialized():
        return False
    address = config.address
    if address is None and os.environ.get("RAY_ADDRESS"):
        address = "auto"
    if address in (None, "local"):
        _stay_on_loopback()
        # module:function agents from the caller's project must import on the workers too
        python_path = os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)
        ray.init(
            address="local",
            include_dashboard=False,
            object_store_memory=config.object_store_memory,
            log_to_driver=False,
            configure_logging=False,
            runtime_env={"env_vars": {"PYTHONPATH": python_path}},
        )
        return True
    ray.init(address=address, log_to_driver=False, configure_logging=False)
    return False


def _system_error_row(unit: Unit, attempt: int, eval_: Eval, run_id: str, agent: str, exc: BaseException) -> ResultRow:
    """The row of a unit Ray could not run even after its own retries (e.g. a node kept dying)."""
    stamp = datetime.now(timezone.utc)
    execution = Execution(
        eval_id=unit.eval_id,
        model=unit.model,
        seed=unit.seed,
        run_id=run_id,
        outcome="error",
        error_type=type(exc).__name__,
        error_message=f"Ray could not run the unit: {exc}"[:4000],
        started_at=stamp,
        finished_at=stamp,
    )
    result = grade_execution(eval_, execution)
    return row_from_result(result, unit=unit, eval_=eval_, run_id=run_id, agent=agent, attempt=attempt, node="unknown")


def run_batch(
    config: BatchConfig,
    *,
    evals: list[Eval] | None = None,
    agent: AgentFunction | None = None,
    grade: GradeFunction | None = None,
) -> RunSummary:
    """Plan, run and store a batch; returns the run's summary. Resumable with the same run id.

    In-memory use (the Python APIs, e.g. ``rayeval.evaluations.run``): ``evals`` replaces
    loading ``config.evals`` from files; ``agent``, a callable object (closures and lambdas
    included: it travels to the workers with Ray's cloudpickle), replaces resolving
    ``config.agent``, which then only labels the run (rows, unit ids, manifest); ``grade``
    ``(eval, execution) -> EvalResult`` replaces the eval's graders on the workers.
    """
    if evals is None:
        evals = load_evals(*config.evals)  # every eval is validated before any work starts
    if agent is None:
        resolve_agent(config.agent)  # an unknown agent is a usage error, not thousands of error rows
    store = ResultStore(config.output, s3_endpoint_url=config.s3_endpoint_url)
    run_id = config.run_id or new_run_id()
    units = plan_units(evals, config.models, config.seeds, config.agent)

    previous = store.read_manifest(run_id)
    if config.resume and previous is None:
        raise RunConflict(f"--resume: no run {run_id!r} under {config.output}")
    if not config.resume and previous is not None:
        raise RunConflict(f"run {run_id!r} already exists under {config.output}: pass --resume to finish it")
    if previous is not None and previous.agent != config.agent:
        raise RunConflict(f"run {run_id!r} was made with agent {previous.agent!r}, not {config.agent!r}")

    owns_ray = False
    writer = store.open_writer(run_id, flush_rows=config.flush_rows, flush_seconds=config.flush_seconds)  # recovers the WAL
    done_ids = store.stored_unit_ids(run_id) if config.resume else set()
    todo = [unit for unit in units if unit.unit_id not in done_ids]

    started = datetime.now(timezone.utc)
    manifest = RunManifest(
        run_id=run_id,
        agent=config.agent,
        agent_args=config.agent_args,
        models=config.models,
        seeds=config.seeds,
        eval_files=[EvalFileRef(path=str(e.source_path or "<in-memory>"), id=e.id, eval_hash=e.content_hash()) for e in evals],
        plan=[PlanEntry(unit_id=u.unit_id, eval_id=u.eval_id, model=u.model, seed=u.seed) for u in units],
        created_at=previous.created_at if previous else started,
    )
    store.write_manifest(manifest)
    progress = Progress(len(todo), enabled=config.show_progress)
    status = "failed"
    try:
        owns_ray = connect(config)
        _execute(config, run_id, evals, todo, writer, progress, agent=agent, grade=grade)
        status = "completed"
    except KeyboardInterrupt:
        status = "cancelled"
        raise
    finally:
        progress.close()
        writer.close()
        store.write_manifest(manifest.with_status(status))
        if owns_ray:
            ray.shutdown()
    return summarize(store, run_id, total_units=len(units), skipped=len(units) - len(todo), ran=len(todo), started=started)


def _execute(
    config: BatchConfig,
    run_id: str,
    evals: list[Eval],
    todo: list[Unit],
    writer: Any,
    progress: Progress,
    *,
    agent: AgentFunction | None = None,
    grade: GradeFunction | None = None,
) -> None:
    if not todo:
        return
    isolation = config.isolation if config.isolation != "auto" else ("inline" if config.agent in INLINE_AGENTS else "process")
    worker_count = config.workers or max(2, min(8, math.ceil(min(config.max_concurrency, len(todo)) / 25)))
    threads = max(1, math.ceil(config.max_concurrency / worker_count))
    worker_config = WorkerConfig(
        agent=config.agent,
        agent_args=config.agent_args,
        run_id=run_id,
        isolation=isolation,
        timeout=config.timeout,
        work_root=config.work_root,
        cache_dir=config.cache_dir,
        s3_endpoint_url=config.s3_endpoint_url,
        agent_is_name=agent is None,
    )
    # The evals and in-memory agent/grade callables (cloudpickled) are put once and held for
    # the whole run; every call carries the references, so a restarted worker reloads them.
    shared = [ray.put(evals), ray.put(agent), ray.put(grade)]
    workers = start_workers(worker_config, count=worker_count, threads_per_worker=threads)
    scheduler = Scheduler(todo, max_concurrency=config.max_concurrency, model_limits=config.model_concurrency)
    sizer = ChunkSizer()
    running: dict[Any, list[tuple[Unit, int]]] = {}
    written: set[str] = set()
    next_worker = 0

    def finished(unit: Unit, attempt: int, row: ResultRow) -> ResultRow | None:
        """The row to store, or None when the unit is retried or was already stored."""
        if row.status == "error" and attempt <= config.retries:
            scheduler.retry_later(unit, attempt + 1, config.retry_backoff_s * 2 ** (attempt - 1))
            return None
        if unit.unit_id in written:  # a retried Ray call may deliver a unit twice: keep the first
            return None
        written.add(unit.unit_id)
        progress.update(passed=row.passed, error=row.status in ERROR_STATUSES)
        return row

    while not scheduler.idle or running:
        # Fast units travel many to a call, and a worker runs such calls one at a time (a second
        # thread would only fight the first for the GIL); two per worker keep it busy while the
        # driver handles the other. Slow (I/O-bound) agents get the full concurrency.
        fast = sizer.size > 1
        limit = min(config.max_concurrency, 2 * worker_count) if fast else config.max_concurrency
        while call := scheduler.next_call(sizer.size, limit):
            method = workers[next_worker % len(workers)].run_units
            next_worker += 1
            running[(method.options(concurrency_group=SERIAL_GROUP) if fast else method).remote(call, shared)] = call
        if not running:
            time.sleep(0.05)  # only delayed retries remain
            continue
        refs = list(running)
        ready, _ = ray.wait(refs, num_returns=1, timeout=0.1, fetch_local=True)  # wake at the first result
        if ready:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=True)
        stored = []
        for ref in ready:
            call = running.pop(ref)
            scheduler.call_finished(call[0][0].model)
            try:
                rows = ray.get(ref)
            except ray.exceptions.RayError as exc:
                rows = [_system_error_row(u, a, evals[u.eval_index], run_id, config.agent, exc) for u, a in call]
            for (unit, attempt), row in zip(call, rows):
                sizer.observe(row.agent_s)  # a whole unit's wall time inflates with busy threads
                if (kept := finished(unit, attempt, row)) is not None:
                    stored.append(kept)
        writer.add(stored)
