"""The batch driver: plans a run, fans its units out to Ray worker actors, streams their rows to storage."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
import ray

from ..agents.labels import row_labels
from ..agents.resolve import agent_ref, check_agent_args, resolve_agent
from ..errors import RayevalError
from ..evals import Eval, EvalFileError, load_evals, select_evals
from ..evals.loader import EvalProblem
from ..filesystem import is_s3
from ..graders.rubric import check_judge_key, judge_models
from ..grading.judges import has_judged_graders
from ..harness.context import AgentFunction, UnitResources
from ..harness.execution import Execution, grade_execution
from ..harness.remote_data import remote_data_problems
from ..models.providers import ModelError
from ..record import UnitRecord
from ..sandbox.config import SandboxConfig
from ..storage import (
    ERROR_STATUSES,
    ResultStore,
    RowWriter,
    RunManifest,
    RunStatus,
)
from ..storage.layout import s3_wal_base
from ..storage.lease import RunLease, run_lease
from ..storage.store import (
    ManifestError,
    ResultsRootUnwritable,
    StorageError,
    describe_write_error,
)
from .capacity import NodeResources, describe_capacity, pool_shape
from .config import BatchConfig, RayConfig, SchedulingConfig, StorageConfig
from .judging import JudgeCalls
from .plan import Plan, Unit, compact_seeds, plan_changes, unstored
from .progress import Progress
from .queue import UnitQueue, unit_retry_delay
from .rows import row_from_result
from .stopping import RunCancelled, StopSignals
from .summary import RunSummary, summarize
from .worker import GradeFunction, JudgeWork, WorkerConfig, WorkerPool, start_workers

log = logging.getLogger(__name__)


class RunConflict(RayevalError, ValueError):
    """The run id already holds results (without --resume), or --resume has nothing to resume."""


class RayVersionMismatch(RayevalError):
    """The cluster runs another Ray or Python than this driver: Ray refuses the connection."""


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


def connect(config: RayConfig) -> bool:
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
        # Ray turns token authentication on for a new local cluster and says so on stderr at every
        # start, adding how to turn it off: it stays on, unannounced (RAY_AUTH_MODE still decides)
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
        # No runtime_env: its environment variables would keep actors off the worker processes
        # Ray has already started.  Ray puts the driver's working folder on the workers'
        # sys.path itself, so module:function agents of the caller's project import there too.
        ray.init(
            address="local",
            include_dashboard=False,
            object_store_memory=config.object_store_memory,
            log_to_driver=False,
            configure_logging=False,
        )
        return True
    try:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    except RuntimeError as exc:  # Ray's own check: "Version mismatch: The cluster was started with ..."
        versions = _VERSIONS.findall(str(exc))
        if not str(exc).startswith("Version mismatch") or len(versions) != 2:
            raise
        ray.shutdown()  # what ray.init set up before it refused
        where = os.environ.get("RAY_ADDRESS", address) if address == "auto" else address
        raise RayVersionMismatch(_mismatch_message(str(where), *versions)) from None
    return False


# "Ray: 2.59.0\n    Python: 3.11.7" in Ray's mismatch message, the cluster's first, then this process's
_VERSIONS = re.compile(r"Ray: (\S+)\s+Python: (\S+)")


def _mismatch_message(address: str, cluster: tuple[str, str], driver: tuple[str, str]) -> str:
    (cluster_ray, cluster_python), (driver_ray, driver_python) = cluster, driver
    return (
        f"the Ray cluster at {address} runs Ray {cluster_ray} on Python {cluster_python}, and this driver Ray "
        f"{driver_ray} on Python {driver_python}: a driver and its cluster need the same Ray and Python versions. "
        f"Install ray[default]=={cluster_ray} under Python {cluster_python} here, or submit the run to the cluster "
        "(ray job submit: its driver runs in the cluster's environment)"
    )


def shut_down_embedded_ray() -> None:
    """``ray.shutdown()`` of the Ray ``connect`` started, less the second it spends on the
    autoscaler monitor: Ray stops the GCS first, then asks the monitor to stop, whose SIGTERM
    handler reports to the gone GCS until Ray kills it a second later.  A single node has
    nothing to scale, and the monitor holds no state: it is killed outright first."""
    node = getattr(ray._private.worker, "_global_node", None)
    try:
        if node is not None:
            node.kill_monitor(check_alive=False)
    except Exception as exc:  # noqa: BLE001 - ray.shutdown ends it then, a second later
        log.debug("ending Ray's autoscaler monitor: %s", exc)
    ray.shutdown()


@dataclass(frozen=True)
class _RunRows:
    """What the rows the driver makes itself carry of the run (see :func:`row_from_result`)."""

    evals: list[Eval]
    run_id: str
    agent: str
    agent_args: dict[str, str]

    def model_label(self, model: str) -> str:
        """The model as the run's rows (and their partitions) name it."""
        return row_labels(self.agent, model, self.agent_args)[0]

    def system_error(self, unit: Unit, attempt: int, exc: BaseException) -> UnitRecord:
        """The row of a unit Ray could not run even after its own retries (e.g. a node kept dying)."""
        stamp = datetime.now(timezone.utc)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        execution = Execution(
            eval_id=unit.eval_id,
            model=unit.model,
            seed=unit.seed,
            run_id=self.run_id,
            outcome="error",
            error_type=type(exc).__name__,
            error_message=f"Ray could not run the unit: {reason}",
            error_traceback=str(exc),
            started_at=stamp,
            finished_at=stamp,
        )
        eval_ = self.evals[unit.eval_index]
        return row_from_result(
            grade_execution(eval_, execution),
            unit=unit,
            eval_=eval_,
            run_id=self.run_id,
            agent=self.agent,
            agent_args=self.agent_args,
            attempt=attempt,
            node="unknown",
        )


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
    evals = run_evals(config, evals)
    storage = config.storage
    if storage.retry_errors and not storage.resume:
        raise RunConflict("--retry-errors goes with --resume: it reruns the errored units of an existing run")
    fresh_root = not is_s3(storage.output) and not os.path.exists(storage.output)
    store = _LeasedStore(storage.output, s3_endpoint_url=storage.s3_endpoint_url)
    embedded = runs_embedded(config.ray.address)
    # an unknown agent, a missing data file or judge key is a usage error, not thousands of
    # error rows, found before the run's rows are touched (so is an agent that does not load, or
    # a sandbox that does not start, where units run: the workers check that first)
    check_agent(config, agent, embedded=embedded)
    judges_note = check_judges(evals, embedded=embedded)
    if config.check_data:
        check_data(evals, s3_endpoint_url=storage.s3_endpoint_url)
    run_id = storage.run_id or new_run_id()
    # One driver at a time (LeaseHeld names the other one): taken before the run is read or
    # written, renewed in the background, released at the end; the store writes only while it is held.
    lease = store.lease = run_lease(store, run_id).take().start_renewing()
    try:
        previous, damaged = previous_manifest(store, run_id, storage)
        if storage.resume and previous is None and not damaged:
            raise RunConflict(f"--resume: no run {run_id!r} under {storage.output}")
        if not storage.resume and previous is not None:
            raise RunConflict(_existing_run(run_id, storage.output, previous.status))
        if previous is not None and previous.agent != config.agent:
            raise RunConflict(f"run {run_id!r} was made with agent {previous.agent!r}, not {config.agent!r}")
        plan = Plan(evals, config.models, config.seeds, config.agent)
        planned = run_manifest(config, run_id, evals, plan, previous)
        if previous is not None:
            check_same_inputs(previous, planned, config.agent_args, force=storage.force)

        # opened before Ray starts: an unusable results root fails at once; recovers the WAL
        writer = store.open_writer(
            run_id,
            flush_rows=storage.flush_rows,
            flush_seconds=storage.flush_seconds,
            give_up_after_s=storage.store_retry_s,
        )
    except BaseException:
        lease.release()
        raise
    started = datetime.now(timezone.utc)
    owns_ray = False
    progress: Progress | None = None
    manifest: RunManifest | None = None  # once written
    status: RunStatus = "failed"
    stopped_by: int | None = None
    unwritable: ResultsRootUnwritable | None = None
    workers: WorkerPool | None = None
    summary: Future[RunSummary] | None = None
    with StopSignals() as stop_signals:
        try:
            owns_ray = connect(config.ray)
            stop_signals.claim()
            # Workers start (asynchronously) first: their start-up overlaps planning and the
            # manifest.  A resumed run may need fewer; idle ones cost nothing.
            workers, capacity = (
                _start_pool(config, run_id, evals, len(plan), agent=agent, grade=grade, embedded=embedded)
                if len(plan)
                else (None, None)
            )
            # a bool per plan position: units without a stored row (a resumed run's are mostly stored)
            todo, earlier_attempts = units_to_run(storage, store, run_id, plan)
            to_run = int(todo.sum())
            header = [
                f"run {run_id}: {to_run} units to run ({len(plan) - to_run} already stored); results: {store.run_uri(run_id)}"
            ]
            if to_run and capacity is not None:
                header.append(capacity(to_run))
            progress = Progress(to_run, enabled=config.display.show_progress, header="\n".join([*header, *judges_note]))
            if to_run and workers is not None:
                workers.wait_until_up()
            manifest = store.write_manifest(planned)
            if to_run and workers is not None:
                with lease.interrupts():  # a lost lease stops the run: another driver has it now
                    _execute(
                        config.scheduling,
                        _RunRows(evals, run_id, config.agent, config.agent_args),
                        plan,
                        todo,
                        earlier_attempts,
                        writer,
                        progress,
                        workers,
                        lease,
                        stop_signals,
                    )
            status = "completed"
        except KeyboardInterrupt:
            status = "cancelled"
            stopped_by = stop_signals.by
        except ResultsRootUnwritable as exc:
            unwritable = exc
        finally:
            try:
                if lease.lost is None:
                    _close_run(store, writer, progress, manifest, status, unwritable)
                    if status == "completed":  # read back while Ray shuts down
                        summary = _in_background(
                            summarize, store, run_id, total_units=len(plan), skipped=len(plan) - to_run,
                            ran=to_run, started=started,
                        )  # fmt: skip
                else:
                    _abandon_run(writer, progress)
            finally:
                lease.release()
                if manifest is None and fresh_root:  # stopped before it began (its agent cannot run)
                    with contextlib.suppress(OSError):
                        os.rmdir(storage.output)  # only if the run left it empty
                if workers is not None and status != "completed":
                    workers.end_all()  # calls in flight end now, not in Ray's shutdown (which logs each)
                if owns_ray:
                    shut_down_embedded_ray()
    if lease.lost is not None:
        raise lease.lost
    if unwritable is not None:
        raise unwritable
    if stopped_by is not None:
        raise RunCancelled(run_id, stopped_by)
    assert summary is not None, "a completed run's summary is being read"
    return summary.result()


