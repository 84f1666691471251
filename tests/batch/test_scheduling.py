"""How the driver orders units, sizes and feeds its workers: no Ray cluster needed for these
decisions (Ray's own listing of nodes is stood in for where sizing reads it)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from rayeval._messages import options_as_flags
from rayeval.batch import BatchConfig, capacity, prepare
from rayeval.batch import worker as worker_module
from rayeval.batch.capacity import ray_options
from rayeval.batch.config import ExecutionConfig
from rayeval.batch.plan import Plan, Unit, plan_units, unit_id_for
from rayeval.batch.queue import UnitQueue, retry_delay
from rayeval.batch.worker import (
    UnitWorker,
    WorkerConfig,
    WorkerPool,
    WorkerProblem,
    WorkerReady,
    sweep_dead_workers,
)
from rayeval.evals import load_evals
from rayeval.sandbox.units import SandboxError
from rayeval.unit.context import MIB, AgentContext, UnitResources
from tests.batch.conftest import write_mc_evals


def test_retries_back_off_doubling_and_spread_out() -> None:
    for attempt, base in [(1, 2.0), (2, 4.0), (3, 8.0)]:
        delays = [retry_delay(attempt, 2.0) for _ in range(200)]
        assert all(0.5 * base <= delay <= 1.5 * base for delay in delays)
        assert max(delays) - min(delays) > 0.5 * base  # units that failed together come back apart
    assert retry_delay(1, 0.0) == 0.0


def test_plan_makes_each_unit_from_its_position(tmp_path: Path) -> None:
    evals = load_evals(write_mc_evals(tmp_path / "evals", ["a", "b", "c"]))
    plan = Plan(evals, ["m1", "m2"], [7, 3, 5], "agent")
    listed = plan_units(evals, ["m1", "m2"], [7, 3, 5], "agent")
    assert len(plan) == len(listed) == 18
    assert [plan.unit(i) for i in reversed(range(18))] == listed[::-1]  # any order, same units
    assert listed[7] == Unit(unit_id_for(evals[1], "m1", 3, "agent"), 1, "b", "m1", 3, 7)
    with pytest.raises(IndexError, match="18"):
        plan.unit(18)
    with pytest.raises(IndexError):
        plan.unit(-1)


class _FakeMethod:
    """Stands in for an actor method: records which worker each unit went to."""

    def __init__(self, worker: int, calls: list):
        self.worker, self.calls = worker, calls

    def remote(self, position: int, attempt: int, shared: list, from_any_checkpoint: bool = False) -> object:
        self.calls.append((self.worker, position))
        return object()


class _FakeActor:
    def __init__(self, worker: int, calls: list):
        self.run_unit = _FakeMethod(worker, calls)
        self.prepare = self  # ``prepare.remote(shared)``: a reference to wait for

    def remote(self, shared: list) -> object:
        return object()


def _unit(position: int) -> Unit:
    return Unit(f"id{position}", 0, "e", "m", 1, position)


@pytest.fixture
def prepared(monkeypatch: pytest.MonkeyPatch) -> dict[object, WorkerReady]:
    """What each (fake) worker's ``prepare`` returned, by its reference: up, unless set."""
    answers: dict[object, WorkerReady] = {}
    monkeypatch.setattr(worker_module, "prepared", lambda ref: answers.get(ref, WorkerReady(node_id="n", host="h")))
    monkeypatch.setattr(worker_module.ray, "kill", lambda actor, no_restart: answers.setdefault("killed", actor))
    return answers


def test_units_go_only_to_workers_that_are_up_the_least_busy_first_within_their_slots(
    prepared: dict[object, WorkerReady],
) -> None:
    calls: list = []
    pool = WorkerPool([_FakeActor(i, calls) for i in range(3)], slots=2, shared=[])
    assert not pool.free()  # none up yet (Ray may not have a place for them)
    starting = list(pool.starting)
    assert pool.came_up(starting[2]) and pool.came_up(starting[0])
    assert not pool.came_up(object())  # a unit's reference, not a worker's
    refs = [pool.submit(_unit(p), 1) for p in range(4)]
    assert sorted(worker for worker, _ in calls) == [0, 0, 2, 2]  # each up worker filled to its 2 slots
    assert not pool.free()
    pool.finished(refs[0])
    assert pool.free()
    pool.submit(_unit(4), 1)
    assert calls[-1] == (calls[0][0], 4)  # the worker with a slot free
    pool.came_up(starting[1])
    pool.submit(_unit(5), 1)
    assert calls[-1] == (1, 5)


