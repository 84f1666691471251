"""The pi coding agent (``@earendil-works/pi-coding-agent``) as a rayeval agent.

Runs ``pi --mode json --print`` in the work folder with the prompt on stdin.  Its own folder
(``PI_CODING_AGENT_DIR``: settings, models, sessions) is in the private state folder, never
``~/.pi``.  A model named ``anthropic/...``, ``openrouter/...``, ``fireworks/...`` or
``openai/...`` with ``base_url`` (or ``model_config``), or one of :func:`known_models`, is
registered in that folder's ``models.json`` as a custom provider of that name, as the reference
runner does.  The JSON events are the trajectory: each model reply is a ``message_end`` whose
assistant message holds its usage and pi's cost; a failed call is an assistant message with
``stopReason: "error"`` and an ``errorMessage`` that starts with the HTTP status.  pi exits 0
after a failed call, after retrying it itself (``auto_retry_start`` events) when its settings
allow, and after a reply cut at its length limit or a compaction (the session is resumed then).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from .._json import amount_in, object_at
from ..models.failures import ProviderFailure, provider_failure
from ..models.prices import PRICING_VERSION, Price, cost_usd, find_price, shipped_prices
from ..models.types import ReportedUsage, Usage
from ..unit.prompt import AnswerConvention
from . import _cli, _tools
from ._base import AgentConfigError, ChunkEnd, ProgramAgent, Summary
from ._provider_hints import json_in_text, retry_after_from_body
from ._refusal import (
    ANTHROPIC_REFUSAL_STOPS,
    CONTENT_FILTER,
    RefusalVerdict,
    blocks_text,
    first_text_refusal,
    mapping,
    read_sidecar,
    sidecar_refusal,
    verdict,
)

__all__ = ["PROVIDER_STYLES", "PiAgent", "known_models", "pi"]


@dataclass(frozen=True)
class ProviderStyle:
    """How pi reaches a provider's endpoint: its wire protocol, default URL and key variable."""

    api: str
    base_url: str
    key_name: str


