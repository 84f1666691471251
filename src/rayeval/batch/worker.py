"""The Ray actors that run units: threaded, because agent work waits on models and tools, not CPU."""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar

import ray
from pydantic import BaseModel, Field

from ..agents.resolve import agent_ref
from ..data.cache import left_by_gone_processes, remove_tree
from ..evals import Eval
from ..filesystem import is_s3
from ..graders.judging import Judgments
from ..record import UnitRecord
from ..sandbox.config import SandboxConfig
from ..sandbox.units import SandboxError
from ..storage.layout import Layout, s3_wal_base
from ..unit.context import AgentFunction, AgentRef
from ..unit.execution import grade_execution, judge_requests
from ..unit.grading_process import prestart_grading
from ..unit.judges import JudgedGrade, has_judged_graders
from ..unit.result import EvalResult
from ..unit.runner import EvalRunner, check_agent_loads
from ..unit.unit_agent import AgentUnavailable
from ..unit.workspace import default_work_root
from .budget import budget_view
from .capacity import ray_options, run_capacity
from .cluster import live_nodes
from .config import BatchConfig, ExecutionConfig
from .plan import Plan, Unit
from .rows import RunRows

if TYPE_CHECKING:  # the driver's: workers do not import its checks
    from .prepare import PreparedRun

log = logging.getLogger(__name__)

# A worker's folder under the work root: ``worker-<host>-<pid>``.
WORKER_FOLDER_PREFIX = "worker-"

# The concurrency group of ``UnitWorker.grade_judged``: a unit's second grading pass does not wait
# behind the agents that hold the worker's threads.
GRADING_GROUP = "grading"
GRADING_THREADS = 4


class JudgeWork(NamedTuple):
    """A unit whose agent has run (its ``execution``, not graded yet) and whose LLM-judged
    graders wait on these judge calls."""

    execution: EvalResult
    requests: Judgments


#: what a worker's step on a unit gives back: its execution, its row, or its judge calls to make
_Back = TypeVar("_Back", bound=EvalResult | UnitRecord | JudgeWork)

# Replaces grading by the eval's graders: (eval, execution) -> result (see run_batch's ``grade``).
GradeFunction = Callable[[Eval, EvalResult], EvalResult]


class WorkerConfig(BaseModel):
    """What a worker needs of the run: its inputs (to plan and label units), how units run,
    and where their remote data is read from."""

    agent: str
    agent_args: dict[str, str] = {}
    models: list[str]
    seeds: list[int]
    run_id: str
    execution: ExecutionConfig
    s3_endpoint_url: str | None = None
    #: units the worker runs at once
    slots: int = 1
    #: the run's budget in USD (``--max-cost``), kept by the run's budget actor
    max_cost_usd: float | None = None
    #: where a chunked session's units save their checkpoints (``chunk_turns``; None: nowhere)
    sessions_root: str | None = None
    #: the run's secrets (:func:`rayeval.secrets.run_secrets`), masked in every row it makes
    secrets: frozenset[str] = Field(frozenset(), repr=False)


class WorkerProblem(BaseModel):
    """Why a worker cannot run its units: the sandbox does not start on its node, or the agent
    does not load there."""

    kind: Literal["SandboxError", "AgentUnavailable"]
    message: str

    def error(self, host: str) -> SandboxError | AgentUnavailable:
        kind = SandboxError if self.kind == "SandboxError" else AgentUnavailable
        return kind(f"on node {host}: {self.message}")


class WorkerReady(BaseModel):
    node_id: str
    host: str
    problem: WorkerProblem | None = None