def test_a_worker_where_the_agent_cannot_run_gets_no_unit_and_none_at_all_is_the_runs_error(
    prepared: dict[object, WorkerReady],
) -> None:
    calls: list = []
    pool = WorkerPool([_FakeActor(i, calls) for i in range(2)], slots=1, shared=[])
    first, second = list(pool.starting)
    problem = WorkerProblem(kind="AgentUnavailable", message="agent 'x:y' cannot be loaded in its sandbox")
    prepared[first] = WorkerReady(node_id="n1", host="node-1", problem=problem)
    assert pool.came_up(first) and not pool.free() and prepared["killed"] is pool.actors[0]
    prepared[second] = WorkerReady(
        node_id="n2", host="node-2", problem=problem.model_copy(update={"kind": "SandboxError"})
    )
    with pytest.raises(SandboxError, match="on node node-2: agent 'x:y' cannot be loaded"):
        pool.came_up(second)
    assert calls == []


def test_the_queue_takes_models_in_turn_within_the_run_and_model_limits(tmp_path: Path) -> None:
    plan = Plan(load_evals(write_mc_evals(tmp_path / "evals", ["a", "b"])), ["m1", "m2"], [1, 2, 3], "agent")
    queue = UnitQueue(plan, np.ones(len(plan), dtype=bool), max_concurrency=4, model_limits={"m2": 1})
    taken = [queue.next() for _ in range(4)]
    assert [unit.position for unit, _ in taken if unit] == [0, 3, 1, 2]  # m1, m2, then m1 alone (m2 at its limit)
    assert queue.next() is None  # 4 running: the run's limit
    queue.finished("m2")
    assert queue.next() == (plan.unit(4), 1)
    queue.finished("m1")
    queue.retry_later(plan.unit(0), 2, delay_s=0)
    assert queue.next() == (plan.unit(0), 2)  # a retry that is due goes first
    queue.finished("m1")
    queue.retry_later(plan.unit(1), 2, delay_s=60)
    assert queue.next() == (plan.unit(6), 1) and queue.waiting


def test_the_queue_makes_only_the_units_to_run_and_only_when_taken(tmp_path: Path) -> None:
    plan = Plan(load_evals(write_mc_evals(tmp_path / "evals", ["a", "b"])), ["m1", "m2"], [1, 2, 3], "agent")
    todo = np.zeros(len(plan), dtype=bool)
    todo[[1, 4, 5, 7, 9]] = True  # the rest is stored
    earlier = np.zeros(len(plan), dtype=np.int32)
    earlier[9] = 3  # --retry-errors: three attempts stored
    queue = UnitQueue(plan, todo, max_concurrency=10, model_limits={}, earlier_attempts=earlier)
    taken = [queue.next() for _ in range(6)]
    assert taken == [
        (plan.unit(1), 1),
        (plan.unit(4), 1),
        (plan.unit(7), 1),
        (plan.unit(5), 1),
        (plan.unit(9), 4),
        None,
    ]
    assert not queue.waiting


def test_ray_is_asked_for_each_workers_units_resources() -> None:
    resources = UnitResources(cpus=0.25, memory=100 * MIB, custom={"GPU": 0.5, "licence": 1})
    assert ray_options(resources, 4) == {
        "num_cpus": 1.0, "num_gpus": 2.0, "memory": 400 * MIB, "resources": {"licence": 4},
    }  # fmt: skip


def _config(tmp_path: Path, **fields) -> BatchConfig:
    return BatchConfig(**{"evals": [], "agent": "sleep", "output": str(tmp_path / "out"), **fields})


def test_a_unit_asks_for_its_agents_declaration_with_the_runs_overrides(tmp_path: Path) -> None:
    assert prepare.check_agent(_config(tmp_path), None, embedded=False) == UnitResources(cpus=0.01, memory=64 * MIB)
    assert prepare.check_agent(_config(tmp_path, agent="claude-code"), None, embedded=False).cpus == 1
    assert (
        prepare.check_agent(_config(tmp_path, agent="tests.batch.agents:counting_sleep"), None, embedded=False)
        == UnitResources()
    )
    overridden = _config(tmp_path, unit_cpus=2, unit_memory=MIB, unit_resources={"GPU": 1})
    assert prepare.check_agent(overridden, None, embedded=False) == UnitResources(cpus=2, memory=MIB, custom={"GPU": 1})

    def in_memory(prompt: str, work_dir: Path) -> dict:
        return {}

    in_memory.resources = UnitResources(cpus=0.5)  # type: ignore[attr-defined]
    assert prepare.check_agent(_config(tmp_path), in_memory, embedded=False).cpus == 0.5


