"""Isolating a unit's agent: the unit runner, its namespaces, file-system view and limits.

Below the harness: it runs what the harness names in a unit's process, and imports nothing
above it. Exports load on first use: the unit runner, a process started for every worker,
imports only the few modules it needs from this package.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "SandboxConfig": ".config",
    "SandboxUnusable": ".config",
    "UnitLimits": ".config",
    "ISOLATION_LEVELS": ".isolation",
    "Isolation": ".isolation",
    "Outcome": ".isolation",
    "SandboxError": ".units",
    "UnitRunner": ".units",
    "unit_runner": ".units",
}

__all__ = [
    "ISOLATION_LEVELS",
    "Isolation",
    "Outcome",
    "SandboxConfig",
    "SandboxError",
    "SandboxUnusable",
    "UnitLimits",
    "UnitRunner",
    "unit_runner",
]

__getattr__ = lazy_exports(__name__, _EXPORTS)
