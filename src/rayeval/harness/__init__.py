"""Running one agent on one eval."""
from .context import AgentContext
from .execution import Execution, grade_execution
from .result import STATUSES, EvalResult, Status
from .runner import EvalRunner

__all__ = ["STATUSES", "AgentContext", "EvalResult", "EvalRunner", "Execution", "Status", "grade_execution"]