class UnitWorker:
    """Holds the run's plan, evals and resolved agent; runs one unit per call, up to its share
    of the run's units at once on its threads.

    ``agent`` (a callable object) is used instead of resolving ``config.agent`` by name, and
    ``grade`` instead of the eval's graders, when given (in-memory runs).
    """

    def __init__(self, config: WorkerConfig):
        self.config = config
        self.host = socket.gethostname()
        self.node_id = ray.get_runtime_context().get_node_id() if ray.is_initialized() else self.host
        self._shared_key: tuple[str, ...] = ()
        self._loading = threading.Lock()
        self.evals: list[Eval] = []
        self.plan = Plan([], [], [], config.agent)
        self.agent: AgentFunction | AgentRef | None = None
        self.grade: GradeFunction = grade_execution
        self.judged_evals: frozenset[int] = frozenset()  # eval indices whose judge calls the run makes apart
        self.judged_grade: JudgedGrade | None = None  # the run's own grade function, when it hands its judges over
        # A folder per worker process (named by host and process, see ``sweep_dead_workers``),
        # and in it one per thread (see ``run_unit``).
        root = Path(config.execution.work_root or default_work_root())
        self.work_root = root / f"{WORKER_FOLDER_PREFIX}{self.host}-{os.getpid()}"
        threading.Thread(target=sweep_dead_workers, args=(root, self.host), daemon=True).start()

    def run_unit(
        self, position: int, attempt: int, shared: list[Any], from_any_checkpoint: bool = False
    ) -> UnitRecord | JudgeWork:
        """Run, grade and turn into a row the unit at this plan position.  Grading happens
        here, in a bounded grading process, outside the agent's sandbox.  When the eval's
        LLM-judged graders have judge calls to make, the unit comes back as JudgeWork instead:
        the run makes those calls apart, then has the unit graded (``grade_judged``).
        ``from_any_checkpoint``: the attempt before lost its worker or node, or could not run (its
        data, its sandbox); a chunked session goes on from its checkpoint (as it does when Ray
        runs this attempt again)."""
        self._load(shared)
        unit = self.plan.unit(position)
        # a parent folder per thread: threads creating and removing folders in a shared parent
        # wait on its lock
        work_root = self.work_root / f"thread-{threading.get_native_id()}"
        execution = self._or_failure_row(
            unit, attempt, lambda: self._execute(unit, work_root, attempt, from_any_checkpoint)
        )
        if isinstance(execution, UnitRecord):
            return execution
        return self._or_failure_row(unit, attempt, lambda: self._graded(unit, attempt, execution), execution)

    def _graded(self, unit: Unit, attempt: int, execution: EvalResult) -> UnitRecord | JudgeWork:
        """The row of the unit whose agent has run, or the judge calls its grading waits on."""
        if unit.eval_index in self.judged_evals:
            eval_ = self.evals[unit.eval_index]
            if self.judged_grade is not None:
                requests = self.judged_grade.judge_requests(eval_, execution)
            else:
                requests = judge_requests(eval_, execution, grade_timeout=self.config.execution.grade_timeout)
            if requests:
                return JudgeWork(execution, requests)
        return self._row(unit, attempt, self.grade(self.evals[unit.eval_index], execution))

    def grade_judged(
        self, position: int, attempt: int, execution: EvalResult, judgments: Judgments, shared: list[Any]
    ) -> UnitRecord:
        """The row of a unit whose judge calls have been made: ``judgments`` are their outcomes."""
        self._load(shared)
        unit = self.plan.unit(position)
        eval_ = self.evals[unit.eval_index]

        def graded() -> UnitRecord:
            if self.judged_grade is not None:
                result = self.judged_grade(eval_, execution, judgments)
            else:
                result = grade_execution(
                    eval_, execution, grade_timeout=self.config.execution.grade_timeout, judgments=judgments
                )
            return self._row(unit, attempt, result)

        return self._or_failure_row(unit, attempt, graded, execution, judgments)

    def _or_failure_row(
        self,
        unit: Unit,
        attempt: int,
        work: Callable[[], _Back],
        execution: EvalResult | None = None,
        judgments: Judgments | None = None,
    ) -> _Back | UnitRecord:
        """What ``work`` on ``unit`` gives back, or, when it raises, the unit's error row that
        rayeval failed on it (never Ray's error: a row seen_by ray would be retried and resumed,
        its gateway counts lost), with what is known of its run: its ``execution`` once its
        agent has run, the ``judgments`` of its judge calls once made. Ray's own errors (an
        actor or object lost) stay Ray's."""
        try:
            return work()
        except ray.exceptions.RayError:
            raise
        except Exception as exc:  # whatever the agent made rayeval's code trip on
            log.exception("rayeval failed on unit %s (attempt %d)", unit.unit_id, attempt)
            return self._rows().rayeval_failure(unit, attempt, exc, self.node_id, self.host, execution, judgments)

    def _row(self, unit: Unit, attempt: int, result: EvalResult) -> UnitRecord:
        return self._rows().row(result, unit, attempt, self.node_id, self.host)

    def _rows(self) -> RunRows:
        config = self.config
        return RunRows(self.evals, config.run_id, config.agent, config.agent_args, config.secrets)

    def prepare(self, shared: list[Any]) -> WorkerReady:
        """Once the worker holds the run's data and has checked, as its units will run, that
        the agent loads (its unit runner, started now, then serves the units)."""
        self._load(shared)
        assert self.agent is not None, "_load sets the agent"
        problem = None
        execution = self.config.execution
        try:
            self.agent = check_agent_loads(
                self.agent, self.config.agent_args, isolation=execution.isolation, sandbox=execution.sandbox,
                runner_root=self.work_root, cache_dir=Path(execution.cache_dir) if execution.cache_dir else None,
            )  # fmt: skip
        except (SandboxError, AgentUnavailable) as exc:
            problem = WorkerProblem(kind=type(exc).__name__, message=str(exc))
        return WorkerReady(node_id=self.node_id, host=self.host, problem=problem)

    def _load(self, shared: list[Any]) -> None:
        """The run's evals, plan and in-memory agent/grade callables, fetched once per process.

        They come with each call, as references inside a list, rather than to the constructor:
        a restarted worker (its process or node died) then simply fetches them again, and no
        restart depends on constructor arguments Ray may no longer hold.
        """
        key = tuple(ref.hex() for ref in shared)
        if key == self._shared_key:
            return
        with self._loading:  # the first calls arrive together on several threads: load once
            if key == self._shared_key:
                return
            self.evals, agent, grade = ray.get(shared)
            # the driver's plan, whose units are made here from their positions
            self.plan = Plan(self.evals, self.config.models, self.config.seeds, self.config.agent)
            self.agent = agent if agent is not None else self._named_agent()
            self.grade = grade or functools.partial(grade_execution, grade_timeout=self.config.execution.grade_timeout)
            # a run's own grade function calls its judges itself, unless it hands them over
            self.judged_grade = grade if isinstance(grade, JudgedGrade) and grade.judged else None
            if grade is None:
                judged = [i for i, eval_ in enumerate(self.evals) if has_judged_graders(eval_)]
            else:
                judged = list(range(len(self.evals))) if self.judged_grade is not None else []
            self.judged_evals = frozenset(judged)
            if grade is None:
                prestart_grading(self.evals)
            self._shared_key = key

    def _named_agent(self) -> AgentRef:
        """The run's agent by name: imported here only to run inline; otherwise only in
        each unit's own process, never in this one, which holds every eval."""
        return agent_ref(self.config.agent, load=self.config.execution.isolation == "inline")

    def _execute(self, unit: Unit, work_root: Path, attempt: int, from_any_checkpoint: bool = False) -> EvalResult:
        assert self.agent is not None, "run_unit loads the agent first"
        execution = self.config.execution
        runner = EvalRunner(
            self.evals[unit.eval_index],
            work_root=work_root,
            runner_root=self.work_root,  # one unit runner for all of this worker's threads
            cache_dir=execution.cache_dir,
            run_id=self.config.run_id,
            s3_endpoint_url=self.config.s3_endpoint_url,
            sessions_root=self.config.sessions_root,
            secrets=self.config.secrets,
        )
        return runner.execute(
            self.agent,
            model=unit.model,
            seed=unit.seed,
            timeout=execution.timeout,
            agent_args=self.config.agent_args,
            isolation=execution.isolation,
            sandbox=execution.sandbox,
            convention=execution.answer_convention,
            budget=None
            if self.config.max_cost_usd is None
            else budget_view(self.config.run_id, self.config.max_cost_usd),
            attempt=attempt,
            from_any_checkpoint=from_any_checkpoint,
            allow_models=tuple(execution.allow_models),
        )


