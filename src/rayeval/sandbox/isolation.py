"""How an agent runs, and what running it produced.

Three isolation levels, recorded on every result:

* ``sandbox`` (the default): a fresh process in its own namespaces (``units.py``).
* ``process``: a fresh process, without namespaces: the explicit opt-out where the sandbox
  cannot start (no user namespaces, macOS).
* ``inline``: a thread of the calling process, for trusted in-process agents only (rayeval's
  own replay and sleep agents, tests, your own functions you trust). A hung agent's thread
  cannot be killed; the unit becomes a ``timeout`` all the same.
"""

from __future__ import annotations

import functools
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ..record import RAYEVAL_ERROR_TYPES

Isolation = Literal["sandbox", "process", "inline"]
ISOLATION_LEVELS: tuple[Isolation, ...] = ("sandbox", "process", "inline")
OutcomeKind = Literal["returned", "raised", "timeout", "crashed"]


class Outcome(BaseModel):
    """What the agent did: returned ``value`` (JSON), raised, ran out of time, or died."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    kind: OutcomeKind
    value: Any = None
    error_type: str | None = None
    error_message: str | None = None
    traceback: str | None = None
    seconds: float = 0.0
    #: ``value`` was decoded from the JSON text the unit's process sent: plain JSON values only
    decoded: bool = False


def run_inline(fn: Callable[[], Any], timeout: float | None) -> Outcome:
    """Call ``fn()`` on a thread of this process, waiting at most ``timeout`` seconds."""
    box: dict[str, Outcome] = {}
    start = time.monotonic()

    def target() -> None:
        try:
            box["outcome"] = Outcome(kind="returned", value=fn())
        except BaseException as exc:  # noqa: BLE001 - reported as the agent's outcome
            trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            box["outcome"] = Outcome(
                kind="raised", error_type=agents_error_type(type(exc).__name__), error_message=str(exc), traceback=trace
            )

    if timeout is None:
        target()
    else:
        thread = threading.Thread(target=target, daemon=True, name="rayeval-inline-agent")
        thread.start()
        thread.join(timeout)
    elapsed = time.monotonic() - start
    outcome = box.get("outcome") or Outcome(
        kind="timeout", error_type="Timeout", error_message=f"agent exceeded its {timeout:g} s timeout"
    )
    outcome.seconds = elapsed
    return outcome


def agents_error_type(name: str) -> str:
    """The error_type of an exception the agent raised (or its unit's frame names): its class
    name, unless the trusted side names errors so (rayeval's own, Ray's), which would pass the
    agent's error off as a timeout, a provider's failure or a lost worker."""
    return f"{name} (the agent's)" if name in _trusted_error_types() else name


@functools.cache
def _trusted_error_types() -> frozenset[str]:
    import ray.exceptions

    rays = {
        value.__name__
        for value in vars(ray.exceptions).values()
        if isinstance(value, type) and issubclass(value, BaseException) and value.__module__.startswith("ray")
    }
    return RAYEVAL_ERROR_TYPES | rays
