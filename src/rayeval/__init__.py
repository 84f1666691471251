"""rayeval: run AI-agent evaluations at scale, reproducibly, with exact graders."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from ._lazy import lazy_exports
from ._version import __version__

_EXPORTS = {
    "ConfigError": ".errors",
    "RayevalError": ".errors",
    "Eval": ".evals",
    "EvalFileError": ".evals",
    "EvalProblem": ".evals",
    "GraderSpec": ".evals",
    "load_eval": ".evals",
    "load_evals": ".evals",
    "GraderResult": ".graders",
    "get_grader": ".graders",
    "register_grader": ".graders",
    "grade": ".grading",
    "EvalResult": ".harness",
    "EvalRunner": ".harness",
    "read_results": ".report.reader",
}

__all__ = [
    "ConfigError",
    "Eval",
    "EvalFileError",
    "EvalProblem",
    "EvalResult",
    "EvalRunner",
    "GraderResult",
    "GraderSpec",
    "RayevalError",
    "__version__",
    "evaluations",
    "get_grader",
    "grade",
    "load_eval",
    "load_evals",
    "read_results",
    "register_grader",
]

_export = lazy_exports(__name__, _EXPORTS)


def __getattr__(name: str) -> Any:
    """Exports load on first use: ``rayeval.evaluations`` brings Ray and the reports, and the
    unit runner (a process per worker) imports only the few modules it needs."""
    if name == "evaluations":
        return import_module(".evaluations", __name__)
    return _export(name)