def _in_background(function: Callable[..., RunSummary], *args: Any, **kwargs: Any) -> Future[RunSummary]:
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="summary")
    try:
        return executor.submit(function, *args, **kwargs)
    finally:
        executor.shutdown(wait=False)  # its thread ends with the call


def _existing_run(run_id: str, output: str, status: str) -> str:
    """Why a new run cannot take ``run_id``, and what to do instead: a finished run has
    nothing left to resume (its errored units can run again)."""
    where = f"run {run_id!r} already exists under {output}"
    if status == "completed":
        return (
            f"{where} and is finished: choose another --run-id (or none, for a new one); "
            f"--retry-errors --run-id {run_id} runs its errored units again"
        )
    left = "interrupted" if status == "running" else status  # this driver holds its lease: nobody runs it
    return f"{where} ({left}): pass --resume to finish it"


def previous_manifest(store: ResultStore, run_id: str, config: StorageConfig) -> tuple[RunManifest | None, bool]:
    """The run's stored manifest, and whether it is damaged (not a run manifest).  A damaged
    one leaves the run's inputs unknown: only ``--resume --force`` goes on, with the current
    inputs (its stored units are not run again); anything else is refused saying so."""
    try:
        return store.read_manifest(run_id), False
    except ManifestError as exc:
        if not (config.resume and config.force):
            raise ManifestError(
                f"{exc}: the inputs run {run_id!r} was planned with are unknown; "
                "--resume --force finishes it with the current inputs (its stored units are not run again)"
            ) from None
        log.warning("--resume --force: %s; replaced by the manifest of the current inputs", exc)
        return None, True


