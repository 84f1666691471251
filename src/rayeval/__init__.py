"""rayeval: run AI-agent evaluations at scale, reproducibly, with exact graders.

Exports load on first use: ``rayeval.evaluations`` brings Ray and the reports, and the unit
runner (a process per worker) imports only the few modules it needs.
"""

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

if TYPE_CHECKING:  # the exports (see _lazy)
    from . import evaluations
    from ._version import __version__
    from .errors import ConfigError, RayevalError
    from .evals import Eval, EvalFileError, EvalProblem, GraderSpec, load_eval, load_evals
    from .graders import GraderResult, get_grader, register_grader
    from .report.reader import read_results
    from .unit import EvalResult, EvalRunner, grade

__getattr__, __all__ = lazy_exports(__name__)
