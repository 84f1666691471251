"""Naming an agent on the command line: a built-in name (rayeval's own agents, one table:
:data:`BUILT_IN_AGENTS`) or a ``module:function`` path; the ref a runner gets for it, and what
its units' processes call to find it by that name (:func:`call_named`)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import agents
from .._messages import field_problems
from ..errors import ConfigError
from ..registry import Registry
from ..unit.context import MIB, AgentContext, AgentFunction, AgentRef, UnitResources
from .locate import AgentNotFound

if TYPE_CHECKING:
    from ._base import ProgramAgent
    from ._tools import Program


def _reference() -> AgentFunction:
    from .reference import reference_agent

    return reference_agent


def _replay() -> AgentFunction:
    from .replay import replay_agent

    return replay_agent


def _prompt() -> AgentFunction:
    from .prompt import prompt_agent

    return prompt_agent


def _sleep() -> AgentFunction:
    from .sleep import sleep_agent

    return sleep_agent


def _replay_labels(model: str, agent_args: Mapping[str, str]) -> tuple[str, str]:
    """The replay agent's ``model@harness`` names a recorded model and harness (a model
    recorded with one harness may omit it)."""
    from .replay import recorded_harness

    name, _, harness = model.partition("@")
    return name, harness or recorded_harness(agent_args.get("trials"), name) or "replay"


def _option_value(text: str) -> Any:
    """``--agent-arg`` values are text; numbers, booleans and JSON objects become typed."""
    try:
        return json.loads(text)
    except ValueError:
        return text


@dataclasses.dataclass(frozen=True)
class BuiltIn:
    """One of rayeval's own agents, as :data:`BUILT_IN_AGENTS` lists it."""

    #: its function (its module imported when called)
    load: Callable[[], AgentFunction]
    #: what ``rayeval agents`` says it does (a program's spec says its own)
    description: str = ""
    #: its ``--agent-arg`` options (a program takes its spec's fields, the prompt agent its
    #: :class:`~rayeval.models.calls.PromptOptions`)
    options: tuple[str, ...] = ()
    #: of its options, those naming a local file: given relative to the folder the command runs
    #: in, made absolute (units run in work folders of their own)
    path_options: tuple[str, ...] = ()
    #: a real agent program's spec, a :class:`~rayeval.agents._base.ProgramAgent` (its module
    #: imported when called)
    spec: Callable[[], type[ProgramAgent]] | None = None
    #: ``(model, harness)`` of its rows, from the run's model and options (None: the model as
    #: given, a ``@`` in it part of the name, and the agent's name)
    labels: Callable[[str, Mapping[str, str]], tuple[str, str]] | None = None


def _program(spec: Callable[[], type[ProgramAgent]]) -> BuiltIn:
    """A real agent program, configured per unit: the unit's model, ``--agent-arg`` options."""
    return BuiltIn(lambda: _program_function(spec()), spec=spec)


#: rayeval's own agents: a new program is its spec's file and its line here.
BUILT_IN_AGENTS: dict[str, BuiltIn] = {
    "reference": BuiltIn(_reference, "solves the example evals in evals/ by computing the answer from their data"),
    "replay": BuiltIn(
        _replay,
        "answers as a recorded run did (--models MODEL or MODEL@HARNESS, seed = recorded trial)",
        options=("trials",),
        path_options=("trials",),
        labels=_replay_labels,
    ),
    "sleep": BuiltIn(_sleep, "waits, then answers nothing (benchmarks of the engine)", options=("seconds",)),
    "prompt": BuiltIn(
        _prompt,
        "sends the task to the unit's model (provider/model: openai, anthropic, openai-compatible) and answers with its reply",
    ),
    # the package's exports: each spec's module imported when first used (see rayeval._lazy)
    "claude-code": _program(lambda: agents.ClaudeCodeAgent),
    "codex": _program(lambda: agents.CodexAgent),
    "mini-swe-agent": _program(lambda: agents.MiniSweAgent),
    "pi": _program(lambda: agents.PiAgent),
}
#: The real agent programs, each a spec of its own.
PROGRAM_AGENTS = tuple(name for name, built_in in BUILT_IN_AGENTS.items() if built_in.spec is not None)


def program_class(name: str) -> type[ProgramAgent]:
    """The spec of real agent program ``name`` (imported now)."""
    spec = BUILT_IN_AGENTS[name].spec
    if spec is None:
        raise KeyError(f"{name!r} is no agent program")
    return spec()


def npm_programs() -> list[Program]:
    """The pinned npm programs of every spec, for the installer (``scripts/install_agent_clis.py``)."""
    return [cls.tool for cls in map(program_class, PROGRAM_AGENTS) if cls.tool is not None]


