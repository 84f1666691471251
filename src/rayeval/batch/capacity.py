"""How many units a run can have running at once, and what limits that: the run's
``--max-concurrency``, its number of units, or the resources its units ask Ray for (CPU,
memory, a custom resource) against the nodes' totals.  The engine sizes its workers from it,
and the run (and ``--dry-run``) says it at start: a run held to 8 units at once by its
units' CPU share, while ``--max-concurrency`` says 250, is otherwise a mystery."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._messages import option
from ..errors import RayevalError
from ..unit.context import MIB, UnitResources
from .config import BatchConfig

#: what a node has: Ray's resource name -> amount (``CPU``, ``GPU``, ``memory`` in bytes, custom ones)
NodeResources = dict[str, float]

#: the option that changes what a unit asks for, by resource (custom ones: ``--unit-resource``)
_OPTION_OF = {"CPU": "--unit-cpus", "memory": "--unit-memory"}
_UNIT_OPTIONS = ("--unit-cpus", "--unit-memory", "--unit-resource")


class UnitsDoNotFit(RayevalError, ValueError):
    """A unit asks for more than any node of the (embedded) Ray has: it could never start."""


@dataclass(frozen=True)
class PoolShape:
    """The run's workers: ``count`` of them, each running up to ``slots`` units at once."""

    slots: int
    count: int


def ray_options(resources: UnitResources, slots: int) -> dict[str, Any]:
    """Ray's options asking for ``slots`` units' resources (``GPU`` is Ray's ``num_gpus``)."""
    custom = {name: amount * slots for name, amount in resources.custom.items() if name != "GPU"}
    return {
        "num_cpus": resources.cpus * slots,
        "num_gpus": resources.custom.get("GPU", 0) * slots,
        "memory": resources.memory * slots,
        "resources": custom,
    }


def unit_demand(resources: UnitResources) -> NodeResources:
    """What one unit asks Ray for, by Ray's resource names (only what it asks any of)."""
    asked = ray_options(resources, 1)
    wanted = {"CPU": asked["num_cpus"], "GPU": asked["num_gpus"], "memory": asked["memory"], **asked["resources"]}
    return {name: amount for name, amount in wanted.items() if amount}


def units_on(node: NodeResources, wanted: NodeResources) -> dict[str, int]:
    """Per resource a unit asks for, how many units' worth the node has."""
    return {name: int(node.get(name, 0) / amount + 1e-9) for name, amount in wanted.items()}


def pool_shape(
    resources: UnitResources,
    nodes: Sequence[NodeResources],
    *,
    max_concurrency: int,
    planned: int,
    workers: int | None,
    embedded: bool,
) -> PoolShape:
    """Workers enough for the run's concurrency, each running up to a CPU's worth of units (or
    ``workers`` of them), each within what the largest node holds.  No node holding one unit:
    on the embedded Ray it never would (UnitsDoNotFit); on a cluster an autoscaler may yet add
    a node that does, so a worker asks for one unit, and waits for it."""
    demand = max(1, min(max_concurrency, planned))
    slots = math.ceil(demand / workers) if workers else max(1, min(demand, int(1 / resources.cpus)))
    wanted = unit_demand(resources)
    largest = max((min(units_on(node, wanted).values()) for node in nodes), default=0)
    if not largest and embedded:
        totals = _totals(nodes)
        raise UnitsDoNotFit(
            "a unit asks for "
            + ", ".join(f"{name} {_amount(name, amount)}" for name, amount in wanted.items())
            + f" (the agent's declaration with {'/'.join(map(option, _UNIT_OPTIONS))}), more than this machine's Ray has "
            + f"({', '.join(f'{name} {_amount(name, totals[name])}' for name in ('CPU', 'GPU', 'memory') if name in totals)})"
            + f": lower them, or run on a cluster ({option('--address')})"
        )
    slots = min(slots, largest or 1)
    return PoolShape(slots=slots, count=math.ceil(demand / slots))


