"""mini-swe-agent (PyPI ``mini-swe-agent``) as a rayeval agent.

The agent runs in a separate Python process (:mod:`rayeval.agents._mini_swe_entry`) with a local
environment rooted at the work folder; its model calls go through litellm, typically to an
OpenAI-compatible endpoint (``model="openai/<name>"`` plus ``base_url``).  The driver streams every
message as a JSON line, so the harness records it exactly like the CLI agents.

A failed model call ends the run at once: mini-swe-agent's own retries of a model call (up to 10
attempts over minutes, ``MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT``) are turned off, and litellm's
client retries once (``max_retries``, :data:`MODEL_CLIENT_RETRIES`; with litellm 1.108 a 429 or
5xx is otherwise 3 requests, waiting as ``Retry-After`` says).  The driver then writes the
failure (status, message, the hint from ``retry-after-ms``/``retry-after`` or the error body) as
an ``error`` line, and the conversation is saved in the state folder as a session that
:meth:`MiniSweAgent.resume_argv` goes on with.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from .._json import object_at
from ..models.failures import ANTHROPIC_KEY_FALLBACKS, ProviderFailure, provider_failure
from ..models.types import ReportedUsage
from ..unit.answers import ANSWER_FILE_NAMES
from ..unit.prompt import BENCHMARK_COMPLETION_MARKER, COMPLETION_MARKER, AnswerConvention, in_convention
from . import _cli
from ._base import AgentConfigError, ProgramAgent, Summary
from ._mini_swe_entry import SESSION_ID
from ._refusal import RefusalVerdict, blocks_text, choice_refusal, first_text_refusal, mapping

__all__ = ["INSTANCE_TEMPLATE", "SYSTEM_TEMPLATE", "MiniSweAgent", "mini_swe_agent"]

SYSTEM_TEMPLATE = """\
You are a careful, rigorous analyst working in a Linux shell. You solve the task by running \
bash commands one step at a time, checking each result before moving on.
"""

INSTANCE_TEMPLATE = """\
{{task}}

## How to work

- Every response must contain reasoning text and at least one call to the `bash` tool.
- Each command runs in a fresh subshell in the working directory ({{cwd}}); `cd` and
  environment changes do not persist between commands.
- Commands are killed after {{timeout}} seconds; avoid interactive programs.
- Input data is under `data/` and is read-only.
- Write your final answer as JSON to `eval_answer.json` in the working directory.
- When the answer file is written, finish by running exactly this command on its own:
  `echo {{completion_marker}}`
  Do not combine it with any other command. After it you cannot continue.

<system_information>
{{system}} {{release}} {{machine}}
</system_information>
"""

OBSERVATION_TEMPLATE = """\
{%- if output.output | length < 10000 -%}
{"returncode": {{ output.returncode }}, "output": {{ output.output | tojson }}
{%- if output.exception_info %}, "exception_info": {{ output.exception_info | tojson }}{% endif %}}
{%- else -%}
{"returncode": {{ output.returncode }}, "output_head": {{ output.output[:5000] | tojson }}, \
"output_tail": {{ output.output[-5000:] | tojson }}, "elided_chars": {{ output.output | length - 10000 }}, \
"warning": "Output too long."
{%- if output.exception_info %}, "exception_info": {{ output.exception_info | tojson }}{% endif %}}
{%- endif -%}
"""

FORMAT_ERROR_TEMPLATE = """\
Tool call error:

<error>
{{error}}
</error>

