"""Eval files: schema and loading."""
from .loader import EvalFileError, EvalProblem, check_evals, load_eval, load_evals
from .model import Eval, GraderSpec

__all__ = ["Eval", "EvalFileError", "EvalProblem", "GraderSpec", "check_evals", "load_eval", "load_evals"]
