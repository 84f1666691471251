"""The shape every real-agent harness shares: options, environment, run, post-process.

A harness is a small picklable object (a dataclass) so that an agent function built on the
driver can be shipped to Ray workers.  Calling it runs the program once in ``work_dir``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from ..errors import ConfigError, RayevalError
from ..models.failures import ANTHROPIC_KEY_FALLBACK_ON, ProviderFailure, fallback_keys, key_fallback_on
from ..models.types import ReportedUsage
from ..unit.context import AgentContext
from ..unit.prompt import AnswerConvention
from . import _cli, _tools
from ._recovery import (
    DEFAULT_HINT_JITTER_S,
    DEFAULT_WAIT_BUDGET_S,
    Recovery,
    Step,
    wait_option,
)
from ._refusal import RefusalVerdict

#: Where a chunked session's program keeps its state, in the unit's work folder (see ``_state_path``).
PROGRAM_STATE_FOLDER = ".program-state"


class AgentConfigError(ConfigError):
    """The harness cannot run as configured (missing API key, unsupported option, ...)."""


@dataclass
class Summary:
    """What a harness extracted from its program's events."""

    usage: ReportedUsage = field(default_factory=ReportedUsage)
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
    #: no reply of the model was seen, though the program said something (mini-swe-agent's
    #: driver reports its start and end all the same): as a run that left no events, its turns
    #: and steps are unknown and it was not searched for a refusal
    empty: bool = False


class ChunkFailed(RayevalError, RuntimeError):
    """A chunk of a session failed: its program ended on an error, or ran out of time."""


@dataclass(frozen=True)
class ChunkEnd:
    """How a chunk's run ended, as its program's events and exit code tell."""

    #: the model turns it completed (a failed or aborted call is none)
    turns: int
    #: it stopped on the chunk's turn limit (pi: or a reply cut at its length limit), not on its own
    hit_turn_limit: bool
    #: what the failure said, when the run failed (None: it ended well)
    error: str | None = None


