"""Running one agent on one eval.

Exports load on first use: the unit runner, a process started for every worker, imports
only the few modules it needs from this package.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # the exports (see rayeval._lazy)
    from .context import AgentContext
    from .execution import Execution, grade_execution
    from .resolvers import Resolved, register_resolver, unregister_resolver
    from .result import STATUSES, EvalResult, Status
    from .runner import EvalRunner
    from .staging import StagedNode, StagingError, stage_data

__getattr__, __all__ = lazy_exports(__name__)
