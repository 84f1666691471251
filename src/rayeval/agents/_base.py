"""The shape every real-agent harness shares: options, environment, run, post-process.

A harness is a small picklable object (a dataclass) so that an agent function built on the
driver can be shipped to Ray workers.  Calling it runs the program once in ``work_dir``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..errors import ConfigError
from ..harness.context import AgentContext
from ..harness.prompt import AnswerConvention
from . import _cli
from ._recovery import ProviderFailure
from ._refusal import RefusalVerdict, detect_program_refusal


class AgentConfigError(ConfigError):
    """The harness cannot run as configured (missing API key, unsupported option, ...)."""


@dataclass
class Summary:
    """What a harness extracted from its program's events."""

    usage: _cli.Usage = field(default_factory=_cli.Usage)
    n_turns: int | None = None
    n_steps: int | None = None
    cost_usd: float | None = None
    cost_source: str | None = None
    trajectory: list[dict[str, Any]] | None = None  # None: the streamed events as they are
    extra: dict[str, Any] = field(default_factory=dict)
    #: the program's session, which a resumed run goes on with (None: it cannot be resumed)
    session_id: str | None = None
    #: the provider's failures the program reported, in order; the last one ended the session
    #: when it ended without an answer
    failures: list[ProviderFailure] = field(default_factory=list)
    #: the model's refusal, as the program's events show it (None: none seen)
    refusal: RefusalVerdict | None = None


@dataclass
class ProgramAgent:
    """Common options of the subprocess harnesses.

    * ``model`` -- model name passed to the program (provider prefixes are stripped where the
      program wants bare names).
    * ``timeout`` -- seconds; the program's process tree is killed when it passes.  The runner
      has its own deadline; this is a safety net.
    * ``base_url`` -- endpoint override (an Anthropic- or OpenAI-compatible server).
    * ``extra_args`` -- appended to the program's command line.
    * ``env`` -- variables added to the program's environment (a value of None removes one).
    * ``pass_env`` -- names of further secret variables to pass through from ``os.environ``
      (everything secret-looking is scrubbed from the environment by default; the program's
      own key variables are always passed).
    * ``state_dir`` -- keep the program's own state (config, sessions) there instead of a
      temporary folder that is removed after the run.
    """

    model: str | None = None
    timeout: float | None = None
    base_url: str | None = None
    extra_args: tuple[str, ...] = ()
    env: dict[str, str | None] = field(default_factory=dict)
    pass_env: tuple[str, ...] = ()
    state_dir: str | None = None

    harness: ClassVar[str] = "program"
    key_names: ClassVar[tuple[str, ...]] = ()
    #: Further variables the program reads (endpoints, provider switches): a sandboxed unit
    #: gets them, with ``key_names``, from the worker's environment.
    config_names: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        self.extra_args = tuple(str(a) for a in (self.extra_args or ()))
        self.pass_env = tuple(self.pass_env or ())
        self.env = dict(self.env or {})
        if self.timeout is not None and self.timeout <= 0:
            raise AgentConfigError("timeout must be positive")

    # ---------------------------------------------------------------- hooks
    def program_argv(self) -> list[str]:
        raise NotImplementedError

    def build_argv(self, program: list[str], state: Path, work_dir: Path) -> list[str]:
        raise NotImplementedError

    def program_env(self, state: Path, work_dir: Path) -> dict[str, str]:
        """Harness-specific variables (telemetry switches, state folders, endpoints)."""
        return {}

    def prepare(self, state: Path, work_dir: Path, env: dict[str, str], convention: AnswerConvention) -> None:
        """Write config files into ``state`` before the run (text that names the answer file or
        the completion marker in ``convention``'s names)."""

    def check_env(self, env: dict[str, str]) -> None:
        """Raise :class:`AgentConfigError` when the program cannot authenticate."""

    def stdin_text(self, task_prompt: str) -> str | None:
        return task_prompt

    def summarize(self, events: list[dict[str, Any]], state: Path, work_dir: Path) -> Summary:
        raise NotImplementedError

    def keep_event(self, event: dict[str, Any]) -> bool:
        return True

    def resume_argv(self, program: list[str], state: Path, work_dir: Path, session_id: str) -> list[str] | None:
        """The command line that goes on with ``session_id`` (its prompt: ``Continue.`` on
        stdin); None when the program cannot resume a session."""
        return None

    # ---------------------------------------------------------------- the agent function
    @property
    def __name__(self) -> str:  # what the runner and reports call this agent
        return f"{self.harness}:{self.model or 'default'}"

    def __call__(
        self, task_prompt: str, work_dir: str | os.PathLike[str], context: AgentContext | None = None
    ) -> dict[str, Any]:
        work_dir = Path(work_dir).resolve()
        work_dir.mkdir(parents=True, exist_ok=True)
        program = self.program_argv()  # raises AgentNotInstalledError with the install hint
        with _cli.state_dir(self.harness, self.state_dir) as state:
            env = _cli.build_env(
                pass_keys=(*self.key_names, *self.pass_env),
                extra={**self.program_env(state, work_dir), **self.env},
            )
            self.check_env(env)
            self.prepare(state, work_dir, env, context.convention if context is not None else "legacy")
            secrets = _cli.secrets_for(env, {k: v for k, v in self.env.items() if v is not None})
            argv = self.build_argv(program, state, work_dir)
            result = _cli.run_streaming(
                argv,
                work_dir=work_dir,
                env=env,
                stdin_text=self.stdin_text(task_prompt),
                timeout=self.timeout,
                secrets=secrets,
                keep_event=self.keep_event,
            )
            try:
                summary = self.summarize(result.events, state, work_dir)
            except Exception as exc:  # noqa: BLE001 - a surprise in the event stream must not lose the answer
                summary = Summary(extra={"summary_error": f"{type(exc).__name__}: {exc}"})
            if summary.refusal is None:
                summary.refusal = detect_program_refusal(self.harness, result.events)
        return _cli.finish(
            harness=self.harness,
            model=self.model,
            work_dir=work_dir,
            result=result,
            secrets=secrets,
            trajectory=summary.trajectory if summary.trajectory is not None else result.events,
            usage=summary.usage,
            n_turns=summary.n_turns,
            n_steps=summary.n_steps,
            cost_usd=summary.cost_usd,
            cost_source=summary.cost_source,
            command=self.display_argv(argv),
            timeout=self.timeout,
            extra=summary.extra,
            refusal=summary.refusal,
        )

    def display_argv(self, argv: list[str]) -> list[str]:
        """The command line as recorded in metadata (it never holds the prompt or a key)."""
        return list(argv)


def strip_provider(model: str | None, prefixes: tuple[str, ...]) -> str | None:
    if model is None:
        return None
    for prefix in prefixes:
        if model.startswith(prefix + "/"):
            return model[len(prefix) + 1 :]
    return model