def run_evals(config: BatchConfig, evals: list[Eval] | None = None) -> list[Eval]:
    """The evals the run covers: ``evals``, or every eval of ``config.evals`` (each validated
    before any work starts), then the selection (``sample_ids``, ``filters``, ``limit``)."""
    if evals is None:
        evals = load_evals(*config.evals, data_roots=config.data_roots)
    return select_evals(evals, sample_ids=config.sample_ids, filters=config.filters, limit=config.limit)


def units_to_run(
    config: StorageConfig, store: ResultStore, run_id: str, plan: Plan
) -> tuple[np.ndarray, np.ndarray | None]:
    """A bool per plan position, the units to run (a resumed run's stored ones are not), and
    with ``retry_errors`` the attempts already stored of each unit that runs again (else None)."""
    stored = store.stored_unit_id_array(run_id) if config.resume else np.array([], dtype="S32")
    if not config.retry_errors:
        return unstored(plan, stored), None
    errored = store.errored_units(run_id)
    again = np.sort(np.array(list(errored), dtype="S32"))
    todo = unstored(plan, stored[~np.isin(stored, again)])
    earlier = np.zeros(len(plan), dtype=np.int32)
    for position in np.flatnonzero(~unstored(plan, again)):
        earlier[position] = errored[plan.unit(int(position)).unit_id]
    return todo, earlier


