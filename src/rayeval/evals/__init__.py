"""Eval files: schema and loading."""

from .loader import EvalFileError, EvalProblem, check_evals, load_eval, load_evals
from .model import Eval, GraderSpec
from .select import EvalSelectionError, select_evals

__all__ = [
    "Eval",
    "EvalFileError",
    "EvalProblem",
    "EvalSelectionError",
    "GraderSpec",
    "check_evals",
    "load_eval",
    "load_evals",
    "select_evals",
]