NODES = [
    {"CPU": 2.0, "memory": 1024.0 * MIB},
    {"CPU": 8.0, "memory": 4096.0 * MIB, "GPU": 1.0},
]


def _shape(resources: UnitResources, *, embedded: bool = True, **options) -> capacity.PoolShape:
    return capacity.pool_shape(
        resources, NODES, **{"max_concurrency": 1000, "planned": 1000, "workers": None, "embedded": embedded, **options}
    )


def test_a_worker_holds_no_more_units_than_the_largest_node_has_room_for() -> None:
    assert _shape(UnitResources(cpus=0.01, memory=64 * MIB)).slots == 64  # memory bounds it
    assert _shape(UnitResources(cpus=3, memory=0), workers=1) == capacity.PoolShape(slots=2, count=500)
    assert _shape(UnitResources(cpus=0.1, memory=0, custom={"GPU": 0.5})).slots == 2
    assert _shape(UnitResources(cpus=0.25), workers=50) == capacity.PoolShape(slots=8, count=125)
    with pytest.raises(capacity.UnitsDoNotFit, match="CPU 16.*unit_cpus.*more than this machine's Ray has .CPU 10, "):
        _shape(UnitResources(cpus=16))
    assert _shape(UnitResources(cpus=16), embedded=False).slots == 1  # a cluster's autoscaler may add a node that fits


@pytest.mark.parametrize(
    "resources, options, said",
    [
        (UnitResources(cpus=0.25, memory=0), {"max_concurrency": 250, "planned": 2000},
         ("units at once: 40, not the 250 of --max-concurrency: each unit asks for CPU 0.25 and this machine's Ray "
         "has CPU 10 in all (--unit-cpus changes what a unit asks for)")),
        (UnitResources(cpus=0.01, memory=1024 * MIB), {"max_concurrency": 250, "planned": 20, "workers": 20},
         ("units at once: 5 of the run's 20: each unit asks for memory 1.0 GiB and this machine's Ray has memory "
         "5.0 GiB in all (--unit-memory changes what a unit asks for)")),
        (UnitResources(cpus=0.01, memory=512 * MIB), {"max_concurrency": 250, "planned": 20},
         ("units at once: 8 of the run's 20: each worker runs 8 units and asks for their resources on one node, and "
         "the nodes' room holds 1 such worker (--workers N: more, smaller workers pack more units onto the nodes)")),
        (UnitResources(cpus=0.01, memory=0, custom={"GPU": 0.5}), {"max_concurrency": 8, "planned": 20},
         ("units at once: 2, not the 8 of --max-concurrency: each unit asks for GPU 0.5 and this machine's Ray has "
         "GPU 1 in all (--unit-resource GPU=AMOUNT changes what a unit asks for)")),
        (UnitResources(cpus=0.01, memory=0, custom={"licence": 1}), {"max_concurrency": 8, "planned": 20},
         ("units at once: none yet: no node of the cluster now has room for a unit, which asks for CPU 0.01, licence 1 "
         "(--unit-cpus, --unit-memory, --unit-resource); units wait for a node that has, such as an autoscaler's")),
        (UnitResources(cpus=0.3, memory=0), {"max_concurrency": 250, "planned": 2000},
         ("units at once: 30, not the 250 of --max-concurrency: each worker runs 3 units and asks for their resources "
         "on one node, and the nodes' room holds 10 such workers (--workers N: more, smaller workers pack more units "
         "onto the nodes); a cluster's autoscaler, where it has one, may add nodes for more")),
        (UnitResources(cpus=1, memory=0), {"max_concurrency": 4, "planned": 20}, "units at once: 4, as --max-concurrency 4 says"),
        (UnitResources(cpus=1, memory=0), {"max_concurrency": 32, "planned": 6}, "units at once: all 6 of the run (--max-concurrency 32)"),
    ],
)  # fmt: skip
def test_the_run_says_how_many_units_run_at_once_and_what_holds_them(
    resources: UnitResources, options: dict, said: str
) -> None:
    """On 2 + 8 CPUs, 5 GiB of memory and a GPU: the --max-concurrency, the run's units, or the
    first resource to run out (over the nodes, or as whole workers fit on each), and the option
    that changes it; a unit no node holds now (on a cluster) waits for one."""
    embedded = "licence" not in resources.custom and resources.cpus != 0.3
    shape = _shape(resources, embedded=embedded, **options)
    options.pop("workers", None)
    with options_as_flags():  # as `rayeval run` says it
        assert capacity.describe_capacity(resources, NODES, shape, embedded=embedded, **options) == said