def run_manifest(
    config: BatchConfig, run_id: str, evals: list[Eval], plan: Plan, previous: RunManifest | None
) -> RunManifest:
    """The run's manifest: the inputs its units are derived from, not the units."""
    execution = config.execution
    return RunManifest.model_validate(
        {
            "run_id": run_id,
            "agent": config.agent,
            "agent_args": config.agent_args,
            "isolation": execution.isolation,
            "network": execution.sandbox.network if execution.isolation == "sandbox" else None,
            "timeout": execution.timeout,
            "grade_timeout": execution.grade_timeout,
            "answer_convention": execution.answer_convention,
            "limits": execution.sandbox.limits.model_dump(),
            "models": config.models,
            "seeds": compact_seeds(config.seeds),
            "eval_files": [
                {"path": str(e.source_path or "<in-memory>"), "id": e.id, "eval_hash": e.content_hash()} for e in evals
            ],
            "plan_digest": plan.digest(),
            "total_units": len(plan),
            **({"created_at": previous.created_at} if previous else {}),
        }
    )


def check_same_inputs(previous: RunManifest, manifest: RunManifest, agent_args: dict[str, str], *, force: bool) -> None:
    """A resumed run finishes the plan it started with: with other inputs its stored rows and
    the new ones would mix two experiments (``force`` takes the new inputs knowingly)."""
    changes = plan_changes(previous, manifest, agent_args)
    if not changes:
        return
    diff = "".join(f"\n  {change}" for change in changes)
    if not force:
        raise RunConflict(
            f"--resume: run {previous.run_id!r} was planned with other inputs (before → after):{diff}\n"
            "Its rows and new ones would mix two experiments. Restore those inputs, start a new run "
            "(another --run-id), or pass --force to resume with the new inputs."
        )
    log.warning(
        "--resume --force: run %s goes on with new inputs (units with new ids run, stored rows stay):%s",
        previous.run_id,
        diff,
    )


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


