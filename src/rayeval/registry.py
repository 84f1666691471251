"""One registry for every kind of plug-in (graders, evaluators, agents, resolvers, providers).

A registry maps names to values: rayeval's built-ins and what code registers in this process,
then what installed packages offer under the entry-point group ``rayeval.<kind>``. The group is
read once per ``sys.path``, an entry point loaded only when its name is asked for; a name already
taken is never replaced by one, and a plug-in that cannot be loaded is skipped with a warning
naming it.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from importlib import metadata
from typing import Any, Generic, TypeVar

from .errors import ConfigError

log = logging.getLogger(__name__)

T = TypeVar("T")


class UnknownName(ConfigError):
    """No value is registered under the name asked for."""


def _as_is(value: Any) -> Any:
    return value


class Registry(Generic[T]):
    """Named values of one ``kind``, starting with ``built_ins``; ``plugin`` turns an entry
    point's object into a value (raising for an object of the wrong kind)."""

    def __init__(
        self, kind: str, plugin: Callable[[Any], T] = _as_is, built_ins: Mapping[str, T] | None = None
    ) -> None:
        self.kind = kind
        self.group = f"rayeval.{kind}"
        self._plugin = plugin
        self._values: dict[str, T] = dict(built_ins or {})
        self._lock = threading.RLock()  # a plug-in's module may register while being loaded
        self._scanned_path: list[str] | None = None
        self._pending: dict[str, metadata.EntryPoint] = {}

    def register(self, name: str, value: T, *, replace: bool = False) -> None:
        """Make ``value`` known as ``name``; a name already taken is a ValueError unless ``replace``."""
        with self._lock:
            if not replace and name in self._values:
                raise ValueError(f"{self.kind}: {name!r} is already registered")
            self._values[name] = value

    def unregister(self, name: str) -> T | None:
        """Forget ``name``; returns its value, or None when there was none."""
        with self._lock:
            return self._values.pop(name, None)

    def find(self, name: str) -> T | None:
        """The value of ``name`` (loading the entry point offering it), or None."""
        with self._lock:
            if name not in self._values:
                entry_point = self._entry_points().pop(name, None)
                if entry_point is not None:
                    self._load(entry_point)
            return self._values.get(name)

    def knows(self, name: str) -> bool:
        """``name`` is registered or offered by an entry point; loads nothing."""
        with self._lock:
            return name in self._values or name in self._entry_points()

    def get(self, name: str) -> T:
        """The value of ``name``; :class:`UnknownName` listing the known names when there is none."""
        found = self.find(name)
        if found is None:
            raise UnknownName(f"{name!r} is not one of the known {self.kind}: {', '.join(sorted(self.names()))}")
        return found

    def names(self) -> list[str]:
        """Every known name, in the order registered (entry points not loaded yet last)."""
        with self._lock:
            return [*self._values, *(name for name in self._entry_points() if name not in self._values)]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find(name) is not None

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def _entry_points(self) -> dict[str, metadata.EntryPoint]:
        """The group's entry points not tried yet, read again when ``sys.path`` changed."""
        if self._scanned_path != sys.path:
            self._scanned_path = list(sys.path)
            self._pending = {entry_point.name: entry_point for entry_point in metadata.entry_points(group=self.group)}
        return self._pending

    def _load(self, entry_point: metadata.EntryPoint) -> None:
        try:
            self._values[entry_point.name] = self._plugin(entry_point.load())
        except Exception as exc:  # noqa: BLE001 - a broken plug-in must not take the others down with it
            log.warning(
                "%s plug-in %r (entry point %s) cannot be loaded, skipped: %s: %s",
                self.kind,
                entry_point.name,
                entry_point.value,
                type(exc).__name__,
                exc,
            )
