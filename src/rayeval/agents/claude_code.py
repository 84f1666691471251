"""Claude Code (``@anthropic-ai/claude-code``) as a rayeval agent.

Runs ``claude --print --dangerously-skip-permissions --verbose --output-format stream-json
--effort max`` in the work folder with the prompt on stdin.  Its stream-json events are the trajectory; the
final ``result`` event gives turns, token usage and the provider-priced cost.

Provider failures, as the pinned Claude Code (2.1.332) reports them against a server that
answers with an error status:

* it retries a failed call itself, first: each retry is a ``system``/``api_retry`` event
  (``attempt``, ``max_retries``, ``retry_delay_ms``, ``error_status``, ``error``).  By default
  it makes 10 retries, the delay doubling from about 0.5 s to about 35 s (a ``retry-after``
  header, when the server sends a positive one, is the delay, plus its own jitter), so a
  call fails for good after about 2.5 minutes -- a 401 included.
  ``CLAUDE_CODE_MAX_RETRIES`` bounds the count (0: no retry); ``API_TIMEOUT_MS`` is one
  request's timeout, not a retry bound.  rayeval sets ``CLAUDE_CODE_MAX_RETRIES`` to
  :data:`PROGRAM_RETRIES` (the ``env`` option overrides it), so a blip is retried in the
  program and a longer failure is rayeval's to wait out within the unit's wait budget;
* when it gives up, the session ends with a ``result`` event of ``terminal_reason``
  ``api_error``, ``api_error_status`` (the HTTP status, null on a connection failure),
  ``is_error`` true and the error's text in ``result`` (after a ``<synthetic>`` assistant
  message that is no model turn); the process exits with a non-zero code.

That failure goes on :attr:`Summary.failures`, with the last ``api_retry`` delay of the same
status as the provider's hint; the session resumes with ``--resume <session>`` and
``Continue.`` on stdin.  The resumed command gives ``--model``, the session's: without one the
pinned program goes on with its own default model (``claude-opus-5-5`` in its requests), unless
the session fell back to another model on a refusal; given one, it goes back to that model.  So
a session that fell back goes on with its fallback model (:func:`session_model`), any other with
the requested one. A chunked session restored from its checkpoint in another process finds its
fallback in its transcript, which the restored state folder holds
(:meth:`ClaudeCodeAgent.restored_events`).

A run the unit's deadline cut off while Claude Code was still retrying a failed call (an
``api_retry`` with no model reply after it) ended on that failure: the row's error, as
latch-eval-tools' ``include_inflight_retry`` keeps it (:meth:`ClaudeCodeAgent.failure_at_deadline`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from .._json import amount_in
from ..gateway.pin import DEFAULT_MODEL
from ..models.failures import ProviderFailure, provider_failure
from ..models.types import ReportedUsage
from ..unit.prompt import AnswerConvention
from . import _cli, _tools
from ._base import AgentConfigError, ChunkEnd, ProgramAgent, Summary, strip_provider
from ._refusal import ANTHROPIC_REFUSAL_STOPS, RefusalVerdict, blocks_text, first_text_refusal, mapping, verdict

__all__ = ["ClaudeCodeAgent", "claude_code"]

# Switches that keep Claude Code off the network except for model calls.
QUIET_ENV = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    "NODE_DISABLE_COMPILE_CACHE": "1",
}
#: the variables naming the models Claude Code gives its side tasks and subagents (Haiku by
#: default): the unit's model, as the model gateway lets a unit call its own model only
HELPER_MODEL_VARIABLES = ("ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL")
#: ``CLAUDE_CODE_MAX_RETRIES``: the program's own retries of a failed call (about 1.5 s of
#: waits) before the session ends and rayeval's recovery takes over
PROGRAM_RETRIES = "2"
SYNTHETIC_MODEL = "<synthetic>"  # the model of the assistant message Claude Code makes of an error
#: ``--effort``, as latch-eval-tools runs Claude Code (the ``effort`` option turns it down)
DEFAULT_EFFORT = "max"
#: Ends the prompt of a new session, as latch-eval-tools words it: the session ends with the
#: model's turn, and whatever it left running in the background ends with it. A chunk's new
#: session gets it after a line break; chunked runs also turn Claude Code's background tasks off.
BACKGROUND_PROCESS_NOTE = (
    "\n\nNote: Do not end your turn while a background process is still running. Nothing will alert"
    " you it is done. Ending your turn may complete the session and kill the process; instead,"
    " block synchronously and poll until the job finishes before returning."
)


#: the program, pinned: the version this spec is tested with
CLAUDE = _tools.Program("claude", "@anthropic-ai/claude-code", "2.1.332", "RAYEVAL_CLAUDE_BIN")


@dataclass
class ClaudeCodeAgent(ProgramAgent):
    """See :func:`claude_code`."""

    max_turns: int | None = None
    system_prompt: str | None = None
    append_system_prompt: str | None = None
    effort: str | None = DEFAULT_EFFORT
    settings: dict[str, Any] | None = None
    include_partial_messages: bool = False
    switch_models_on_flag: bool | None = None

    option_help: ClassVar[dict[str, str]] = {
        **ProgramAgent.option_help,
        "max_turns": "the most turns of the session (Claude Code's --max-turns)",
        "system_prompt": "replaces Claude Code's system prompt",
        "append_system_prompt": "appended to Claude Code's system prompt",
        "effort": "the model's effort: low, medium, high or max (default max; null: Claude Code's own)",
        "settings": "Claude Code's --settings, as a JSON object",
        "include_partial_messages": "stream partial messages into the events (the log grows)",
        "switch_models_on_flag": "Claude Code's switchModelsOnFlag: when the model refuses, go on with "
        "its fallback model (true) or stop (false); unset: the program's default (true)",
    }

    harness: ClassVar[str] = "claude-code"
    description: ClassVar[str] = "Anthropic's Claude Code program (ANTHROPIC_API_KEY), the unit's model"
    tool: ClassVar[_tools.Program | None] = CLAUDE
    key_names: ClassVar[tuple[str, ...]] = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
    model_api = "anthropic"
    model_fallback_option = "switch_models_on_flag"
    config_names: ClassVar[tuple[str, ...]] = (
        "ANTHROPIC_BASE_URL", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY",
    )  # fmt: skip
    key_fallbacks: ClassVar[tuple[str, str] | None] = ("ANTHROPIC_API_KEY_FALLBACKS", "ANTHROPIC_API_KEY")
    hidden_values: ClassVar[tuple[str, ...]] = ("--system-prompt", "--append-system-prompt")
    chunk_env: ClassVar[dict[str, str]] = {"CLAUDE_CODE_DISABLE_BACKGROUND_TASKS": "1"}

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_turns is not None and int(self.max_turns) < 1:
            raise AgentConfigError("max_turns must be >= 1")
        if self.max_turns is not None and self.chunk_turns is not None:
            raise AgentConfigError("max_turns ends the session, chunk_turns goes on with it after each chunk: give one")
        if self.switch_models_on_flag is not None and not isinstance(self.switch_models_on_flag, bool):
            raise AgentConfigError(f"switch_models_on_flag must be true or false, got {self.switch_models_on_flag!r}")

    def stdin_text(self, task_prompt: str) -> str | None:
        return task_prompt + BACKGROUND_PROCESS_NOTE

    def chunk_stdin_text(self, prompt: str) -> str | None:
        return f"{prompt}\n{BACKGROUND_PROCESS_NOTE}"

    def program_env(self, state: Path, work_dir: Path) -> dict[str, str]:
        env = {**QUIET_ENV, "CLAUDE_CODE_MAX_RETRIES": PROGRAM_RETRIES}
        env["CLAUDE_CONFIG_DIR"] = str(state / "claude")
        if self.base_url:
            env["ANTHROPIC_BASE_URL"] = self.base_url.rstrip("/")
        model = strip_provider(self.model, ("anthropic",))
        if model and model != DEFAULT_MODEL:
            env.update(dict.fromkeys(HELPER_MODEL_VARIABLES, model))
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            # Claude Code refuses --dangerously-skip-permissions as root unless it is told it
            # runs in a sandbox (the work folder is the unit's sandbox).
            env["IS_SANDBOX"] = "1"
        if self.timeout is not None:
            ms = str(int(self.timeout * 1000))
            env["BASH_DEFAULT_TIMEOUT_MS"] = ms
            env["BASH_MAX_TIMEOUT_MS"] = ms
        return env

    def check_env(self, env: dict[str, str]) -> None:
        if env.get("ANTHROPIC_API_KEY") or env.get("ANTHROPIC_AUTH_TOKEN"):
            return
        if any(env.get(k) for k in ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY")):
            return
        raise AgentConfigError("claude_code needs ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN) in the environment")

    def prepare(self, state: Path, work_dir: Path, env: dict[str, str], convention: AnswerConvention) -> None:
        (state / "claude").mkdir(parents=True, exist_ok=True)

    def build_argv(self, program: list[str], state: Path, work_dir: Path) -> list[str]:
        return [*self._options_argv(program), *self.extra_args]

    def resume_argv(self, program: list[str], state: Path, work_dir: Path, session_id: str) -> list[str] | None:
        # with --model: a resumed session without it runs on Claude Code's default model
        return [*self._options_argv(program), "--resume", session_id, *self.extra_args]

    def resuming(self, events: list[dict[str, Any]]) -> ClaudeCodeAgent:
        """Itself on the model the session fell back to, when it did (see :func:`session_model`)."""
        model = session_model(events)
        return self if model is None else dataclasses.replace(self, model=model)

    def restored_events(self, state: Path, session_id: str) -> list[dict[str, Any]]:
        """The records of the session's transcript, ``projects/<folder>/<session>.jsonl`` (the
        pinned program appends each run of a session to the transcript of the work folder it
        began in, wherever it is resumed): its ``system``/``model_refusal_fallback`` records are
        its events' (camelCase), which :func:`session_model` reads."""
        name = f"{session_id}.jsonl"  # compared, never a pattern: the id comes from the agent's side
        transcripts = sorted(path for path in (state / "claude" / "projects").glob("*/*.jsonl") if path.name == name)
        return [record for transcript in transcripts for record in _cli.read_jsonl(transcript)]

    def chunk_argv(
        self, program: list[str], state: Path, max_turns: int, session_id: str | None, fork: bool
    ) -> list[str]:
        argv = self._options_argv(program, max_turns)
        if session_id is not None:
            argv += ["--resume", session_id, *(["--fork-session"] if fork else [])]
        return [*argv, *self.extra_args]

    def chunk_end(self, events: list[dict[str, Any]], exit_code: int | None) -> ChunkEnd:
        """A run that stopped on ``--max-turns`` (``result`` ``error_max_turns``, exit code 1)
        hit the limit; any other non-zero exit failed. Its turns: the model's main-loop replies
        (a reply streamed as several events is one)."""
        final: dict[str, Any] = next((event for event in reversed(events) if event.get("type") == "result"), {})
        hit_limit = final.get("subtype") == "error_max_turns"
        failed = exit_code != 0 and not hit_limit
        return ChunkEnd(len(_reply_ids(events)), hit_limit, str(final.get("result") or "") if failed else None)

    def _options_argv(self, program: list[str], max_turns: int | None = None) -> list[str]:
        argv = [
            *program,
            "--print",
            "--dangerously-skip-permissions",
            "--verbose",
            "--output-format",
            "stream-json",
        ]
        if self.include_partial_messages:
            argv.append("--include-partial-messages")
        turns = max_turns if max_turns is not None else self.max_turns
        if turns is not None:
            argv += ["--max-turns", str(int(turns))]
        if self.effort:
            argv += ["--effort", self.effort]
        settings = dict(self.settings or {})
        if self.switch_models_on_flag is not None:
            settings["switchModelsOnFlag"] = self.switch_models_on_flag
        if settings:
            argv += ["--settings", json.dumps(settings)]
        if self.system_prompt:
            argv += ["--system-prompt", self.system_prompt]
        if self.append_system_prompt:
            argv += ["--append-system-prompt", self.append_system_prompt]
        model = strip_provider(self.model, ("anthropic",))
        if model:
            argv += ["--model", model]
        return argv

    def keep_event(self, event: dict[str, Any]) -> bool:
        # Partial-message chunks (--include-partial-messages) stay in the log only.
        return event.get("type") != "stream_event"

    def summarize(self, events: list[dict[str, Any]], state: Path, work_dir: Path) -> Summary:
        summary = summarize_claude_events(events)
        summary.session_id = summary.extra.get("session_id")
        summary.extra["model_routing"] = model_routing(events, self.model, self.switch_models_on_flag)
        failure = claude_failure(events)
        summary.failures = [failure] if failure is not None else []
        return summary

    def made_progress(self, summary: Summary, events: list[dict[str, Any]]) -> bool:
        return any(_model_turn(event) for event in events)

    def failure_at_deadline(self, summary: Summary, events: list[dict[str, Any]]) -> ProviderFailure | None:
        """The failure that ended the run, or the one it was still retrying (none after a refusal)."""
        return None if summary.refusal is not None else claude_failure(events, in_flight=True)

    @classmethod
    def refusal_in(cls, events: list[dict[str, Any]]) -> RefusalVerdict | None:
        """Its stop reasons first (the refused replies come before Claude Code's own message), then
        a refusal it was still retrying when the run ended (its notice of one, or its model
        fallback, with no model reply after), then the providers' refusal texts in its replies
        and errors."""
        said: list[str] = []
        errors: list[str] = []
        retrying: RefusalVerdict | None = None  # a refusal no model reply has answered yet
        for event in events:
            kind = event.get("type")
            if _refusal_notice(event):
                retrying = verdict("anthropic", "stop_reason_refusal", _notice_text(event), said[-3:])
            elif _model_turn(event):
                retrying = None
            if kind == "assistant":
                message = mapping(event.get("message"))
                texts = blocks_text(message.get("content"))
                said.extend(texts)
                stop = message.get("stop_reason")
                if stop in ANTHROPIC_REFUSAL_STOPS:  # the refused replies came before Claude Code's own message
                    return verdict(
                        "anthropic", f"stop_reason_{stop}", " ".join(texts) or f"stop_reason {stop}", said[-3:]
                    )
            elif kind == "result":
                result = event.get("result")
                if event.get("stop_reason") in ANTHROPIC_REFUSAL_STOPS:
                    stop = event["stop_reason"]
                    return verdict("anthropic", f"stop_reason_{stop}", str(result or stop), said[-3:])
                if isinstance(result, str) and event.get("is_error"):
                    errors.append(result)
                errors.extend(str(e) for e in event.get("errors") or [] if isinstance(e, str))
        return retrying or first_text_refusal(said, errors)


