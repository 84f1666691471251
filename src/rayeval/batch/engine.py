"""The batch driver: fans units out to Ray actors, grades in batches, streams rows to storage."""
from __future__ import annotations

import heapq
import math
import os
import secrets
import time
from collections import Counter, deque
from datetime import datetime, timezone
from typing import Any, Literal

import ray
from pydantic import BaseModel, Field

from ..agents.resolve import INLINE_AGENTS, resolve_agent
from ..evals import Eval, load_evals
from ..harness.execution import Execution, grade_execution
from ..harness.result import EvalResult
from ..storage import EvalFileRef, PlanEntry, ResultStore, RunManifest
from .plan import Unit, plan_units
from .progress import Progress
from .rows import row_from_result
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


@ray.remote(num_cpus=0.25, max_retries=3)
def grade_batch(evals: list[Eval], items: list[tuple[int, Execution]]) -> list[EvalResult]:
    """Grading is microseconds per unit: batching keeps Ray's round trip off the unit path."""
    return [grade_execution(evals[index], execution) for index, execution in items]


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


class _Scheduler:
    """Which unit runs next: per-model queues, round robin, within global and per-model limits."""

    def __init__(self, units: list[Unit], config: BatchConfig):
        self.queues: dict[str, deque[tuple[Unit, int]]] = {}
        for unit in units:
            self.queues.setdefault(unit.model, deque()).append((unit, 1))
        self.delayed: list[tuple[float, int, Unit, int]] = []
        self.running: Counter[str] = Counter()
        self.limits = config.model_concurrency
        self.max_total = config.max_concurrency
        self._sequence = 0
        self._order = deque(self.queues)

    def retry_later(self, unit: Unit, attempt: int, delay_s: float) -> None:
        self._sequence += 1
        heapq.heappush(self.delayed, (time.monotonic() + delay_s, self._sequence, unit, attempt))

    def next_ready(self) -> tuple[Unit, int] | None:
        now = time.monotonic()
        while self.delayed and self.delayed[0][0] <= now:
            _, _, unit, attempt = heapq.heappop(self.delayed)
            self.queues.setdefault(unit.model, deque()).appendleft((unit, attempt))
            if unit.model not in self._order:
                self._order.append(unit.model)
        if sum(self.running.values()) >= self.max_total:
            return None
        for _ in range(len(self._order)):
            model = self._order[0]
            self._order.rotate(-1)
            queue = self.queues.get(model)
            if queue and self.running[model] < self.limits.get(model, self.max_total):
                self.running[model] += 1
                return queue.popleft()
        return None

    def finished(self, unit: Unit) -> None:
        self.running[unit.model] -= 1

    @property
    def idle(self) -> bool:
        return not self.delayed and not any(self.queues.values()) and not sum(self.running.values())


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
    workers = start_workers(worker_config, count=worker_count, threads_per_worker=threads)
    eval_refs = [ray.put(eval_) for eval_ in evals]
    evals_ref = ray.put(evals)
    grade_batch.remote(evals_ref, [])  # start a grading worker now, not when the first unit is done
    scheduler = _Scheduler(todo, config)
    running: dict[Any, tuple[Unit, int]] = {}
    grading: dict[Any, list[tuple[Unit, int, str, Execution]]] = {}
    to_grade: list[tuple[Unit, int, str, Execution]] = []
    first_waiting = 0.0
    written: set[str] = set()
    next_worker = 0

    def store_results(batch: list[tuple[Unit, int, str, Execution]], results: list[EvalResult]) -> None:
        rows = []
        for (unit, attempt, node, _), result in zip(batch, results):
            if unit.unit_id in written:  # a retried Ray call may deliver a unit twice: keep the first
                continue
            written.add(unit.unit_id)
            rows.append(row_from_result(result, unit=unit, eval_=evals[unit.eval_index], run_id=run_id, agent=config.agent, attempt=attempt, node=node))
            progress.update(passed=result.passed, error=result.status in ERROR_STATUSES)
        writer.add(rows)

    def flush_grading() -> None:
        nonlocal to_grade
        if not to_grade:
            return
        items = [(unit.eval_index, execution) for unit, _, _, execution in to_grade]
        grading[grade_batch.remote(evals_ref, items)] = to_grade
        to_grade = []

    while not scheduler.idle or running or grading or to_grade:
        while (picked := scheduler.next_ready()) is not None:
            unit, attempt = picked
            worker = workers[next_worker % len(workers)]
            next_worker += 1
            running[worker.execute.remote(unit, eval_refs[unit.eval_index])] = (unit, attempt)

        if to_grade and (len(to_grade) >= GRADE_BATCH_SIZE or time.monotonic() - first_waiting >= GRADE_BATCH_WAIT_S or not running):
            flush_grading()

        refs = list(running) + list(grading)
        if not refs:
            time.sleep(0.05)  # only delayed retries remain
            continue
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0.1, fetch_local=True)
        for ref in ready:
            if ref in grading:
                batch = grading.pop(ref)
                try:
                    results = ray.get(ref)
                except ray.exceptions.RayError:
                    # grading is pure and cheap: redo it here rather than lose the batch
                    results = [grade_execution(evals[unit.eval_index], execution) for unit, _, _, execution in batch]
                store_results(batch, results)
                continue
            unit, attempt = running.pop(ref)
            scheduler.finished(unit)
            try:
                execution, node = ray.get(ref)
            except ray.exceptions.RayError as exc:
                execution, node = _system_error_execution(unit, run_id, exc), "unknown"
            if execution.outcome == "error" and attempt <= config.retries:
                scheduler.retry_later(unit, attempt + 1, config.retry_backoff_s * 2 ** (attempt - 1))
                continue
            if not to_grade:
                first_waiting = time.monotonic()
            to_grade.append((unit, attempt, node, execution))
