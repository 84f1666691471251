"""What an agent may know about the unit it is running: never the answer key."""

from __future__ import annotations

import inspect
import json
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..sandbox.unit_runner import report_chunk
from .prompt import AnswerConvention

AgentFunction = Callable[..., Any]


class ModelRelay(BaseModel):
    """Where an agent run in the worker (the prompt agent) sends its model calls: the model
    gateway's endpoint for its model's API, with the unit's token as the key (never a
    provider's), so that the gateway counts, limits and records them as any unit's."""

    model_config = ConfigDict(frozen=True)

    base_url: str
    token: str = Field(repr=False)


class UnitKey(BaseModel):
    """Which unit: its eval, model and seed, and the run it is one of (None: none given)."""

    eval_id: str
    model: str | None = None
    seed: int | None = None
    run_id: str | None = None


class AgentContext(UnitKey):
    """Passed to agents that declare a ``context`` parameter (the replay agent needs it)."""

    model_config = ConfigDict(frozen=True)

    timeout: float | None = None
    args: dict[str, str] = Field(default_factory=dict)
    #: the names the agent is told for its answer file and completion marker (see harness.prompt)
    convention: AnswerConvention = "legacy"
    #: the gateway session of an agent run in the worker; never sent into a unit's process
    relay: ModelRelay | None = Field(default=None, exclude=True, repr=False)
    #: the program's session this attempt goes on with, restored in its work folder from the
    #: unit's checkpoint (its node was lost); None: a fresh start
    resume_session: str | None = None

    def chunk_done(self, session_id: str, turns: int) -> bool:
        """Tell the worker that a chunk of ``turns`` model turns of the program's session
        ``session_id`` is done, and wait while it saves the unit's checkpoint (the work folder,
        the program's state in it), from which the unit resumes on another node. False where
        no worker saves one (an agent run in the worker, or outside a run)."""
        return report_chunk(json.dumps({"session_id": session_id, "turns": turns}).encode())


MIB = 1024 * 1024


class UnitResources(BaseModel):
    """What one unit asks Ray for while it runs: its agent's CPUs, memory (bytes) and custom
    resources (``GPU`` included). Each agent declares its own; a run may override them
    (``--unit-cpus``, ``--unit-memory``, ``--unit-resource``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpus: float = Field(0.25, gt=0, allow_inf_nan=False)
    memory: int = Field(512 * MIB, ge=0)
    custom: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(default_factory=dict)


class AgentRef(BaseModel):
    """An agent by name (a built-in or ``module:function``), imported only where it runs: a
    sandbox never lets an agent's module run code in the process that holds the evals.
    The rest says what the trusted side needs to know without importing it: the agents layer
    (``rayeval.agents.resolve.agent_ref``) fills it in, from rayeval's own code only."""

    model_config = ConfigDict(frozen=True)

    name: str
    #: what the unit's process calls to find the agent by its name and run it (``module:function``)
    entry: str
    needs_data: bool = True
    #: rayeval's replay agent: the durations it reports are the recorded runs'
    replays_recorded_runs: bool = False
    #: rayeval's agents that run nothing the model writes (the prompt agent): they run in the
    #: worker's process whatever the isolation, and their rows say ``inline``
    runs_in_worker: bool = False
    env_names: tuple[str, ...] = ()
    resources: UnitResources = UnitResources()
    #: modules a built-in agent's runner imports once, not every unit (rayeval's own and their
    #: dependencies; never a ``module:function`` agent's module)
    preload: tuple[str, ...] = ()
    #: host folders and files a built-in agent reads where it runs (a program's install folder),
    #: shown read-only in its sandbox
    read_paths: tuple[str, ...] = ()
    #: a built-in program's binaries, shown execute-only in its sandbox: the program's own
    #: process is out of its tools' reach (see ``rayeval.sandbox.exec_only``)
    exec_only: tuple[str, ...] = ()
    #: its ``--agent-arg`` options that name a host file (the replay agent's trials), shown too
    path_options: tuple[str, ...] = ()
    #: variables set for it where it runs, as (name, value) (where its program is installed)
    env: tuple[tuple[str, str], ...] = ()
    #: the one model API a built-in program speaks (Claude Code: Anthropic's, Codex: OpenAI's),
    #: which its ``base_url`` option is the endpoint of; None: the unit's model's
    model_api: Literal["openai", "anthropic"] | None = None
    #: a built-in program's option saying whether it goes on with a fallback model when its model
    #: refuses (Claude Code's ``switch_models_on_flag``; unset: it does); None: it never does
    model_fallback_option: str | None = None
    #: the agent itself, where rayeval's agents layer loaded it in this process (a built-in, or
    #: an agent run inline): what a unit run in this process calls
    function: AgentFunction | None = Field(default=None, exclude=True, repr=False)

    @property
    def module(self) -> str | None:
        """The module of a ``module:function`` agent (None for a built-in)."""
        module, sep, _ = self.name.partition(":")
        return module if sep else None

    def falls_back(self, args: dict[str, str]) -> bool:
        """Whether, with ``args`` its options, it moves to a fallback model when its model refuses."""
        option = self.model_fallback_option
        return option is not None and args.get(option, "").strip().lower() != "false"

    def shown_paths(self, args: dict[str, str]) -> tuple[str, ...]:
        """What of the host it reads where it runs, with ``args`` its options."""
        return (*self.read_paths, *(args[name] for name in self.path_options if args.get(name)))


# Per agent: reading a signature costs ~20 µs, a tenth of a unit whose agent answers at once.
_WANTS_CONTEXT: weakref.WeakKeyDictionary[AgentFunction, bool] = weakref.WeakKeyDictionary()


def wants_context(agent: AgentFunction) -> bool:
    try:
        return _WANTS_CONTEXT[agent]
    except (KeyError, TypeError):  # TypeError: not hashable or not weakly referable
        pass
    try:
        parameters = inspect.signature(agent).parameters
    except (TypeError, ValueError):
        wanted = False
    else:
        wanted = "context" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    try:
        _WANTS_CONTEXT[agent] = wanted
    except TypeError:
        pass
    return wanted


def call_agent(agent: AgentFunction, task_prompt: str, work_dir: Path, context: AgentContext) -> Any:
    """The reference contract ``agent(task_prompt, work_dir)``, plus ``context=`` when accepted."""
    if wants_context(agent):
        return agent(task_prompt, work_dir, context=context)
    return agent(task_prompt, work_dir)