Every response must call the `bash` tool at least once, with arguments {"command": "<your command>"}.
When you are done, and the answer file exists, run `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` on its own.
"""

#: litellm provider prefix -> the environment variable holding that provider's key.
PROVIDER_KEYS: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "xai": ("XAI_API_KEY",),
    "fireworks_ai": ("FIREWORKS_AI_API_KEY", "FIREWORKS_API_KEY"),
    "together_ai": ("TOGETHERAI_API_KEY", "TOGETHER_API_KEY"),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "groq": ("GROQ_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "hosted_vllm": ("HOSTED_VLLM_API_KEY",),
}

#: litellm's retries of a failed model call (the OpenAI client's ``max_retries``)
MODEL_CLIENT_RETRIES = 1

QUIET_ENV = {
    "MSWEA_SILENT_STARTUP": "1",
    "MSWEA_COST_TRACKING": "ignore_errors",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch of the price map at import
    "LITELLM_TELEMETRY": "False",
    "DISABLE_TELEMETRY": "1",
    "PYTHONUNBUFFERED": "1",
    "PAGER": "cat",
    "MANPAGER": "cat",
    "PIP_PROGRESS_BAR": "off",
    "TQDM_DISABLE": "1",
}


@dataclass
class MiniSweAgent(ProgramAgent):
    """See :func:`mini_swe_agent`."""

    step_limit: int = 0
    cost_limit: float = 10.0
    command_timeout: float = 300
    api_key_env: str | None = None
    model_kwargs: dict[str, Any] | None = None
    model_class: str | None = None
    system_template: str | None = None
    instance_template: str | None = None
    python: str | None = None

    option_help: ClassVar[dict[str, str]] = {
        **ProgramAgent.option_help,
        "step_limit": "the most model calls (0: no limit)",
        "cost_limit": "the most USD of model calls, as mini-swe-agent counts them (0: no limit)",
        "command_timeout": "seconds each shell command may run",
        "api_key_env": "the variable holding the key, when not the provider's own",
        "model_kwargs": "more arguments of litellm's call, as a JSON object",
        "model_class": "mini-swe-agent's model class",
        "system_template": "the system prompt (Jinja)",
        "instance_template": "the task's prompt (Jinja: {{task}} is the task)",
        "python": "the interpreter that runs mini-swe-agent",
    }

    harness: ClassVar[str] = "mini-swe-agent"
    description: ClassVar[str] = (
        "mini-swe-agent through litellm (the provider's key), the unit's model as provider/model"
    )
    key_fallbacks: ClassVar[tuple[str, str] | None] = (ANTHROPIC_KEY_FALLBACKS, "ANTHROPIC_API_KEY")
    config_names: ClassVar[tuple[str, ...]] = (
        "OPENAI_BASE_URL",
        "OPENAI_API_BASE",
        "ANTHROPIC_BASE_URL",
        "EXTRA_ENV_KEYS",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.extra_args:
            raise AgentConfigError("mini_swe_agent takes no extra_args; use model_kwargs, model_class or the templates")
        if not self.model:
            raise AgentConfigError("mini_swe_agent needs a model name, e.g. 'openai/gpt-5-mini'")
        if self.step_limit < 0 or self.cost_limit < 0:
            raise AgentConfigError("step_limit and cost_limit must be >= 0 (0 = unlimited)")

    @property
    def provider(self) -> str:
        return self.model.split("/", 1)[0] if self.model and "/" in self.model else "openai"

    @classmethod
    def env_names(cls) -> tuple[str, ...]:
        """Every provider's key variables: its model, and with it its key, is the unit's."""
        fallbacks = cls.key_fallbacks[:1] if cls.key_fallbacks else ()
        return (*(name for names in PROVIDER_KEYS.values() for name in names), *cls.config_names, *fallbacks)

    @classmethod
    def make(cls, model: str | None = None, **options: Any) -> MiniSweAgent:
        """As the base's, with ``max_turns`` an alias of ``step_limit``."""
        if "max_turns" in options:
            if "step_limit" in options:
                raise AgentConfigError("give step_limit or max_turns, not both")
            options["step_limit"] = options.pop("max_turns") or 0
        return cls(model=model, **options)

    @property
    def key_names(self) -> tuple[str, ...]:  # type: ignore[override]
        names = PROVIDER_KEYS.get(self.provider, (f"{self.provider.upper()}_API_KEY",))
        return (*names, *((self.api_key_env,) if self.api_key_env else ()))

    def fallback_variable(self) -> str | None:
        """Fallback keys are Anthropic keys: they stand in for the key of an ``anthropic/`` model
        (litellm reads ``ANTHROPIC_API_KEY``, where ``api_key_env``'s key goes too)."""
        return "ANTHROPIC_API_KEY" if self.provider == "anthropic" else None

    def program_argv(self) -> list[str]:
        return [self.python or sys.executable, "-m", "rayeval.agents._mini_swe_entry"]

    def program_env(self, state: Path, work_dir: Path) -> dict[str, str]:
        env = dict(QUIET_ENV)
        env["MSWEA_GLOBAL_CONFIG_DIR"] = str(state / "mini-swe-agent")  # no ~/.config/.env loading
        env["MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT"] = "1"  # a failed call ends the run: the caller resumes
        if self.api_key_env:
            value = os.environ.get(self.api_key_env) or self.env.get(self.api_key_env)
            if value:
                # litellm reads the provider's standard variable; feed it the named key.
                env[PROVIDER_KEYS.get(self.provider, (f"{self.provider.upper()}_API_KEY",))[0]] = value
        return env

    def check_env(self, env: dict[str, str]) -> None:
        names = PROVIDER_KEYS.get(self.provider, (f"{self.provider.upper()}_API_KEY",))
        if any(env.get(n) for n in names):
            return
        if self.base_url:
            # A local endpoint may need no key, but litellm's OpenAI client insists on one.
            env[names[0]] = "no-key"
            return
        raise AgentConfigError(f"mini_swe_agent with {self.model!r} needs {' or '.join(names)} in the environment")

    def prepare(self, state: Path, work_dir: Path, env: dict[str, str], convention: AnswerConvention) -> None:
        (state / "mini-swe-agent").mkdir(parents=True, exist_ok=True)
        model_kwargs = {"drop_params": True, "max_retries": MODEL_CLIENT_RETRIES, **(self.model_kwargs or {})}
        if self.base_url:
            model_kwargs["api_base"] = self.base_url.rstrip("/")
        for forbidden in ("api_key", "api_keys"):
            if forbidden in model_kwargs:
                raise AgentConfigError(
                    f"pass the key through the environment (api_key_env=...), not model_kwargs[{forbidden!r}]"
                )
        # rayeval's templates speak the convention's names; templates the user gave stay as given
        instance = (self.instance_template or in_convention(INSTANCE_TEMPLATE, convention)).replace(
            "{{completion_marker}}", in_convention(COMPLETION_MARKER, convention)
        )
        config = {
            "work_dir": str(work_dir),
            "session_dir": str(self._session_dir(state)),
            "model_name": self.model,
            "model_class": self.model_class,
            "model_kwargs": model_kwargs,
            "system_template": self.system_template or in_convention(SYSTEM_TEMPLATE, convention),
            "instance_template": instance,
            "observation_template": OBSERVATION_TEMPLATE,
            "format_error_template": in_convention(FORMAT_ERROR_TEMPLATE, convention),
            "step_limit": int(self.step_limit),
            "cost_limit": float(self.cost_limit),
            "command_timeout": int(self.command_timeout),
            # stop by itself a little before the hard kill, so the run ends with a result event
            "wall_time_limit_seconds": int(self.timeout * 0.95) if self.timeout else 0,
            "answer_files": list(ANSWER_FILE_NAMES),
            "completion_markers": [COMPLETION_MARKER, BENCHMARK_COMPLETION_MARKER],
            "env": {"PAGER": "cat", "MANPAGER": "cat", "PIP_PROGRESS_BAR": "off", "TQDM_DISABLE": "1"},
        }
        (state / "config.json").write_text(json.dumps(config, indent=1))

    def build_argv(self, program: list[str], state: Path, work_dir: Path) -> list[str]:
        return [*program, str(state / "config.json")]

    def resume_argv(self, program: list[str], state: Path, work_dir: Path, session_id: str) -> list[str] | None:
        """The driver with ``--resume``: the saved conversation, then stdin as a user message."""
        if not SESSION_ID.fullmatch(session_id) or not (self._session_dir(state) / f"{session_id}.json").is_file():
            return None
        return [*self.build_argv(program, state, work_dir), "--resume", session_id]

    @staticmethod
    def _session_dir(state: Path) -> Path:
        return state / "mini-swe-agent" / "sessions"

    def display_argv(self, argv: list[str]) -> list[str]:
        return [Path(argv[0]).name, *argv[1:3], "<config.json>", *argv[4:]]

    def summarize(self, events: list[dict[str, Any]], state: Path, work_dir: Path) -> Summary:
        return summarize_mini_events(events)

    @classmethod
    def refusal_in(cls, events: list[dict[str, Any]]) -> RefusalVerdict | None:
        """mini-swe-agent's last model response decides (a reply without a tool call is recorded
        on the format-error message that answers it, so every message's response is looked at),
        then what the model said, then the driver's error (the agent's error, which
        latch-eval-tools searches after the trajectory, as ``agent_output``)."""
        said: list[str] = []
        errors: list[str] = []
        last: RefusalVerdict | None = None
        for event in events:
            if event.get("type") == "result" and isinstance(event.get("error"), str):
                errors.append(event["error"])
            if event.get("role") == "assistant":
                said.extend(blocks_text(event.get("content")))
            choices = mapping(mapping(event.get("extra")).get("response")).get("choices")
            if isinstance(choices, list) and choices:
                last = choice_refusal(mapping(choices[0]))
        found = last or first_text_refusal(said, [])
        in_error = first_text_refusal(said, errors) if found is None else None  # what said had none of
        return found or (replace(in_error, source="agent_output") if in_error is not None else None)


