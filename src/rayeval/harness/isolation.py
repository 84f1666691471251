"""Running an agent so that a hang, a crash or a stray child process cannot outlive its unit.

The agent runs in a forked child that leads its own session. Every process it starts inherits
that session and a per-unit marker in its environment, so at the end (normal return, crash or
timeout) the whole tree is found and killed: by process group, and by the marker for anything
that moved to another group.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

UNIT_MARKER_ENV = "RAYEVAL_UNIT_MARKER"

Isolation = Literal["process", "inline"]
OutcomeKind = Literal["returned", "raised", "timeout", "crashed"]


class Outcome(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    kind: OutcomeKind
    value: Any = None
    error_type: str | None = None
    error_message: str | None = None
    traceback: str | None = None
    seconds: float = 0.0


def _describe(exc: BaseException) -> tuple[str, str, str]:
    return type(exc).__name__, str(exc), "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def _child_main(fn: Callable[[], Any], sender: Any, marker: str, log_path: Path | None) -> None:
    os.setsid()
    os.environ[UNIT_MARKER_ENV] = marker
    if log_path is not None:  # the agent's prints belong to its log, not the caller's stdout
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        # the parent's sys.stdout may not even be fd 1 (pytest, notebooks): rebind both
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115 - the child's stdout
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115 - the child's stderr
    try:
        payload: tuple = ("returned", fn())
    except BaseException as exc:  # noqa: BLE001 - the parent decides what an exception means
        payload = ("raised", *_describe(exc))
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken stream: the payload still goes back
            stream.flush()
    try:
        sender.send(payload)
    except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable return value
        sender.send(("raised", "UnsendableResult", f"agent result could not be sent back: {exc}", ""))
    finally:
        sender.close()


def processes_with_marker(marker: str) -> list[int]:
    """PIDs whose environment carries ``marker`` (Linux /proc); empty where /proc is absent."""
    needle = f"{UNIT_MARKER_ENV}={marker}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def kill_tree(leader_pid: int, marker: str) -> None:
    """SIGKILL the leader's process group and every process carrying the unit marker."""
    for _ in range(3):  # a dying process may have been forking: sweep until nothing is left
        try:
            os.killpg(leader_pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        stragglers = [pid for pid in processes_with_marker(marker) if pid != os.getpid()]
        for pid in stragglers:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not stragglers:
            return
        time.sleep(0.05)


def _run_in_process(fn: Callable[[], Any], timeout: float | None, log_path: Path | None) -> Outcome:
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    marker = uuid.uuid4().hex
    start = time.monotonic()
    child = context.Process(target=_child_main, args=(fn, sender, marker, log_path), daemon=True)
    child.start()
    sender.close()
    try:
        ready = receiver.poll(timeout)
        payload = receiver.recv() if ready else None
    except (EOFError, OSError):
        payload = ("crashed",)
    finally:
        elapsed = time.monotonic() - start
        kill_tree(child.pid, marker)
        child.join(timeout=5)
        receiver.close()
    if payload is None:
        return Outcome(kind="timeout", error_type="Timeout", error_message=f"agent exceeded its {timeout:g} s timeout", seconds=elapsed)
    if payload[0] == "returned":
        return Outcome(kind="returned", value=payload[1], seconds=elapsed)
    if payload[0] == "raised":
        return Outcome(kind="raised", error_type=payload[1], error_message=payload[2], traceback=payload[3], seconds=elapsed)
    code = child.exitcode
    reason = f"killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
    return Outcome(kind="crashed", error_type="AgentProcessDied", error_message=f"agent process {reason} before returning", seconds=elapsed)


def _run_inline(fn: Callable[[], Any], timeout: float | None) -> Outcome:
    """For cheap in-process agents: no fork, but a hung agent's thread cannot be killed."""
    box: dict[str, Outcome] = {}
    start = time.monotonic()

    def target() -> None:
        try:
            box["outcome"] = Outcome(kind="returned", value=fn())
        except BaseException as exc:  # noqa: BLE001 - reported as the agent's outcome
            name, message, trace = _describe(exc)
            box["outcome"] = Outcome(kind="raised", error_type=name, error_message=message, traceback=trace)

    if timeout is None:
        target()
    else:
        thread = threading.Thread(target=target, daemon=True, name="rayeval-inline-agent")
        thread.start()
        thread.join(timeout)
    elapsed = time.monotonic() - start
    outcome = box.get("outcome") or Outcome(kind="timeout", error_type="Timeout", error_message=f"agent exceeded its {timeout:g} s timeout")
    outcome.seconds = elapsed
    return outcome


def run_agent_isolated(
    fn: Callable[[], Any], *, timeout: float | None, isolation: Isolation = "process", log_path: Path | None = None
) -> Outcome:
    """Call ``fn()`` under ``isolation`` with an optional wall-clock ``timeout`` in seconds.

    In a process, the agent's stdout/stderr go to ``log_path`` when given.
    """
    if isolation == "process" and hasattr(os, "fork"):
        return _run_in_process(fn, timeout, log_path)
    return _run_inline(fn, timeout)