def _abandon_run(writer: RowWriter, progress: Progress | None) -> None:
    """End a run whose lease another driver holds now: store nothing more (the leased store
    refuses; rows not stored stay in the WAL, where a later --resume finds those still missing)
    and leave the manifest to that driver."""
    if progress is not None:
        progress.close()
    try:
        writer.close(timeout=0)
    except StorageError as exc:
        log.warning("%s", exc)


def _close_run(
    store: ResultStore,
    writer: RowWriter,
    progress: Progress | None,
    manifest: RunManifest | None,
    status: RunStatus,
    unwritable: ResultsRootUnwritable | None = None,
) -> None:
    """Store the buffered rows, then record how the run ended: failed if rows could not be
    stored (they stay in the WAL for the next ``--resume``; the writer's error, which says so,
    is what propagates, even when the manifest cannot be written either), or if the run stopped
    because its results root cannot be written (``unwritable``: it is told what became of the
    manifest)."""
    if progress is not None:
        progress.close()
    ended: RunStatus = "failed" if status == "completed" else status
    try:
        writer.close()
    except ResultsRootUnwritable as exc:
        _record_stop(store, manifest, ended, exc)
        raise
    except BaseException:
        _record_stop(store, manifest, ended, unwritable)
        raise
    if unwritable is not None:
        _record_stop(store, manifest, ended, unwritable)
    elif manifest is not None:
        store.write_manifest(manifest.with_status(status))


def _record_stop(
    store: ResultStore, manifest: RunManifest | None, status: RunStatus, unwritable: ResultsRootUnwritable | None
) -> None:
    """Record in the manifest how a run that could not store everything ended, if the manifest
    can be written (it is replaced whole or not at all); ``unwritable`` is told which."""
    if manifest is None:
        return
    try:
        store.write_manifest(manifest.with_status(status))
    except Exception as exc:  # noqa: BLE001 - the run's own error says why it stopped
        if unwritable is None:
            log.warning("run %s: cannot record its status in the manifest: %s", manifest.run_id, exc)
        else:  # said in the run's one message
            unwritable.manifest_note = (
                f"its manifest could not be marked {status} either ({describe_write_error(exc)}) and still says running"
            )
        return
    if unwritable is not None:
        unwritable.manifest_note = f"its manifest says {status}"


def sandbox_config(sandbox: SandboxConfig, output: str, evals: list[Eval]) -> SandboxConfig:
    """The run's sandbox: the configured one, with the results root ``output`` and its
    write-ahead log (for an S3 root, in this machine's cache folder: its rows name expected
    values) and every eval's folders (answer keys) hidden from agents as well."""
    hidden = [*sandbox.hide, *(str(root) for eval_ in evals for root in eval_.data_roots)]
    hidden.append(str(s3_wal_base() if is_s3(output) else output))
    return sandbox.model_copy(update={"hide": tuple(dict.fromkeys(hidden))})


def check_agent(config: BatchConfig, agent: AgentFunction | None, *, embedded: bool) -> None:
    """A built-in agent's options (and, where units share this environment, its key); an
    inline agent resolves.  Whether a sandboxed or ``process`` agent loads is checked where
    units run, by the run's workers before the first unit (``UnitWorker.prepare``), or by a dry
    run on this machine (see rayeval.batch.preview)."""
    if agent is None:
        check_agent_args(config.agent, config.agent_args, config.models, environment=embedded)
    if embedded:  # a cluster's nodes have their own files
        config.execution.sandbox.check_binds()
    if config.execution.isolation == "inline" and agent is None:
        resolve_agent(config.agent)