def summarize_mini_events(events: list[dict[str, Any]]) -> Summary:
    """Model calls, usage, cost, session and failures from the driver's message stream: one
    run's, or a session's runs one after the other. Turns and steps are both the agent's model
    calls that were answered (each one action, as latch-eval-tools counts them): its own count
    on each run's result line, else the model replies streamed. A run without a model reply is
    empty, though the driver reported its start and end."""
    usage = ReportedUsage()
    replies = 0
    cost = 0.0
    for e in events:
        if e.get("role") != "assistant" and e.get("object") != "response":
            continue
        replies += 1
        step = object_at(e, "extra")
        if isinstance(step.get("cost"), (int, float)):
            cost += float(step["cost"])
        usage.add(_reply_usage(e))
    final = next((e for e in reversed(events) if e.get("type") == "result"), None)
    results = [e for e in events if e.get("type") == "result"]
    calls = [e["n_calls"] for e in results if isinstance(e.get("n_calls"), int)]
    failures = mini_failures(events)
    # its count takes in a call that failed (the driver's error line): no model turn
    n_calls = max(sum(calls) - len(failures), 0) if calls else replies
    extra: dict[str, Any] = {}
    if final is not None:
        extra["exit_status"] = final.get("exit_status")
        if final.get("error"):
            extra["agent_error"] = final.get("error")
        extra["mini_swe_agent_version"] = final.get("mini_swe_agent_version")
        # each run's result line gives its own share (a resumed run's as well)
        costs = [float(e["cost"]) for e in results if isinstance(e.get("cost"), (int, float))]
        cost = sum(costs) if costs else cost
    else:
        exits = [e for e in events if e.get("role") == "exit"]
        if exits:
            extra["exit_status"] = (exits[-1].get("extra") or {}).get("exit_status")
    session = next((e for e in events if e.get("type") == "session"), {})
    return Summary(
        usage=usage,
        n_turns=n_calls,
        n_steps=n_calls,
        empty=replies == 0,
        cost_usd=cost if cost > 0 else (0.0 if n_calls == 0 else None),
        cost_source="litellm_pricing" if cost > 0 else None,
        extra=extra,
        session_id=session.get("session_id") if isinstance(session.get("session_id"), str) else None,
        failures=failures,
    )


