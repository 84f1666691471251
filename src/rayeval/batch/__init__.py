"""Distributed batch runs on Ray: the layer that composes harness, graders and storage."""
from .engine import BatchConfig, RunConflict, run_batch
from .summary import RunSummary

__all__ = ["BatchConfig", "RunConflict", "RunSummary", "run", "run_batch"]


def run(evals: list[str] | str, *, agent: str, output: str, **options) -> RunSummary:
    """Python API of ``rayeval run``: ``rayeval.batch.run("evals", agent="reference", output="results")``."""
    paths = [evals] if isinstance(evals, str) else list(evals)
    return run_batch(BatchConfig(evals=paths, agent=agent, output=output, **options))
