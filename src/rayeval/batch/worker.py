"""The Ray actor that runs units: threaded, because agent work waits on LLM calls, not CPU."""
from __future__ import annotations

import socket
from typing import Any

import ray
from pydantic import BaseModel

from ..agents.resolve import resolve_agent
from ..evals import Eval
from ..harness.execution import Execution
from ..harness.isolation import Isolation
from ..harness.runner import EvalRunner
from .plan import Unit


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

    def execute_many(self, units: list[Unit]) -> list[tuple[Execution, str]]:
        return [(self._execute(unit), self.node) for unit in units]

    def _execute(self, unit: Unit) -> Execution:
        runner = EvalRunner(
            self.evals[unit.eval_index],
            work_root=self.config.work_root,
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
    actor_class = ray.remote(UnitWorker).options(
        num_cpus=0.01,
        max_concurrency=threads_per_worker,
        max_restarts=-1,
        max_task_retries=3,
        scheduling_strategy="SPREAD",
    )
    return [actor_class.remote(config, evals_ref) for _ in range(count)]