def sweep_dead_workers(root: Path, host: str) -> None:
    """Remove the folders left under ``root`` by this host's worker processes that are gone.

    Ray ends a worker without notice when its run is over, so its folder, one per thread and
    run, stays behind, and a worker killed mid-unit (its node out of memory, a test killing
    it) leaves that unit's work folder with its staged data.  No row refers to them: the unit
    ran again elsewhere.  Other hosts' folders (a shared work root) are left to their hosts."""
    prefix = f"{WORKER_FOLDER_PREFIX}{host}-"

    def owner(name: str) -> int | None:
        pid = name.removeprefix(prefix)
        return int(pid) if pid != name and pid.isdigit() else None

    for folder in left_by_gone_processes(root, owner):
        try:
            remove_tree(folder)
        except OSError:  # another worker is sweeping it too
            pass


class WorkerPool:
    """The run's worker actors.  Each asks Ray for ``slots`` units' resources and runs up to
    that many units at once: Ray places each where its resources are free (a cluster's
    autoscaler adds nodes for those it cannot place yet) and restarts one whose process or node
    died, retrying its calls.  Units go only to workers that are up, the least busy first, so
    none waits behind a worker that has no place yet.

    The evals and in-memory callables (cloudpickled) are put once and held for the whole run;
    every call carries the references (see ``UnitWorker._load``) and names its unit by its
    position in the plan, which each worker derives from the evals, models and seeds.
    """

    def __init__(self, actors: list[Any], slots: int, shared: list[Any]):
        self.actors = actors
        self.slots = slots
        self.shared = shared
        self.in_flight = [0] * len(actors)
        self.starting = {actor.prepare.remote(shared): index for index, actor in enumerate(actors)}
        self.up: set[int] = set()
        self._worker_of: dict[Any, int] = {}
        self._grading: set[Any] = set()  # second grading passes in flight

    def came_up(self, ref: Any) -> bool:
        """Whether ``ref`` (ready) is a worker's ``prepare``; the worker takes units from now
        on (one that failed to start too: Ray restarts it, and its units wait for that). One
        where the agent cannot run (no sandbox on its node, the agent not loading there) is
        ended instead; when no worker can, that is the run's error."""
        index = self.starting.pop(ref, None)
        if index is None:
            return False
        ready = prepared(ref)
        if ready is None or ready.problem is None:
            self.up.add(index)
            return True
        problem = ready.problem.error(ready.host)
        log.error("a worker cannot run units: %s", problem)
        try:
            ray.kill(self.actors[index], no_restart=True)
        except ray.exceptions.RayError as exc:
            log.debug("worker %d: %s", index, exc)
        if not self.up and not self.starting:
            raise problem
        return True

    def wait_until_up(self) -> None:
        """Until a worker is up: a run whose agent cannot run on any worker stops here, before
        its first unit (``SandboxError``, ``AgentUnavailable``)."""
        while not self.up:
            ready, _ = ray.wait(list(self.starting), num_returns=1, timeout=1.0)
            for ref in ready:
                self.came_up(ref)

    def free(self) -> bool:
        return any(self.in_flight[index] < self.slots for index in self.up)

    def submit(self, unit: Unit, attempt: int, from_any_checkpoint: bool = False) -> Any:
        index = min(self.up, key=self.in_flight.__getitem__)
        ref = self.actors[index].run_unit.remote(unit.position, attempt, self.shared, from_any_checkpoint)
        self.in_flight[index] += 1
        self._worker_of[ref] = index
        return ref

    def finished(self, ref: Any) -> None:
        """The call behind ``ref`` (a unit, or a second grading pass) is over (its result or
        error has been fetched)."""
        if ref in self._grading:
            self._grading.discard(ref)
        else:
            self.in_flight[self._worker_of.pop(ref)] -= 1

    def grade(self, unit: Unit, attempt: int, execution: EvalResult, judgments: Judgments) -> Any:
        """A unit's second grading pass, on a worker that is up, outside its units' slots."""
        worker = self.actors[min(self.up, key=self.in_flight.__getitem__)]
        method = worker.grade_judged.options(concurrency_group=GRADING_GROUP)
        ref = method.remote(unit.position, attempt, execution, judgments, self.shared)
        self._grading.add(ref)
        return ref

    def end_all(self) -> None:
        """End every worker, calls in flight included (a run that stops early).  The calls are
        cancelled first: a call on a killed worker is otherwise retried (its actor restarts
        on a crash), and Ray prints a "Task UnitWorker.run_unit failed ... killed by ray.kill"
        line for each into the run's output."""
        for ref in [*self._worker_of, *self._grading, *self.starting]:
            try:
                ray.cancel(ref)
            except ray.exceptions.RayError as exc:  # over already: nothing to cancel
                log.debug("worker call: %s", exc)
        for actor in self.actors:
            try:
                ray.kill(actor, no_restart=True)
            except ray.exceptions.RayError as exc:  # gone already: nothing to end
                log.debug("worker: %s", exc)


