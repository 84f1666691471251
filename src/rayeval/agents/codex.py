"""OpenAI Codex CLI (``@openai/codex``) as a rayeval agent.

Runs ``codex exec --json --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check -``
in the work folder with the prompt on stdin and a private ``CODEX_HOME`` whose
``config.toml`` turns off update checks and analytics and, with ``base_url``, points a custom
model provider at that endpoint.  The ``--json`` events are the trajectory; after the run the
session file in ``CODEX_HOME/sessions`` supplies per-response token counts and the reasoning
items the event stream leaves out.

What the pinned Codex (0.171.0) reports when the provider fails, as found by running it against
the scripted model server (``tests/agents/test_program_failures.py`` checks it still does):

* A failed model call ends the turn with ``{"type": "error", "message": M}`` then
  ``{"type": "turn.failed", "error": {"message": M}}``, and the program exits with code 1.  Each
  reconnect before that is ``{"type": "error", "message": "Reconnecting... n/N (M)"}``.
* ``M`` is ``unexpected status N <reason>: <the body's error.message, or the body>, url: <url>``
  for most statuses (401, 403, 408, 502, 503, 504, 529 seen); for 429 it is ``exceeded retry
  limit, last status: 429 Too Many Requests`` (the body dropped) and for 500 ``We're currently
  experiencing high demand, ...`` (status and body dropped).  The session file's
  ``task_complete`` record keeps the same message with ``codex_error_info``:
  ``{"http_connection_failed" | "response_too_many_failed_attempts": {"http_status_code": N}}``,
  or a name (``"internal_server_error"`` for the 500).
* Codex honours ``Retry-After`` between its own reconnects but reports it nowhere: a Codex
  failure's hint is only what the body in ``M`` says (Google's ``retryDelay``).
* It retries by itself: ``request_max_retries`` (default 4) per request for 5xx statuses, and
  ``stream_max_retries`` (default 5) reconnects for any status but a 429 without ``Retry-After``.
  With the defaults a 5xx storm is 30 requests over about 25 s; a 429 with ``Retry-After: H`` is
  6 requests H apart; a 401 is 6 requests.  With ``base_url`` the custom provider's table bounds
  both to :data:`REQUEST_MAX_RETRIES` and :data:`STREAM_MAX_RETRIES` (at most 4 requests, about
  a second), so a storm ends the program and the resume loop waits, within its budget, instead
  (the ``config`` option may set them otherwise).  The built-in ``openai`` provider cannot be
  configured so (Codex refuses to start), and keeps the defaults.
* ``codex exec resume [OPTIONS] <SESSION_ID> -`` goes on with the thread (same thread id, same
  session file) with the prompt from stdin; it has no ``--color`` option.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from .._json import object_at
from ..models.failures import ProviderFailure, provider_failure
from ..models.prices import PRICING_VERSION, Price, cost_usd, find_price, shipped_prices
from ..models.types import ReportedUsage
from ..unit.prompt import AnswerConvention
from . import _cli, _tools
from ._base import AgentConfigError, ProgramAgent, Summary, strip_provider
from ._provider_hints import retry_after_from_body
from ._refusal import CONTENT_FILTER, RefusalVerdict, first_text_refusal, mapping, strings_in, verdict

__all__ = ["CodexAgent", "codex"]

PROVIDER_ID = "rayeval"

#: Codex's own retries of a failed model request and reconnects of a failed stream, with
#: ``base_url`` (see the module's docstring)
REQUEST_MAX_RETRIES = 1
STREAM_MAX_RETRIES = 1
RECONNECTING = re.compile(r"^Reconnecting\.\.\. \d+/\d+ \((?P<message>.*)\)$", re.DOTALL)
STATUS_IN_MESSAGE = re.compile(r"(?:unexpected status|last status:) (?P<status>[1-5]\d\d)\b")
#: ``codex_error_info`` names that stand for a status (the message then has none): a 500 was
#: seen as ``internal_server_error``; the others are taken at their names' word
STATUS_OF_ERROR_NAME = {"internal_server_error": 500, "server_overloaded": 529, "unauthorized": 401}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise AgentConfigError(f"cannot write {value!r} to config.toml")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise AgentConfigError(f"cannot write {type(value).__name__} to config.toml")


def _toml_key(key: str) -> str:
    if key and all(c.isalnum() or c in "-_" for c in key):
        return key
    return json.dumps(key)


def to_toml(config: dict[str, Any]) -> str:
    """A small TOML writer for nested dicts of scalars and lists (enough for codex's config)."""
    lines: list[str] = []

    def table(prefix: list[str], mapping: dict[str, Any]) -> None:
        scalars = {k: v for k, v in mapping.items() if not isinstance(v, dict)}
        tables = {k: v for k, v in mapping.items() if isinstance(v, dict)}
        if prefix and (scalars or not tables):
            lines.append("[" + ".".join(_toml_key(p) for p in prefix) + "]")
        for k, v in scalars.items():
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
        if scalars:
            lines.append("")
        for k, v in tables.items():
            table([*prefix, k], v)

    table([], config)
    return "\n".join(lines).rstrip() + "\n"


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


#: the program, pinned: the version this spec is tested with
CODEX = _tools.Program("codex", "@openai/codex", "0.171.0", "RAYEVAL_CODEX_BIN", native_binary="codex")


@dataclass
class CodexAgent(ProgramAgent):
    """See :func:`codex`."""

    reasoning_effort: str | None = None
    config: dict[str, Any] | None = None
    prices: tuple[float, float, float] | None = None
    wire_api: str = "responses"

    option_help: ClassVar[dict[str, str]] = {
        **ProgramAgent.option_help,
        "reasoning_effort": "the model's reasoning effort (minimal, low, medium, high)",
        "config": "more of Codex's config.toml, as a JSON object",
        "prices": "USD per million input, cached input and output tokens, for a model not in the table",
        "wire_api": "the protocol its calls speak: responses or chat",
    }

    harness: ClassVar[str] = "codex"
    description: ClassVar[str] = "OpenAI's Codex program (OPENAI_API_KEY or CODEX_API_KEY), the unit's model"
    tool: ClassVar[_tools.Program | None] = CODEX
    key_names: ClassVar[tuple[str, ...]] = ("OPENAI_API_KEY", "CODEX_API_KEY")
    model_api = "openai"
    config_names: ClassVar[tuple[str, ...]] = ("OPENAI_BASE_URL",)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._price()  # a bad ``prices`` stops the run at its start, not each unit at its end

    @classmethod
    def make(cls, model: str | None = None, **options: Any) -> CodexAgent:
        """As the base's; it has no turn limit to take."""
        if "max_turns" in options or "step_limit" in options:
            raise AgentConfigError("codex exec has no turn limit; use timeout instead")
        return cls(model=model, **options)

    @property
    def bare_model(self) -> str | None:
        return strip_provider(self.model, ("openai",))

    def program_env(self, state: Path, work_dir: Path) -> dict[str, str]:
        env = {"CODEX_HOME": str(state / "codex"), "NO_COLOR": "1"}
        return env

    def check_env(self, env: dict[str, str]) -> None:
        # `codex exec` reads CODEX_API_KEY; a custom provider reads OPENAI_API_KEY.  Give it both,
        # in the child's environment only (the reference mutated os.environ).
        if env.get("OPENAI_API_KEY") and not env.get("CODEX_API_KEY"):
            env["CODEX_API_KEY"] = env["OPENAI_API_KEY"]
        elif env.get("CODEX_API_KEY") and not env.get("OPENAI_API_KEY"):
            env["OPENAI_API_KEY"] = env["CODEX_API_KEY"]
        if not env.get("CODEX_API_KEY"):
            raise AgentConfigError("codex needs OPENAI_API_KEY or CODEX_API_KEY in the environment")

    def codex_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "check_for_update_on_startup": False,
            "analytics": {"enabled": False},
            # The curated-plugin sync reaches github.com and chatgpt.com on every start.
            "features": {"plugins": False},
        }
        if self.reasoning_effort:
            config["model_reasoning_effort"] = self.reasoning_effort
        if self.base_url:
            config["model_provider"] = PROVIDER_ID
            config["model_providers"] = {
                PROVIDER_ID: {
                    "name": "rayeval endpoint",
                    "base_url": self.base_url.rstrip("/"),
                    "env_key": "OPENAI_API_KEY",
                    "wire_api": self.wire_api,
                    "request_max_retries": REQUEST_MAX_RETRIES,
                    "stream_max_retries": STREAM_MAX_RETRIES,
                }
            }
        if self.config:
            config = _merge(config, self.config)
        return config

    def prepare(self, state: Path, work_dir: Path, env: dict[str, str], convention: AnswerConvention) -> None:
        home = state / "codex"
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(to_toml(self.codex_config()))

    def build_argv(self, program: list[str], state: Path, work_dir: Path) -> list[str]:
        return [*program, "exec", *self._exec_options(), "--color", "never", *self.extra_args, "-"]

    def resume_argv(self, program: list[str], state: Path, work_dir: Path, session_id: str) -> list[str] | None:
        """``codex exec resume``: the same thread, ``CODEX_HOME`` and model; the prompt on stdin."""
        return [*program, "exec", "resume", *self._exec_options(), *self.extra_args, session_id, "-"]

    def _exec_options(self) -> list[str]:
        options = ["--json", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check"]
        return [*options, "--model", self.bare_model] if self.bare_model else options

    def summarize(self, events: list[dict[str, Any]], state: Path, work_dir: Path) -> Summary:
        """Codex reports no cost: ``cost_usd`` is computed from the price table's ``openai/``
        prices (cached input at its ``cache_read`` price, else the input price; ``cost_source``
        says so) or from the ``prices`` option, and is None for other models."""
        summary = summarize_codex_events(events, state / "codex")
        cost = cost_usd(self._price(), summary.usage)  # OpenAI's input_tokens hold the cached ones
        if cost is not None:
            summary.cost_usd = round(cost, 8)
            summary.cost_source = "configured_prices" if self.prices else "rayeval_price_table"
            summary.extra["pricing_version"] = PRICING_VERSION
        return summary

    def _price(self) -> Price | None:
        """The ``prices`` option's (input, cached input, output), else the price table's price
        of the model (None: neither)."""
        if self.prices is None:
            return find_price(shipped_prices(), f"openai/{self.bare_model}") if self.bare_model else None
        try:
            price_in, cached, price_out = self.prices
            return Price(input=price_in, output=price_out, cache_read=cached)
        except (TypeError, ValueError) as exc:  # a ValidationError is a ValueError
            raise AgentConfigError(
                f"prices must be three USD prices per million tokens (input, cached input, output), not {self.prices!r}"
            ) from exc

    @classmethod
    def refusal_in(cls, events: list[dict[str, Any]]) -> RefusalVerdict | None:
        """Codex drops OpenAI's refusal parts; a filtered reply is an incomplete response, which it
        retries (``Reconnecting... n/N`` errors, not the run's end) before the turn fails. A failed
        turn's error decides, then a filtered reply it was still retrying when the run ended (no
        turn's end and no tool run after it), then the providers' refusal texts."""
        said: list[str] = []
        errors: list[str] = []
        retrying: RefusalVerdict | None = None  # a filtered reply no accepted reply has followed yet
        for event in events:
            kind = event.get("type")
            item = mapping(event.get("item"))
            reconnecting = RECONNECTING.match(str(event.get("message"))) if kind == "error" else None
            if reconnecting is not None:
                if CONTENT_FILTER in reconnecting["message"].lower():
                    retrying = verdict("openai", CONTENT_FILTER, reconnecting["message"], said[-1:])
            elif kind in ("turn.completed", "item.started"):  # the reply was taken: a tool runs
                retrying = None
            elif kind == "item.completed" and item.get("type") == "agent_message":
                said.extend(strings_in(item.get("text")))
            elif kind == "turn.failed" or (
                kind == "error" and not str(event.get("message")).startswith("Reconnecting")
            ):
                error = event.get("error")
                errors.extend(strings_in(error) if error is not None else strings_in(event.get("message")))
        for text in errors:
            if CONTENT_FILTER in text.lower():
                return verdict("openai", CONTENT_FILTER, text, said[-1:] or [text])
        return retrying or first_text_refusal(said, errors)


def _sidecar_files(codex_home: Path, thread_id: str | None) -> list[Path]:
    sessions = codex_home / "sessions"
    if not sessions.is_dir():
        return []
    files = sorted(sessions.rglob("*.jsonl"))
    if thread_id:
        files = [f for f in files if thread_id in f.name] or files
    return files


def summarize_codex_events(events: list[dict[str, Any]], codex_home: Path | None = None) -> Summary:
    """Turns, tool calls and usage from ``codex exec --json`` events plus the session file.

    Turns are model calls (the session file's responses; without it, the events' ``turn.completed``,
    which are the prompts answered, kept as ``codex_turns``: latch-eval-tools' turn count). Steps
    are, as latch-eval-tools counts them, the session file's ``function_call`` records (a
    ``custom_tool_call``, the freeform ``apply_patch``, is none); without it, the events'
    commands, file changes, MCP calls and web searches."""
    thread_id = next((e.get("thread_id") for e in events if e.get("type") == "thread.started"), None)
    usage = ReportedUsage()
    user_turns = 0
    steps = 0
    errors: list[str] = []
    for e in events:
        kind = e.get("type")
        if kind == "turn.completed":
            user_turns += 1
            u = e.get("usage") or {}
            usage.input_tokens = _cli.add(usage.input_tokens, u.get("input_tokens"))
            usage.cache_read_tokens = _cli.add(usage.cache_read_tokens, u.get("cached_input_tokens"))
            usage.cache_write_tokens = _cli.add(usage.cache_write_tokens, u.get("cache_write_input_tokens"))
            usage.output_tokens = _cli.add(usage.output_tokens, u.get("output_tokens"))
            usage.reasoning_tokens = _cli.add(usage.reasoning_tokens, u.get("reasoning_output_tokens"))
        elif kind == "item.completed":
            item = e.get("item") or {}
            if item.get("type") in ("command_execution", "file_change", "mcp_tool_call", "web_search"):
                steps += 1
        elif kind in ("turn.failed", "error"):
            err = object_at(e, "error")
            errors.append(str(err.get("message") or e.get("message") or kind))
    extra: dict[str, Any] = {"thread_id": thread_id, "codex_turns": user_turns}
    if errors:
        extra["errors"] = errors[-5:]
    trajectory = list(events)
    n_turns: int | None = None

    # The session file knows each model response and function call: count them, and take the
    # final token total.
    response_ids: list[str] = []
    function_calls = 0
    last_total: dict[str, Any] | None = None
    sidecar_reasoning: list[dict[str, Any]] = []
    error_infos: dict[str, Any] = {}  # a failed turn's message -> its codex_error_info
    sidecar_files = _sidecar_files(codex_home, thread_id) if codex_home is not None else []
    for path in sidecar_files:
        for rec in _cli.read_jsonl(path):
            payload = object_at(rec, "payload")
            rtype = rec.get("type")
            if rtype == "token_usage_record" and payload.get("response_id"):
                if payload["response_id"] not in response_ids:
                    response_ids.append(payload["response_id"])
            elif rtype == "event_msg" and payload.get("type") == "token_count":
                info = payload.get("info") or {}
                if isinstance(info, dict) and isinstance(info.get("total_token_usage"), dict):
                    last_total = info["total_token_usage"]
            elif rtype == "response_item" and payload.get("type") == "function_call":
                function_calls += 1
            elif rtype == "response_item" and payload.get("type") == "reasoning":
                sidecar_reasoning.append({"type": "reasoning", "source": "codex_sidecar", "item": payload})
            elif rtype == "event_msg" and payload.get("type") == "task_complete":
                error = object_at(payload, "error")
                if isinstance(error.get("message"), str):
                    error_infos[error["message"]] = error.get("codex_error_info")
    if codex_home is not None:
        extra["sidecar_files"] = len(sidecar_files)
    if sidecar_files:
        steps = function_calls
    if response_ids:
        n_turns = len(response_ids)
    if last_total is not None:
        usage = ReportedUsage(
            input_tokens=_cli.count(last_total.get("input_tokens")),
            output_tokens=_cli.count(last_total.get("output_tokens")),
            cache_read_tokens=_cli.count(last_total.get("cached_input_tokens")),
            cache_write_tokens=_cli.count(last_total.get("cache_write_input_tokens")),
            reasoning_tokens=_cli.count(last_total.get("reasoning_output_tokens")),
        )
    if n_turns is None:
        n_turns = user_turns or None
    trajectory.extend(sidecar_reasoning)
    return Summary(
        usage=usage,
        n_turns=n_turns,
        n_steps=steps,
        trajectory=trajectory,
        extra=extra,
        session_id=thread_id if isinstance(thread_id, str) and thread_id else None,
        failures=codex_failures(events, error_infos),
    )


def codex_failures(events: list[dict[str, Any]], error_infos: dict[str, Any] | None = None) -> list[ProviderFailure]:
    """The provider failures in ``codex exec --json`` events: each ``turn.failed``, and the
    failure a last ``Reconnecting...`` error names (the program was stopped while it retried).

    ``error_infos`` maps a failure's message to the ``codex_error_info`` the session file kept
    for it: the status when the message has none (a 500's)."""
    failures = []
    for index, event in enumerate(events):
        if event.get("type") == "turn.failed":
            message = object_at(event, "error").get("message")
        elif event.get("type") == "error" and index == len(events) - 1:
            reconnecting = RECONNECTING.match(str(event.get("message")))
            if reconnecting is None:
                continue
            message = reconnecting["message"]
        else:
            continue
        text = message if isinstance(message, str) else ""
        status = _status_in(text, (error_infos or {}).get(text))
        failures.append(provider_failure(status, text, retry_after_from_body(text)))
    return failures


def _status_in(message: str, error_info: Any) -> int | None:
    """The HTTP status a failed turn's message names, else the one its ``codex_error_info``
    holds (``{"<kind>": {"http_status_code": N}}``) or stands for (:data:`STATUS_OF_ERROR_NAME`)."""
    found = STATUS_IN_MESSAGE.search(message)
    if found:
        return int(found["status"])
    if isinstance(error_info, str):
        return STATUS_OF_ERROR_NAME.get(error_info)
    if isinstance(error_info, dict):
        for detail in error_info.values():
            status = _cli.as_int(detail.get("http_status_code")) if isinstance(detail, dict) else None
            if status is not None:
                return status
    return None


def codex(model: str | None = None, **options: Any) -> CodexAgent:
    """An agent function that runs the Codex CLI on the task.

    ``model`` -- e.g. ``"gpt-5.1-codex"`` (an ``openai/`` prefix is dropped); None uses Codex's
    default.  Options: ``timeout`` (s), ``base_url`` (an OpenAI-compatible endpoint, e.g.
    ``http://host:port/v1``: registered as a custom provider), ``wire_api`` ("responses"),
    ``reasoning_effort``, ``config`` (dict merged into ``config.toml``), ``prices``
    ((input, cached input, output) USD per million tokens for ``cost_usd``), ``extra_args``,
    ``env``, ``pass_env``, ``state_dir`` (keep ``CODEX_HOME`` there).  Codex has no turn limit.
    ``extra_args`` go on the resumed session's command line too (``codex exec resume`` takes
    the options of ``codex exec`` but ``--color``, ``--sandbox``, ``--approve-for-me``, ``--cd``,
    ``--add-dir``, ``--profile``, ``--oss`` and ``--local-provider``).

    The key comes from ``OPENAI_API_KEY`` or ``CODEX_API_KEY`` in the environment.  The program
    is found through ``$RAYEVAL_CODEX_BIN``, ``<repo>/.agent-tools``
    (``python scripts/install_agent_clis.py``), then ``PATH``.
    """
    return CodexAgent.make(model, **options)
