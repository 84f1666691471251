"""The grader library: every reference grader type, exact to the behaviour spec.

Graders know nothing of Ray, files or the harness: ``get_grader(type).evaluate_answer(
answer, config)`` is a pure function of JSON values that never raises.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from . import builtin as _builtin  # registers the built-in types

if TYPE_CHECKING:  # the exports (see rayeval._lazy)
    from .base import Grader
    from .registry import GRADER_REGISTRY, get_grader, is_registered, register_grader
    from .result import GraderResult, normalize_score

__getattr__, __all__ = lazy_exports(__name__)
