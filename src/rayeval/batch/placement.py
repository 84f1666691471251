"""How many unit workers a run has, and on which nodes new ones go when the cluster grows."""

from __future__ import annotations

import math
from collections.abc import Mapping

# Agent work waits on LLM calls, so a worker's threads mostly sleep; beyond this, add workers.
MAX_THREADS_PER_WORKER = 64


def worker_count(cpus: float, demand: int) -> int:
    """One worker per CPU (a worker keeps about one core busy with fast units), no more than
    ``demand`` (the units that may run at once), and at least enough workers that none needs
    more than MAX_THREADS_PER_WORKER threads."""
    return max(1, min(int(cpus), demand), math.ceil(demand / MAX_THREADS_PER_WORKER))


def nodes_for_new_workers(node_cpus: Mapping[str, float], workers_on: Mapping[str, int], wanted: int) -> list[str]:
    """A node for each of up to ``wanted`` new workers: each goes to the node furthest below one
    worker per CPU (ties: in ``node_cpus`` order), so that a node that joined the cluster gets
    the workers its CPUs are worth; none once every node has that many."""
    deficits = {node: int(cpus) - workers_on.get(node, 0) for node, cpus in node_cpus.items()}
    chosen = []
    for _ in range(wanted):
        node = max(deficits, key=deficits.__getitem__, default=None)
        if node is None or deficits[node] <= 0:
            break
        chosen.append(node)
        deficits[node] -= 1
    return chosen
