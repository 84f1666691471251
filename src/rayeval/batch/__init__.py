"""Distributed batch runs on Ray: the layer that composes harness, graders and storage.

Exports load on first use, so a Ray worker importing ``rayeval.batch.worker`` does not pay
for the driver's imports (the engine, the storage reader, pandas).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import lazy_exports

if TYPE_CHECKING:  # the exports (see rayeval._lazy), with ``run`` below
    from .capacity import UnitsDoNotFit
    from .config import BatchConfig
    from .engine import run_batch
    from .resume import RunConflict
    from .stopping import RunCancelled
    from .summary import RunSummary

__getattr__, __all__ = lazy_exports(__name__, "run")


def run(evals: list[str] | str, *, agent: str, output: str | None = None, **options: Any) -> RunSummary:
    """Python API of ``rayeval run``: ``rayeval.batch.run("evals", agent="reference", output="results")``
    (``output``: the results root, by default ``rayeval-results`` in the working folder)."""
    from .config import DEFAULT_OUTPUT, BatchConfig
    from .engine import run_batch

    paths = [evals] if isinstance(evals, str) else list(evals)
    return run_batch(BatchConfig(evals=paths, agent=agent, output=output or DEFAULT_OUTPUT, **options))
