"""Running one agent on one eval.

Exports load on first use: the unit runner, a process started for every worker, imports
only the few modules it needs from this package.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "AgentContext": ".context",
    "Execution": ".execution",
    "grade_execution": ".execution",
    "Resolved": ".resolvers",
    "register_resolver": ".resolvers",
    "unregister_resolver": ".resolvers",
    "STATUSES": ".result",
    "EvalResult": ".result",
    "Status": ".result",
    "EvalRunner": ".runner",
    "StagedNode": ".staging",
    "StagingError": ".staging",
    "stage_data": ".staging",
}

__all__ = [
    "STATUSES",
    "AgentContext",
    "EvalResult",
    "EvalRunner",
    "Execution",
    "Resolved",
    "StagedNode",
    "StagingError",
    "Status",
    "grade_execution",
    "register_resolver",
    "stage_data",
    "unregister_resolver",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)