def _program_install(spec: type[ProgramAgent]) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """Where a real agent program is installed, for its sandbox to show (read-only), and the
    variable telling it there: the npm programs' tools folder, a ``$RAYEVAL_<NAME>_BIN``'s
    folder. A Python program (mini-swe-agent) is in the environment, shown anyway."""
    from . import _tools

    if spec.tool is None:
        return (), ()
    folders = [str(_tools.tools_dir())]
    explicit = os.environ.get(spec.tool.env_var)
    if explicit:
        folders.append(str(Path(explicit).expanduser().resolve().parent))
    return tuple(folders), (("RAYEVAL_AGENT_TOOLS_DIR", folders[0]),)


def _program_binaries(spec: type[ProgramAgent]) -> tuple[str, ...]:
    """The binaries an npm program's process runs as (its own, the node that runs its script,
    the native binary its script execs): shown execute-only in its sandbox. A Python program
    (mini-swe-agent) makes its process not dumpable itself; one not installed has none."""
    from . import _tools

    if spec.tool is None:
        return ()
    try:
        command = _tools.find_program(spec.tool)
    except _tools.AgentNotInstalledError:
        return ()
    binaries = [command[0]]
    if spec.tool.native_binary and len(command) > 1:
        native = _tools.native_binary(Path(command[1]), spec.tool.native_binary)
        binaries += native or []
    return tuple(binaries)


def _program_function(spec: type[ProgramAgent]) -> AgentFunction:
    """The function of a real agent program: its agent made for each unit's model and options."""
    name = spec.harness

    def program_agent(task_prompt: str, work_dir: Path, context: AgentContext) -> Any:
        options = {key: _option_value(value) for key, value in context.args.items()}
        return spec.make(context.model, **options)(task_prompt, work_dir, context)

    def check_args(args: dict[str, str]) -> None:
        """Where its units run (a run's start-up probe): the fallback keys of the units'
        environment (its options were checked with each of the run's models at start)."""
        try:
            spec.spare_keys(os.environ)
        except ValueError as exc:
            raise AgentArgsError(f"agent {name!r}: {exc}") from None

    program_agent.check_args = check_args  # type: ignore[attr-defined]
    program_agent.env_names = spec.env_names()  # type: ignore[attr-defined]
    program_agent.read_paths, program_agent.env = _program_install(spec)  # type: ignore[attr-defined]
    program_agent.exec_only = _program_binaries(spec)  # type: ignore[attr-defined]
    program_agent.model_api = spec.model_api  # type: ignore[attr-defined]
    program_agent.model_fallback_option = spec.model_fallback_option  # type: ignore[attr-defined]
    # a CLI agent (node or Python, its tools' subprocesses): about a CPU and a GiB
    program_agent.resources = UnitResources(cpus=1, memory=1024 * MIB)  # type: ignore[attr-defined]
    return program_agent


def _agent_loader(value: object) -> Callable[[], AgentFunction]:
    if not callable(value):
        raise TypeError(f"an agent is a function, got {type(value).__name__}")
    return lambda: value


#: Agents by name, as loaders (a built-in's module is imported when it runs); installed packages
#: offer their agent functions under the ``rayeval.agents`` entry-point group.
AGENTS: Registry[Callable[[], AgentFunction]] = Registry(
    "agents", _agent_loader, {name: built_in.load for name, built_in in BUILT_IN_AGENTS.items()}
)


def _unknown(name: str) -> AgentNotFound:
    known = ", ".join(sorted(AGENTS.names()))
    return AgentNotFound(f"unknown agent {name!r}: use a known agent ({known}) or module:function")


def is_module_path(name: str) -> bool:
    module_name, sep, attribute = name.partition(":")
    return bool(sep and module_name and attribute)


def resolve_agent(name: str) -> AgentFunction:
    if ":" not in name:
        loader = AGENTS.find(name)
        if loader is None:
            raise _unknown(name)
        return loader()
    if not is_module_path(name):
        raise _unknown(name)
    module_name, _, attribute = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentNotFound(f"agent {name!r}: cannot import module {module_name!r}: {exc}") from None
    target: Any = module
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise AgentNotFound(f"agent {name!r}: module {module_name!r} has no attribute {attribute!r}")
    if not callable(target):
        raise AgentNotFound(f"agent {name!r} is not callable")
    return target


def call_named(call: dict[str, Any], work_dir: Path) -> Any:
    """What a unit's process calls (its ref's ``entry``): the agent found by its name there
    (a ``module:function``'s module imported there only), then called on the task."""
    from ..unit.unit_agent import answer_call  # preloaded in every unit runner

    return answer_call(resolve_agent(call["agent"]), call, work_dir)


