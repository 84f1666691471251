"""The providers: OpenAI (and any OpenAI-compatible server) and Anthropic, through their
official SDKs with the SDKs' own retries off (:mod:`rayeval.models.retry` applies one policy)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from .._json import count_in, object_at
from ..errors import RayevalError
from ..registry import Registry
from .failures import ANTHROPIC_KEY_FALLBACKS, fallback_keys
from .types import ChatMessage, GenerateConfig, Usage

SDK = Literal["openai", "anthropic"]
#: Anthropic requires ``max_tokens``; sent when the settings leave it unset.
ANTHROPIC_DEFAULT_MAX_TOKENS = 4096


@dataclass(frozen=True)
class Provider:
    """How a ``provider/model`` name is served: the SDK, and where the key and the base URL
    come from when not given (the SDKs' own variables)."""

    name: str
    sdk: SDK
    key_env: str
    base_url_env: str
    #: an OpenAI-compatible server (vLLM, a gateway) may take no key at all
    key_required: bool = True
    #: the variable listing keys to use in turn when the provider rejects the key (a JSON list)
    key_fallbacks_env: str | None = None


def _provider(value: object) -> Provider:
    if not isinstance(value, Provider):
        raise TypeError(f"a provider is a rayeval.models.providers.Provider, got {type(value).__name__}")
    return value


#: By name: the built-ins; installed packages add theirs (another OpenAI-compatible service, say)
#: under the ``rayeval.providers`` entry-point group.
PROVIDERS: Registry[Provider] = Registry(
    "providers",
    _provider,
    {
        "openai": Provider("openai", "openai", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
        "openai-compatible": Provider(
            "openai-compatible", "openai", "OPENAI_API_KEY", "OPENAI_BASE_URL", key_required=False
        ),
        "anthropic": Provider(
            "anthropic",
            "anthropic",
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
            key_fallbacks_env=ANTHROPIC_KEY_FALLBACKS,
        ),
    },
)


class ModelError(RayevalError, RuntimeError):
    """A model cannot be named, configured or called; the message never holds the API key.
    ``transient``: the call failed on errors worth trying again later (rate limits, server
    errors, connection failures) until the retry policy gave up. ``call``: the last try of a
    call that failed (its status, message and retry hint), None when nothing was sent;
    ``attempts``: the tries made; ``key_fallbacks``: the times it moved to a fallback key."""

    def __init__(
        self,
        message: str,
        *,
        transient: bool = False,
        call: CallFailed | None = None,
        attempts: int = 0,
        key_fallbacks: int = 0,
    ):
        super().__init__(message)
        self.transient = transient
        self.call = call
        self.attempts = attempts
        self.key_fallbacks = key_fallbacks


class CallFailed(RayevalError):
    """One try failed: ``status`` None for a connection error or timeout (``timed_out``: the
    model did not answer within the call's time, which what it was asked may bring about)."""

    def __init__(
        self, status: int | None, message: str, headers: dict[str, str] | None = None, *, timed_out: bool = False
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
        self.timed_out = timed_out


@dataclass(frozen=True)
class Reply:
    text: str
    stop_reason: str | None
    usage: Usage
    refusal: str | None = None  # OpenAI's refusal field


def anthropic_usage(usage: dict[str, Any], into: Usage) -> None:
    """Anthropic's usage object (a reply's; streamed, ``message_start``'s, then
    ``message_delta``'s running totals)."""
    fresh = count_in(usage.get("input_tokens"))
    read = count_in(usage.get("cache_read_input_tokens"))
    written = count_in(usage.get("cache_creation_input_tokens"))
    if read is not None:
        into.cache_read_tokens = read
    if written is not None:
        into.cache_write_tokens = written
    hour = count_in(object_at(usage, "cache_creation").get("ephemeral_1h_input_tokens"))
    if hour is not None:
        into.cache_write_1h_tokens = hour
    if fresh is not None:
        into.input_tokens = fresh + (into.cache_read_tokens or 0) + (into.cache_write_tokens or 0)
    output = count_in(usage.get("output_tokens"))
    if output is not None:
        into.output_tokens = output


def openai_usage(usage: dict[str, Any], into: Usage, *, prompt: str, completion: str) -> None:
    """OpenAI's usage object: Chat Completions (prompt/completion) or Responses (input/output)."""
    into.input_tokens = count_in(usage.get(prompt))
    into.output_tokens = count_in(usage.get(completion))
    into.cache_read_tokens = count_in(object_at(usage, f"{prompt}_details").get("cached_tokens"))
    into.reasoning_tokens = count_in(object_at(usage, f"{completion}_details").get("reasoning_tokens"))


def split_name(name: str) -> tuple[Provider, str]:
    """``provider/model`` (the model part may hold more slashes, as in
    ``openai-compatible/meta-llama/Llama-3.1-8B``)."""
    provider, sep, model = name.partition("/")
    if not sep or not model:
        raise ModelError(f"model {name!r}: expected provider/model, with provider one of {', '.join(PROVIDERS)}")
    found = PROVIDERS.find(provider)
    if found is None:
        raise ModelError(f"model {name!r}: unknown provider {provider!r} (known: {', '.join(PROVIDERS)})")
    return found, model


# Bare model names whose provider is not in doubt: OpenAI's GPT and o-series, Anthropic's Claude.
_KNOWN_FAMILIES = (
    (re.compile(r"(gpt|chatgpt)-"), "openai"),
    (re.compile(r"o[134](-|$)"), "openai"),
    (re.compile(r"claude-"), "anthropic"),
)


def inferred_provider(name: str) -> str | None:
    """The provider of a bare model name (no ``provider/``) that can only be one provider's:
    ``gpt-4`` and ``o3-mini`` are OpenAI's, ``claude-sonnet-4-5`` Anthropic's; None for any
    other name (a local or gateway model could be anyone's)."""
    if "/" in name:
        return None
    return next((provider for family, provider in _KNOWN_FAMILIES if family.match(name)), None)


def api_key(provider: Provider, key_env: str | None) -> str | None:
    """The key from ``key_env`` (default: the provider's variable); a missing required key is
    a :class:`ModelError` naming the variable."""
    name = key_env or provider.key_env
    value = os.environ.get(name)
    if not value and provider.key_required:
        raise ModelError(f"provider {provider.name!r} needs an API key in the environment variable {name}")
    return value or None


def spare_keys(provider: Provider) -> list[str]:
    """The provider's fallback keys in the environment (``key_fallbacks_env``), in order; a
    list that is not a JSON list of non-empty strings is a :class:`ModelError` naming the
    variable, never a key."""
    if provider.key_fallbacks_env is None:
        return []
    try:
        return fallback_keys(provider.key_fallbacks_env, os.environ.get(provider.key_fallbacks_env))
    except ValueError as exc:
        raise ModelError(str(exc)) from None


def provider_keys(provider: Provider, key_env: str | None) -> list[str | None]:
    """The key a model of ``provider`` calls with, then its fallback keys, as the environment
    holds them now (see :func:`api_key` and :func:`spare_keys`)."""
    return [api_key(provider, key_env), *spare_keys(provider)]


@lru_cache(maxsize=32)
def client(sdk: SDK, base_url: str | None, key: str | None, timeout_s: float) -> Any:
    """One SDK client per process and settings: clients are thread-safe and pool connections."""
    if sdk == "openai":
        import openai

        return openai.OpenAI(api_key=key or "unused", base_url=base_url, timeout=timeout_s, max_retries=0)
    import anthropic

    return anthropic.Anthropic(api_key=key, base_url=base_url, timeout=timeout_s, max_retries=0)


def base_url_of(sdk_client: Any) -> str:
    return str(sdk_client.base_url)


def send(
    sdk: SDK,
    sdk_client: Any,
    model: str,
    messages: list[ChatMessage],
    config: GenerateConfig,
) -> Reply:
    """One request; a failure is :class:`CallFailed` with its status and headers."""
    if sdk == "openai":
        import openai

        errors: tuple[type[Exception], type[Exception], type[Exception]] = (
            openai.APIStatusError,
            openai.APIConnectionError,
            openai.APITimeoutError,
        )
        call = _openai_chat
    else:
        import anthropic

        errors = (anthropic.APIStatusError, anthropic.APIConnectionError, anthropic.APITimeoutError)
        call = _anthropic_messages
    try:
        return call(sdk_client, model, messages, config)
    except errors[0] as exc:
        response = exc.response  # type: ignore[attr-defined]
        raise CallFailed(response.status_code, exc.message, dict(response.headers)) from None  # type: ignore[attr-defined]
    except errors[1] as exc:
        cause = exc.__cause__ or exc.__context__
        detail = f"{exc} ({type(cause).__name__}: {cause})" if cause else str(exc)
        raise CallFailed(None, detail, timed_out=isinstance(exc, errors[2])) from None


def _openai_chat(sdk_client: Any, model: str, messages: list[ChatMessage], config: GenerateConfig) -> Reply:
    settings: dict[str, Any] = {k: v for k, v in config.model_dump().items() if v is not None}
    if "stop" in settings:
        settings["stop"] = list(settings["stop"])
    completion = sdk_client.chat.completions.create(
        model=model, messages=[m.model_dump() for m in messages], **settings
    )
    choice = completion.choices[0] if completion.choices else None
    usage = Usage()
    if completion.usage is not None:
        openai_usage(completion.usage.model_dump(), usage, prompt="prompt_tokens", completion="completion_tokens")
    return Reply(
        text=(choice.message.content or "") if choice else "",
        stop_reason=choice.finish_reason if choice else None,
        usage=usage,
        refusal=getattr(choice.message, "refusal", None) if choice else None,
    )


def _anthropic_messages(sdk_client: Any, model: str, messages: list[ChatMessage], config: GenerateConfig) -> Reply:
    system = "\n\n".join(m.content for m in messages if m.role == "system")
    settings: dict[str, Any] = {"max_tokens": config.max_tokens or ANTHROPIC_DEFAULT_MAX_TOKENS}
    # the SDK (2.x) no longer names them; older models take them, newer ones refuse with a 400
    sampling = {"temperature": config.temperature, "top_p": config.top_p}
    extra_body = {name: value for name, value in sampling.items() if value is not None}
    extra_body.update(config.extra_body or {})
    if extra_body:
        settings["extra_body"] = extra_body
    if config.stop:
        settings["stop_sequences"] = list(config.stop)
    if system:
        settings["system"] = system
    message = sdk_client.messages.create(
        model=model,
        messages=[m.model_dump() for m in messages if m.role != "system"],
        **settings,
    )
    usage = Usage()
    if message.usage is not None:
        anthropic_usage(message.usage.model_dump(), usage)
    return Reply(
        text="".join(block.text for block in message.content if getattr(block, "type", None) == "text"),
        stop_reason=message.stop_reason,
        usage=usage,
    )