def check_judges(evals: list[Eval], *, embedded: bool) -> list[str]:
    """Every rubric judge of the run's evals can be called.  Where the judges run with this
    process's environment (``embedded``: an embedded Ray), their keys are there: else EvalFileError naming,
    per judge model without one, the first eval file and field that names it.  Elsewhere (a
    cluster, whose nodes' environment the judge actor has), the note saying what is not checked."""
    used: dict[str, list[tuple[str, str]]] = {}
    for eval_ in evals:
        specs = [spec.model_dump() for spec in eval_.grader_specs]
        named = judge_models(specs[0], "grader") if eval_.grader is not None else judge_models(specs, "graders")
        for where, model in named:
            used.setdefault(model, []).append((str(eval_.source_path or f"<eval {eval_.id}>"), where))
    if not used:
        return []
    if not embedded:
        note = f"judges {', '.join(used)}: names checked; their keys are read on the cluster's nodes, not checked here"
        return [note]
    problems = []
    for model, naming in used.items():
        try:
            check_judge_key(model)
        except ModelError as exc:
            (path, field), others = naming[0], len(naming) - 1
            also = f" (named here and by {others} more graders)" if others else ""
            problems.append(
                EvalProblem(
                    path, field,
                    f"the rubric judge {model!r}{also} cannot be called: {exc}. It runs on this machine's Ray, with "
                    "this environment: set the variable before the run, or name another judge in model_id",
                )
            )  # fmt: skip
    if problems:
        raise EvalFileError(problems)
    return []


def check_data(evals: list[Eval], *, s3_endpoint_url: str | None) -> None:
    """Every remote data node of the run's evals is there, else EvalFileError naming each eval
    file and field; local ones were checked when they loaded."""
    if problems := remote_data_problems(evals, s3_endpoint_url=s3_endpoint_url):
        raise EvalFileError(problems)


def runs_embedded(address: str | None) -> bool:
    """A run with this ``address`` starts its own Ray on this machine (see :func:`connect`):
    its units and judges see this process's environment."""
    return address == "local" or (address is None and not os.environ.get("RAY_ADDRESS"))


def _worker_config(config: BatchConfig, run_id: str, evals: list[Eval]) -> WorkerConfig:
    """The run's inputs and the concerns its workers need, with what only the driver knows:
    the run id, and the folders the sandbox hides."""
    sandbox = sandbox_config(config.execution.sandbox, config.storage.output, evals)
    return WorkerConfig(
        agent=config.agent,
        agent_args=config.agent_args,
        models=config.models,
        seeds=config.seeds,
        run_id=run_id,
        execution=config.execution.model_copy(update={"sandbox": sandbox}),
        s3_endpoint_url=config.storage.s3_endpoint_url,
    )


def unit_resources(config: BatchConfig, agent: AgentFunction | None) -> UnitResources:
    """What one unit asks Ray for: the agent's declaration (an in-memory agent's
    ``resources`` attribute), with the run's overrides."""
    declared = agent_ref(config.agent).resources if agent is None else getattr(agent, "resources", UnitResources())
    overrides: dict[str, Any] = {"custom": {**declared.custom, **config.ray.unit_resources}}
    if config.ray.unit_cpus is not None:
        overrides["cpus"] = config.ray.unit_cpus
    if config.ray.unit_memory is not None:
        overrides["memory"] = config.ray.unit_memory
    return declared.model_copy(update=overrides)


def live_nodes() -> list[NodeResources]:
    """What each node now in the Ray cluster has (Ray's totals)."""
    return [node["Resources"] for node in ray.nodes() if node["Alive"]]


def _start_pool(
    config: BatchConfig,
    run_id: str,
    evals: list[Eval],
    planned: int,
    *,
    agent: AgentFunction | None,
    grade: GradeFunction | None,
    embedded: bool,
) -> tuple[WorkerPool, Callable[[int], str]]:
    """Workers enough for the run's concurrency (see :func:`pool_shape`), and what tells how
    many of ``n`` units to run can run at once, and why."""
    resources = unit_resources(config, agent)
    nodes = live_nodes()
    max_concurrency = config.scheduling.max_concurrency
    shape = pool_shape(
        resources, nodes, max_concurrency=max_concurrency, planned=planned, workers=config.ray.workers,
        embedded=embedded,
    )  # fmt: skip
    pool = start_workers(
        _worker_config(config, run_id, evals),
        evals=evals,
        agent=agent,
        grade=grade,
        resources=resources,
        count=shape.count,
        slots=shape.slots,
    )

    def capacity(to_run: int) -> str:
        return describe_capacity(
            resources, nodes, shape, max_concurrency=max_concurrency, planned=to_run, embedded=embedded
        )

    return pool, capacity


