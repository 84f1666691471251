"""Running one agent on one eval."""
from .result import STATUSES, EvalResult, Status

__all__ = ["STATUSES", "EvalResult", "Status"]
