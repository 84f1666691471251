"""The base of rayeval's exceptions, so a caller can catch every error rayeval raises on purpose.

Each class stays in the module that raises it; this module holds only the bases.  Classes keep
their builtin base too (``ValueError``, ``OSError``, ...) where callers catch that.  The two
interrupts (``RunCancelled``, ``LeaseLostInterrupt``) are KeyboardInterrupts instead, outside
this hierarchy on purpose: no ``except Exception`` on their way may swallow them.
"""

from __future__ import annotations

__all__ = ["ConfigError", "RayevalError"]


class RayevalError(Exception):
    """The base of every error rayeval raises on purpose; its message is meant for the user."""


class ConfigError(RayevalError, ValueError):
    """A configuration the user wrote cannot work: an eval file or selection, a grader's options,
    an agent or its arguments, the arguments of ``evaluations.run``.  The message says which."""
