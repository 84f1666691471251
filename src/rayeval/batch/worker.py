"""The Ray actor that runs units: threaded, because agent work waits on LLM calls, not CPU."""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import ray
from pydantic import BaseModel
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..agents.resolve import agent_ref, resolve_agent
from ..evals import Eval
from ..harness.cache import left_by_gone_processes, remove_tree
from ..harness.context import AgentFunction, AgentRef
from ..harness.execution import Execution, grade_execution
from ..harness.grading_pool import DEFAULT_TIMEOUT_S as DEFAULT_GRADE_TIMEOUT_S
from ..harness.isolation import Isolation
from ..harness.result import EvalResult
from ..harness.runner import EvalRunner
from ..harness.sandbox import SandboxConfig
from ..harness.workspace import default_work_root
from .cpu_share import CpuShare
from .plan import Plan, Unit
from .rows import UnitRow, row_from_result, unit_row

log = logging.getLogger(__name__)

FAST_GROUP = "fast"
# Fast units (many to a call) run this many calls at once per worker: one call alone leaves the
# core idle while it waits on the file system (work folders); two fill those gaps.
FAST_CALLS_PER_WORKER = 2

# A worker's folder under the work root: ``worker-<host>-<pid>``.
WORKER_FOLDER_PREFIX = "worker-"

# Replaces grading by the eval's graders: (eval, execution) -> result (see run_batch's ``grade``).
GradeFunction = Callable[[Eval, Execution], EvalResult]


class WorkerConfig(BaseModel):
    agent: str
    models: list[str]
    seeds: list[int]
    agent_args: dict[str, str] = {}
    run_id: str
    isolation: Isolation
    sandbox: SandboxConfig = SandboxConfig()
    grade_timeout: float = DEFAULT_GRADE_TIMEOUT_S
    timeout: float | None = None
    work_root: str | None = None
    cache_dir: str | None = None
    s3_endpoint_url: str | None = None


