"""How the driver sizes, places and orders calls: no Ray needed for these decisions."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rayeval.batch import engine
from rayeval.batch.placement import (
    MAX_THREADS_PER_WORKER,
    nodes_for_new_workers,
    worker_count,
)
from rayeval.batch.plan import Plan, Unit, plan_units, unit_id_for
from rayeval.batch.scheduler import (
    INSTANT_AGENT_S,
    MAX_UNITS_PER_CALL,
    TARGET_CALL_SECONDS,
    ChunkSizer,
    Scheduler,
    retry_delay,
)
from rayeval.batch.worker import (
    FAST_GROUP,
    UnitWorker,
    WorkerConfig,
    WorkerPool,
    sweep_dead_workers,
)
from rayeval.evals import load_evals
from tests.batch.conftest import write_mc_evals


def test_call_size_follows_the_measured_unit_time() -> None:
    sizer = ChunkSizer()
    assert (sizer.known, sizer.size, sizer.instant) == (False, 1, False)  # nothing seen: one unit per call
    sizer.observe(0.0002, 0.00001)  # an agent that answers at once: hundreds to a call, fast path
    assert sizer.instant and sizer.size == MAX_UNITS_PER_CALL
    slow = ChunkSizer()
    slow.observe(2.0, 1.99)  # an LLM agent: one unit per call, full concurrency
    assert (slow.size, slow.instant) == (1, False)
    waiting = ChunkSizer()
    waiting.observe(0.02, 0.019)  # quick but waiting (a local model server): batched, yet not the fast path
    assert waiting.size == int(TARGET_CALL_SECONDS / 0.02) and not waiting.instant


def test_instant_agents_stay_instant_when_threads_slow_their_units() -> None:
    """Units of an instant agent that share a worker with many threads take longer (the GIL):
    their calls get smaller, but they stay on the fast path, which ends that contention."""
    sizer = ChunkSizer()
    for _ in range(20):
        sizer.observe(0.012, 0.00002)
    assert sizer.instant and sizer.size == int(TARGET_CALL_SECONDS / 0.012)


def test_call_size_adapts_when_units_slow_down() -> None:
    sizer = ChunkSizer()
    sizer.observe(0.001, 0.0001)
    for _ in range(40):
        sizer.observe(1.0, 1.0)
    assert sizer.size == 1 and not sizer.instant
    assert INSTANT_AGENT_S < TARGET_CALL_SECONDS


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
    """Stands in for an actor method: records where each call went."""

    def __init__(self, worker: int, calls: list, group: str | None = None):
        self.worker, self.calls, self.group = worker, calls, group

    def options(self, *, concurrency_group: str) -> _FakeMethod:
        return _FakeMethod(self.worker, self.calls, concurrency_group)

    def remote(self, positions: list[int], attempts: list[int], shared: list, budget_s: float, instant: bool) -> object:
        self.calls.append((self.worker, self.group, positions, instant))
        return object()


class _FakeActor:
    def __init__(self, worker: int, calls: list):
        self.run_units = _FakeMethod(worker, calls)
        self.prepare = self  # ``prepare.remote(shared)``: a reference to wait for

    def remote(self, shared: list) -> object:
        return object()


def _fake_pool(calls: list, strategies: list) -> WorkerPool:
    """A pool whose ``new_actor`` records each scheduling strategy and makes a fake actor."""

    def new_actor(strategy: object) -> _FakeActor:
        strategies.append(strategy)
        return _FakeActor(len(strategies) - 1, calls)

    return WorkerPool(new_actor, shared=[])


def _call(*positions: int) -> list[tuple[Unit, int]]:
    return [(Unit(f"id{p}", 0, "e", "m", 1, p), 1) for p in positions]


def test_each_call_goes_to_the_worker_with_the_fewest_calls_in_flight() -> None:
    calls: list = []
    pool = _fake_pool(calls, [])
    pool.add(["SPREAD", "SPREAD"])
    first = pool.submit(_call(0), fast=True, budget_s=1)
    pool.submit(_call(1), fast=True, budget_s=1)
    pool.submit(_call(2), fast=True, budget_s=1)  # both had one: the first worker again
    assert [worker for worker, *_ in calls] == [0, 1, 0]
    pool.finished(first)  # worker 0 now has one in flight, worker 1 one
    pool.submit(_call(3, 4), fast=False, budget_s=1)
    pool.submit(_call(5), fast=False, budget_s=1)  # worker 0: 2, worker 1: 1 before this one
    assert [worker for worker, *_ in calls] == [0, 1, 0, 0, 1]
    assert [group for _, group, *_ in calls] == [FAST_GROUP] * 3 + [None, None]
    assert [instant for *_, instant in calls] == [True] * 3 + [
        False,
        False,
    ]  # the worker shares a CPU for fast calls only
    assert calls[3][2] == [3, 4]  # units travel as their plan positions


def test_workers_added_for_a_new_node_get_the_next_calls() -> None:
    calls: list = []
    strategies: list = []
    pool = _fake_pool(calls, strategies)
    pool.add(["SPREAD", "SPREAD"])
    assert len(pool.preparing) == 2 and pool.node_of == [None, None]
    for _ in range(4):
        pool.submit(_call(0), fast=False, budget_s=1)  # two calls on each
    node = "ab" * 28  # a Ray node id
    pool.add_on_nodes([node])
    assert pool.count == 3 and len(pool.preparing) == 3
    affinity = strategies[2]
    assert isinstance(affinity, NodeAffinitySchedulingStrategy)
    assert (affinity.node_id, affinity.soft) == (node, True)  # a node that died meanwhile: elsewhere
    pool.submit(_call(1), fast=False, budget_s=1)
    pool.submit(_call(2), fast=False, budget_s=1)
    assert [worker for worker, *_ in calls[4:]] == [2, 2]  # the idle new worker first


def _node(node_id: str, cpus: float, alive: bool = True) -> dict:
    """An entry of ``ray.nodes()``."""
    return {"NodeID": node_id, "Alive": alive, "Resources": {"CPU": cpus} if cpus else {}}


def test_the_pool_grows_onto_nodes_that_joined(monkeypatch: pytest.MonkeyPatch) -> None:
    head, joined, dead = "aa" * 28, "bb" * 28, "cc" * 28
    strategies: list = []
    pool = _fake_pool([], strategies)
    pool.add(["SPREAD", "SPREAD"])
    monkeypatch.setattr(engine.ray, "nodes", lambda: [_node(head, 2), _node(joined, 4), _node(dead, 8, alive=False)])
    engine._grow_pool(pool, demand=16)
    assert pool.count == 2, "workers still starting (node unknown): nothing is added yet"
    pool.preparing.clear()
    pool.node_of[:] = [head, head]
    engine._grow_pool(pool, demand=16)
    assert [strategy.node_id for strategy in strategies[2:]] == [
        joined
    ] * 4  # one per CPU of the new node, none on the dead one
    pool.preparing.clear()
    pool.node_of[2:] = [joined] * 4
    engine._grow_pool(pool, demand=16)
    assert pool.count == 6  # every node has one worker per CPU
    small = _fake_pool([], [])
    small.add(["SPREAD"])
    small.preparing.clear()
    small.node_of[:] = [head]
    engine._grow_pool(small, demand=3)
    assert small.count == 3  # no more workers than units that may run at once


def test_workers_return_to_a_node_that_comes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dead node's workers run on elsewhere (Ray restarts them); when a node joins again,
    new workers go there, and each, once up, retires one of them: it gets no more calls and
    is ended when its calls are back, never with a call in flight."""
    head, gone, back = "aa" * 28, "bb" * 28, "cc" * 28
    calls: list = []
    strategies: list = []
    ended: list = []
    pool = _fake_pool(calls, strategies)
    pool.add(["SPREAD"] * 4)
    pool.preparing.clear()
    pool.node_of[:] = [head, head, gone, gone]
    monkeypatch.setattr(
        engine.ray, "kill", lambda actor, no_restart: ended.append((actor.run_units.worker, no_restart))
    )
    monkeypatch.setattr(engine.ray, "nodes", lambda: [_node(head, 2), _node(gone, 2, alive=False)])
    engine._grow_pool(pool, demand=16)
    assert pool.count == 4 and len(strategies) == 4, "no node to go to: the displaced workers keep working"
    busy = [pool.submit(_call(n), fast=False, budget_s=1) for n in range(4)]  # one call on each

    monkeypatch.setattr(engine.ray, "nodes", lambda: [_node(head, 2), _node(gone, 2, alive=False), _node(back, 2)])
    engine._grow_pool(pool, demand=16)
    assert [strategy.node_id for strategy in strategies[4:]] == [back, back]
    assert pool.count == 6 and not ended  # the old ones work on until the new ones are up
    monkeypatch.setattr(engine.ray, "get", lambda ref: back)
    for ref in list(pool.preparing):
        assert pool.came_up(ref)
    assert pool.count == 4 and pool.workers_on() == {head: 2, back: 2}
    assert not ended, "a retired worker with a call in flight is not ended"
    pool.submit(_call(4), fast=False, budget_s=1)
    pool.submit(_call(5), fast=False, budget_s=1)
    assert [worker for worker, *_ in calls[4:]] == [4, 5]  # never to a retired worker
    pool.finished(busy[2])
    pool.finished(busy[0])
    assert ended == [(2, True)]  # ended once its call was back, and not restarted by Ray
    pool.finished(busy[3])
    assert ended == [(2, True), (3, True)]
    engine._grow_pool(pool, demand=16)
    assert len(strategies) == 6  # the pool is whole again: nothing more to add