def prepared(ref: Any) -> WorkerReady | None:
    """What a worker's ``prepare`` (ready) returned; None when its process failed to start
    (Ray restarts it)."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as exc:
        log.debug("a worker failed to start: %s", exc)
        return None


def start_pool(
    config: BatchConfig,
    run_id: str,
    run: PreparedRun,
    *,
    agent: AgentFunction | None,
    grade: GradeFunction | None,
) -> tuple[WorkerPool, Callable[[int], str]]:
    """Workers enough for the run's concurrency (see :func:`pool_shape`), spread over the
    nodes, and what tells how many of ``n`` units to run can run at once, and why.  Actors
    restart when their process or node dies, and Ray retries their in-flight calls."""
    worker = worker_config(config, run_id, run)
    shape, capacity = run_capacity(config, run.resources, live_nodes(), planned=len(run.plan), embedded=run.embedded)
    groups: dict[str, Any] = {"concurrency_groups": {GRADING_GROUP: GRADING_THREADS}}  # not settable in options()
    actor_class = ray.remote(**groups)(UnitWorker).options(
        **ray_options(run.resources, shape.slots),
        max_concurrency=shape.slots,
        max_restarts=-1,
        max_task_retries=3,
        scheduling_strategy="SPREAD",  # a run's units over every node with room, not packed on the first
    )
    actors = [actor_class.remote(worker.model_copy(update={"slots": shape.slots})) for _ in range(shape.count)]
    pool = WorkerPool(actors, shape.slots, [ray.put(run.evals), ray.put(agent), ray.put(grade)])
    return pool, capacity


def worker_config(config: BatchConfig, run_id: str, run: PreparedRun) -> WorkerConfig:
    """The run's inputs and the concerns its workers need, with what only the driver knows:
    the run id, the folders the sandbox hides and the run's secrets."""
    sandbox = sandbox_config(config.execution.sandbox, config.storage.output, run.evals)
    return WorkerConfig(
        agent=config.agent,
        agent_args=config.agent_args,
        models=config.models,
        seeds=config.seeds,
        run_id=run_id,
        execution=config.execution.model_copy(update={"sandbox": sandbox}),
        s3_endpoint_url=config.storage.s3_endpoint_url,
        max_cost_usd=config.scheduling.max_cost_usd,
        sessions_root=sessions_root(config, run_id),
        secrets=run.secrets,
    )


def sessions_root(config: BatchConfig, run_id: str) -> str | None:
    """Where run ``run_id`` keeps its units' checkpoints (None: its sessions are not chunked)."""
    return Layout(config.storage.output.rstrip("/")).sessions(run_id) if "chunk_turns" in config.agent_args else None


def sandbox_config(sandbox: SandboxConfig, output: str, evals: list[Eval]) -> SandboxConfig:
    """The run's sandbox: the configured one, with the results root ``output`` and its
    write-ahead log (for an S3 root, in this machine's cache folder: its rows name expected
    values) and every eval's folders (answer keys) hidden from agents as well."""
    hidden = [*sandbox.hide, *(str(root) for eval_ in evals for root in eval_.data_roots)]
    hidden.append(str(s3_wal_base() if is_s3(output) else output))
    return sandbox.model_copy(update={"hide": tuple(dict.fromkeys(hidden))})