#: The entry of every named agent's units, and what their runner imports once to call it.
UNIT_ENTRY = f"{__name__}:{call_named.__name__}"


def agent_ref(name: str, *, load: bool = False) -> AgentRef:
    """``name`` for a runner. A built-in is rayeval's own code: asked for its traits here, and
    its ref carries its function. A plug-in or ``module:function`` is loaded here only with
    ``load`` (an agent run in this process, inline); otherwise never (its module would run code
    in this process): it gets the defaults, and is checked where it runs. Its own attributes
    never give it a built-in's traits: only being one of them does (by identity)."""
    if name in BUILT_IN_AGENTS:
        return _built_in_ref(name, BUILT_IN_AGENTS[name].load())
    if load:
        function = resolve_agent(name)
        for built_in in BUILT_IN_AGENTS.keys() - set(PROGRAM_AGENTS):  # a program's function is made anew each time
            if BUILT_IN_AGENTS[built_in].load() is function:
                return _built_in_ref(built_in, function)
        return AgentRef(
            name=name, entry=UNIT_ENTRY, needs_data=getattr(function, "needs_data", True), preload=(__name__,),
            function=function,
        )  # fmt: skip
    if not (AGENTS.knows(name) or is_module_path(name)):
        raise _unknown(name)
    return AgentRef(name=name, entry=UNIT_ENTRY, preload=(__name__,))


def _built_in_ref(name: str, function: AgentFunction) -> AgentRef:
    """The ref of built-in ``name``, whose ``function`` states its traits."""
    return AgentRef(
        name=name,
        entry=UNIT_ENTRY,
        needs_data=getattr(function, "needs_data", True),
        replays_recorded_runs=getattr(function, "replays_recorded_runs", False),
        runs_in_worker=getattr(function, "runs_in_worker", False),
        env_names=tuple(getattr(function, "env_names", ())),
        resources=getattr(function, "resources", UnitResources()),
        preload=(__name__, function.__module__, *getattr(function, "preload", ())),
        read_paths=tuple(getattr(function, "read_paths", ())),
        exec_only=tuple(getattr(function, "exec_only", ())),
        path_options=BUILT_IN_AGENTS[name].path_options,
        env=tuple(getattr(function, "env", ())),
        model_api=getattr(function, "model_api", None),
        model_fallback_option=getattr(function, "model_fallback_option", None),
        function=function,
    )


class AgentArgsError(ConfigError):
    """A built-in agent's ``--agent-arg`` options or credentials cannot work: found before any
    unit starts, instead of as one error row per unit."""


def _with_default(name: str, default: Any) -> str:
    """``name=default`` where the option has one to show (a number, a word, a flag), else ``name``."""
    if default in (None, "") or not isinstance(default, (bool, int, float, str)):
        return name
    return f"{name}={default:g}" if isinstance(default, float) else f"{name}={default}"


def built_in_agents() -> list[tuple[str, str, tuple[tuple[str, str], ...]]]:
    """``(name, what it does, its --agent-arg options)`` of every built-in agent; an option is
    ``(name or name=default, what it does)`` (a program's say what they do; others: "")."""
    listed = []
    for name, built_in in BUILT_IN_AGENTS.items():
        if built_in.spec is not None:
            spec = built_in.spec()
            fields = sorted((f for f in dataclasses.fields(spec) if f.name != "model"), key=lambda f: f.name)
            options = tuple((_with_default(f.name, f.default), spec.option_help.get(f.name, "")) for f in fields)
            listed.append((name, spec.description, options))
            continue
        names = built_in.options
        if name == "prompt":
            from ..models.calls import PromptOptions

            names = tuple(PromptOptions.model_fields)
        listed.append((name, built_in.description, tuple((option, "") for option in names)))
    return listed


def check_agent_args(
    name: str, args: dict[str, str], models: Sequence[str | None], *, environment: bool = True
) -> None:
    """Raise :class:`AgentArgsError` when a built-in agent cannot run with these options: an
    option it does not take, a value it refuses, the replay agent's trials file missing or
    unreadable, and (``environment``: where units run with this process's environment, as on
    an embedded Ray) a program's API key absent.  A ``module:function`` agent is not imported
    here, so its options are its own business."""
    built_in = BUILT_IN_AGENTS.get(name)
    if built_in is None:
        return
    if built_in.spec is not None:
        for model in models:
            _check_program(name, args, model, environment=environment)
    elif name == "prompt":
        for model in models:
            _check_prompt(args, model, environment=environment)
    else:
        unknown = sorted(set(args) - set(built_in.options))
        if unknown:
            takes = ", ".join(built_in.options) or "no options"
            raise AgentArgsError(f"agent {name!r}: unknown --agent-arg {', '.join(unknown)} (it takes {takes})")
        _check_function_args(name, args, models, environment=environment)