#: The providers a custom model can be registered for (``provider/model`` names).
PROVIDER_STYLES: dict[str, ProviderStyle] = {
    "anthropic": ProviderStyle("anthropic-messages", "https://api.anthropic.com", "ANTHROPIC_API_KEY"),
    "openrouter": ProviderStyle("openai-completions", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "fireworks": ProviderStyle("openai-completions", "https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY"),
    "openai": ProviderStyle("openai-completions", "https://api.openai.com/v1", "OPENAI_API_KEY"),
}
#: The key variable of each provider pi knows by itself, for the ones above and these.
BUILT_IN_KEYS = {"google": "GEMINI_API_KEY", "xai": "XAI_API_KEY"}
WIRE_APIS = ("anthropic-messages", "openai-completions", "openai-responses")
#: providers whose models pi runs only as registered here (or declared with ``model_config``):
#: the reference runner registers every one of theirs itself
REGISTERED_ONLY = ("openrouter", "fireworks")
#: pi's thinking levels, highest last; pi 0.79's highest (``xhigh``) is the provider's top
#: effort (the reference runner's ``--thinking max`` on pi 0.80)
THINKING_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh")
#: the reference runner's top level, which pi 0.79 names ``xhigh``
TOP_THINKING = "max"
#: what a reply that ends well says: the model answered, called a tool, or reached its length
#: limit (an error or an aborted call is no progress)
COMPLETED_STOPS = frozenset({"stop", "toolUse", "length"})

# Switches that keep pi off the network except for model calls (version check, telemetry,
# downloads of helper binaries).
QUIET_ENV = {"PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1", "PI_TELEMETRY": "0", "NODE_DISABLE_COMPILE_CACHE": "1"}
# Streaming deltas: in the log only (each message and tool call ends in a complete event).
STREAM_EVENTS = frozenset({"message_update", "tool_execution_update"})
#: the events that hold a whole message: pi's stream ends each with ``message_end``; its session
#: file holds each as a ``message`` entry (the reference runner reads both)
MESSAGE_EVENTS = frozenset({"message", "message_end"})


#: what pi 0.79 says in place of Anthropic's ``stop_reason: refusal`` (when the provider gave no
#: explanation) and of OpenAI's ``content_filter`` finish (pi-ai's providers/anthropic.js and
#: openai-completions.js)
PI_ANTHROPIC_REFUSAL = "The model refused to complete the request"
PI_CONTENT_FILTER = "Provider finish_reason: content_filter"


#: the refusal records a pi extension may write beside pi's own folder (``$PI_CODING_AGENT_DIR/..``,
#: ``~/.pi`` in the reference runner), one JSON object a line: ``provider``, ``raw_reason``, ``explanation``
REFUSAL_SIDECAR = "refusal_events.jsonl"

#: a pi extension that adds ``--max-turns N``: the model is called no more once N turns ended
#: without a failure (the call that would pass the limit is aborted)
MAX_TURNS_EXTENSION = """
export default function (pi) {
  pi.registerFlag("max-turns", { description: "the most model turns of this run", type: "string" });
  let completed = 0;
  pi.on("turn_end", (event) => {
    if (event.message.stopReason !== "error") completed += 1;
  });
  pi.on("before_provider_request", (_event, ctx) => {
    if (completed >= Number(pi.getFlag("max-turns"))) ctx.abort();
  });
}
"""

#: seconds a bash call that sets no timeout of its own may run (the reference runner's default)
DEFAULT_BASH_TIMEOUT_S = 300
#: a pi extension that adds ``--bash-timeout S``: a bash call that sets no timeout of its own
#: (or none above 0) is stopped after S seconds, as one that set S, and the bash tool's
#: description of its timeout says so to the model (pi's says there is no default), as the
#: reference runner's ``tool_timeout.js`` does
BASH_TIMEOUT_EXTENSION = """
export default function (pi) {
  pi.registerFlag("bash-timeout", { description: "seconds a bash call without a timeout may run", type: "string" });
  const seconds = () => Number(pi.getFlag("bash-timeout"));
  pi.on("session_start", () => {
    const timeout = pi.getAllTools().find((tool) => tool.name === "bash")?.parameters?.properties?.timeout;
    if (timeout) timeout.description = `Timeout in seconds (${seconds()}s default)`;
  });
  pi.on("tool_call", (event) => {
    const asked = event.input.timeout;
    if (event.toolName === "bash" && !(typeof asked === "number" && asked > 0)) event.input.timeout = seconds();
  });
}
"""

#: the program, pinned: the version this spec is tested with
PI = _tools.Program("pi", "@earendil-works/pi-coding-agent", "0.79.10", "RAYEVAL_PI_BIN")


@dataclass
class PiAgent(ProgramAgent):
    """See :func:`pi`."""

    thinking: str = THINKING_LEVELS[-1]
    system_prompt: str | None = None
    append_system_prompt: str | None = None
    api: str | None = None
    model_config: dict[str, Any] | None = None
    settings: dict[str, Any] | None = None
    bash_timeout_s: float | None = DEFAULT_BASH_TIMEOUT_S

    option_help: ClassVar[dict[str, str]] = {
        **ProgramAgent.option_help,
        "thinking": "the model's thinking: off, minimal, low, medium, high or xhigh (the highest, by default; max: xhigh)",
        "system_prompt": "replaces pi's system prompt",
        "append_system_prompt": "appended to pi's system prompt",
        "api": "the custom model's protocol: anthropic-messages, openai-completions or openai-responses",
        "model_config": "fields of the custom model's entry in pi's models.json (contextWindow, maxTokens, cost...)",
        "settings": "pi's settings.json, as a JSON object",
        "bash_timeout_s": "seconds a bash call that sets no timeout of its own may run (default 300; null: no limit)",
    }

    harness: ClassVar[str] = "pi"
    description: ClassVar[str] = "the pi coding agent (the provider's key), the unit's model as provider/model"
    tool: ClassVar[_tools.Program | None] = PI
    key_names: ClassVar[tuple[str, ...]] = (
        *(style.key_name for style in PROVIDER_STYLES.values()), *BUILT_IN_KEYS.values(),
    )  # fmt: skip
    key_fallbacks: ClassVar[tuple[str, str] | None] = ("ANTHROPIC_API_KEY_FALLBACKS", "ANTHROPIC_API_KEY")
    hidden_values: ClassVar[tuple[str, ...]] = ("--system-prompt", "--append-system-prompt")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.thinking == TOP_THINKING:
            self.thinking = THINKING_LEVELS[-1]
        if self.thinking not in THINKING_LEVELS:
            levels = ", ".join(THINKING_LEVELS)
            raise AgentConfigError(f"thinking must be one of {levels} or {TOP_THINKING}, got {self.thinking!r}")
        seconds = self.bash_timeout_s
        if seconds is not None and (
            isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < math.inf
        ):
            raise AgentConfigError(f"bash_timeout_s must be a number of seconds above 0 or null, got {seconds!r}")
        if self.api is not None and self.api not in WIRE_APIS:
            raise AgentConfigError(f"api must be one of {', '.join(WIRE_APIS)}, got {self.api!r}")
        for option in ("model_config", "settings"):
            if getattr(self, option) is not None and not isinstance(getattr(self, option), dict):
                raise AgentConfigError(f"{option} must be a JSON object")
        if self.custom_model and self.provider not in PROVIDER_STYLES:
            styles = ", ".join(f"{name}/..." for name in PROVIDER_STYLES)
            raise AgentConfigError(
                f"pi registers a custom model (base_url, model_config, api) for a model named {styles}; "
                f"got {self.model!r}"
            )
        if self.provider in REGISTERED_ONLY and self.pi_model not in known_models() and not self.model_config:
            known = ", ".join(name for name in known_models() if name.startswith(f"{self.provider}/"))
            raise AgentConfigError(
                f"pi is known to work with these {self.provider} models: {known}; got {self.model!r} "
                "(model_config declares another one: its contextWindow, maxTokens, cost, compat...)"
            )

    # ---------------------------------------------------------------- the model
    @property
    def pi_model(self) -> str | None:
        """The model as pi names it (``gemini/...`` is pi's ``google/...``)."""
        if self.model is not None and self.model.startswith("gemini/"):
            return "google/" + self.model.removeprefix("gemini/")
        return self.model

    @property
    def provider(self) -> str | None:
        name = self.pi_model
        return name.partition("/")[0] if name and "/" in name else None

    @property
    def custom_model(self) -> bool:
        return bool(self.base_url or self.model_config or self.api or self.pi_model in known_models())

    def models_json(self) -> dict[str, Any]:
        """pi's ``models.json``: the custom provider that serves the model, its entry the
        known model's (:func:`known_models`) with ``model_config`` on top."""
        provider = self.provider or ""
        style = PROVIDER_STYLES[provider]
        model_id = (self.pi_model or "").partition("/")[2]
        known = known_models().get(self.pi_model or "", {})
        entry = {"id": model_id, "name": model_id, **known, **(self.model_config or {})}
        config = {
            "baseUrl": (self.base_url or style.base_url).rstrip("/"),
            "apiKey": "$" + style.key_name,  # pi reads the variable: the key is in no file
            "api": self.api or style.api,
            "models": [entry],
        }
        return {"providers": {provider: config}}

    def fallback_variable(self) -> str | None:
        """Fallback keys are Anthropic keys: they stand in for a model served by Anthropic."""
        return "ANTHROPIC_API_KEY" if self.needed_key() == "ANTHROPIC_API_KEY" else None

    def needed_key(self) -> str | None:
        """The key variable of the model's provider (None: pi's default model, or a provider
        whose key rayeval does not know: any of ``key_names``)."""
        provider = self.provider or ""
        if provider in PROVIDER_STYLES:
            return PROVIDER_STYLES[provider].key_name
        return BUILT_IN_KEYS.get(provider)

    # ---------------------------------------------------------------- the program
    def program_env(self, state: Path, work_dir: Path) -> dict[str, str]:
        return {**QUIET_ENV, "PI_CODING_AGENT_DIR": str(state / "pi" / "agent")}

    def check_env(self, env: dict[str, str]) -> None:
        needed = self.needed_key()
        if needed is None:
            if not any(env.get(name) for name in self.key_names):
                raise AgentConfigError(f"pi needs a provider's key in the environment ({', '.join(self.key_names)})")
            return
        if not env.get(needed):
            raise AgentConfigError(f"pi with model {self.model!r} needs {needed} in the environment")
        for name in self.key_names:  # the program sees its provider's key only
            if name != needed:
                env.pop(name, None)

    def prepare(self, state: Path, work_dir: Path, env: dict[str, str], convention: AnswerConvention) -> None:
        agent_dir = state / "pi" / "agent"
        agent_dir.mkdir(parents=True, exist_ok=True)
        if self.custom_model:
            (agent_dir / "models.json").write_text(json.dumps(self.models_json(), indent=2))
        if self.settings:
            (agent_dir / "settings.json").write_text(json.dumps(self.settings, indent=2))
        if self.bash_timeout_s is not None:
            (state / "pi" / "bash_timeout.js").write_text(BASH_TIMEOUT_EXTENSION)

    def _options(self, program: list[str], state: Path) -> list[str]:
        argv = [*program, "--mode", "json", "--print"]
        if self.bash_timeout_s is not None:  # its extension is written by :meth:`prepare`
            argv += ["--extension", str(state / "pi" / "bash_timeout.js"), "--bash-timeout", str(self.bash_timeout_s)]
        if self.pi_model:
            argv += ["--model", self.pi_model]
        argv += ["--thinking", self.thinking]
        if self.system_prompt:
            argv += ["--system-prompt", self.system_prompt]
        if self.append_system_prompt:
            argv += ["--append-system-prompt", self.append_system_prompt]
        return argv + list(self.extra_args)

    def build_argv(self, program: list[str], state: Path, work_dir: Path) -> list[str]:
        return self._options(program, state)

    def resume_argv(self, program: list[str], state: Path, work_dir: Path, session_id: str) -> list[str] | None:
        return [*self._options(program, state), "--session", session_id]

    def adopt_session(self, state: Path, work_dir: Path, session_id: str) -> None:
        """pi files a session under its working folder (``sessions/--<path, / as ->--``), and
        asks before going on with one filed under another or whose header names a working
        folder that is gone: the restored session's file moves to this work folder's, its
        header naming it."""
        sessions = state / "pi" / "agent" / "sessions"
        here = sessions / f"--{re.sub(r'[/:]', '-', str(work_dir).removeprefix('/'))}--"
        for found in list(sessions.glob(f"*/*_{session_id}.jsonl")):
            lines = found.read_text().splitlines(keepends=True)
            with contextlib.suppress(ValueError, IndexError):
                header = json.loads(lines[0])
                if isinstance(header, dict) and header.get("type") == "session":
                    lines[0] = json.dumps({**header, "cwd": str(work_dir)}) + "\n"
            here.mkdir(parents=True, exist_ok=True)
            (here / found.name).write_text("".join(lines))
            if found.parent != here:
                found.unlink()

    def chunk_argv(
        self, program: list[str], state: Path, max_turns: int, session_id: str | None, fork: bool
    ) -> list[str]:
        """pi has no turn limit of its own: an extension (written into ``state``) adds one."""
        extension = state / "pi" / "max_turns.js"
        extension.write_text(MAX_TURNS_EXTENSION)
        argv = [*self._options(program, state), "--extension", str(extension), "--max-turns", str(max_turns)]
        if session_id is not None:
            argv += ["--fork" if fork else "--session", session_id]
        return argv

    def chunk_end(self, events: list[dict[str, Any]], exit_code: int | None) -> ChunkEnd:
        """pi exits 0 after a failed call: the last turn's stop reason tells. A turn aborted by
        the turn limit, or a reply cut at its length limit, is no natural end (the limit was
        hit); its turns are the ones that neither failed nor were aborted."""
        turn_ends = [mapping(event.get("message")) for event in events if event.get("type") == "turn_end"]
        last = turn_ends[-1] if turn_ends else {}
        failed = exit_code != 0 or last.get("stopReason") == "error"
        turns = sum(message.get("stopReason") not in ("error", "aborted") for message in turn_ends)
        error = str(last.get("errorMessage") or "") if failed else None
        return ChunkEnd(turns, last.get("stopReason") in ("aborted", "length"), error)

    def keep_event(self, event: dict[str, Any]) -> bool:
        return event.get("type") not in STREAM_EVENTS

    def made_progress(self, summary: Summary, events: list[dict[str, Any]]) -> bool:
        """A reply that ended well (:data:`COMPLETED_STOPS`); an aborted one is no progress."""
        return any(message.get("stopReason") in COMPLETED_STOPS for message in _assistant_replies(events))

    def cut_short(self, events: list[dict[str, Any]]) -> bool:
        """Whether pi ended its run on a reply cut at its length limit, or after a compaction
        that was not aborted: the latest of the two decides, a later reply does not."""
        for event in reversed(events):
            if event.get("type") == "compaction_end":
                return event.get("aborted") is not True
            message = mapping(event.get("message"))
            if message.get("role") == "assistant" and message.get("stopReason") == "length":
                return True
        return False

    def summarize(self, events: list[dict[str, Any]], state: Path, work_dir: Path) -> Summary:
        summary = summarize_pi_events(events)
        if summary.cost_usd is None and (cost := table_cost(self.pi_model, summary.usage)) is not None:
            summary.cost_usd, summary.cost_source = cost, "rayeval_price_table"  # pi reported none
        elif summary.cost_usd is not None and "cost" in (self.model_config or {}):
            summary.cost_source = "configured_prices"  # pi priced the calls with the given prices
        elif (
            summary.cost_usd is not None and self.custom_model and "cost" in known_models().get(self.pi_model or "", {})
        ):
            summary.cost_source = "rayeval_price_table"  # with the price table's prices
        if summary.cost_source == "rayeval_price_table":
            summary.extra["pricing_version"] = PRICING_VERSION
        sidecar = read_sidecar(state / "pi" / REFUSAL_SIDECAR)
        if sidecar:  # an extension's word on a refusal comes before the events'
            summary.refusal = sidecar_refusal(sidecar)
        return summary

    @classmethod
    def refusal_in(cls, events: list[dict[str, Any]]) -> RefusalVerdict | None:
        """pi maps a provider's refusal to ``stopReason: error`` (its own stop reasons have no
        refusal), so its assistant messages' texts and ``errorMessage`` are what tell one."""
        said: list[str] = []
        errors: list[str] = []
        for event in events:
            message = mapping(event.get("message"))
            if event.get("type") not in MESSAGE_EVENTS or message.get("role") != "assistant":
                continue
            texts = blocks_text(message.get("content"), ("text",))
            said.extend(texts)
            stop = message.get("stopReason")
            if stop == CONTENT_FILTER:
                return verdict("openai", CONTENT_FILTER, " ".join(texts) or f"stopReason {stop}", texts)
            if stop in ANTHROPIC_REFUSAL_STOPS:
                return verdict("anthropic", f"stop_reason_{stop}", " ".join(texts) or f"stopReason {stop}", texts)
            error = message.get("errorMessage")
            if stop == "error" and error == PI_ANTHROPIC_REFUSAL:
                return verdict("anthropic", "stop_reason_refusal", error, texts)
            if stop == "error" and error == PI_CONTENT_FILTER:
                return verdict("openai", CONTENT_FILTER, error, texts)
            if isinstance(error, str):
                errors.append(error)
        return first_text_refusal(said, errors)


# -------------------------------------------------------------------------- events
def _assistant_replies(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    replies = []
    for event in events:
        message = event.get("message")
        if event.get("type") in MESSAGE_EVENTS and isinstance(message, dict) and message.get("role") == "assistant":
            replies.append(message)
    return replies


def _add_usage(total: ReportedUsage, usage: dict[str, Any]) -> None:
    total.input_tokens = _cli.add(total.input_tokens, usage.get("input"))  # the cache apart, as pi counts
    total.output_tokens = _cli.add(total.output_tokens, usage.get("output"))
    total.cache_read_tokens = _cli.add(total.cache_read_tokens, usage.get("cacheRead"))
    total.cache_write_tokens = _cli.add(total.cache_write_tokens, usage.get("cacheWrite"))
    total.reasoning_tokens = _cli.add(total.reasoning_tokens, usage.get("reasoning"))


def summarize_pi_events(events: list[dict[str, Any]]) -> Summary:
    """Usage, cost, turns (completed model replies), steps (tool calls), the session and the
    provider failures from ``pi --mode json`` events.  ``failures`` are the failed calls since
    the last completed reply: the ones the session ended on when it ended without an answer."""
    session_id = next((e.get("id") for e in events if e.get("type") == "session" and e.get("id")), None)
    usage, cost, priced = ReportedUsage(cache_apart=True), 0.0, False
    turns, tool_calls = 0, set[str]()
    failures: list[ProviderFailure] = []
    for message in _assistant_replies(events):
        if isinstance(message.get("usage"), dict):
            _add_usage(usage, message["usage"])
            total = amount_in(object_at(message["usage"], "cost").get("total"))
            if total is not None:  # a reported 0 too: pi's, for a model it has no prices of
                cost, priced = cost + total, True
        if message.get("stopReason") == "error":  # a failure without a status: not the provider's
            failure = failure_from_error(message.get("errorMessage"))
            failures = [*failures, failure] if failure is not None else []
            continue
        if message.get("stopReason") == "aborted":  # a call stopped before or while it was made
            continue
        turns, failures = turns + 1, []
        for block in message.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "toolCall":
                tool_calls.add(block.get("id") or f"anonymous-{len(tool_calls)}")
    retries = [e for e in events if e.get("type") == "auto_retry_start"]
    extra: dict[str, Any] = {
        "session_id": session_id,
        "program_retry_count": len(retries),
        "program_retry_wait_s": sum(_cli.as_int(e.get("delayMs")) or 0 for e in retries) / 1000,
    }
    return Summary(
        usage=usage,
        n_turns=turns,
        n_steps=len(tool_calls),
        cost_usd=round(cost, 10) if priced else None,
        cost_source="provider_reported" if priced else None,
        extra=extra,
        session_id=session_id,
        failures=failures,
    )


# -------------------------------------------------------------------------- failures
_STATUS_PREFIX = re.compile(r"^\s*([1-5][0-9]{2})(?=[:\s]|$)")


def failure_from_error(error_message: Any) -> ProviderFailure | None:
    """A failed call from pi's ``errorMessage``: ``"<status> <provider's body>"`` (a body cut
    short gives no hint; text after it is ignored); the body's ``code`` when no status leads.
    None when it gives no HTTP status ("Connection error.", "Invalid model configuration"):
    no provider's failure, as the reference runner reads it."""
    text = error_message if isinstance(error_message, str) else ""
    body = json_in_text(text)
    payload = body if isinstance(body, dict) else {}
    prefix = _STATUS_PREFIX.match(text)
    status: Any = int(prefix[1]) if prefix else payload.get("code")
    if status is None:
        status = object_at(payload, "error").get("code")
    failure = provider_failure(status, text, retry_after_from_body(payload))
    return failure if failure.status is not None else None


@cache
def known_models() -> dict[str, dict[str, Any]]:
    """The models pi is known to work with, by ``provider/model``: their ``models.json`` entry
    (``pi_models.json``: context window, output limit, thinking map, compat flags) with the
    price table's prices as pi's ``cost`` (USD per million tokens)."""
    listed = json.loads(resources.files(__package__).joinpath("pi_models.json").read_text())
    known = {}
    for name, entry in listed.items():
        price = find_price(shipped_prices(), name)
        if price is not None:
            entry["cost"] = pi_cost(price)
        known[name] = entry
    return known


def pi_cost(price: Price) -> dict[str, float]:
    """A price of the table as pi's ``cost`` of a model (USD per million tokens; a cache price
    the table has not: 0)."""
    return {"input": price.input, "output": price.output,
            "cacheRead": price.cache_read or 0.0, "cacheWrite": price.cache_write or 0.0}  # fmt: skip


def table_cost(model: str | None, usage: ReportedUsage) -> float | None:
    """What calls of ``model`` with ``usage`` (as pi reports it) cost at the price table's prices,
    by the one rule (:func:`~rayeval.models.prices.cost_usd`: cache reads and writes at their own
    prices); None when the table has no price or the tokens are unknown."""
    price = find_price(shipped_prices(), model) if model else None
    cost = cost_usd(price, Usage.model_validate(usage.as_dict()))
    return None if cost is None else round(cost, 10)


def pi(model: str | None = None, **options: Any) -> PiAgent:
    """An agent function that runs the pi coding agent on the task.

    ``model`` -- ``provider/id`` as pi names it, e.g. ``"anthropic/claude-sonnet-4-5"``,
    ``"openrouter/moonshotai/kimi-k3"`` (``gemini/...`` is pi's ``google/...``); None uses
    pi's default.  Options: ``timeout`` (s), ``base_url`` (the provider's endpoint: the model
    becomes a custom model of an ``anthropic``, ``openrouter``, ``fireworks`` or ``openai``
    provider in pi's ``models.json``), ``model_config`` (fields of that model entry:
    ``contextWindow``, ``maxTokens``, ``reasoning``, ``cost`` in USD per million tokens,
    ``compat``, ...; on top of a known model's entry, :func:`known_models`; an ``openrouter/``
    or ``fireworks/`` model pi is not known to work with needs it), ``api`` (its wire protocol:
    ``anthropic-messages``, ``openai-completions``, ``openai-responses``), ``thinking`` (off,
    minimal, low, medium, high, xhigh: the default, pi 0.79's highest, which ``max`` gives
    too), ``bash_timeout_s`` (seconds a bash call that sets no timeout may run: 300; None: no
    limit), ``system_prompt``, ``append_system_prompt``, ``settings`` (pi's ``settings.json``,
    e.g. ``{"retry": {"enabled": false}}``), ``extra_args``, ``env``, ``pass_env``,
    ``state_dir`` (keep pi's folder there).

    The key comes from the provider's variable (``ANTHROPIC_API_KEY``, ``OPENROUTER_API_KEY``,
    ``FIREWORKS_API_KEY``, ``OPENAI_API_KEY``, ``GEMINI_API_KEY``, ``XAI_API_KEY``) in the
    environment; pi sees that one only.  The program is found through ``$RAYEVAL_PI_BIN``,
    ``<repo>/.agent-tools`` (``python scripts/install_agent_clis.py``), then ``PATH``.
    """
    return PiAgent(model=model, **options)