def test_a_node_with_more_workers_than_cpus_hands_the_last_ones_to_a_node_that_joins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker that was still starting when its node died comes up where Ray restarted it:
    its node then has more workers than CPUs, and a node that joins takes over the last ones."""
    head, joined = "aa" * 28, "bb" * 28
    strategies: list = []
    ended: list = []
    pool = _fake_pool([], strategies)
    pool.add(["SPREAD"] * 3)
    pool.preparing.clear()
    pool.node_of[:] = [head, head, head]
    monkeypatch.setattr(engine.ray, "kill", lambda actor, no_restart: ended.append(actor.run_units.worker))
    monkeypatch.setattr(engine.ray, "nodes", lambda: [_node(head, 2)])
    engine._grow_pool(pool, demand=3)
    assert len(strategies) == 3, "nowhere better to go: the third worker stays"
    monkeypatch.setattr(engine.ray, "nodes", lambda: [_node(head, 2), _node(joined, 2)])
    engine._grow_pool(pool, demand=3)
    assert [strategy.node_id for strategy in strategies[3:]] == [joined]
    monkeypatch.setattr(engine.ray, "get", lambda ref: joined)
    (ref,) = pool.preparing
    pool.came_up(ref)
    assert ended == [2] and pool.workers_on() == {head: 2, joined: 1}


def test_a_cluster_that_cannot_be_listed_leaves_the_pool_as_it_is(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def unreachable() -> list:
        raise ConnectionError("GCS unavailable")

    pool = _fake_pool([], [])
    pool.add(["SPREAD"])
    pool.preparing.clear()
    monkeypatch.setattr(engine.ray, "nodes", unreachable)
    engine._grow_pool(pool, demand=8)
    assert pool.count == 1 and "cannot list the cluster's nodes" in caplog.text


def test_worker_count_is_one_per_cpu_within_the_concurrency() -> None:
    assert worker_count(cpus=2, demand=64) == 2
    assert worker_count(cpus=32, demand=8) == 8  # never more workers than units at once
    assert worker_count(cpus=0, demand=10) == 1  # no CPU yet (a RayJob's workers still starting)
    assert worker_count(cpus=2, demand=200) == math.ceil(200 / MAX_THREADS_PER_WORKER)  # threads bounded
    assert worker_count(cpus=3.5, demand=64) == 3


def test_new_workers_go_to_the_nodes_furthest_below_one_per_cpu() -> None:
    cpus = {"head": 2.0, "joined": 4.0}
    assert nodes_for_new_workers(cpus, {"head": 2}, wanted=2) == ["joined", "joined"]
    assert nodes_for_new_workers(cpus, {"head": 2}, wanted=9) == ["joined"] * 4  # no node beyond its CPUs
    assert nodes_for_new_workers(cpus, {"head": 2, "joined": 4}, wanted=3) == []
    # a 0-CPU head (RayJob): the one worker started on the first worker node; the rest follow it
    assert nodes_for_new_workers({"head": 0.0, "a": 8.0}, {"a": 1}, wanted=7) == ["a"] * 7
    # spread: each new worker to the node with the largest deficit, ties in node order
    assert nodes_for_new_workers({"a": 2.0, "b": 4.0, "c": 2.0}, {"a": 1}, wanted=5) == ["b", "b", "b", "c", "a"]
    assert nodes_for_new_workers({}, {}, wanted=3) == []


def test_units_a_call_did_not_start_are_first_in_line_again(tmp_path: Path) -> None:
    plan = Plan(load_evals(write_mc_evals(tmp_path / "evals", ["a", "b"])), ["m1", "m2"], [1, 2, 3], "agent")
    scheduler = Scheduler(plan, np.ones(len(plan), dtype=bool), max_concurrency=4, model_limits={})
    call = scheduler.next_call(3)
    assert [unit.index for unit, _ in call] == [0, 1, 2]  # eval a, model m1, seeds 1-3
    scheduler.call_finished("m1")
    scheduler.put_back(call[1:])
    assert [unit.index for unit, _ in scheduler.next_call(10)] == [3, 4, 5, 9, 10, 11]  # m2's turn
    assert [unit.index for unit, _ in scheduler.next_call(10)] == [1, 2, 6, 7, 8]  # m1: put back first
    assert scheduler.queued == 0


def test_the_scheduler_makes_only_the_units_to_run_and_only_when_taken(tmp_path: Path) -> None:
    plan = Plan(load_evals(write_mc_evals(tmp_path / "evals", ["a", "b"])), ["m1", "m2"], [1, 2, 3], "agent")
    todo = np.zeros(len(plan), dtype=bool)
    todo[[1, 4, 5, 7, 9]] = True  # the rest is stored
    scheduler = Scheduler(plan, todo, max_concurrency=4, model_limits={})
    assert scheduler.queued == 5
    assert scheduler.next_call(1) == [(plan.unit(1), 1)]  # m1
    assert scheduler.next_call(10) == [(plan.unit(4), 1), (plan.unit(5), 1), (plan.unit(9), 1)]  # m2, both evals
    assert scheduler.next_call(10) == [(plan.unit(7), 1)]
    assert scheduler.queued == 0 and scheduler.next_call(10) == []


def _worker_on(evals: list, agent) -> UnitWorker:
    """A worker object outside Ray, holding the run's data as ``_load`` would."""
    worker = UnitWorker(WorkerConfig(agent="test", models=["m"], seeds=list(range(10)), run_id="r", isolation="inline"))
    worker.evals = evals
    worker.plan = Plan(evals, ["m"], list(range(10)), "test")
    worker.agent = agent
    return worker


