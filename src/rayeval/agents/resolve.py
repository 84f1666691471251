"""Naming an agent on the command line: a built-in name or a ``module:function`` path."""
from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..harness.context import AgentContext, AgentFunction, AgentRef


def _reference() -> AgentFunction:
    from .reference import reference_agent

    return reference_agent


def _replay() -> AgentFunction:
    from .replay import replay_agent

    return replay_agent


def _sleep() -> AgentFunction:
    from .sleep import sleep_agent

    return sleep_agent


def _option_value(text: str) -> Any:
    """``--agent-arg`` values are text; numbers, booleans and JSON objects become typed."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _program_env_names(factory_name: str) -> tuple[str, ...]:
    """The variables a real agent program reads: its API keys and its endpoint settings."""
    if factory_name == "claude-code":
        from .claude_code import ClaudeCodeAgent

        return (*ClaudeCodeAgent.key_names, *ClaudeCodeAgent.config_names)
    if factory_name == "codex":
        from .codex import CodexAgent

        return (*CodexAgent.key_names, *CodexAgent.config_names)
    from .mini_swe import PROVIDER_KEYS, MiniSweAgent

    return (*(name for names in PROVIDER_KEYS.values() for name in names), *MiniSweAgent.config_names)


def _program(factory_name: str) -> Callable[[], AgentFunction]:
    """A real agent program configured per unit: the unit's model, ``--agent-arg`` options."""

    def load() -> AgentFunction:
        def program_agent(task_prompt: str, work_dir: Path, context: AgentContext) -> Any:
            from . import claude_code, codex, mini_swe_agent

            factory = {"claude-code": claude_code, "codex": codex, "mini-swe-agent": mini_swe_agent}[factory_name]
            options = {key: _option_value(value) for key, value in context.args.items()}
            return factory(model=context.model, **options)(task_prompt, work_dir)

        program_agent.env_names = _program_env_names(factory_name)  # type: ignore[attr-defined]
        return program_agent

    return load


BUILT_IN_AGENTS: dict[str, Callable[[], AgentFunction]] = {
    "reference": _reference,
    "replay": _replay,
    "sleep": _sleep,
    "claude-code": _program("claude-code"),
    "codex": _program("codex"),
    "mini-swe-agent": _program("mini-swe-agent"),
}

# Built-ins cheap and safe enough to run inside the worker without a forked child.
INLINE_AGENTS = frozenset({"replay", "sleep"})


class AgentNotFound(ValueError):
    """The agent name is neither built in nor an importable ``module:function``."""


def resolve_agent(name: str) -> AgentFunction:
    if name in BUILT_IN_AGENTS:
        return BUILT_IN_AGENTS[name]()
    module_name, sep, attribute = name.partition(":")
    if not sep or not module_name or not attribute:
        known = ", ".join(sorted(BUILT_IN_AGENTS))
        raise AgentNotFound(f"unknown agent {name!r}: use a built-in ({known}) or module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentNotFound(f"agent {name!r}: cannot import module {module_name!r}: {exc}") from None
    target = module
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise AgentNotFound(f"agent {name!r}: module {module_name!r} has no attribute {attribute!r}")
    if not callable(target):
        raise AgentNotFound(f"agent {name!r} is not callable")
    return target


def agent_ref(name: str) -> AgentRef:
    """``name`` for a runner that imports it where it runs. A built-in is rayeval's own code
    and is asked for its traits here; a ``module:function`` is never imported here (its
    module would run code in this process): it gets the defaults, and is checked where it
    runs."""
    if name in BUILT_IN_AGENTS:
        function = BUILT_IN_AGENTS[name]()
        return AgentRef(
            name=name,
            needs_data=getattr(function, "needs_data", True),
            leaves_nothing_running=getattr(function, "leaves_nothing_running", False),
            replays_recorded_runs=getattr(function, "replays_recorded_runs", False),
            env_names=tuple(getattr(function, "env_names", ())),
            preload=(function.__module__, *getattr(function, "preload", ())),
        )
    module_name, sep, attribute = name.partition(":")
    if not sep or not module_name or not attribute:
        known = ", ".join(sorted(BUILT_IN_AGENTS))
        raise AgentNotFound(f"unknown agent {name!r}: use a built-in ({known}) or module:function")
    return AgentRef(name=name)


def parse_agent_args(pairs: list[str]) -> dict[str, str]:
    """``["k=v", ...]`` from repeated ``--agent-arg`` options."""
    args = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--agent-arg expects key=value, got {pair!r}")
        args[key.strip()] = value
    return args
