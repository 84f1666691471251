"""The batch driver: fans units out to Ray actors, grades in batches, streams rows to storage."""
from __future__ import annotations

import math
import os
import secrets
import time
from datetime import datetime, timezone
from typing import Any, Literal

import ray
from pydantic import BaseModel, ConfigDict, Field

from ..agents.resolve import INLINE_AGENTS, resolve_agent
from ..evals import Eval, load_evals
from ..harness.execution import Execution, grade_execution
from ..harness.result import EvalResult
from ..storage import EvalFileRef, PlanEntry, ResultRow, ResultStore, RunManifest
from .plan import Unit, plan_units
from .progress import Progress
from .rows import row_from_result
from .scheduler import ChunkSizer, Scheduler
from .summary import RunSummary, summarize
from .worker import WorkerConfig, start_workers

GRADE_BATCH_SIZE = 64
GRADE_BATCH_WAIT_S = 0.25
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


class GradeItem(BaseModel):
    """One finished execution waiting for its grade, with what its stored row needs."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    unit: Unit
    attempt: int
    node: str
    execution: Execution


def grade_items(evals: list[Eval], items: list[GradeItem], *, run_id: str, agent: str) -> list[tuple[ResultRow, EvalResult]]:
    """Grade and build the stored rows: pure, cheap, and the same wherever it runs."""
    graded = []
    for item in items:
        eval_ = evals[item.unit.eval_index]
        result = grade_execution(eval_, item.execution)
        row = row_from_result(result, unit=item.unit, eval_=eval_, run_id=run_id, agent=agent, attempt=item.attempt, node=item.node)
        graded.append((row, result))
    return graded


@ray.remote(num_cpus=0.25, max_retries=3)
def grade_batch(evals: list[Eval], items: list[GradeItem], run_id: str, agent: str) -> list[tuple[ResultRow, EvalResult]]:
    """Grading is microseconds per unit: batching keeps Ray's round trip off the unit path."""
    return grade_items(evals, items, run_id=run_id, agent=agent)


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


def _system_error_execution(unit: Unit, run_id: str, exc: BaseException) -> Execution:
    stamp = datetime.now(timezone.utc)
    return Execution(
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


def run_batch(config: BatchConfig) -> RunSummary:
    """Plan, run and store a batch; returns the run's summary. Resumable with the same run id."""
    evals = load_evals(*config.evals)  # every eval is validated before any work starts
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
        eval_files=[EvalFileRef(path=str(e.source_path), id=e.id, eval_hash=e.content_hash()) for e in evals],
        plan=[PlanEntry(unit_id=u.unit_id, eval_id=u.eval_id, model=u.model, seed=u.seed) for u in units],
        created_at=previous.created_at if previous else started,
    )
    store.write_manifest(manifest)
    progress = Progress(len(todo), enabled=config.show_progress)
    status = "failed"
    try:
        owns_ray = connect(config)
        _execute(config, run_id, evals, todo, writer, progress)
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


def _execute(config: BatchConfig, run_id: str, evals: list[Eval], todo: list[Unit], writer: Any, progress: Progress) -> None:
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
    )
    evals_ref = ray.put(evals)
    workers = start_workers(worker_config, evals_ref, count=worker_count, threads_per_worker=threads)
    grade_batch.remote(evals_ref, [], run_id, config.agent)  # start a grading worker now, not at the first result
    scheduler = Scheduler(todo, max_concurrency=config.max_concurrency, model_limits=config.model_concurrency)
    sizer = ChunkSizer()
    running: dict[Any, list[tuple[Unit, int]]] = {}
    grading: dict[Any, list[GradeItem]] = {}
    to_grade: list[GradeItem] = []
    first_waiting = 0.0
    written: set[str] = set()
    next_worker = 0

    def store(graded: list[tuple[ResultRow, EvalResult]]) -> None:
        rows = []
        for row, result in graded:
            if row.unit_id in written:  # a retried Ray call may deliver a unit twice: keep the first
                continue
            written.add(row.unit_id)
            rows.append(row)
            progress.update(passed=result.passed, error=result.status in ERROR_STATUSES)
        writer.add(rows)

    def flush_grading() -> None:
        nonlocal to_grade
        grading[grade_batch.remote(evals_ref, to_grade, run_id, config.agent)] = to_grade
        to_grade = []

    def unit_done(unit: Unit, attempt: int, execution: Execution, node: str) -> None:
        nonlocal first_waiting
        if execution.outcome == "error" and attempt <= config.retries:
            scheduler.retry_later(unit, attempt + 1, config.retry_backoff_s * 2 ** (attempt - 1))
            return
        if not to_grade:
            first_waiting = time.monotonic()
        to_grade.append(GradeItem(unit=unit, attempt=attempt, node=node, execution=execution))

    while not scheduler.idle or running or grading or to_grade:
        # Fast units travel many to a call; more calls in flight than workers can use only
        # adds thread contention, so the full concurrency is for slow (I/O-bound) agents.
        limit = config.max_concurrency if sizer.size == 1 else min(config.max_concurrency, 2 * worker_count)
        while call := scheduler.next_call(sizer.size, limit):
            worker = workers[next_worker % len(workers)]
            next_worker += 1
            running[worker.execute_many.remote([unit for unit, _ in call])] = call

        if to_grade and (len(to_grade) >= GRADE_BATCH_SIZE or time.monotonic() - first_waiting >= GRADE_BATCH_WAIT_S or not running):
            flush_grading()

        refs = list(running) + list(grading)
        if not refs:
            time.sleep(0.05)  # only delayed retries remain
            continue
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0.1, fetch_local=True)
        for ref in ready:
            if ref in grading:
                items = grading.pop(ref)
                try:
                    graded = ray.get(ref)
                except ray.exceptions.RayError:
                    # grading is pure and cheap: redo it here rather than lose the batch
                    graded = grade_items(evals, items, run_id=run_id, agent=config.agent)
                store(graded)
                continue
            call = running.pop(ref)
            scheduler.call_finished(call[0][0].model)
            try:
                outcomes = ray.get(ref)
            except ray.exceptions.RayError as exc:
                outcomes = [(_system_error_execution(unit, run_id, exc), "unknown") for unit, _ in call]
            for (unit, attempt), (execution, node) in zip(call, outcomes):
                sizer.observe(execution.agent_s)  # wall time of the whole unit inflates with busy threads
                unit_done(unit, attempt, execution, node)
