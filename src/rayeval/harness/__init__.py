"""Running one agent on one eval."""
from .context import AgentContext
from .execution import Execution, grade_execution
from .resolvers import Resolved, register_resolver, unregister_resolver
from .result import STATUSES, EvalResult, Status
from .runner import EvalRunner
from .staging import StagedNode, StagingError, stage_data

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