def run_capacity(
    config: BatchConfig, resources: UnitResources, nodes: Sequence[NodeResources], *, planned: int, embedded: bool
) -> tuple[PoolShape, Callable[[int], str]]:
    """The pool a run of ``planned`` units gets on ``nodes`` (:func:`pool_shape`), and what
    says how many of ``n`` units to run can run at once on it, and why (:func:`describe_capacity`)."""
    max_concurrency = config.scheduling.max_concurrency
    shape = pool_shape(
        resources,
        nodes,
        max_concurrency=max_concurrency,
        planned=planned,
        workers=config.ray.workers,
        embedded=embedded,
    )

    def capacity(to_run: int) -> str:
        return describe_capacity(
            resources, nodes, shape, max_concurrency=max_concurrency, planned=to_run, embedded=embedded
        )

    return shape, capacity


def at_once(resources: UnitResources, nodes: Sequence[NodeResources], shape: PoolShape, demand: int) -> int:
    """Units the nodes can run at once: whole workers of ``shape.slots`` units on each node,
    at most ``demand``."""
    wanted = unit_demand(resources)
    workers = sum(min(units_on(node, wanted).values()) // shape.slots for node in nodes)
    return min(demand, min(workers, shape.count) * shape.slots)


def describe_capacity(
    resources: UnitResources,
    nodes: Sequence[NodeResources],
    shape: PoolShape,
    *,
    max_concurrency: int,
    planned: int,
    embedded: bool,
) -> str:
    """``units at once: 8 of the 250 --max-concurrency allows: ...``: how many of the run's
    units can run at once, what holds it there, and the option that changes it."""
    demand = max(1, min(max_concurrency, planned))
    running = at_once(resources, nodes, shape, demand)
    where = "this machine's Ray has" if embedded else "the cluster's nodes now have"
    grows = "" if embedded else "; a cluster's autoscaler, where it has one, may add nodes for more"
    if running == demand:
        if planned <= max_concurrency:
            return f"units at once: all {planned} of the run ({option('--max-concurrency', max_concurrency)})"
        return f"units at once: {running}, as {option('--max-concurrency', max_concurrency)} says"
    wanted = unit_demand(resources)
    if not running:  # only on a cluster: the embedded Ray refuses such a unit (UnitsDoNotFit)
        asked = ", ".join(f"{name} {_amount(name, amount)}" for name, amount in wanted.items())
        return (
            f"units at once: none yet: no node of the cluster now has room for a unit, which asks for {asked} "
            f"({', '.join(map(option, _UNIT_OPTIONS))}); units wait for a node that has, such as an autoscaler's"
        )
    held = {name: sum(units_on(node, {name: wanted[name]})[name] for node in nodes) for name in wanted}
    name = min(held, key=lambda resource: held[resource])
    if demand == max_concurrency:
        head = f"units at once: {running}, not the {max_concurrency} of {option('--max-concurrency')}"
    else:
        head = f"units at once: {running} of the run's {planned}"
    if held[name] <= running or shape.slots == 1:  # the resource itself, summed over the nodes
        totals = _totals(nodes)
        changes = option(_OPTION_OF[name]) if name in _OPTION_OF else option("--unit-resource", {name: "AMOUNT"})
        return (
            f"{head}: each unit asks for {name} {_amount(name, wanted[name])} and {where} "
            f"{name} {_amount(name, totals.get(name, 0))} in all ({changes} changes what a unit asks for){grows}"
        )
    return (  # what is left on each node after its whole workers is too small for another
        f"{head}: each worker runs {shape.slots} units and asks for their resources on one node, and the "
        f"nodes' room holds {_count(running // shape.slots, 'such worker')} ({option('--workers', 'N')}: more, smaller "
        "workers pack "
        f"more units onto the nodes){grows}"
    )


def local_node_resources(object_store_memory: int) -> NodeResources:
    """The resources an embedded Ray would find on this machine (as ``ray.init`` works them
    out: its CPUs, and its memory less the object store), without starting it."""
    from ray._private.resource_and_label_spec import ResourceAndLabelSpec

    spec = ResourceAndLabelSpec(object_store_memory=object_store_memory).resolve(
        is_head=True, node_ip_address="127.0.0.1"
    )
    return {name: float(amount) for name, amount in spec.to_resource_dict().items()}


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _totals(nodes: Sequence[NodeResources]) -> NodeResources:
    totals: NodeResources = {}
    for node in nodes:
        for name, amount in node.items():
            totals[name] = totals.get(name, 0) + amount
    return totals


def _amount(name: str, amount: float) -> str:
    if name == "memory":
        return f"{amount / 1024 / MIB:.1f} GiB" if amount >= 1024 * MIB else f"{amount / MIB:.0f} MiB"
    return f"{amount:g}"
