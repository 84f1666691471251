"""The plan of a batch run: evals × models × seeds, each unit with a stable content id."""
from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, ConfigDict

from ..evals import Eval


class Unit(BaseModel):
    """One agent run on one eval with one model and one seed."""

    model_config = ConfigDict(frozen=True)

    unit_id: str
    eval_index: int
    eval_id: str
    model: str
    seed: int


def unit_id_for(eval_: Eval, model: str, seed: int, agent: str) -> str:
    """Content hash: the same eval content, grader config, model, seed and agent → the same id."""
    grader = [spec.model_dump(mode="json") for spec in eval_.grader_specs]
    key = json.dumps(
        {"eval": eval_.content_hash(), "grader": grader, "model": model, "seed": seed, "agent": agent},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def plan_units(evals: list[Eval], models: list[str], seeds: list[int], agent: str) -> list[Unit]:
    """Cross product in a stable order (eval, model, seed)."""
    return [
        Unit(unit_id=unit_id_for(eval_, model, seed, agent), eval_index=index, eval_id=eval_.id, model=model, seed=seed)
        for index, eval_ in enumerate(evals)
        for model in models
        for seed in seeds
    ]


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
        if numbers[0] < 1:
            raise ValueError(f"--seeds N needs N >= 1, got {numbers[0]}")
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