def test_a_call_starts_no_unit_after_its_time_budget(tmp_path: Path) -> None:
    evals = load_evals(write_mc_evals(tmp_path / "evals", ["a"]))

    def slow(prompt: str, work_dir: Path) -> dict:
        time.sleep(0.05)
        return {"answer": "B"}

    worker = _worker_on(evals, slow)
    worker.work_root = tmp_path / "work"
    rows = worker.run_units(list(range(10)), [1] * 10, [], budget_s=0.12)
    assert 1 <= len(rows) <= 4  # each unit takes at least 0.05 s: the fourth starts at >= 0.15 s
    assert [json.loads(row.line)["unit_id"] for row in rows] == [worker.plan.unit(i).unit_id for i in range(len(rows))]
    assert all(row.status == "passed" and row.seconds >= 0.05 for row in rows)
    instant = _worker_on(evals, lambda prompt, work_dir: {"answer": "B"})
    instant.work_root = tmp_path / "work"
    assert len(instant.run_units([0, 1, 2], [1, 1, 1], [], budget_s=0)) == 1  # the first unit always runs
    assert len(instant.run_units(list(range(10)), [1] * 10, [], budget_s=10)) == 10


def test_each_thread_of_a_worker_has_its_own_parent_folder(tmp_path: Path) -> None:
    """Threads creating and removing work folders in one parent wait on its lock: two threads
    then run units no faster than one."""
    evals = load_evals(write_mc_evals(tmp_path / "evals", ["a"]))
    parents: dict[int, set[Path]] = {}

    def record(prompt: str, work_dir: Path) -> dict:
        parents.setdefault(threading.get_native_id(), set()).add(work_dir.parent)
        return {"answer": "B"}

    worker = _worker_on(evals, record)
    worker.work_root = tmp_path / "work"
    threads = [
        threading.Thread(target=worker.run_units, args=(positions, [1] * 5, [], 10))
        for positions in ([0, 1, 2, 3, 4], [5, 6, 7, 8, 9])
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(parents) == 2 and all(len(folders) == 1 for folders in parents.values())
    first, second = (folders.pop() for folders in parents.values())
    assert first != second and first.is_relative_to(worker.work_root) and second.is_relative_to(worker.work_root)


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
