"""Package exports that import their module on first use (PEP 562)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` serving ``name`` from the relative module ``exports[name]``."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(import_module(exports[name], package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
