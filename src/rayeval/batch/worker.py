"""The Ray actor that runs units: threaded, because agent work waits on LLM calls, not CPU."""
from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Callable

import ray
from pydantic import BaseModel

from ..agents.resolve import resolve_agent
from ..evals import Eval
from ..harness.context import AgentFunction
from ..harness.execution import Execution, grade_execution
from ..harness.isolation import Isolation
from ..harness.result import EvalResult
from ..harness.runner import EvalRunner
from ..harness.workspace import default_work_root
from ..storage.schema import ResultRow
from .plan import Unit
from .rows import row_from_result

SERIAL_GROUP = "serial"

# Replaces grading by the eval's graders: (eval, execution) -> result (see run_batch's ``grade``).
GradeFunction = Callable[[Eval, Execution], EvalResult]


class WorkerConfig(BaseModel):
    agent: str
    agent_args: dict[str, str] = {}
    run_id: str
    isolation: Isolation
    timeout: float | None = None
    work_root: str | None = None
    cache_dir: str | None = None
    s3_endpoint_url: str | None = None
    # False when the run brings its own agent object (in-memory runs): ``agent`` only labels it
    agent_is_name: bool = True


class UnitWorker:
    """Holds the resolved agent and the run's evals; each call runs its units on one thread.

    ``agent`` (a callable object) is used instead of resolving ``config.agent`` by name, and
    ``grade`` instead of the eval's graders, when given (in-memory runs).
    """

    def __init__(self, config: WorkerConfig):
        self.config = config
        self.node = socket.gethostname()
        self._shared_key: tuple[str, ...] = ()
        self.evals: list[Eval] = []
        self.agent: AgentFunction | None = resolve_agent(config.agent) if config.agent_is_name else None
        self.grade: GradeFunction = grade_execution
        # One parent folder per worker process: creating and removing work folders in a
        # folder shared by several processes serialises them on its lock.
        self.work_root = Path(config.work_root or default_work_root()) / f"worker-{os.getpid()}"

    def run_units(self, call: list[tuple[Unit, int]], shared: list[Any]) -> list[ResultRow]:
        """Run, grade and turn into rows, one unit after another (a call is one agent slot).

        Grading happens here, batched per call: it costs microseconds, so sending executions
        elsewhere to be graded would cost more in Ray round trips than the grading itself.
        """
        self._load(shared)
        return [self._run_unit(unit, attempt) for unit, attempt in call]

    def _load(self, shared: list[Any]) -> None:
        """The run's evals and in-memory agent/grade callables, fetched once per worker process.

        They come with each call, as references inside a list, rather than to the constructor:
        a restarted worker (its process or node died) then simply fetches them again.
        """
        key = tuple(ref.hex() for ref in shared)
        if key == self._shared_key:
            return
        evals, agent, grade = ray.get(shared)
        self.evals = evals
        if agent is not None:
            self.agent = agent
        if grade is not None:
            self.grade = grade
        self._shared_key = key

    def _run_unit(self, unit: Unit, attempt: int) -> ResultRow:
        eval_ = self.evals[unit.eval_index]
        result = self.grade(eval_, self._execute(unit))
        return row_from_result(
            result, unit=unit, eval_=eval_, run_id=self.config.run_id, agent=self.config.agent, attempt=attempt, node=self.node
        )

    def _execute(self, unit: Unit) -> Execution:
        runner = EvalRunner(
            self.evals[unit.eval_index],
            work_root=self.work_root,
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
        )

    def ping(self) -> str:
        return self.node


def start_workers(config: WorkerConfig, *, count: int, threads_per_worker: int) -> list:
    """Actors restart when their process or node dies, and Ray retries their in-flight calls."""
    # calls of fast units queue up in the serial group and run one at a time (no GIL fight)
    actor_class = ray.remote(concurrency_groups={SERIAL_GROUP: 1})(UnitWorker).options(
        num_cpus=0.01,
        max_concurrency=threads_per_worker,
        max_restarts=-1,
        max_task_retries=3,
        scheduling_strategy="SPREAD",
    )
    return [actor_class.remote(config) for _ in range(count)]
