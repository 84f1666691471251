"""The grader library: every reference grader type, exact to the behaviour spec.

Graders know nothing of Ray, files or the harness: ``get_grader(type).evaluate_answer(
answer, config)`` is a pure function of JSON values that never raises.
"""

from . import builtin as _builtin  # noqa: F401  (registers the built-in types)
from .base import Grader
from .registry import GRADER_REGISTRY, get_grader, is_registered, register_grader
from .result import GraderResult, normalize_score

__all__ = [
    "GRADER_REGISTRY",
    "Grader",
    "GraderResult",
    "get_grader",
    "is_registered",
    "normalize_score",
    "register_grader",
]
