"""The batch driver: plans a run, fans its units out to Ray worker actors, streams their rows to storage."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
import ray

from ..evals import Eval
from ..filesystem import is_s3
from ..record import UnitRecord
from ..storage import ERROR_STATUSES, ResultStore, RowWriter, RunManifest, RunStatus
from ..storage.lease import RunLease, run_lease
from ..storage.spend import EarlierAttempts
from ..storage.store import ResultsRootUnwritable, StorageError
from ..unit.checkpoint import remove_checkpoints, unit_checkpoints
from ..unit.context import AgentFunction
from ..unit.judges import has_judged_graders
from .budget import BudgetSpent, BudgetView, open_budget, stored_spend
from .cluster import connect, shut_down_embedded_ray
from .config import BatchConfig
from .judging import JudgeCalls
from .plan import Unit
from .prepare import PreparedRun, prepare_run
from .progress import Progress
from .queue import UnitQueue, goes_on_from_any_checkpoint, unit_retry_delay
from .resume import rerun_text, resumed_run_id, starting_manifest, units_run_again, units_to_run
from .rows import RunRows
from .stopping import RunCancelled, StopSignals
from .summary import RunSummary, summarize
from .worker import GradeFunction, JudgeWork, WorkerPool, sessions_root, start_pool

log = logging.getLogger(__name__)


def new_run_id() -> str:
    return f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


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

    Ctrl-C or SIGTERM stops the run: the units finished by then are stored, the manifest says
    ``cancelled``, and :class:`RunCancelled` is raised.  A results root (or write-ahead log) that
    cannot be written stops it too: the rows of finished units are stored or in the write-ahead
    log, the manifest says ``failed`` where it can be written, and :class:`ResultsRootUnwritable`
    is raised.
    """
    run = _DriverRun.open(config, evals, agent)
    with StopSignals() as stop_signals:
        try:
            run.execute(stop_signals, agent=agent, grade=grade)
            run.status = "completed"
        except BudgetSpent as exc:  # resumable, as a cancelled run is
            run.status, run.spent = "cancelled", exc
        except KeyboardInterrupt:
            run.status, run.stopped_by = "cancelled", stop_signals.by
        except ResultsRootUnwritable as exc:
            run.unwritable = exc
        finally:
            run.close()
    return run.outcome()


