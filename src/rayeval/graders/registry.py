"""Grader registry: built-in types, aliases, user registrations and entry points."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any, TypeVar

from .base import Grader

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "rayeval.graders"

GRADER_REGISTRY: dict[str, type[Grader]] = {}

G = TypeVar("G", bound=type[Grader])


def register_grader(*names: str) -> Callable[[G], G]:
    """Class decorator: make a Grader subclass available under one or more type names.

    Users call it on their own classes (``@register_grader("my_type")``); packages can
    instead expose the class under the ``rayeval.graders`` entry-point group.
    """
    if not names or not all(isinstance(n, str) and n.strip() for n in names):
        raise ValueError("register_grader needs at least one non-empty type name")

    def decorate(cls: G) -> G:
        if not (isinstance(cls, type) and issubclass(cls, Grader)):
            raise TypeError(f"{cls!r} is not a rayeval.graders.Grader subclass")
        for name in names:
            GRADER_REGISTRY[name] = cls
        return cls

    return decorate


_entry_points_loaded = False


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in GRADER_REGISTRY:
            continue
        try:
            cls = ep.load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not take the built-ins down with it
            log.warning(
                "grader plugin %r (entry point %s) cannot be loaded, skipped: %s: %s",
                ep.name,
                ep.value,
                type(exc).__name__,
                exc,
            )
            continue
        if isinstance(cls, type) and issubclass(cls, Grader):
            GRADER_REGISTRY[ep.name] = cls


def is_registered(name: Any) -> bool:
    if not isinstance(name, str):
        return False
    if name not in GRADER_REGISTRY:
        _load_entry_points()
    return name in GRADER_REGISTRY


def get_grader(name: str) -> Grader:
    """A fresh instance of the grader registered as ``name``; ValueError when unknown."""
    if not is_registered(name):
        known = ", ".join(sorted(GRADER_REGISTRY))
        raise ValueError(f"Unknown grader type {name!r}; registered types: {known}")
    return GRADER_REGISTRY[name]()


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