#: the ``system`` events the pinned program sends when the model refused: its notice that it goes
#: on once after the refusal, its move to the fallback model, and its stop without one
_REFUSAL_EVENTS = frozenset({"model_refusal_fallback", "model_refusal_no_fallback"})
_REFUSAL_NOTICE = "safeguards stopped the response"


def _refusal_notice(event: dict[str, Any]) -> bool:
    if event.get("type") != "system":
        return False
    if event.get("subtype") in _REFUSAL_EVENTS:
        return True
    content = event.get("content")
    return event.get("subtype") == "informational" and isinstance(content, str) and _REFUSAL_NOTICE in content


def _notice_text(event: dict[str, Any]) -> str:
    explanation = _text_field(event, "api_refusal_explanation", "content")
    return explanation or f"{event.get('subtype')}: the model refused"


def _reply_ids(events: list[dict[str, Any]]) -> set[str]:
    """The model's main-loop replies (one reply may stream as several events)."""
    return {event["message"].get("id") or f"anonymous-{i}" for i, event in enumerate(events) if _model_turn(event)}


def _model_turn(event: dict[str, Any]) -> bool:
    """A main-loop assistant message the model sent (not one Claude Code made of an error)."""
    message = event.get("message")
    return (
        event.get("type") == "assistant"
        and not event.get("parent_tool_use_id")
        and isinstance(message, dict)
        and message.get("model") != SYNTHETIC_MODEL
    )


