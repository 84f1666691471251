"""The Ray actor that runs units: threaded, because agent work waits on LLM calls, not CPU."""
from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import ray
from pydantic import BaseModel

from ..agents.resolve import resolve_agent
from ..evals import Eval
from ..harness.execution import Execution, grade_execution
from ..harness.isolation import Isolation
from ..harness.runner import EvalRunner
from ..harness.workspace import default_work_root
from ..storage.schema import ResultRow
from .plan import Unit
from .rows import row_from_result


SERIAL_GROUP = "serial"


class WorkerConfig(BaseModel):
    agent: str
    agent_args: dict[str, str] = {}
    run_id: str
    isolation: Isolation
    timeout: float | None = None
    work_root: str | None = None
    cache_dir: str | None = None
    s3_endpoint_url: str | None = None


class UnitWorker:
    """Holds the resolved agent and the run's evals; each call runs its units on one thread."""

    def __init__(self, config: WorkerConfig, evals: list[Eval]):
        self.config = config
        self.evals = evals
        self.agent = resolve_agent(config.agent)
        self.node = socket.gethostname()
        # One parent folder per worker process: creating and removing work folders in a
        # folder shared by several processes serialises them on its lock.
        self.work_root = Path(config.work_root or default_work_root()) / f"worker-{os.getpid()}"

    def run_units(self, call: list[tuple[Unit, int]]) -> list[ResultRow]:
        """Run, grade and turn into rows, one unit after another (a call is one agent slot).

        Grading happens here, batched per call: it costs microseconds, so sending executions
        elsewhere to be graded would cost more in Ray round trips than the grading itself.
        """
        return [self._run_unit(unit, attempt) for unit, attempt in call]

    def _run_unit(self, unit: Unit, attempt: int) -> ResultRow:
        eval_ = self.evals[unit.eval_index]
        result = grade_execution(eval_, self._execute(unit))
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


def start_workers(config: WorkerConfig, evals_ref: Any, *, count: int, threads_per_worker: int) -> list:
    """Actors restart when their process or node dies, and Ray retries their in-flight calls."""
    # calls of fast units queue up in the serial group and run one at a time (no GIL fight)
    actor_class = ray.remote(concurrency_groups={SERIAL_GROUP: 1})(UnitWorker).options(
        num_cpus=0.01,
        max_concurrency=threads_per_worker,
        max_restarts=-1,
        max_task_retries=3,
        scheduling_strategy="SPREAD",
    )
    return [actor_class.remote(config, evals_ref) for _ in range(count)]
