"""The eval file schema: what one benchmark task looks like on disk."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictStr,
    field_validator,
    model_validator,
)

from ..graders.registry import GRADER_REGISTRY, is_registered

MAX_ID_BYTES = 200
#: The longest timeout an eval (or a run) may set, in seconds: 30 days.  Longer ones are typos,
#: and beyond what the waits that enforce a timeout take (1e300 s overflows them).
MAX_TIMEOUT_S = 30 * 24 * 3600


#: Seconds a unit may run when neither the run (``--timeout``) nor its eval (``agent_timeout``,
#: ``timeout``) says: the reference runner's ``eval_timeout`` default (latch-eval-tools), and
#: 1.8 times the longest real-agent run recorded in the scbench and spatialbench corpus
#: (3,263 s; 99 % end within 2,947 s). No unit runs unbounded: a hung agent ends as a timeout row.
DEFAULT_AGENT_TIMEOUT_S = 6000.0


class GraderSpec(BaseModel):
    """One ``{type, config}`` grader entry; unknown extra keys (e.g. ``name``) are kept."""

    model_config = ConfigDict(extra="allow", strict=True)

    type: StrictStr
    config: dict[str, Any] = Field(default_factory=dict)

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("grader type must be a non-empty string")
        if not is_registered(value):
            known = ", ".join(sorted(GRADER_REGISTRY))
            raise ValueError(f"unknown grader type {value!r} (registered types: {known})")
        return value


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot name a work folder, or None when it can."""
    if not value or not value.strip():
        return "must be a non-empty string"
    if "/" in value or "\\" in value:
        return "must not contain '/' or '\\' (it names a work folder)"
    if ".." in value or value == ".":
        return "must not contain '..' or be '.' (it names a work folder)"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        return "must not contain control characters"
    if len(value.encode("utf-8")) > MAX_ID_BYTES:
        return f"must be at most {MAX_ID_BYTES} bytes"
    return None


def selection_problem(grader: Any, graders: Any) -> tuple[str, str] | None:
    """(field, message) breaking the rule: exactly one of grader/graders, graders never empty."""
    if grader is not None and graders is not None:
        return "grader", "'grader' and 'graders' are mutually exclusive: give only one"
    if grader is None and graders is None:
        return "grader", "one of 'grader' or 'graders' is required"
    if isinstance(graders, list) and not graders:
        return "graders", "'graders' must be a non-empty list"
    return None


def _positive_timeout(value: Any) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            raise ValueError(f"must be a positive number of seconds, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"must be a positive number of seconds, got {value!r}")  # noqa: TRY004 - pydantic reports ValueError
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"must be a positive number of seconds, got {value!r}")
    if value > MAX_TIMEOUT_S:
        raise ValueError(f"must be at most {MAX_TIMEOUT_S:,} seconds (30 days), got {value!r}")
    return value


class Eval(BaseModel):
    """An eval file. Unknown top-level keys (``canary``…) are kept, never rejected."""

    model_config = ConfigDict(extra="allow")

    id: StrictStr
    task: StrictStr
    data_node: StrictStr | list[StrictStr] | None = None
    grader: GraderSpec | None = None
    graders: list[GraderSpec] | None = None
    metadata: dict[str, Any] | None = None
    timeout: float | int | None = None
    download_timeout: float | int | None = None
    agent_timeout: float | int | None = None
    notes: str | None = None

    _source_path: Path | None = PrivateAttr(default=None)
    _data_roots: tuple[Path, ...] = PrivateAttr(default=())
    _content_hash: str | None = PrivateAttr(default=None)

    @field_validator("id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        problem = id_problem(value)
        if problem:
            raise ValueError(f"id {problem}")
        return value

    @field_validator("timeout", "download_timeout", "agent_timeout", mode="before")
    @classmethod
    def _timeouts(cls, value: Any) -> Any:
        return _positive_timeout(value)

    @model_validator(mode="after")
    def _one_grader_selection(self) -> Eval:
        problem = selection_problem(self.grader, self.graders)
        if problem:
            raise ValueError(problem[1])
        return self

    @property
    def grader_specs(self) -> list[GraderSpec]:
        return [self.grader] if self.grader is not None else list(self.graders or [])

    @property
    def data_nodes(self) -> list[str]:
        if self.data_node is None:
            return []
        return [self.data_node] if isinstance(self.data_node, str) else list(self.data_node)

    @property
    def source_path(self) -> Path | None:
        """The file this eval was loaded from; relative ``data_node`` paths resolve against it."""
        return self._source_path

    @property
    def data_roots(self) -> tuple[Path, ...]:
        """The real folders local ``data_node`` paths may be staged from: the evals root the
        eval was loaded from and the ``--data-root`` folders; none for an eval built in memory."""
        return self._data_roots

    @property
    def effective_timeout(self) -> float:
        """Seconds a unit of this eval may run: its ``agent_timeout``, else its ``timeout``,
        else :data:`DEFAULT_AGENT_TIMEOUT_S` (a run's ``--timeout`` overrides all three)."""
        return float(self.agent_timeout or self.timeout or DEFAULT_AGENT_TIMEOUT_S)

    def content_hash(self) -> str:
        """sha256 of the eval's canonical JSON: stable across key order and whitespace.

        Computed once: a loaded eval is treated as immutable (unit ids and rows rely on it).
        """
        if self._content_hash is None:
            canonical = json.dumps(
                self.model_dump(mode="json", exclude_none=True), sort_keys=True, separators=(",", ":")
            )
            self._content_hash = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
        return self._content_hash