@dataclass
class _DriverRun:
    """A run from its lease taken to its lease released: what its stages share, so that its
    end stores and records whatever it got to, however it stopped."""

    config: BatchConfig
    prepared: PreparedRun
    run_id: str
    store: _LeasedStore
    lease: RunLease
    planned: RunManifest
    writer: RowWriter
    fresh_root: bool  # the results folder did not exist before this run
    #: a bool per plan position: the units without a stored row, or stored ones to run again
    todo: np.ndarray
    earlier_attempts: np.ndarray | None  # the attempts stored of each unit that runs again
    #: a bool per plan position: the unit's first attempt goes on from any checkpoint
    from_any_checkpoint: np.ndarray
    started: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    owns_ray: bool = False
    workers: WorkerPool | None = None
    progress: Progress | None = None
    manifest: RunManifest | None = None  # once written
    to_run: int = 0
    status: RunStatus = "failed"
    stopped_by: int | None = None
    budget_actor: Any = None
    budget: BudgetView | None = None
    spent: BudgetSpent | None = None
    unwritable: ResultsRootUnwritable | None = None
    summary: Future[RunSummary] | None = None

    @classmethod
    def open(cls, config: BatchConfig, evals: list[Eval] | None, agent: AgentFunction | None) -> _DriverRun:
        """Check the run's options and inputs, take its lease, open its writer, and decide what
        it starts from: the manifest it starts or resumes, the units left to run."""
        storage = config.storage
        resumed_run_id(storage)  # options that cannot go together fail before any work
        prepared = prepare_run(config, evals, agent)
        fresh_root = not is_s3(storage.output) and not os.path.exists(storage.output)
        store = _LeasedStore(storage.output, s3_endpoint_url=storage.s3_endpoint_url)
        run_id = storage.run_id or new_run_id()
        # One driver at a time (LeaseHeld names the other one): taken before the run is read or
        # written, renewed in the background, released at the end; the store writes only while it is held.
        lease = store.lease = run_lease(store, run_id).take().start_renewing()
        with contextlib.ExitStack() as undo:  # what a run that cannot start gives back
            undo.callback(lease.release)
            planned = starting_manifest(store, run_id, config, prepared)
            # opened before Ray starts: an unusable results root fails at once; recovers the WAL
            writer = store.open_writer(
                run_id,
                flush_rows=storage.flush_rows,
                flush_seconds=storage.flush_seconds,
                give_up_after_s=storage.store_retry_s,
            )
            undo.callback(writer.close)
            # read once the WAL is recovered, and before Ray starts: a resumed run with nothing
            # left starts none (a new run reads no stored rows)
            todo, earlier_attempts, from_any = units_to_run(storage, store, run_id, prepared.plan)
            undo.pop_all()
        return cls(
            config, prepared, run_id, store, lease, planned, writer, fresh_root, todo, earlier_attempts, from_any
        )

    def execute(self, stop_signals: StopSignals, *, agent: AgentFunction | None, grade: GradeFunction | None) -> None:
        """Start Ray and the workers, say what runs, write the manifest, run the units not stored."""
        config, prepared, plan, todo = self.config, self.prepared, self.prepared.plan, self.todo
        capacity = None
        runs_units = not config.storage.resume or bool(todo.any())
        if runs_units:
            self.owns_ray = connect(config.ray)
        stop_signals.claim()  # after Ray's start, which sets handlers of its own
        if runs_units and len(plan):  # the workers start asynchronously, overlapping the manifest
            self.workers, capacity = start_pool(config, self.run_id, prepared, agent=agent, grade=grade)
        self.to_run = to_run = int(todo.sum())
        results = self.store.run_uri(self.run_id)
        done = f"{len(plan) - to_run} already done{rerun_text(units_run_again(todo, self.earlier_attempts))}"
        header = [f"run {self.run_id}: {to_run} units to run ({done}); results: {results}"]
        if to_run and capacity is not None:
            header.append(capacity(to_run))
        self.progress = Progress(
            to_run, enabled=config.display.show_progress, header="\n".join([*header, *prepared.notes])
        )
        if to_run and self.workers is not None:
            self.workers.wait_until_up()  # before the manifest: a run whose agent cannot run stops with none written
        self.manifest = self.store.write_manifest(self.planned)
        if to_run and self.workers is not None:
            self.progress.units_start()
            budget = self._open_budget()
            with self.lease.interrupts():  # a lost lease stops the run: another driver has it now
                self._run_units(self.workers, self.progress, stop_signals, budget)

    def _run_units(
        self, workers: WorkerPool, progress: Progress, stop_signals: StopSignals, budget: BudgetView | None
    ) -> None:
        """Start units while the limits and the workers' slots allow (and the run's ``budget`` is
        not spent), wait for the next to end, store its row or run it again (a unit whose
        LLM-judged graders need judge calls frees its slot and is graded once they are made).  Each
        pass waits at most 0.1 s for a unit, so a lost lease stops the loop at once.
        :class:`BudgetSpent` when the budget left units unstarted."""
        config, scheduling = self.config, self.config.scheduling
        run = RunRows(self.prepared.evals, self.run_id, config.agent, config.agent_args, self.prepared.secrets)
        queue = UnitQueue(
            self.prepared.plan, self.todo, max_concurrency=scheduling.max_concurrency,
            model_limits=scheduling.model_concurrency, earlier_attempts=self.earlier_attempts,
        )  # fmt: skip
        work = _InFlight(queue, workers, JudgeCalls(scheduling.judge_concurrency), self.from_any_checkpoint)
        if any(has_judged_graders(eval_) for eval_ in run.evals):
            work.judges.start()
        spent_out = False
        while (queue.waiting and not spent_out) or work.busy:
            self.writer.check()  # a results root that cannot be written stops the run: no unit more
            self.lease.stop_if_lost()  # so does a lease another driver holds now
            spent_out = budget is not None and budget.spent_out()
            while not spent_out and workers.free() and (taken := queue.next()) is not None:
                work.start(*taken)
            work.judges.submit()
            refs = work.refs()
            if not refs:
                time.sleep(0.05)  # only delayed retries remain
                continue
            ready, _ = ray.wait(refs, num_returns=1, timeout=0.1)
            if ready:  # and whatever else is done by now
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            with stop_signals.deferred():  # a unit back is stored whole, even if the run stops now
                self._store_units_back(run, ready, work, progress, budget)
        if budget is not None and (queue.waiting or work.refused_by_budget):
            raise BudgetSpent(run.run_id, budget.max_cost_usd, budget.spent(), queue.left(), work.refused_by_budget)

    def _store_units_back(
        self, run: RunRows, ready: list[Any], work: _InFlight, progress: Progress, budget: BudgetView | None
    ) -> None:
        """Settle the calls that are back: store the rows of finished units, queue retries (a
        unit's final row says what its retried attempts used: :mod:`rayeval.storage.spend`);
        what they cost that no gateway counted counts in the run's ``budget`` as they come back."""
        scheduling, earlier_attempts = self.config.scheduling, self.earlier_attempts
        # a row's model (its partition) -> rows to store, of every unit back by now
        kept: dict[str, list[UnitRecord]] = {}
        finished: list[Unit] = []  # of those, the units whose checkpoints no attempt goes on from
        for ref in ready:
            if (done := work.settle(ref, run)) is None:
                continue
            unit, attempt, row = done
            if budget is not None:
                budget.charge(_cost_the_gateway_did_not_count(row))
                work.refused_by_budget += row.limit_reached == "run_cost"
            earlier = 0 if earlier_attempts is None else int(earlier_attempts[unit.position])
            delay = unit_retry_delay(row, attempt, scheduling.retry_backoff_s) if row.retryable else None
            # only a retryable error can be seen_by ray or runner: no other row's metadata is parsed here
            resumable = row.retryable and goes_on_from_any_checkpoint(row.metadata_json)
            if delay is not None and attempt - earlier <= scheduling.retries:  # retries count from this run's first
                work.queue.retry_later(unit, attempt + 1, delay)
                work.resumes[unit.position] = resumable
                work.retried.setdefault(unit.position, EarlierAttempts()).add(row)
            else:
                if (retried := work.retried.pop(unit.position, None)) is not None:
                    row = retried.onto(row)
                kept.setdefault(row.model, []).append(row)
                if not resumable:  # else --retry-errors goes on from its checkpoints
                    finished.append(unit)
        for model, rows in kept.items():  # one WAL write and fsync per model and round
            self.writer.add_lines(model, [row.to_line() for row in rows])
            for row in rows:  # done once on disk, in the write-ahead log
                progress.update(passed=row.passed, error=row.status in ERROR_STATUSES)
        self._remove_checkpoints(finished)

    def _remove_checkpoints(self, units: list[Unit]) -> None:
        """Remove the checkpoints of ``units``, stored: up to 256 MiB each would otherwise pile
        up in the results root over a long run."""
        root = sessions_root(self.config, self.run_id)
        if root is None:
            return
        for unit in units:
            folder = unit_checkpoints(root, unit.eval_id, unit.model, unit.seed)
            remove_checkpoints(folder, self.config.storage.s3_endpoint_url)

    def _open_budget(self) -> BudgetView | None:
        """The run's budget (``--max-cost``), its earlier attempts' cost spent already."""
        max_cost = self.config.scheduling.max_cost_usd
        if max_cost is None:
            return None
        self.budget_actor = open_budget(self.run_id, stored_spend(self.store, self.run_id))
        self.budget = BudgetView(self.run_id, max_cost)
        return self.budget

    def close(self) -> None:
        """Store what is buffered and record how the run ended (unless another driver has it
        now), release the lease, and stop what the run started."""
        try:
            if self.progress is not None:
                self.progress.close()
            if self.lease.lost is not None:
                # another driver has the run now: store nothing more (the leased store refuses; rows
                # not stored stay in the WAL, where a later --resume finds those still missing) and
                # leave the manifest to that driver
                try:
                    self.writer.close(timeout=0)
                except StorageError as exc:
                    log.warning("%s", exc)
            else:
                self.store.end_run(self.writer, self.manifest, self.status, self.unwritable)
                if self.status == "completed":  # read back while Ray shuts down
                    planned = len(self.prepared.plan)
                    self.summary = _in_background(
                        summarize, self.store, self.run_id, total_units=planned, skipped=planned - self.to_run,
                        ran=self.to_run, started=self.started,
                    )  # fmt: skip
        finally:
            self.lease.release()
            if self.manifest is None and self.fresh_root:  # stopped before it began (its agent cannot run)
                with contextlib.suppress(OSError):
                    os.rmdir(self.config.storage.output)  # only if the run left it empty
            if self.workers is not None and self.status != "completed":
                self.workers.end_all()  # calls in flight end now, not in Ray's shutdown (which logs each)
            if self.budget is not None:
                self.budget.close()
            if self.budget_actor is not None:
                with contextlib.suppress(Exception):  # Ray is going: so is the actor
                    ray.kill(self.budget_actor)
            if self.owns_ray:
                shut_down_embedded_ray()

    def outcome(self) -> RunSummary:
        """The summary of a completed run, or the error that stopped it."""
        if self.lease.lost is not None:
            raise self.lease.lost
        if self.unwritable is not None:
            raise self.unwritable
        if self.stopped_by is not None:
            raise RunCancelled(self.run_id, self.stopped_by)
        if self.spent is not None:
            raise self.spent
        assert self.summary is not None, "a completed run's summary is being read"
        return self.summary.result()


