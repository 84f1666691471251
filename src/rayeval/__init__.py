"""rayeval: run AI-agent evaluations at scale, reproducibly, with exact graders."""
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
    "get_grader",
    "grade",
    "load_eval",
    "load_evals",
    "register_grader",
]