@dataclass(frozen=True)
class Chunk:
    """What :meth:`ProgramAgent.run_chunk` returns: the session to go on with, where its
    file is (in ``state_dir``), the model turns of this chunk, and whether it hit its limit."""

    session_id: str
    session_file: Path | None
    turns: int
    hit_turn_limit: bool


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
    * ``provider_wait_s`` -- the most seconds, in all, the unit waits on its provider's
      failures before resuming the program's session (default 1800; 0: never resume).
    * ``provider_jitter_s`` -- at most this many random seconds added to the provider's
      retry hint (default 5; see :func:`rayeval.agents._recovery.resume_wait_s`).
    * ``chunk_turns`` -- run the session in chunks of at most this many model turns, each
      going on with the session (``Continue.``) until it ends on its own, answers, or the
      unit's time is up (programs that run chunks: see :meth:`run_chunk`).
    """

    model: str | None = None
    timeout: float | None = None
    base_url: str | None = None
    extra_args: tuple[str, ...] = ()
    env: dict[str, str | None] = field(default_factory=dict)
    pass_env: tuple[str, ...] = ()
    state_dir: str | None = None
    provider_wait_s: float = DEFAULT_WAIT_BUDGET_S
    provider_jitter_s: float = DEFAULT_HINT_JITTER_S
    chunk_turns: int | None = None

    #: what each ``--agent-arg`` option does, as ``rayeval agents`` says it (a spec adds its own)
    option_help: ClassVar[dict[str, str]] = {
        "timeout": "seconds the program may run (a safety net under the unit's own time limit)",
        "base_url": "the model's endpoint (an Anthropic- or OpenAI-compatible server), behind the gateway",
        "extra_args": "more arguments for the program's command line",
        "env": "variables added to the program's environment (null removes one)",
        "pass_env": "names of further secret variables the program may see",
        "state_dir": "keep the program's own state (config, sessions) in this folder",
        "provider_wait_s": "the most seconds, in all, a unit waits on its provider's failures before resuming (0: never)",
        "provider_jitter_s": "at most this many random seconds added to the provider's retry hint",
        "chunk_turns": "run the session in chunks of at most this many turns, each going on with it (Claude Code, pi)",
    }
    #: the program's name, as ``--agent`` and the rows' ``harness`` give it
    harness: ClassVar[str] = "program"
    #: what ``rayeval agents`` says of it
    description: ClassVar[str] = ""
    #: the npm program it runs, pinned (None: a Python program of rayeval's environment)
    tool: ClassVar[_tools.Program | None] = None
    key_names: ClassVar[tuple[str, ...]] = ()
    #: the one model API the program speaks, whose endpoint ``base_url`` is (None: its model's)
    model_api: ClassVar[Literal["openai", "anthropic"] | None] = None
    #: its option saying whether it goes on with a fallback model when its model refuses
    #: (unset: it does), None: it never does (the gateway lets a unit that does call that model)
    model_fallback_option: ClassVar[str | None] = None
    #: (the variable listing fallback keys, the key variable a fallback goes into): a key the
    #: provider rejects is replaced by the next one listed; the list never reaches the program
    key_fallbacks: ClassVar[tuple[str, str] | None] = None
    #: Further variables the program reads (endpoints, provider switches): a sandboxed unit
    #: gets them, with ``key_names``, from the worker's environment.
    config_names: ClassVar[tuple[str, ...]] = ()
    #: flags whose value the recorded command line shows as its length only (a system prompt)
    hidden_values: ClassVar[tuple[str, ...]] = ()
    #: variables a chunked run of the program gets besides :meth:`program_env` (its process
    #: ends with each chunk, and with it whatever it left running)
    chunk_env: ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        self.extra_args = tuple(str(a) for a in (self.extra_args or ()))
        self.pass_env = tuple(self.pass_env or ())
        self.env = dict(self.env or {})
        if self.timeout is not None and self.timeout <= 0:
            raise AgentConfigError("timeout must be positive")
        try:
            self.provider_wait_s = wait_option("provider_wait_s", self.provider_wait_s)
            self.provider_jitter_s = wait_option("provider_jitter_s", self.provider_jitter_s)
        except ValueError as exc:
            raise AgentConfigError(str(exc)) from None
        if self.chunk_turns is not None:
            if type(self).chunk_argv is ProgramAgent.chunk_argv:
                raise AgentConfigError(f"{self.harness} does not run chunked sessions (chunk_turns)")
            _check_turns("chunk_turns", self.chunk_turns)

    @classmethod
    def make(cls, model: str | None = None, **options: Any) -> ProgramAgent:
        """The agent of ``model`` with ``options`` (``--agent-arg``); :class:`TypeError` for an
        option it has no field for, :class:`AgentConfigError` for a value it cannot take."""
        return cls(model=model, **options)

    @classmethod
    def env_names(cls) -> tuple[str, ...]:
        """The variables its sandboxed units get from the worker's environment: its keys and
        endpoint settings, and the fallback list (for the agent function, never the program)."""
        return (*cls.key_names, *cls.config_names, *(cls.key_fallbacks[:1] if cls.key_fallbacks else ()))

    @classmethod
    def refusal_in(cls, events: list[dict[str, Any]]) -> RefusalVerdict | None:
        """The model's refusal, as the program's events show it (None: none seen)."""
        return None

    @classmethod
    def evaluates_refusals(cls) -> bool:
        """Whether its events are searched for refusals (its spec says how)."""
        return cls.refusal_in.__func__ is not ProgramAgent.refusal_in.__func__  # type: ignore[attr-defined]

    @classmethod
    def spare_keys(cls, environ: Mapping[str, str]) -> list[str]:
        """The fallback keys listed in ``environ`` for a rejected key (:class:`AgentConfigError`
        when the list is not a JSON list of non-empty strings, or ``ANTHROPIC_KEY_FALLBACK_ON``
        names no trigger); none when that says ``refusal``: a refusal is the gateway's to see."""
        if cls.key_fallbacks is None:
            return []
        try:
            trigger = key_fallback_on(environ.get(ANTHROPIC_KEY_FALLBACK_ON))
            keys = fallback_keys(cls.key_fallbacks[0], environ.get(cls.key_fallbacks[0]))
        except ValueError as exc:
            raise AgentConfigError(str(exc)) from None
        return [] if trigger == "refusal" else keys

    def fallback_variable(self) -> str | None:
        """The key variable a fallback key replaces (None: this agent takes no fallback keys,
        e.g. its model's provider is not the one they are for)."""
        return self.key_fallbacks[1] if self.key_fallbacks is not None else None

    # ---------------------------------------------------------------- hooks
    def program_argv(self) -> list[str]:
        """The command that runs the program (raises ``AgentNotInstalledError`` with the fix)."""
        if self.tool is None:
            raise NotImplementedError(f"{type(self).__name__} names no program")
        return _tools.find_program(self.tool)

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
        """What the program reads on stdin at the start of a unit's session."""
        return task_prompt

    def chunk_stdin_text(self, prompt: str) -> str | None:
        """What it reads at the start of a new session of :meth:`run_chunk`."""
        return self.stdin_text(prompt)

    def summarize(self, events: list[dict[str, Any]], state: Path, work_dir: Path) -> Summary:
        raise NotImplementedError

    def keep_event(self, event: dict[str, Any]) -> bool:
        return True

    def resume_argv(self, program: list[str], state: Path, work_dir: Path, session_id: str) -> list[str] | None:
        """The command line that goes on with ``session_id`` (its prompt: ``Continue.`` on
        stdin); None when the program cannot resume a session."""
        return None

    def adopt_session(self, state: Path, work_dir: Path, session_id: str) -> None:
        """Make ``session_id``, restored in ``state`` from a checkpoint taken in another work
        folder, one the program goes on with in ``work_dir`` (Claude Code finds a session by
        its id, whatever work folder it was filed under)."""

    def restored_events(self, state: Path, session_id: str) -> list[dict[str, Any]]:
        """The events so far of ``session_id``, restored in ``state`` from a checkpoint (another
        process ran them), as far as the program's state records them, for :meth:`resuming` to
        read (Claude Code: its transcript); none by default. ``state`` is the agent's own work,
        untrusted: what it says may only choose what :meth:`resuming` may choose."""
        return []

    def made_progress(self, summary: Summary, events: list[dict[str, Any]]) -> bool:
        """Whether a run completed a model turn (which resets the doubling of provider waits)."""
        return bool(summary.n_turns)

    def resuming(self, events: list[dict[str, Any]]) -> ProgramAgent:
        """The agent that goes on with the session whose events so far are ``events`` (Claude
        Code: on the model the session fell back to); itself by default."""
        return self

    def failure_at_deadline(self, summary: Summary, events: list[dict[str, Any]]) -> ProviderFailure | None:
        """The provider's failure a run the unit's deadline cut off was on, which stays the
        unit's error (its last one reported; Claude Code: also one it was still retrying)."""
        return summary.failures[-1] if summary.failures else None

    def cut_short(self, events: list[dict[str, Any]]) -> bool:
        """Whether a run that exited cleanly, without an answer and without a provider's
        failure, stopped on a limit of the program's own (pi: a reply cut at its length limit, a
        compaction): its session then goes on with ``Continue.`` while the unit has time."""
        return False

    # ---------------------------------------------------------------- the agent function
    @property
    def __name__(self) -> str:  # what the runner and reports call this agent
        return f"{self.harness}:{self.model or 'default'}"

    def __call__(
        self, task_prompt: str, work_dir: str | os.PathLike[str], context: AgentContext | None = None
    ) -> dict[str, Any]:
        """Run the program on the task; on a provider's failure that left it without an answer,
        resume its session in place (see :class:`rayeval.agents._recovery.Recovery`)."""
        started = time.monotonic()
        work_dir = Path(work_dir).resolve()
        work_dir.mkdir(parents=True, exist_ok=True)
        program = self.program_argv()  # raises AgentNotInstalledError with the install hint
        limit = min((t for t in (self.timeout, context and context.timeout) if t), default=None)
        recovery = Recovery(
            wait_budget_s=self.provider_wait_s,
            jitter_s=self.provider_jitter_s,
            deadline=None if limit is None else started + limit,
            spare_keys=self.spare_keys(os.environ) if self.fallback_variable() else [],
        )
        with _cli.state_dir(self.harness, self._state_path(work_dir)) as state:
            convention = context.convention if context is not None else "legacy"
            env, secrets = self._environment(state, work_dir, convention, chunked=self.chunk_turns is not None)
            secrets |= set(recovery.spare_keys)
            first_argv, stdin, restored = self._first_run(program, state, work_dir, task_prompt, context)
            on_chunk = context.chunk_done if context is not None else None
            runs = self._run_recovering(
                program, first_argv, state, work_dir, env, stdin, recovery, secrets, restored, on_chunk
            )
            result, summary = self._session(runs, started, state, work_dir)  # Codex reads its state
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
            command=self.display_argv(first_argv),
            timeout=self.timeout,
            extra={**summary.extra, **recovery.metadata()},
            refusal=summary.refusal,
            refusals_evaluated=self.evaluates_refusals(),
            empty=summary.empty,
            failure_details=recovery.error_details() if recovery.last_failure is not None else None,
        )

    def _first_run(
        self, program: list[str], state: Path, work_dir: Path, task_prompt: str, context: AgentContext | None
    ) -> tuple[list[str], str | None, list[dict[str, Any]]]:
        """The first command line, its stdin and the session's events restored with it: the
        task, or, for a chunked session restored from its checkpoint (``context.resume_session``),
        that session gone on with ``Continue.`` by the agent its restored events choose
        (:meth:`resuming`: Claude Code on the model it fell back to)."""
        session = context.resume_session if context is not None else None
        if self.chunk_turns is None:
            return self.build_argv(program, state, work_dir), self.stdin_text(task_prompt), []
        if session is None:
            argv = self.chunk_argv(program, state, self.chunk_turns, None, fork=False)
            return argv, self.stdin_text(task_prompt), []
        self.adopt_session(state, work_dir, session)
        restored = self.restored_events(state, session)
        _cli.note(work_dir, "HARNESS: going on with the session restored from the unit's checkpoint")
        going_on = self.resuming(restored)
        return going_on.chunk_argv(program, state, self.chunk_turns, session, fork=False), RESUME_PROMPT, restored

    def _state_path(self, work_dir: Path) -> str | Path | None:
        """Where the program keeps its state: ``state_dir``; for a chunked session, else, in the
        work folder (saved with it after each chunk, so that the session can go on elsewhere);
        None: a temporary folder."""
        if self.state_dir is None and self.chunk_turns is not None:
            return work_dir / PROGRAM_STATE_FOLDER
        return self.state_dir

    def _environment(
        self, state: Path, work_dir: Path, convention: AnswerConvention, *, chunked: bool
    ) -> tuple[dict[str, str], set[str]]:
        """The program's environment (a ``chunked`` run's with :attr:`chunk_env`), checked, with
        its config files written into ``state``, and the secret values the log and events are
        redacted of."""
        env = _cli.build_env(
            pass_keys=(*self.key_names, *self.pass_env),
            extra={**self.program_env(state, work_dir), **(self.chunk_env if chunked else {}), **self.env},
        )
        self.check_env(env)
        self.prepare(state, work_dir, env, convention)
        return env, _cli.secrets_for(env, {k: v for k, v in self.env.items() if v is not None})

    # ---------------------------------------------------------------- chunked sessions
    def run_chunk(
        self,
        prompt: str,
        work_dir: str | os.PathLike[str],
        max_turns: int,
        *,
        session_id: str | None = None,
        fork: bool = False,
        timeout: float | None = None,
    ) -> Chunk:
        """Run the program for at most ``max_turns`` model turns: a new session with ``prompt``,
        or, with ``session_id``, that session gone on with ``prompt`` (``fork``: in a new
        session forked from it, which is left as it was). The session is kept in ``state_dir``
        (required) for the next chunk. Reaching the turn limit is a normal end
        (``hit_turn_limit``); :class:`ChunkFailed` when the program ended on an error (pi's
        failed reply too, although it exits 0) or ran past ``timeout`` (default: the agent's
        ``timeout``; its process tree is killed)."""
        _check_turns("max_turns", max_turns)
        if self.state_dir is None:
            raise AgentConfigError("a chunked session is kept in the agent's state_dir between chunks: set state_dir")
        work_dir = Path(work_dir).resolve()
        work_dir.mkdir(parents=True, exist_ok=True)
        program = self.program_argv()
        limit = timeout if timeout is not None else self.timeout
        with _cli.state_dir(self.harness, self.state_dir) as state:
            env, secrets = self._environment(state, work_dir, "legacy", chunked=True)
            result = _cli.run_streaming(
                self.chunk_argv(program, state, max_turns, session_id, fork),
                work_dir=work_dir,
                env=env,
                stdin_text=prompt if session_id is not None else self.chunk_stdin_text(prompt),
                timeout=limit,
                secrets=secrets,
                keep_event=self.keep_event,
            )
            if result.timed_out:
                raise ChunkFailed(f"{self.harness} chunk timed out after {limit} s")
            end = self.chunk_end(result.events, result.exit_code)
            if end.error is not None or result.error is not None:
                raise ChunkFailed(
                    f"{self.harness} chunk failed with exit code {result.exit_code}: "
                    f"{result.error or end.error}\n{_cli.log_tail(work_dir)}"
                )
            session = self._summary(result, state, work_dir).session_id
            if session is None:
                raise ChunkFailed(f"{self.harness} chunk ended without a session\n{_cli.log_tail(work_dir)}")
            session_file = next(iter(sorted(state.rglob(f"*{session}.jsonl"))), None)
        return Chunk(session, session_file, end.turns, end.hit_turn_limit)

    def chunk_argv(
        self, program: list[str], state: Path, max_turns: int, session_id: str | None, fork: bool
    ) -> list[str]:
        """The command line of a chunk: at most ``max_turns`` turns of a new session, of
        ``session_id``, or (``fork``) of a new session forked from it."""
        raise AgentConfigError(f"{self.harness} does not run chunked sessions")

    def chunk_end(self, events: list[dict[str, Any]], exit_code: int | None) -> ChunkEnd:
        """How a chunk's run ended, from its events and exit code."""
        raise NotImplementedError

    def _run_recovering(
        self,
        program: list[str],
        argv: list[str],
        state: Path,
        work_dir: Path,
        env: dict[str, str],
        stdin: str | None,
        recovery: Recovery,
        secrets: set[str],
        restored: list[dict[str, Any]],
        on_chunk: Callable[[str, int], object] | None = None,
    ) -> list[tuple[_cli.CliResult, Summary]]:
        """Run ``argv`` (``stdin`` on its standard input), then resume the program's session for
        as long as :class:`Recovery` says, each resume's :meth:`resuming` reading the session's
        events so far (``restored``, those before this process, first); ``on_chunk`` is told of
        each chunk done that the session goes on from (its id, turns)."""
        runs: list[tuple[_cli.CliResult, Summary]] = []
        while True:
            earlier = [event for run, _ in runs for event in run.events]
            result = _cli.run_streaming(
                argv,
                work_dir=work_dir,
                env=env,
                stdin_text=stdin,
                timeout=recovery.remaining_s(),
                secrets=secrets,
                keep_event=self.keep_event,
                earlier_events=earlier if runs else None,
            )
            summary = self._summary(result, state, work_dir)
            runs.append((result, summary))
            if _cli.read_answer(work_dir)[0] is not None:
                recovery.last_failure = None
                return runs
            if result.timed_out:
                recovery.ran_out_of_time(self.failure_at_deadline(summary, result.events))
                return runs
            failure = summary.failures[-1] if summary.failures else None
            session = summary.session_id
            resumed = (
                self.resuming([*restored, *earlier, *result.events])._resumed_argv(program, state, work_dir, session)
                if session
                else None
            )
            step = recovery.next_step(failure, self.made_progress(summary, result.events), resumed is not None)
            if failure is None and resumed is not None and self._stopped_short(result):
                if recovery.out_of_time():
                    return runs
                if on_chunk is not None and session and self.chunk_turns is not None:
                    on_chunk(session, self.chunk_end(result.events, result.exit_code).turns)
                _cli.note(work_dir, "HARNESS: the program stopped short of an answer; resuming the session")
                argv, stdin = resumed, RESUME_PROMPT
                continue
            if failure is None or step is None or resumed is None:
                if failure is not None:
                    _cli.note(work_dir, f"HARNESS: provider recovery stopped: {recovery.stop_reason}")
                return runs
            self._resume_after(step, recovery, work_dir, env, failure)
            if recovery.out_of_time():
                # the cooldown overslept the unit's deadline: the unit ends there, on the
                # provider's failure, rather than start the program with no time left
                recovery.stop_reason = "run_deadline"
                _cli.note(work_dir, "HARNESS: the provider's cooldown ran past the unit's deadline")
                runs[-1] = (dataclasses.replace(result, timed_out=True), summary)
                return runs
            argv, stdin = resumed, RESUME_PROMPT

    def _resumed_argv(self, program: list[str], state: Path, work_dir: Path, session_id: str) -> list[str] | None:
        """The command line that goes on with ``session_id``: for a chunk of ``chunk_turns``
        turns when given."""
        if self.chunk_turns is not None:
            return self.chunk_argv(program, state, self.chunk_turns, session_id, fork=False)
        return self.resume_argv(program, state, work_dir, session_id)

    def _stopped_short(self, result: _cli.CliResult) -> bool:
        """Whether a run that ended without an answer and without a provider's failure stopped
        on a limit: its chunk's turn limit, or one of the program's own (:meth:`cut_short`)."""
        if self.chunk_turns is not None:
            end = self.chunk_end(result.events, result.exit_code)
            if end.error is None and end.hit_turn_limit:
                return True
        return result.exit_code == 0 and self.cut_short(result.events)

    def _resume_after(
        self, step: Step, recovery: Recovery, work_dir: Path, env: dict[str, str], failure: ProviderFailure
    ) -> None:
        """Log the resume, wait its time (the time it took counts), switch to the next key if it says so."""
        what = f"HTTP {failure.status} ({failure.code})"
        if step.key is not None and (variable := self.fallback_variable()) is not None:
            env[variable] = step.key
            note = f"the provider rejected the key ({what}); resuming the session with fallback key"
            _cli.note(work_dir, f"HARNESS: {note} {recovery.key_fallbacks}")
            return
        _cli.note(
            work_dir,
            f"HARNESS: provider failure {what}; resume {recovery.resumes} of the session after "
            f"{step.wait_s:.1f} s ({recovery.waited_s:.1f} of {recovery.wait_budget_s:.0f} s waited)",
        )
        began = time.monotonic()
        time.sleep(step.wait_s)
        recovery.waited(max(step.wait_s, time.monotonic() - began))

    def _summary(self, result: _cli.CliResult, state: Path, work_dir: Path) -> Summary:
        try:
            summary = self.summarize(result.events, state, work_dir)
        except Exception as exc:  # noqa: BLE001 - a surprise in the event stream must not lose the answer
            summary = Summary(extra={"summary_error": f"{type(exc).__name__}: {exc}"})
        if summary.refusal is None:
            summary.refusal = self.refusal_in([event for event in result.events if isinstance(event, dict)])
        if summary.refusal is not None:  # the model's answer (Claude Code ends it as an api_error,
            summary.failures = []  # Codex as a failed turn): never the provider's fault, never resumed
        return summary

    def _session(
        self, runs: list[tuple[_cli.CliResult, Summary]], started: float, state: Path, work_dir: Path
    ) -> tuple[_cli.CliResult, Summary]:
        """One result and one summary of a session's runs: the last run's outcome, and the
        spec's summary of every run's events (each spec adds its runs up as its program
        counts: Codex's session file keeps running totals, Claude Code reports each run)."""
        last, summary = runs[-1]
        if len(runs) == 1:
            return last, summary
        events = [event for run, _ in runs for event in run.events]
        result = dataclasses.replace(last, duration_s=round(time.monotonic() - started, 2), events=events)
        return result, self._summary(result, state, work_dir)

    def display_argv(self, argv: list[str]) -> list[str]:
        """The command line as recorded in metadata (it never holds the prompt or a key): the
        value of a ``hidden_values`` flag shown as its length only."""
        shown = list(argv)
        for flag in self.hidden_values:
            if flag in shown and shown.index(flag) + 1 < len(shown):
                i = shown.index(flag) + 1
                shown[i] = f"<{len(shown[i])} chars>"
        return shown


def _check_turns(option: str, turns: object) -> None:
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
        raise AgentConfigError(f"{option} must be an integer >= 1, got {turns!r}")


def strip_provider(model: str | None, prefixes: tuple[str, ...]) -> str | None:
    if model is None:
        return None
    for prefix in prefixes:
        if model.startswith(prefix + "/"):
            return model[len(prefix) + 1 :]
    return model


#: what a resumed session is told
RESUME_PROMPT = "Continue."
