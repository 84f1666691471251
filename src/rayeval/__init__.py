"""rayeval: run AI-agent evaluations at scale, reproducibly, with exact graders."""
from importlib import import_module
from typing import Any

from ._version import __version__
from .evals import Eval, EvalFileError, EvalProblem, GraderSpec, load_eval, load_evals
from .graders import GraderResult, get_grader, register_grader
from .grading import grade
from .harness import EvalResult, EvalRunner

__all__ = [
    "Eval",
    "EvalFileError",
    "EvalProblem",
    "EvalResult",
    "EvalRunner",
    "GraderResult",
    "GraderSpec",
    "__version__",
    "evaluations",
    "get_grader",
    "grade",
    "load_eval",
    "load_evals",
    "register_grader",
]


def __getattr__(name: str) -> Any:
    """``rayeval.evaluations`` loads on first use (it brings Ray and the reports with ``run``)."""
    if name == "evaluations":
        return import_module(".evaluations", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