def _execute(
    config: SchedulingConfig,
    run: _RunRows,
    plan: Plan,
    todo: np.ndarray,
    earlier_attempts: np.ndarray | None,
    writer: RowWriter,
    progress: Progress,
    workers: WorkerPool,
    lease: RunLease,
    stop_signals: StopSignals,
) -> None:
    """Start units while the limits and the workers' slots allow, wait for the next to end,
    store its row or run it again (a unit whose LLM-judged graders need judge calls frees its
    slot and is graded once they are made).  Each pass waits at most 0.1 s for a unit, so a
    lost lease stops the loop at once."""
    queue = UnitQueue(
        plan, todo, max_concurrency=config.max_concurrency, model_limits=config.model_concurrency,
        earlier_attempts=earlier_attempts,
    )  # fmt: skip
    work = _InFlight(queue, workers, JudgeCalls(config.judge_concurrency))
    if any(has_judged_graders(eval_) for eval_ in run.evals):
        work.judges.start()
    while queue.waiting or work.busy:
        writer.check()  # a results root that cannot be written stops the run: no unit more
        lease.stop_if_lost()  # so does a lease another driver holds now
        while workers.free() and (taken := queue.next()) is not None:
            work.running[workers.submit(*taken)] = taken
        work.judges.submit()
        refs = work.refs()
        if not refs:
            time.sleep(0.05)  # only delayed retries remain
            continue
        ready, _ = ray.wait(refs, num_returns=1, timeout=0.1)
        if ready:  # and whatever else is done by now
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        with stop_signals.deferred():  # a unit back is stored whole, even if the run stops now
            _store_units_back(config, run, ready, work, earlier_attempts, writer, progress)


def _store_units_back(
    config: SchedulingConfig,
    run: _RunRows,
    ready: list[Any],
    work: _InFlight,
    earlier_attempts: np.ndarray | None,
    writer: RowWriter,
    progress: Progress,
) -> None:
    """Settle the calls that are back: store the rows of finished units, queue retries."""
    kept: dict[str, list[UnitRecord]] = {}  # model -> rows to store, of every unit back by now
    for ref in ready:
        if (done := work.settle(ref, run)) is None:
            continue
        unit, attempt, row = done
        earlier = 0 if earlier_attempts is None else int(earlier_attempts[unit.position])
        delay = unit_retry_delay(row, attempt, config.retry_backoff_s) if row.retryable else None
        if delay is not None and attempt - earlier <= config.retries:  # retries count from this run's first
            work.queue.retry_later(unit, attempt + 1, delay)
        else:
            kept.setdefault(unit.model, []).append(row)
    for model, rows in kept.items():  # one WAL write and fsync per model and round
        writer.add_lines(run.model_label(model), [row.to_line() for row in rows])
        for row in rows:  # done once on disk, in the write-ahead log
            progress.update(passed=row.passed, error=row.status in ERROR_STATUSES)


@dataclass
class _InFlight:
    """What the driver waits on: agent calls (each holding a slot), judge calls, and the
    second grading passes of judged units."""

    queue: UnitQueue
    workers: WorkerPool
    judges: JudgeCalls
    running: dict[Any, tuple[Unit, int]] = field(default_factory=dict)
    grading: dict[Any, tuple[Unit, int]] = field(default_factory=dict)

    @property
    def busy(self) -> bool:
        return bool(self.running or self.grading or self.judges.busy)

    def refs(self) -> list[Any]:
        return [*self.running, *self.grading, *self.judges.in_flight, *self.workers.starting]

    def settle(self, ref: Any, run: _RunRows) -> tuple[Unit, int, UnitRecord] | None:
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


def _unit_result(ref: Any, unit: Unit, attempt: int, run: _RunRows) -> UnitRecord | JudgeWork:
    """The worker's answer, or an error row when Ray could not run the unit (after its retries)."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as exc:
        return run.system_error(unit, attempt, exc)