def test_a_python_callers_run_names_the_options_by_their_keywords() -> None:
    """``batch.run``'s caller reads the keywords it passes, not the command line's flags."""
    gpu = UnitResources(cpus=0.01, memory=0, custom={"GPU": 0.5})
    said = capacity.describe_capacity(gpu, NODES, _shape(gpu), embedded=True, max_concurrency=8, planned=20)
    assert (
        said.endswith("(unit_resources={'GPU': AMOUNT} changes what a unit asks for)")
        and "8 of max_concurrency" in said
    )
    held = UnitResources(cpus=0.01, memory=512 * MIB)
    said = capacity.describe_capacity(held, NODES, _shape(held), embedded=True, max_concurrency=250, planned=20)
    assert "(workers=N: more, smaller workers pack" in said and "--" not in said


def _worker_on(evals: list, agent) -> UnitWorker:
    """A worker object outside Ray, holding the run's data as ``_load`` would."""
    worker = UnitWorker(
        WorkerConfig(
            agent="test", models=["m"], seeds=list(range(10)), run_id="r", execution=ExecutionConfig(isolation="inline")
        )
    )
    worker.evals = evals
    worker.plan = Plan(evals, ["m"], list(range(10)), "test")
    worker.agent = agent
    return worker


def test_each_thread_of_a_worker_has_its_own_parent_folder(tmp_path: Path) -> None:
    """Threads creating and removing work folders in one parent wait on its lock: two threads
    then run units no faster than one."""
    evals = load_evals(write_mc_evals(tmp_path / "evals", ["a"]))
    parent_of: dict[int, Path] = {}  # by the unit's seed (each inline unit runs on a thread of its own)

    def record(prompt: str, work_dir: Path, context: AgentContext) -> dict:
        parent_of[context.seed] = work_dir.parent
        return {"answer": "B"}

    worker = _worker_on(evals, record)
    worker.work_root = tmp_path / "work"
    rows: list = []
    groups = ([0, 1, 2, 3, 4], [5, 6, 7, 8, 9])
    threads = [
        threading.Thread(target=lambda ps: rows.extend(worker.run_unit(p, 1, []) for p in ps), args=(positions,))
        for positions in groups
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    parents = [{parent_of[worker.plan.unit(p).seed] for p in positions} for positions in groups]
    assert all(len(folders) == 1 for folders in parents)
    first, second = (folders.pop() for folders in parents)
    assert first != second and first.is_relative_to(worker.work_root) and second.is_relative_to(worker.work_root)
    assert sorted(row.unit_id for row in rows) == sorted(u.unit_id for u in worker.plan.units())
    assert all(row.status == "passed" for row in rows)


def test_workers_sweep_the_folders_of_this_hosts_dead_workers(tmp_path: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    dead, alive = int(gone.stdout), os.getpid()
    (tmp_path / f"worker-host-a-{dead}" / "thread-1" / "run1").mkdir(parents=True)
    interrupted = tmp_path / f"worker-host-a-{dead}" / "thread-2" / "run2" / "unit"  # killed mid-unit
    (interrupted / "data").mkdir(parents=True)
    (interrupted / "data" / "input.h5ad").write_text("staged")
    (interrupted / "data").chmod(0o555)
    (interrupted / "agent_stdout.log").write_text("")
    (tmp_path / f"worker-host-a-{10**20}" / "thread-1").mkdir(parents=True)  # no process has that id
    for other in (f"worker-host-a-{alive}/thread-1/run1/unit", f"worker-host-b-{dead}/thread-1", "unrelated/empty"):
        (tmp_path / other).mkdir(parents=True)
    sweep_dead_workers(tmp_path, "host-a")
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        [f"worker-host-a-{alive}", f"worker-host-b-{dead}", "unrelated"]
    )
    assert (tmp_path / f"worker-host-a-{alive}/thread-1/run1/unit").is_dir()  # a live worker's unit
    sweep_dead_workers(tmp_path / "missing", "host-a")  # no work root yet: nothing to do
