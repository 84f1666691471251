"""Grader registry: built-in types, aliases, user registrations and entry points (``rayeval.graders``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ..registry import Registry
from .base import Grader

G = TypeVar("G", bound=type[Grader])


def _grader_class(value: Any) -> type[Grader]:
    if not (isinstance(value, type) and issubclass(value, Grader)):
        raise TypeError(f"{value!r} is not a rayeval.graders.Grader subclass")
    return value


GRADER_REGISTRY: Registry[type[Grader]] = Registry("graders", _grader_class)


def register_grader(*names: str) -> Callable[[G], G]:
    """Class decorator: make a Grader subclass available under one or more type names.

    Users call it on their own classes (``@register_grader("my_type")``); packages can
    instead expose the class under the ``rayeval.graders`` entry-point group.
    """
    if not names or not all(isinstance(n, str) and n.strip() for n in names):
        raise ValueError("register_grader needs at least one non-empty type name")

    def decorate(cls: G) -> G:
        _grader_class(cls)
        for name in names:
            GRADER_REGISTRY.register(name, cls, replace=True)
        return cls

    return decorate


def is_registered(name: Any) -> bool:
    return name in GRADER_REGISTRY


def get_grader(name: str) -> Grader:
    """A fresh instance of the grader registered as ``name``; ValueError when unknown."""
    return GRADER_REGISTRY.get(name)()


def named_grader_types(specs: Any) -> Iterator[str]:
    """Every grader type named in grader entries ``specs`` (as JSON; composite children included)."""
    stack = [specs]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            kind = item.get("type")
            if isinstance(kind, str):
                yield kind
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
