"""Package exports that import their module on first use (PEP 562).

A package lists its exports once, as the imports of its ``if TYPE_CHECKING:`` block: mypy reads
them as imports (the exports are typed), and at run time :func:`lazy_exports` reads the same
block from the package's source, so that each export's module is imported only when the name
is first used (a Ray worker or the CLI does not pay for pandas, Ray or the SDKs it never uses).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from importlib import import_module
from importlib.abc import InspectLoader
from typing import Any


def lazy_exports(package: str, *defined_here: str) -> tuple[Callable[[str], Any], list[str]]:
    """The module ``__getattr__`` and ``__all__`` of ``package``, called from its ``__init__``:
    ``__getattr__, __all__ = lazy_exports(__name__)``; ``defined_here``: exports the ``__init__``
    defines itself.  An export named like the submodule it comes from (``agents.codex``) is
    bound at once: importing that submodule would bind the name to the module instead."""
    exports = _type_checking_imports(package)
    for name, (module, attribute) in exports.items():
        if module == f".{name}":
            setattr(sys.modules[package], name, getattr(import_module(module, package), attribute))

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = exports[name]
        if module == ".":  # ``from . import submodule``
            return import_module(f".{attribute}", package)
        return getattr(import_module(module, package), attribute)

    return __getattr__, sorted([*exports, *defined_here])


def _type_checking_imports(package: str) -> dict[str, tuple[str, str]]:
    """Name -> (relative module, attribute) of each import under the package's ``if TYPE_CHECKING:``."""
    loader = sys.modules[package].__loader__
    source = loader.get_source(package) if isinstance(loader, InspectLoader) else None
    if source is None:
        raise ImportError(f"{package}: its exports are listed in its source, which cannot be read")
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return {
                alias.asname or alias.name: ("." * statement.level + (statement.module or ""), alias.name)
                for statement in node.body
                if isinstance(statement, ast.ImportFrom)
                for alias in statement.names
            }
    raise ImportError(f"{package}: no `if TYPE_CHECKING:` block lists its exports")