def _reply_usage(message: dict[str, Any]) -> ReportedUsage:
    """The usage of one model reply, as litellm reported it: a Responses-API reply's own
    (``object: response``), a Chat Completions reply's under ``extra.response``. Its input
    counts the cache reads (``*_tokens_details.cached_tokens``, or Anthropic's
    ``cache_read_input_tokens``) and writes (``cache_creation_input_tokens``)."""
    usage = message.get("usage")
    if not isinstance(usage, dict):
        usage = object_at(object_at(object_at(message, "extra"), "response"), "usage")
    prompt = object_at(usage, "prompt_tokens_details") or object_at(usage, "input_tokens_details")
    completion = object_at(usage, "completion_tokens_details") or object_at(usage, "output_tokens_details")
    return ReportedUsage(
        input_tokens=_first_count(usage.get("prompt_tokens"), usage.get("input_tokens")),
        output_tokens=_first_count(usage.get("completion_tokens"), usage.get("output_tokens")),
        cache_read_tokens=_first_count(usage.get("cache_read_input_tokens"), prompt.get("cached_tokens")),
        cache_write_tokens=_first_count(usage.get("cache_creation_input_tokens")),
        reasoning_tokens=_first_count(usage.get("reasoning_tokens"), completion.get("reasoning_tokens")),
    )


def _first_count(*values: Any) -> int | None:
    """The first of ``values`` that is a count (the names of two APIs, or a count and its details')."""
    return next((count for value in values if (count := _cli.count(value)) is not None), None)


def mini_failures(events: list[dict[str, Any]]) -> list[ProviderFailure]:
    """The failed model calls the driver reported (its ``error`` lines), in order."""
    return [
        provider_failure(e.get("status"), e.get("message"), e.get("retry_after_s"))
        for e in events
        if e.get("type") == "error"
    ]


def mini_swe_agent(model: str, **options: Any) -> MiniSweAgent:
    """An agent function that runs mini-swe-agent on the task.

    ``model`` -- a litellm model name, e.g. ``"openai/gpt-5-mini"``; with ``base_url`` any
    OpenAI-compatible server (``"openai/<served name>"``).  Options: ``timeout`` (s),
    ``base_url`` (litellm ``api_base``), ``step_limit`` (model calls, 0 = unlimited; alias
    ``max_turns``), ``cost_limit`` (USD, 0 = unlimited; default 10), ``command_timeout`` (s per
    shell command, default 300), ``api_key_env`` (name of the variable holding the key when it
    is not the provider's standard one), ``model_kwargs``, ``model_class``,
    ``system_template``/``instance_template`` (Jinja, ``{{task}}`` is the prompt), ``python``
    (interpreter for the driver), ``env``, ``pass_env``, ``state_dir``.

    Keys reach litellm only through the driver's environment; shell commands the agent runs do
    not see secret-looking variables at all.
    """
    return MiniSweAgent.make(model, **options)
