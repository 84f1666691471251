"""Eval files: schema and loading."""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # the exports (see rayeval._lazy)
    from .loader import EvalFileError, EvalProblem, check_evals, load_eval, load_evals
    from .model import Eval, GraderSpec
    from .select import EvalSelectionError, select_evals

__getattr__, __all__ = lazy_exports(__name__)
