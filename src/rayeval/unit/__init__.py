"""One unit's life: its context and prompt, its run (stage, sandbox, answer), its grading
(in this process, in a bounded grading process, its LLM judges apart) and its result.

Exports load on first use: the unit runner, a process started for every worker, imports
only the few modules it needs from this package.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # the exports (see rayeval._lazy)
    from .context import AgentContext
    from .execution import grade_execution
    from .grading import grade, grade_spec, grade_specs
    from .result import STATUSES, EvalResult, Status
    from .runner import EvalRunner

__getattr__, __all__ = lazy_exports(__name__)
