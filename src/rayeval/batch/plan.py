"""The plan of a batch run: evals × models × seeds, each unit with a stable content id."""
from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, NamedTuple

from .._messages import listed
from ..evals import Eval

if TYPE_CHECKING:  # workers import this module: no storage layer for them
    from ..storage.manifest import RunManifest


class Unit(NamedTuple):
    """One agent run on one eval with one model and one seed (internal, and sent to every
    worker with the whole plan: a named tuple pickles an order of magnitude faster than a
    pydantic model or a dataclass)."""

    unit_id: str
    eval_index: int
    eval_id: str
    model: str
    seed: int
    index: int  # position in the plan: calls to workers name units by it


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

    A unit is made from its position when asked for: a worker names the units of a call by
    position and never builds the whole plan (the driver lists it for the manifest).
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
        eval_index, rest = divmod(index, len(self.models) * len(self.seeds))
        model_index, seed_index = divmod(rest, len(self.seeds))
        prefix = self._prefixes.get(eval_index)
        if prefix is None:
            prefix = self._prefixes[eval_index] = _unit_key_prefix(self.evals[eval_index], self.agent)
        seed = self.seeds[seed_index]
        unit_id = _unit_id(prefix, self._model_json[model_index], seed)
        return Unit(unit_id, eval_index, self.evals[eval_index].id, self.models[model_index], seed, index)

    def units(self) -> list[Unit]:
        return [self.unit(index) for index in range(len(self))]


def plan_units(evals: list[Eval], models: list[str], seeds: list[int], agent: str) -> list[Unit]:
    """Every unit of the plan, in order."""
    return Plan(evals, models, seeds, agent).units()


def plan_changes(previous: RunManifest, units: list[Unit], evals: list[Eval], models: list[str], seeds: list[int]) -> str:
    """How the plan differs from the one a run started with ("" when it is the same): an eval
    edited since (its units get new ids, so its old rows would stay beside the new ones), evals,
    models or seeds added or removed."""
    if {entry.unit_id for entry in previous.plan} == {unit.unit_id for unit in units}:
        return ""
    before = {ref.id: ref.eval_hash for ref in previous.eval_files}
    now = {eval_.id: eval_.content_hash() for eval_ in evals}
    changes = [
        _listed("eval", "changed since", sorted(i for i in before.keys() & now.keys() if before[i] != now[i])),
        _listed("eval", "added", sorted(now.keys() - before.keys())),
        _listed("eval", "removed", sorted(before.keys() - now.keys())),
        _listed("model", "added", [m for m in models if m not in previous.models]),
        _listed("model", "removed", [m for m in previous.models if m not in models]),
        _listed("seed", "added", [str(s) for s in seeds if s not in previous.seeds]),
        _listed("seed", "removed", [str(s) for s in previous.seeds if s not in seeds]),
    ]
    return "; ".join(change for change in changes if change) or "its units differ"


def _listed(kind: str, what: str, names: list[str]) -> str:
    """``evals e1, e2 changed since``; "" when there are none."""
    if not names:
        return ""
    return f"{kind}{'s' if len(names) > 1 else ''} {listed(names)} {what}"


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


def parse_models(text: str) -> list[str]:
    models = [m.strip() for m in text.split(",") if m.strip()]
    if not models:
        raise ValueError("--models is empty")
    if len(set(models)) != len(models):
        raise ValueError(f"--models has duplicates: {text!r}")
    return models
