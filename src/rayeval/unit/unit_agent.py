"""A unit's agent in a unit runner (``rayeval.sandbox``): how the spec sends it there, how the
unit's process finds and calls it, and a run's start-up probe of both."""

from __future__ import annotations

import base64
import contextlib
import os
import pickle
import shutil
import threading
import weakref
from pathlib import Path
from typing import Any

from ..errors import RayevalError
from ..gateway.unit import provider_variables
from ..sandbox.config import SandboxConfig, SandboxIsolation
from ..sandbox.units import SandboxError, UnitRunner, UnitSpec
from .context import AgentContext, AgentFunction, AgentRef, call_agent


class AgentUnavailable(RayevalError, ValueError):
    """The agent cannot be imported or unpickled where it runs."""


def answer_call(function: AgentFunction, call: dict[str, Any], work_dir: Path) -> Any:
    """In the unit's process, once its entry has found the agent (``function``): the agent
    called on the task. A probe only checks that it is callable and takes its options."""
    if call["probe"]:  # the run's start-up check: the sandbox starts, the agent is found, takes its options
        check_args = getattr(function, "check_args", None)
        if callable(check_args):
            check_args(call["context"]["args"])  # raises, naming the option, where the units would fail
        return {"probe": callable(function), "needs_data": getattr(function, "needs_data", True) is not False}
    context = AgentContext.model_validate(call["context"])
    return call_agent(function, call["task"], work_dir, context)


def call_pickled(call: dict[str, Any], work_dir: Path) -> Any:
    """The entry of a unit of the caller's own agent object: unpickled in the unit's process,
    then called. An agent named by its ref has the entry its ref names (the agents layer's)."""
    return answer_call(pickle.loads(base64.b64decode(call["agent"])), call, work_dir)


#: What a unit's process calls for an agent object.
PICKLED_ENTRY = f"{__name__}:{call_pickled.__name__}"
#: Modules every unit runner imports once: what calls the agents (a ref's own add to them).
UNIT_PRELOAD = (__name__,)

# An agent object is pickled once, not for every unit.
_PICKLED: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _pickled(agent: AgentFunction) -> str:
    """The caller's own agent object, pickled by value where it must be (once per object)."""
    with contextlib.suppress(KeyError, TypeError):
        return _PICKLED[agent]
    import cloudpickle

    data = base64.b64encode(cloudpickle.dumps(agent, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")
    with contextlib.suppress(TypeError):
        _PICKLED[agent] = data
    return data


def unit_spec(
    runner: UnitRunner,
    agent: AgentFunction | AgentRef,
    task: str,
    work_dir: Path,
    context: AgentContext,
    inputs: list[tuple[str, str]],
    *,
    probe: bool = False,
    model_env: dict[str, str] | None = None,
    gateway_port: int | None = None,
) -> UnitSpec:
    """The spec of a unit of ``agent`` on ``task`` in ``runner``, with the variables it names.
    No provider key reaches it: ``model_env`` sets the variables of its model gateway session
    (none for a probe, which calls no model)."""
    # by name (built-in or ``module:function``, imported in the sandbox only), or pickled
    entry, found_by = (agent.entry, agent.name) if isinstance(agent, AgentRef) else (PICKLED_ENTRY, _pickled(agent))
    call = {"agent": found_by, "task": task, "context": context.model_dump(), "probe": probe}
    env = [*(agent.env if isinstance(agent, AgentRef) else ()), *(model_env or {}).items()]
    return runner.spec(
        entry, call, work_dir, inputs, env_names=getattr(agent, "env_names", ()), env=env,
        withheld=provider_variables(), gateway_port=gateway_port,
    )  # fmt: skip


def probe(
    runner: UnitRunner, agent: AgentFunction | AgentRef, args: dict[str, str] | None = None, timeout: float = 60
) -> bool:
    """Start a unit of ``runner`` that only finds the agent: ``SandboxError`` when the sandbox
    cannot start here (once, at a run's start, not for every unit), ``AgentUnavailable`` when
    the agent cannot be loaded where it would run, or its ``check_args(args)`` (an agent
    whose options name files: the replay agent's trials) refuses its options there. Returns
    whether the agent reads inputs: False only where it declares ``needs_data = False``
    (what it says of itself decides nothing but whether its own units get their data)."""
    probe_dir = Path(runner.work_root) / f".probe-{os.getpid()}-{threading.get_native_id()}"
    probe_dir.mkdir(parents=True, exist_ok=True)
    try:
        context = AgentContext(eval_id="probe", args=args or {})
        outcome = runner.run(unit_spec(runner, agent, "", probe_dir, context, [], probe=True), timeout)
    except SandboxError as exc:
        raise SandboxError(
            f"{exc}\nThe sandbox cannot start on this machine (it needs Linux user namespaces and bubblewrap). "
            "To run agents without it, pass --isolation process (Python: isolation='process'): they then "
            "see and may change whatever the worker can, and rows record isolation=process."
        ) from None
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)
    if outcome.kind == "returned" and isinstance(outcome.value, dict) and outcome.value.get("probe") is True:
        return outcome.value.get("needs_data") is not False
    name = agent.name if isinstance(agent, AgentRef) else getattr(agent, "__name__", repr(agent))
    detail = outcome.error_message or outcome.kind
    hint = (
        " (a sandboxed agent sees the system folders, the Python environment, its own code (of the folders on "
        "its import path, their modules and packages, and of a package only its code: not a prompt template or "
        "other data file in it) and its inputs: show other files and folders it needs with --sandbox-bind PATH)"
        if runner.isolation == "sandbox"
        else ""
    )
    raise AgentUnavailable(
        f"agent {name!r} cannot be loaded in its {runner.isolation}: {outcome.error_type}: {detail}{hint}"
    )


def check_runs_here(
    config: SandboxConfig,
    isolation: SandboxIsolation,
    work_root: Path,
    cache_dir: Path | None,
    agent: AgentFunction | AgentRef,
    agent_args: dict[str, str] | None = None,
) -> bool:
    """A run's start-up check on this machine: the sandbox starts, and the agent loads in it
    and takes ``agent_args`` there (``SandboxError`` with the way out, ``AgentUnavailable``).
    The agent itself is not called. Returns whether it reads inputs (see :func:`probe`)."""
    runner = UnitRunner(config, isolation, work_root, cache_dir)
    try:
        return probe(runner, agent, agent_args)
    finally:
        runner.close()
