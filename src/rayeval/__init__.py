"""rayeval: run AI-agent evaluations at scale, reproducibly, with exact graders."""
from .evals import Eval, EvalFileError, EvalProblem, GraderSpec, load_eval, load_evals
from .grading import grade
from .graders import GraderResult, get_grader, register_grader
from .harness import EvalResult, EvalRunner

__version__ = "0.1.0"

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