class UnitWorker:
    """Holds the run's plan, evals and resolved agent; each call runs its units on one thread.

    ``agent`` (a callable object) is used instead of resolving ``config.agent`` by name, and
    ``grade`` instead of the eval's graders, when given (in-memory runs).
    """

    def __init__(self, config: WorkerConfig):
        self.config = config
        self.node = socket.gethostname()
        self._shared_key: tuple[str, ...] = ()
        self._loading = threading.Lock()
        self.evals: list[Eval] = []
        self.plan = Plan([], [], [], config.agent)
        self.agent: AgentFunction | AgentRef | None = None
        self.grade: GradeFunction = grade_execution
        # A folder per worker process (named by host and process, see ``sweep_dead_workers``),
        # and in it one per thread (see ``run_units``).
        root = Path(config.work_root or default_work_root())
        self.work_root = root / f"{WORKER_FOLDER_PREFIX}{self.node}-{os.getpid()}"
        threading.Thread(target=sweep_dead_workers, args=(root, self.node), daemon=True).start()
        self.cpus = CpuShare()

    def run_units(
        self, positions: list[int], attempts: list[int], shared: list[Any], budget_s: float, instant: bool = False
    ) -> list[UnitRow]:
        """Run, grade and turn into rows the units at these plan positions, one after another
        (a call is one agent slot).  Flat lists of ints: Ray encodes them far faster than tuples.
        ``instant``: a call of the fast group (see ``CpuShare``).

        No unit starts once the call has run ``budget_s``: its rows cover a prefix of the
        positions and the driver queues the rest again.  Calls are sized from the units seen so
        far; when units turn slow (an API that answered errors at once recovers), a call of
        hundreds must not hold them on one thread for hours.

        Grading happens here, batched per call: it costs microseconds, so sending executions
        elsewhere to be graded would cost more in Ray round trips than the grading itself.
        """
        self._load(shared)
        # a parent folder per thread: threads creating and removing folders in a shared
        # parent wait on its lock (two threads then go no faster than one)
        work_root = self.work_root / f"thread-{threading.get_native_id()}"
        start = time.perf_counter()
        rows = []
        with self.cpus.call(instant=instant):
            for index, attempt in zip(positions, attempts):
                if rows and time.perf_counter() - start >= budget_s:
                    break
                rows.append(self._run_unit(self.plan.unit(index), attempt, work_root))
        return rows

    def prepare(self, shared: list[Any]) -> str:
        """Returns, with the id of the node the worker is on, once the worker is up and holds
        the run's data: the start of its first unit."""
        self._load(shared)
        return ray.get_runtime_context().get_node_id()

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
            self.grade = grade or functools.partial(grade_execution, grade_timeout=self.config.grade_timeout)
            self._shared_key = key

    def _named_agent(self) -> AgentFunction | AgentRef:
        """The run's agent by name: imported here only to run inline; otherwise only in
        each unit's own process, never in this one, which holds every eval."""
        if self.config.isolation == "inline":
            return resolve_agent(self.config.agent)
        return agent_ref(self.config.agent)

    def _run_unit(self, unit: Unit, attempt: int, work_root: Path) -> UnitRow:
        start = time.perf_counter()
        eval_ = self.evals[unit.eval_index]
        result = self.grade(eval_, self._execute(unit, work_root))
        row = row_from_result(
            result,
            unit=unit,
            eval_=eval_,
            run_id=self.config.run_id,
            agent=self.config.agent,
            agent_args=self.config.agent_args,
            attempt=attempt,
            node=self.node,
        )
        return unit_row(row, time.perf_counter() - start)

    def _execute(self, unit: Unit, work_root: Path) -> Execution:
        runner = EvalRunner(
            self.evals[unit.eval_index],
            work_root=work_root,
            runner_root=self.work_root,  # one unit runner for all of this worker's threads
            cache_dir=self.config.cache_dir,
            run_id=self.config.run_id,
            s3_endpoint_url=self.config.s3_endpoint_url,
        )
        return runner.execute(
            self.agent,
            model=unit.model,
            seed=unit.seed,
            timeout=self.config.timeout,
            agent_args=self.config.agent_args,
            isolation=self.config.isolation,
            sandbox=self.config.sandbox,
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
    """The run's worker actors; each call goes to the worker with the fewest calls in flight,
    so that no worker runs short of work while calls queue up at another.  Calls of fast
    units go through the fast group.

    The evals and in-memory callables (cloudpickled) are put once and held for the whole run;
    every call carries the references (see ``UnitWorker._load``) and names its units by their
    position in the plan, which each worker derives from the evals, models and seeds.

    ``new_actor(scheduling_strategy)`` starts one more actor: the pool grows when nodes join.
    A worker whose node died runs on elsewhere (Ray restarts it, on whatever node has room),
    and a node can end up with more workers than CPUs; when a new worker replaces such a
    worker on a node that joined, the old one gets no more calls and is ended once its calls
    are back, so that a node that comes back gets its share of the work again.
    """

    def __init__(self, new_actor: Callable[[Any], Any], shared: list[Any]):
        self._new_actor = new_actor
        self.shared = shared
        self.actors: list[Any] = []
        self._threaded: list[Any] = []
        self._fast: list[Any] = []
        self._in_flight: list[int] = []
        self._worker_of: dict[Any, int] = {}
        self.node_of: list[str | None] = []  # as each worker reported when it came up
        self.preparing: dict[Any, int] = {}  # ``prepare`` references of workers not up yet
        self._replaces: dict[int, int] = {}  # new worker -> the one it replaces (see ``excess``)
        self._retiring: set[int] = set()  # no more calls; ended once theirs are back

    @property
    def count(self) -> int:
        """Workers that take calls."""
        return len(self.actors) - len(self._retiring)

    def add(self, strategies: list[Any], *, replacing: list[int] = ()) -> None:
        """Start one worker per scheduling strategy ("SPREAD", or a node affinity); the first
        ones retire the workers ``replacing`` names once they are up."""
        for position, strategy in enumerate(strategies):
            actor = self._new_actor(strategy)
            if position < len(replacing):
                self._replaces[len(self.actors)] = replacing[position]
            self.preparing[actor.prepare.remote(self.shared)] = len(self.actors)
            self.actors.append(actor)
            self._threaded.append(actor.run_units)
            self._fast.append(actor.run_units.options(concurrency_group=FAST_GROUP))
            self._in_flight.append(0)
            self.node_of.append(None)

    def add_on_nodes(self, node_ids: list[str], *, replacing: list[int] = ()) -> None:
        """Workers on these nodes (a node that dies meanwhile: elsewhere)."""
        self.add([NodeAffinitySchedulingStrategy(node_id, soft=True) for node_id in node_ids], replacing=replacing)

    def came_up(self, ref: Any) -> bool:
        """Whether ``ref`` (ready) is a worker's ``prepare``; notes the worker's node if so,
        and retires the worker it replaces."""
        index = self.preparing.pop(ref, None)
        if index is None:
            return False
        replaced = self._replaces.pop(index, None)
        try:
            self.node_of[index] = ray.get(ref)
        except ray.exceptions.RayError:  # it failed to start: Ray restarts it, node unknown
            return True  # the one it was to replace keeps working
        if replaced is not None:
            self._retire(replaced)
        return True

    def excess(self, node_cpus: Mapping[str, float]) -> list[int]:
        """Workers taking calls that another node would serve better: those whose node has
        died since they came up (Ray has restarted them elsewhere, where the pool does not
        know), then the last ones beyond one per CPU of an alive node."""
        displaced, beyond = [], []
        seen: Counter[str] = Counter()
        for index, node in enumerate(self.node_of):
            if node is None or index in self._retiring:
                continue
            if node not in node_cpus:
                displaced.append(index)
            else:
                seen[node] += 1
                if seen[node] > int(node_cpus[node]):
                    beyond.append(index)
        return displaced + beyond

    def workers_on(self) -> Counter[str]:
        """Workers taking calls per node, for those whose node is known."""
        return Counter(
            node for index, node in enumerate(self.node_of) if node is not None and index not in self._retiring
        )

    def _retire(self, index: int) -> None:
        self._retiring.add(index)
        if self._in_flight[index] == 0:
            self._end(index)

    def end_all(self) -> None:
        """End every worker, calls in flight included (a run that stops early)."""
        for index in range(len(self.actors)):
            self._end(index)

    def _end(self, index: int) -> None:
        try:
            ray.kill(self.actors[index], no_restart=True)
        except ray.exceptions.RayError as exc:  # gone already: nothing to end
            log.debug("worker %d: %s", index, exc)

    def submit(self, call: list[tuple[Unit, int]], *, fast: bool, budget_s: float) -> Any:
        """Send a call to the least busy worker; ``fast``: through its fast group (see
        FAST_CALLS_PER_WORKER); ``budget_s``: see ``UnitWorker.run_units``."""
        taking = (i for i in range(len(self.actors)) if i not in self._retiring)
        index = min(taking, key=self._in_flight.__getitem__)
        method = (self._fast if fast else self._threaded)[index]
        ref = method.remote(
            [unit.index for unit, _ in call], [attempt for _, attempt in call], self.shared, budget_s, fast
        )
        self._in_flight[index] += 1
        self._worker_of[ref] = index
        return ref

    def finished(self, ref: Any) -> None:
        """The call behind ``ref`` is over (its result or error has been fetched)."""
        index = self._worker_of.pop(ref)
        self._in_flight[index] -= 1
        if index in self._retiring and self._in_flight[index] == 0:
            self._end(index)


def start_workers(
    config: WorkerConfig,
    *,
    evals: list[Eval],
    agent: AgentFunction | None,
    grade: GradeFunction | None,
    count: int,
    threads_per_worker: int,
) -> WorkerPool:
    """Actors restart when their process or node dies, and Ray retries their in-flight calls."""
    actor_class = ray.remote(concurrency_groups={FAST_GROUP: FAST_CALLS_PER_WORKER})(UnitWorker)

    def new_actor(strategy: Any) -> Any:
        return actor_class.options(
            num_cpus=0.01,
            max_concurrency=threads_per_worker,
            max_restarts=-1,
            max_task_retries=3,
            scheduling_strategy=strategy,
        ).remote(config)

    pool = WorkerPool(new_actor, [ray.put(evals), ray.put(agent), ray.put(grade)])
    pool.add(["SPREAD"] * count)
    return pool
