"""Isolating a unit's agent: the unit runner, its namespaces, file-system view and limits.

Below the harness: it runs what the harness names in a unit's process, and imports nothing
above it. Exports load on first use: the unit runner imports only what it needs.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # the exports (see rayeval._lazy)
    from .config import SandboxConfig, SandboxUnusable, UnitLimits
    from .isolation import ISOLATION_LEVELS, Isolation, Outcome
    from .units import SandboxError, UnitRunner, unit_runner

__getattr__, __all__ = lazy_exports(__name__)
