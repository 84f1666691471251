"""Whether a ``module:function`` agent exists on this machine, found without running any of
its code: its module is located on the import path (the working folder first, as units see
it) and its source parsed, never imported (importing runs the agent's code in the process
that holds the evals). Where units run with this machine's files (an embedded Ray) the answer
is definitive, and a typo is refused at once with the nearest names."""

from __future__ import annotations

import ast
import difflib
import importlib.machinery
import importlib.util
import os
import pkgutil
import sys
from collections.abc import Iterable

from ..errors import ConfigError


class AgentNotFound(ConfigError):
    """The agent name is neither known (built in, a plug-in) nor an importable ``module:function``."""


def check_module_agent(name: str) -> None:
    """AgentNotFound when ``module:function`` ``name`` has no module on this machine's import
    path, or its module's source defines no such function; the message offers the nearest
    names. What cannot be told without running code (a compiled module, a namespace package,
    a name made at import time) passes: the run's workers check it where units run."""
    module_name, _, attribute = name.partition(":")
    search = list(dict.fromkeys([os.getcwd(), *(os.path.abspath(p or ".") for p in sys.path)]))
    parts = module_name.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])  # a top-level name: located, nothing run
    except (ImportError, ValueError):
        spec = None
    spec = spec or importlib.machinery.PathFinder.find_spec(parts[0], search)
    if spec is None:
        known = {module.name for module in pkgutil.iter_modules(search)} | set(sys.builtin_module_names)
        raise AgentNotFound(f"agent {name!r}: no module {parts[0]!r} on this machine's import path "
                            f"(the working folder and the Python environment){_nearest(parts[0], known)}")  # fmt: skip
    for depth, part in enumerate(parts[1:], start=1):
        folders = list(spec.submodule_search_locations or [])
        if not folders:
            raise AgentNotFound(f"agent {name!r}: {'.'.join(parts[:depth])!r} is a module, not a package")
        found = importlib.machinery.PathFinder.find_spec(part, folders)
        if found is None:
            known = {module.name for module in pkgutil.iter_modules(folders)}
            where = ".".join(parts[:depth])
            raise AgentNotFound(
                f"agent {name!r}: package {where!r} has no module {part!r}{_nearest(part, known, where)}"
            )
        spec = found
    _check_function(name, spec.origin, attribute.split(".")[0])


def _check_function(name: str, origin: str | None, function: str) -> None:
    if not origin or not origin.endswith(".py"):
        return
    try:
        with open(origin, "rb") as source:
            tree = ast.parse(source.read(), filename=origin)
    except (OSError, SyntaxError, ValueError):
        return  # the workers' import says what is wrong with it
    defined = set(_top_level_names(tree.body))
    if (
        function in defined
        or "__getattr__" in defined
        or any(
            isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names) for node in tree.body
        )
    ):
        return
    raise AgentNotFound(f"agent {name!r}: {origin} defines no {function!r}{_nearest(function, defined)}")


def _top_level_names(body: Iterable[ast.stmt]) -> Iterable[str]:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            yield from ((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Assign):
            yield from (target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            yield node.target.id
        elif isinstance(node, (ast.If, ast.Try)):  # definitions under a version check or a fallback
            yield from _top_level_names([*node.body, *node.orelse, *getattr(node, "finalbody", []),
                                         *(stmt for handler in getattr(node, "handlers", []) for stmt in handler.body)])  # fmt: skip


def _nearest(wrong: str, known: Iterable[str], package: str = "") -> str:
    close = difflib.get_close_matches(wrong, sorted(known), n=3, cutoff=0.6)
    prefix = f"{package}." if package else ""
    return f"; did you mean {' or '.join(repr(prefix + name) for name in close)}?" if close else ""