def claude_failure(events: list[dict[str, Any]], *, in_flight: bool = False) -> ProviderFailure | None:
    """The provider failure that ended a Claude Code session: its last ``result`` event's
    ``api_error``, with the ``retry_delay_ms`` of the ``api_retry`` events since the last model
    turn (of the same status) as the hint; None when the session did not end on one.
    ``in_flight``: a run with no ``result`` event (cut off) ended on the failed call Claude Code
    was still retrying, its last ``api_retry`` with no model reply after it (its status, its
    delay as the hint)."""
    ends = [i for i, event in enumerate(events) if event.get("type") == "result"]
    if not ends:
        retries = _retries_since_reply(events) if in_flight else []
        if not retries:
            return None
        return provider_failure(retries[-1].get("error_status"), retries[-1].get("error"), _delay_s(retries[-1]))
    final = events[ends[-1]]
    if final.get("terminal_reason") != "api_error":
        return None
    status = final.get("api_error_status")
    same = [retry for retry in _retries_since_reply(events[: ends[-1]]) if retry.get("error_status") == status]
    return provider_failure(status, final.get("result"), _delay_s(same[-1]) if same else None)


def _retries_since_reply(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``api_retry`` events after the model's last main-loop reply."""
    start = next((i + 1 for i in range(len(events) - 1, -1, -1) if _model_turn(events[i])), 0)
    return [event for event in events[start:] if event.get("subtype") == "api_retry"]


def _delay_s(retry: dict[str, Any]) -> float | None:
    delay_ms = amount_in(retry.get("retry_delay_ms"))
    return None if delay_ms is None else delay_ms / 1000


def model_routing(
    events: list[dict[str, Any]], requested_model: str | None, switch_models_on_flag: bool | None
) -> dict[str, Any]:
    """Claude Code's model routing as its events claim it (the gateway's count of each model's
    calls is the row's word): the model it started on (``init``), each ``model_refusal_fallback``
    (the pinned program's snake_case fields, or the camelCase ones of older programs), the model
    of its last main-loop reply (else the last fallback's, else the first), the stop reason it
    ended on, and each model's usage and cost (each run's ``result`` ``modelUsage``, added up)."""
    initial = effective = stop = None
    succeeded = False
    fallbacks: list[dict[str, str | None]] = []
    per_model: dict[str, ReportedUsage] = {}
    costs: dict[str, float] = {}
    for event in events:
        kind, subtype = event.get("type"), event.get("subtype")
        if kind == "system" and subtype == "init" and initial is None:
            initial = _text_field(event, "model")
        elif kind == "system" and subtype == "model_refusal_fallback":
            original = _text_field(event, "original_model", "originalModel")
            fallback = _text_field(event, "fallback_model", "fallbackModel")
            if original and fallback:
                fallbacks.append({
                    "original_model": original,
                    "fallback_model": fallback,
                    "trigger": _text_field(event, "trigger"),
                    "category": _text_field(event, "api_refusal_category", "apiRefusalCategory"),
                    "explanation": _text_field(event, "api_refusal_explanation", "apiRefusalExplanation"),
                })  # fmt: skip
        elif _model_turn(event):
            effective = _text_field(event["message"], "model") or effective
        elif kind == "result":
            stop = _text_field(event, "stop_reason")
            succeeded = event.get("subtype") == "success" and event.get("is_error") is False
            for model, record in mapping(event.get("modelUsage")).items():
                if isinstance(record, dict):
                    per_model.setdefault(model, ReportedUsage(cache_apart=True)).add(_model_usage(record))
                    cost = amount_in(record.get("costUSD"))
                    costs[model] = costs.get(model, 0.0) + (cost or 0.0)
    return {
        "requested_model": requested_model,
        "switch_models_on_flag": switch_models_on_flag,
        "initial_model": initial,
        "effective_model": effective or (fallbacks[-1]["fallback_model"] if fallbacks else initial),
        "fallback_occurred": bool(fallbacks),
        "fallback_recovered": bool(fallbacks) and succeeded and stop != "refusal",
        "terminal_stop_reason": stop,
        "safety_fallbacks": fallbacks,
        "per_model_usage": {
            model: {**usage.model_dump(), "cost_usd": costs[model]} for model, usage in per_model.items()
        },
    }


def session_model(events: list[dict[str, Any]]) -> str | None:
    """The model a session's last ``model_refusal_fallback`` moved it to, which it goes on with
    (None: it fell back to none): of its events, or of its transcript's records (camelCase). As
    Claude Code names the model it asks for, where its replies may name it as the provider does
    (a dated id)."""
    for event in reversed(events):
        if event.get("type") == "system" and event.get("subtype") == "model_refusal_fallback":
            model = _text_field(event, "fallback_model", "fallbackModel")
            return None if model is None or model.startswith("-") else model  # never an option of the command
    return None


def _text_field(event: dict[str, Any], *names: str) -> str | None:
    """The first of ``names`` that holds a non-empty string."""
    return next((event[name] for name in names if isinstance(event.get(name), str) and event[name]), None)


def _model_usage(record: dict[str, Any]) -> ReportedUsage:
    """One model's entry of a ``result`` event's ``modelUsage``, as it reports it (cache reads
    and writes apart)."""
    return ReportedUsage(
        input_tokens=_cli.count(record.get("inputTokens")),
        output_tokens=_cli.count(record.get("outputTokens")),
        cache_read_tokens=_cli.count(record.get("cacheReadInputTokens")),
        cache_write_tokens=_cli.count(record.get("cacheCreationInputTokens")),
        reasoning_tokens=_cli.count(record.get("thinkingTokens")),
        cache_apart=True,
    )


def _anthropic_usage(usage: dict[str, Any]) -> ReportedUsage:
    """An Anthropic usage object's counts, as it reports them (cache reads and writes apart)."""
    details = usage.get("output_tokens_details") or {}
    return ReportedUsage(
        input_tokens=_cli.count(usage.get("input_tokens")),
        output_tokens=_cli.count(usage.get("output_tokens")),
        cache_read_tokens=_cli.count(usage.get("cache_read_input_tokens")),
        cache_write_tokens=_cli.count(usage.get("cache_creation_input_tokens")),
        reasoning_tokens=_cli.count(details.get("thinking_tokens")) if isinstance(details, dict) else None,
        cache_apart=True,
    )


def summarize_claude_events(events: list[dict[str, Any]]) -> Summary:
    """Turns, tool calls, usage and cost from a Claude Code stream-json event list: of each run
    of a resumed session (each ends with its own ``result`` event), added up."""
    runs: list[list[dict[str, Any]]] = [[]]
    for event in events:
        runs[-1].append(event)
        if event.get("type") == "result":
            runs.append([])
    parts = [_summarize_run(run) for run in runs if run]
    if len(parts) <= 1:
        return parts[0] if parts else _summarize_run([])
    last = parts[-1]
    costs = [part.cost_usd for part in parts if part.cost_usd is not None]
    usage = ReportedUsage(cache_apart=True)
    for part in parts:
        usage.add(part.usage)
    return Summary(
        usage=usage,
        n_turns=sum(part.n_turns or 0 for part in parts),
        n_steps=len(_tool_ids(events)),
        cost_usd=sum(costs) if costs else None,
        cost_source=last.cost_source or next((part.cost_source for part in parts if part.cost_source), None),
        extra={**last.extra, "session_id": parts[0].extra.get("session_id") or last.extra.get("session_id")},
    )


def _tool_ids(events: list[dict[str, Any]]) -> set[str]:
    """The ids of the main loop's tool calls (a sub-agent's are its own)."""
    ids: set[str] = set()
    for e in events:
        if e.get("type") != "assistant" or e.get("parent_tool_use_id"):
            continue
        for block in (e.get("message") or {}).get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                ids.add(block.get("id") or f"anon-{len(ids)}")
    return ids


def _summarize_run(events: list[dict[str, Any]]) -> Summary:
    """The summary of one run of the program (at most one ``result`` event, its last)."""
    session_id = next((e.get("session_id") for e in events if e.get("session_id")), None)
    results = [e for e in events if e.get("type") == "result"]
    tool_ids = _tool_ids(events)
    per_message: dict[str, dict[str, Any]] = {}
    for e in events:
        msg = e.get("message") or {}
        main_loop = e.get("type") == "assistant" and not e.get("parent_tool_use_id")
        if main_loop and msg.get("id") and isinstance(msg.get("usage"), dict):
            per_message[msg["id"]] = msg["usage"]
    extra: dict[str, Any] = {"session_id": session_id}
    if results:
        final = results[-1]
        usage = _anthropic_usage(final.get("usage") or {})
        model_usage = final.get("modelUsage")
        if isinstance(model_usage, dict) and model_usage:
            # every model the run used (sub-agents, small helper models), not just the main loop's
            total = ReportedUsage(cache_apart=True)
            for record in model_usage.values():
                if isinstance(record, dict):
                    total.add(_model_usage(record))
            if total.input_tokens is not None:
                usage = total
        cost = final.get("total_cost_usd")
        extra.update(
            {
                "result_subtype": final.get("subtype"),
                "terminal_reason": final.get("terminal_reason"),
                "is_error": final.get("is_error"),
                "final_message": final.get("result"),
                "provider_usage": final.get("usage"),
            }
        )
        if final.get("api_error_status") is not None:
            extra["api_error_status"] = final.get("api_error_status")
        # a run stopped by --max-turns counts the turn it did not start: its replies are its turns
        max_turns_end = final.get("terminal_reason") == "max_turns"
        return Summary(
            usage=usage,
            n_turns=len(_reply_ids(events)) if max_turns_end else _cli.as_int(final.get("num_turns")),
            n_steps=len(tool_ids),
            cost_usd=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None,
            cost_source="provider_reported",
            extra=extra,
        )
    # No result event (killed or crashed): add up the assistant messages we saw.
    usage = ReportedUsage(cache_apart=True)
    for u in per_message.values():
        usage.add(_anthropic_usage(u))
    return Summary(usage=usage, n_turns=len(per_message), n_steps=len(tool_ids), extra=extra)


def claude_code(model: str | None = None, **options: Any) -> ClaudeCodeAgent:
    """An agent function that runs Claude Code on the task.

    ``model`` -- e.g. ``"claude-sonnet-4-5"`` (an ``anthropic/`` prefix is dropped); None uses
    Claude Code's default.  Options: ``timeout`` (s), ``base_url`` (sets
    ``ANTHROPIC_BASE_URL``), ``max_turns``, ``system_prompt``, ``append_system_prompt``,
    ``effort`` (low..max; default max, None: the program's own), ``settings`` (dict for
    ``--settings``), ``include_partial_messages``, ``switch_models_on_flag`` (Claude Code's
    ``switchModelsOnFlag``: on a refusal, go on with its fallback model, or stop; its routing is
    the metadata's ``model_routing``), ``extra_args``, ``env`` (additions), ``pass_env`` (further
    secret names to pass through),
    ``state_dir`` (keep ``CLAUDE_CONFIG_DIR`` there), ``provider_wait_s`` and
    ``provider_jitter_s`` (see :class:`~rayeval.agents._base.ProgramAgent`).

    The key comes from ``ANTHROPIC_API_KEY`` (or ``ANTHROPIC_AUTH_TOKEN``) in the environment,
    never the command line; when the provider rejects it, the session resumes with the next
    key of ``ANTHROPIC_API_KEY_FALLBACKS`` (a JSON list), which the program never sees.  The program is found through ``$RAYEVAL_CLAUDE_BIN``,
    ``<repo>/.agent-tools`` (``python scripts/install_agent_clis.py``), then ``PATH``.
    """
    return ClaudeCodeAgent(model=model, **options)
