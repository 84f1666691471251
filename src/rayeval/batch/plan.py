"""The plan of a batch run: evals × models × seeds, each unit with a stable content id; and
what differs between the inputs of a stored run's plan and the current ones."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np

from .._messages import listed
from ..evals import Eval
from ..storage import RunManifest


class Unit(NamedTuple):
    """One agent run on one eval with one model and one seed (internal, and sent to every
    worker with the whole plan: a named tuple pickles an order of magnitude faster than a
    pydantic model or a dataclass)."""

    unit_id: str
    eval_index: int
    eval_id: str
    model: str
    seed: int
    position: int  # in the plan: calls to workers name units by it


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _unit_key_prefix(eval_: Eval, agent: str) -> str:
    """The part of a unit's key shared by all its models and seeds (hashing the grader config
    once per eval instead of once per unit)."""
    grader = [spec.model_dump(mode="json") for spec in eval_.grader_specs]
    return f'{{"agent":{_canonical(agent)},"eval":{_canonical(eval_.content_hash())},"grader":{_canonical(grader)},'


def _unit_id(prefix: str, model_json: str, seed: int) -> str:
    key = f'{prefix}"model":{model_json},"seed":{seed}}}'
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def unit_id_for(eval_: Eval, model: str, seed: int, agent: str) -> str:
    """Content hash of the canonical JSON of eval content hash, grader config, model, seed and
    agent: the same inputs give the same id across runs, resumes and versions."""
    return _unit_id(_unit_key_prefix(eval_, agent), _canonical(model), int(seed))


class Plan:
    """The cross product evals × models × seeds in a stable order (eval, model, seed).

    A unit is made from its position when asked for: neither the driver nor a worker builds
    the whole plan (a million units would take gigabytes as objects).
    """

    def __init__(self, evals: list[Eval], models: list[str], seeds: list[int], agent: str):
        self.evals = evals
        self.models = models
        self.seeds = [int(seed) for seed in seeds]
        self.agent = agent
        self._model_json = [_canonical(model) for model in models]
        self._prefixes: dict[int, str] = {}  # per eval, made on first use

    def __len__(self) -> int:
        return len(self.evals) * len(self.models) * len(self.seeds)

    def unit(self, index: int) -> Unit:
        if not 0 <= index < len(self):
            raise IndexError(f"plan position {index} out of range (the plan has {len(self)} units)")
        eval_index, model_index, seed = self._locate(index)
        unit_id = _unit_id(self._prefix(eval_index), self._model_json[model_index], seed)
        return Unit(unit_id, eval_index, self.evals[eval_index].id, self.models[model_index], seed, index)

    def _locate(self, index: int) -> tuple[int, int, int]:
        """(eval index, model index, seed) of a position."""
        eval_index, rest = divmod(index, len(self.models) * len(self.seeds))
        model_index, seed_index = divmod(rest, len(self.seeds))
        return eval_index, model_index, self.seeds[seed_index]

    def _prefix(self, eval_index: int) -> str:
        prefix = self._prefixes.get(eval_index)
        if prefix is None:
            prefix = self._prefixes[eval_index] = _unit_key_prefix(self.evals[eval_index], self.agent)
        return prefix

    def units(self) -> list[Unit]:
        return [self.unit(index) for index in range(len(self))]

    def unit_ids(self, start: int, stop: int) -> np.ndarray:
        """The ids of the units at positions start..stop-1, as an array of 32-byte strings."""
        ids = []
        for index in range(start, stop):
            eval_index, model_index, seed = self._locate(index)
            ids.append(_unit_id(self._prefix(eval_index), self._model_json[model_index], seed))
        return np.array(ids, dtype="S32")

    def model_positions(self, model_index: int, todo: np.ndarray) -> Iterator[int]:
        """The positions of one model's units for which ``todo`` (a bool per position) is set,
        in plan order, a slice of seeds at a time."""
        seeds = len(self.seeds)
        for eval_index in range(len(self.evals)):
            first = (eval_index * len(self.models) + model_index) * seeds
            for start in range(first, first + seeds, _SLICE):
                stop = min(start + _SLICE, first + seeds)
                yield from (start + int(offset) for offset in np.flatnonzero(todo[start:stop]))

    def model_counts(self, todo: np.ndarray) -> list[int]:
        """How many positions ``todo`` sets for each model."""
        shaped = todo.reshape(len(self.evals), len(self.models), len(self.seeds))
        return [int(n) for n in shaped.sum(axis=(0, 2))]

    def digest(self) -> str:
        """The plan's digest: sha256 of the canonical JSON of ``{"evals": sorted sha256s of the
        distinct unit-key prefixes (agent, eval content hash, grader config), "models": sorted
        distinct models, "seeds": sorted distinct seeds compacted into ranges}`` (all three empty
        for an empty plan).  A unit's id hashes its prefix, model and seed, so the set of unit
        ids is the product of these three sets: the digest changes iff the set of units does."""
        if not len(self):
            evals: list[str] = []
            models: list[str] = []
            seeds: list[int | tuple[int, int]] = []
        else:
            evals = sorted({hashlib.sha256(self._prefix(i).encode()).hexdigest() for i in range(len(self.evals))})
            models = sorted(set(self.models))
            seeds = compact_seeds(sorted(self.seeds))
        return hashlib.sha256(_canonical({"evals": evals, "models": models, "seeds": seeds}).encode()).hexdigest()


# Positions of the plan handled as one numpy slice (ids computed, todo scanned): bounded memory.
_SLICE = 65_536


def plan_units(evals: list[Eval], models: list[str], seeds: list[int], agent: str) -> list[Unit]:
    """Every unit of the plan, in order (small plans: tests, benchmarks)."""
    return Plan(evals, models, seeds, agent).units()


def unstored(plan: Plan, stored: np.ndarray) -> np.ndarray:
    """A bool per plan position: whether the unit has no id among ``stored`` (sorted unit ids as
    bytes, see ``ResultStore.stored_unit_id_array``).  One byte a unit, whatever is stored."""
    todo = np.ones(len(plan), dtype=bool)
    if not len(stored):
        return todo
    width = max(32, stored.dtype.itemsize)
    stored = stored.astype(f"S{width}", copy=False)
    for start in range(0, len(plan), _SLICE):
        stop = min(start + _SLICE, len(plan))
        ids = plan.unit_ids(start, stop).astype(f"S{width}")
        found = np.searchsorted(stored, ids)
        todo[start:stop] = stored[np.minimum(found, len(stored) - 1)] != ids
    return todo


def compact_seeds(seeds: Iterable[int | tuple[int, int]]) -> list[int | tuple[int, int]]:
    """Seeds in their order, with runs of three or more consecutive ones as inclusive
    ``(first, last)`` pairs (1..1,000,000 is one pair); takes such pairs too.  A repeated seed
    right after itself is dropped."""
    runs: list[list[int]] = []
    for item in seeds:
        first, last = (item, item) if isinstance(item, int) else (int(item[0]), int(item[1]))
        if runs and runs[-1][1] + 1 >= first >= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], last)
        else:
            runs.append([first, last])
    out: list[int | tuple[int, int]] = []
    for first, last in runs:
        if last - first >= 2:
            out.append((first, last))
        else:
            out.extend(range(first, last + 1))
    return out


def describe_seeds(seeds: Iterable[int | tuple[int, int]]) -> str:
    """``1..1000, 1005``."""
    items = compact_seeds(seeds)
    return ", ".join(str(item) if isinstance(item, int) else f"{item[0]}..{item[1]}" for item in items) or "none"


def plan_changes(previous: RunManifest, current: RunManifest, agent_args: dict[str, Any]) -> list[str]:
    """What differs between the inputs a run was planned with and the current ones, one line
    per field (``seeds: 1..2 → 1..3``); [] when they are the same.  ``agent_args`` are the
    current arguments unmasked: a secret one compares by its fingerprint and is never shown.
    Only what ``previous`` records is compared (manifests of earlier versions record less)."""
    changes = _argument_changes(previous, current, agent_args)
    if previous.models != current.models:
        changes.append(f"models: {_names(previous.models)} → {_names(current.models)}")
    if compact_seeds(previous.seeds) != compact_seeds(current.seeds):
        changes.append(f"seeds: {describe_seeds(previous.seeds)} → {describe_seeds(current.seeds)}")
    before = {ref.id: ref.eval_hash for ref in previous.eval_files}
    now = {ref.id: ref.eval_hash for ref in current.eval_files}
    for what, ids in (
        ("changed since", sorted(i for i in before.keys() & now.keys() if before[i] != now[i])),
        ("added", sorted(now.keys() - before.keys())),
        ("removed", sorted(before.keys() - now.keys())),
    ):
        if ids:
            changes.append(f"evals {what}: {listed(ids)}")
    for name in UNIT_OPTIONS:
        if name in previous.model_fields_set and getattr(previous, name) != getattr(current, name):
            changes.append(f"{name}: {getattr(previous, name)} → {getattr(current, name)}")
    changes += _limit_changes(previous.limits, current.limits)
    if not changes and previous.plan_digest and previous.plan_digest != current.plan_digest:
        changes.append(f"plan_digest: {previous.plan_digest} → {current.plan_digest}")
    return changes


# Options of a run that change how its units run (and so their rows), compared on --resume.
UNIT_OPTIONS = ("isolation", "network", "timeout", "grade_timeout", "answer_convention", "allow_models")


def _limit_changes(previous: dict[str, float | None] | None, current: dict[str, float | None] | None) -> list[str]:
    """Unit limits that differ (none when ``previous`` predates their record)."""
    if previous is None:
        return []
    current = current or {}
    return [
        f"limits.{name}: {previous.get(name)} → {current.get(name)}"
        for name in sorted(previous.keys() | current.keys())
        if previous.get(name) != current.get(name)
    ]


def _argument_changes(previous: RunManifest, current: RunManifest, agent_args: dict[str, Any]) -> list[str]:
    changes = []
    changed_secrets = set(previous.secret_args_changed(agent_args))
    for name in sorted(previous.agent_args.keys() | current.agent_args.keys()):
        old, new = previous.agent_args.get(name, _ABSENT), current.agent_args.get(name, _ABSENT)
        if old != new:
            changes.append(f"agent_args.{name}: {_shown(old)} → {_shown(new)}")
        elif name in changed_secrets:
            changes.append(f"agent_args.{name}: changed (a secret: its values are not shown)")
    return changes


_ABSENT = object()


def _shown(value: object) -> str:
    return "(absent)" if value is _ABSENT else json.dumps(value)


def _names(names: list[str]) -> str:
    return listed(names, most=10) or "none"


# ``--seeds N`` plans N runs of every eval and model: beyond this it is a typo, not a plan.
MAX_SEEDS = 1_000_000


def parse_seeds(text: str) -> list[int]:
    """``"1,2,3"`` → [1, 2, 3]; a single ``"N"`` → 1..N."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"--seeds expects N or a comma-separated list of integers, got {text!r}") from None
    if not numbers:
        raise ValueError("--seeds is empty")
    if len(numbers) == 1 and "," not in text:
        if not 1 <= numbers[0] <= MAX_SEEDS:
            raise ValueError(f"--seeds N needs 1 <= N <= {MAX_SEEDS:,}, got {numbers[0]}")
        return list(range(1, numbers[0] + 1))
    if len(set(numbers)) != len(numbers):
        raise ValueError(f"--seeds has duplicates: {text!r}")
    return numbers


_NOT_IN_A_NAME = re.compile(r"[\s;]+")


def parse_models(text: str) -> list[str]:
    """``--models``: names separated by commas (spaces around each are dropped). A name holding
    a space or a ``;`` is refused: it is a list typed with another separator, not one model."""
    models = [m.strip() for m in text.split(",") if m.strip()]
    if not models:
        raise ValueError("--models is empty")
    for model in models:
        if _NOT_IN_A_NAME.search(model):
            names = ",".join(part for part in _NOT_IN_A_NAME.split(model) if part)
            raise ValueError(
                f"--models: {model!r} is not one model name (no spaces or ';' in a name): "
                f"separated by commas, as in --models {names}"
            )
    if len(set(models)) != len(models):
        raise ValueError(f"--models has duplicates: {text!r}")
    return models