def _in_background(function: Callable[..., RunSummary], *args: Any, **kwargs: Any) -> Future[RunSummary]:
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="summary")
    try:
        return executor.submit(function, *args, **kwargs)
    finally:
        executor.shutdown(wait=False)  # its thread ends with the call


class _LeasedStore(ResultStore):
    """The results root as the driver writes it: nothing is stored (parts, manifest) or moved
    (damaged parts to the quarantine) once the run's lease is lost to another driver, nor while
    it has lapsed unrenewed (see RunLease)."""

    lease: RunLease | None = None

    def put_atomic(self, path: str, data: bytes) -> None:
        if self.lease is not None:
            self.lease.check_writable()
        super().put_atomic(path, data)

    def move(self, source: str, target: str) -> None:
        if self.lease is not None:
            self.lease.check_writable()
        super().move(source, target)


def _cost_the_gateway_did_not_count(row: UnitRecord) -> float:
    """A row's judges' cost, and its agent's where the agent ran in the worker (the prompt
    agent, ``--isolation inline``: no gateway counted its calls as they were made)."""
    costs = [row.judge_cost_usd, row.agent_cost_usd if row.n_model_calls is None else None]
    return sum(cost for cost in costs if cost is not None and math.isfinite(cost) and cost > 0)


@dataclass
class _InFlight:
    """What the driver waits on: agent calls (each holding a slot), judge calls, and the
    second grading passes of judged units."""

    queue: UnitQueue
    workers: WorkerPool
    judges: JudgeCalls
    #: a bool per plan position: the unit's next attempt goes on from its newest checkpoint,
    #: whichever attempt saved it (:func:`.queue.goes_on_from_any_checkpoint`), where its
    #: chunked session saved one (an attempt that could not run made none, and one that
    #: started afresh left none of those before)
    resumes: np.ndarray
    running: dict[Any, tuple[Unit, int]] = field(default_factory=dict)
    grading: dict[Any, tuple[Unit, int]] = field(default_factory=dict)
    #: units stored whose model calls the run's spent budget refused (a resume runs them again)
    refused_by_budget: int = 0
    #: by plan position, what the attempts of a unit waiting for its retry used (its final row
    #: says it): only those units hold anything
    retried: dict[int, EarlierAttempts] = field(default_factory=dict)

    def start(self, unit: Unit, attempt: int) -> None:
        """Submit a unit's attempt (it holds a slot until it is back)."""
        from_any_checkpoint = bool(self.resumes[unit.position])
        self.resumes[unit.position] = False  # a retry decides anew from its row
        self.running[self.workers.submit(unit, attempt, from_any_checkpoint)] = (unit, attempt)

    @property
    def busy(self) -> bool:
        return bool(self.running or self.grading or self.judges.busy)

    def refs(self) -> list[Any]:
        return [*self.running, *self.grading, *self.judges.in_flight, *self.workers.starting]

    def settle(self, ref: Any, run: RunRows) -> tuple[Unit, int, UnitRecord] | None:
        """The unit, attempt and row that ``ref`` (ready) finished, or None when it finished
        something else (a worker's start, a judge call, a unit's agent before its judges)."""
        if self.workers.came_up(ref):
            return None
        if ref in self.judges.in_flight:
            judged = self.judges.finished(ref)
            if judged is not None:
                graded = self.workers.grade(judged.unit, judged.attempt, judged.execution, judged.outcomes)
                self.grading[graded] = (judged.unit, judged.attempt)
            return None
        if ref in self.running:
            unit, attempt = self.running.pop(ref)
            self.workers.finished(ref)
            self.queue.finished(unit.model)
        else:
            unit, attempt = self.grading.pop(ref)
            self.workers.finished(ref)
        result = _unit_result(ref, unit, attempt, run)
        if isinstance(result, JudgeWork):
            self.judges.add(unit, attempt, result)
            return None
        return unit, attempt, result


def _unit_result(ref: Any, unit: Unit, attempt: int, run: RunRows) -> UnitRecord | JudgeWork:
    """The worker's answer, or an error row when Ray could not run the unit (after its retries)."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as exc:
        return run.system_error(unit, attempt, exc)