def _check_prompt(args: dict[str, str], model: str | None, *, environment: bool) -> None:
    """The options, the model's name and (``environment``) its keys and price file, as making
    the model reads them; nothing is sent."""
    from pydantic import ValidationError

    from ..models import ModelError
    from ..models.calls import PromptOptions, check_model

    try:
        check_model(model, args, environment=environment)
    except ValidationError as exc:
        option, _, first = field_problems(exc)[0]
        if first["type"] == "extra_forbidden":
            takes = ", ".join(PromptOptions.model_fields)
            raise AgentArgsError(f"agent 'prompt': unknown --agent-arg {option} (it takes {takes})") from None
        raise AgentArgsError(f"agent 'prompt': --agent-arg {option}: {first['msg']}") from None
    except ModelError as exc:
        raise AgentArgsError(f"agent 'prompt': {exc}") from None


def _check_function_args(name: str, args: dict[str, str], models: Sequence[str | None], *, environment: bool) -> None:
    if name == "sleep":
        try:
            seconds = float(args.get("seconds", "1"))
        except ValueError:
            seconds = -1.0
        if not seconds >= 0:
            raise AgentArgsError(f"agent 'sleep': --agent-arg seconds must be a number >= 0, got {args['seconds']!r}")
    if name == "replay":
        from .replay import ReplayError, load_trials

        if not args.get("trials"):
            raise AgentArgsError("agent 'replay' needs --agent-arg trials=PATH (a JSONL file of recorded trials)")
        if environment:
            try:
                trials = load_trials(str(Path(args["trials"]).resolve()))
            except ReplayError as exc:
                raise AgentArgsError(f"agent 'replay': --agent-arg trials: {exc}") from None
            _check_replayed_models(args["trials"], trials, models)


def _check_replayed_models(
    path: str, trials: Mapping[tuple[str, str, int], list[dict]], models: Sequence[str | None]
) -> None:
    """Every model (``model`` or ``model@harness``) has recorded trials: one the file names
    nowhere would make every unit of it an error."""
    recorded = {(name, str(row.get("harness"))) for (_, name, _), rows in trials.items() for row in rows}
    for model in models:
        if model is None:
            continue
        name, _, harness = model.partition("@")
        if not any(n == name and harness in ("", h) for n, h in recorded):
            known = sorted({f"{n}@{h}" for n, h in recorded})
            listed = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "")
            raise AgentArgsError(
                f"agent 'replay': --agent-arg trials: {path} records no trial of model {model!r} "
                f"(--models names MODEL or MODEL@HARNESS of: {listed or 'none: the file is empty'})"
            )


def _check_program(name: str, args: dict[str, str], model: str | None, *, environment: bool) -> None:
    from ._base import AgentConfigError

    spec = program_class(name)
    options = {key: _option_value(value) for key, value in args.items()}
    try:
        agent = spec.make(model, **options)
    except TypeError:  # an option the program's dataclass has no field for
        fields = {f.name for f in dataclasses.fields(spec)} - {"model"}
        unknown = sorted(set(options) - fields)
        raise AgentArgsError(
            f"agent {name!r}: unknown --agent-arg {', '.join(unknown)} (it takes {', '.join(sorted(fields))})"
        ) from None
    except (AgentConfigError, ValueError) as exc:
        raise AgentArgsError(f"agent {name!r} with model {model!r}: {exc}") from None
    # a server of its own (base_url: vLLM, llama.cpp, Ollama on this machine) may take no key:
    # the gateway then sends its calls with none (the unit still gets its token)
    if environment and not args.get("base_url"):
        try:
            agent.check_env(dict(os.environ))
            agent.spare_keys(os.environ)
        except AgentConfigError as exc:
            raise AgentArgsError(f"agent {name!r}: {exc}") from None


def parse_agent_args(pairs: list[str], agent: str = "") -> dict[str, str]:
    """``["k=v", ...]`` from repeated ``--agent-arg`` options; the options of built-in ``agent``
    that name a file made absolute."""
    args = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--agent-arg expects key=value, got {pair!r}")
        args[key.strip()] = value
    for key in BUILT_IN_AGENTS[agent].path_options if agent in BUILT_IN_AGENTS else ():
        if args.get(key):
            args[key] = str(Path(args[key]).expanduser().absolute())
    return args
