"""A model call as the prompt agent, prompt files and LLM-as-judge evaluators make it: the
options that configure the model, the one reply with its row metadata, and the call as plain
JSON (a ``prompt`` request) to be made elsewhere, by a run's judge actor."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .prices import price_table
from .providers import api_key, provider_keys, split_name
from .types import ChatMessage, ModelOutput

if TYPE_CHECKING:  # the model, its cache (pyarrow) and SDKs load with the first model made
    from .model import Model

#: the ``kind`` of a JSON model call made elsewhere (see :func:`prompt_request`)
PROMPT_REQUEST = "prompt"


class PromptOptions(BaseModel):
    """The prompt agent's ``--agent-arg`` options."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: the provider's endpoint (else OPENAI_BASE_URL / ANTHROPIC_BASE_URL, else the provider's)
    base_url: str | None = None
    #: the variable holding the key (default OPENAI_API_KEY / ANTHROPIC_API_KEY)
    api_key_env: str | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    #: sent as the model's seed instead of the unit's
    seed: int | None = None
    #: a system message before the task
    system: str | None = None
    #: the response cache: an absolute folder or s3://bucket/prefix (endpoint: AWS_ENDPOINT_URL)
    cache: str | None = None
    #: a JSON price file over the shipped table (an absolute path)
    prices: str | None = None
    #: requests in flight to the provider, for the whole run (shared by its models of that
    #: provider; each unit makes one request, so --max-concurrency bounds them already)
    max_connections: Annotated[int, Field(ge=1)] | None = None

    @field_validator("cache", "prices")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        """Units run in the workers' processes, whose working folder is not the caller's."""
        if value is None:
            return value
        if value.startswith("s3://"):
            if not urlparse(value).netloc:
                raise ValueError(f"{value!r} names no bucket (s3://bucket/prefix)")
            return value
        path = Path(value).expanduser()
        if not path.is_absolute():
            raise ValueError(
                f"a folder or file here must be an absolute path (units run in the workers' own processes), got {value!r}"
            )
        return str(path)


_making = threading.Lock()


@lru_cache(maxsize=64)
def _model(name: str, options: PromptOptions) -> Model:
    """One model per process and configuration: its SDK client, cache and prices are shared
    by every unit."""
    from .model import get_model

    settings = options.model_dump(include={"temperature", "max_tokens", "top_p"}, exclude_none=True)
    return get_model(
        name,
        base_url=options.base_url,
        api_key_env=options.api_key_env,
        max_connections=options.max_connections,
        cache=options.cache,
        prices=options.prices,
        **settings,
    )


def prompt_model(name: str | None, args: dict[str, str]) -> tuple[Model, PromptOptions]:
    """The unit's model as the agent's options configure it (raises ``ModelError`` or
    ``ValidationError``)."""
    options = PromptOptions.model_validate(args)
    with _making:  # a worker's first units arrive together: one of them makes the model
        model = _model(name or "", options)
    provider_keys(model.provider, options.api_key_env)  # now: a model made earlier kept the keys it had then
    return model, options


def check_model(name: str | None, args: Mapping[str, Any], *, environment: bool, key_alone: bool = False) -> None:
    """Raise ``ValidationError`` (an option) or ``ModelError`` (the name, the key, the price file)
    when the model ``name`` cannot be called with these options; nothing is sent, no SDK is
    loaded. ``environment``: the calls read this process's environment, so its key, fallback
    keys and price file are checked too, as making the model reads them (``key_alone``: the key)."""
    options = PromptOptions.model_validate(dict(args))
    provider, _ = split_name(name or "")
    if not environment:
        return
    if key_alone:
        api_key(provider, options.api_key_env)
        return
    provider_keys(provider, options.api_key_env)
    price_table(options.prices)


def generate_reply(
    model: Model, options: PromptOptions, messages: list[ChatMessage], seed: int | None
) -> tuple[str, dict[str, Any]]:
    """The model's reply to ``messages`` and the row metadata of the call (tokens, cost,
    cache, tries): the one model call of the prompt agent and of ``evaluations.run``'s prompt
    files and judges. ``options.seed``, when set, replaces ``seed``."""
    output = generate_output(model, options, messages, seed)
    return output.text, reply_metadata(output)


def generate_output(model: Model, options: PromptOptions, messages: list[ChatMessage], seed: int | None) -> ModelOutput:
    """:func:`generate_reply`'s reply, as the model layer returns it."""
    if options.system:
        messages = [ChatMessage(role="system", content=options.system), *messages]
    seed = options.seed if options.seed is not None else seed
    return model.generate(messages, **({"seed": seed} if seed is not None else {}))


def reply_metadata(output: ModelOutput) -> dict[str, Any]:
    """The row metadata of one model call."""
    return {
        "harness": "prompt",
        "model": output.model,
        "reply": output.text,
        "stop_reason": output.stop_reason,
        "input_tokens": output.input_tokens,
        "output_tokens": output.output_tokens,
        "cost_usd": output.cost_usd,
        "cached": output.cached,
        "attempts": output.attempts,
        "key_fallback_count": output.key_fallbacks,
        "latency_s": output.latency_s,
        "n_turns": 1,
    }


def prompt_request(model: str, options: PromptOptions, messages: list[ChatMessage]) -> dict[str, Any]:
    """A model call as plain JSON, to be made elsewhere (a run's judge actor) by
    :func:`run_prompt_request`."""
    return {
        "kind": PROMPT_REQUEST,
        "model": model,
        "options": options.model_dump(exclude_none=True),
        "messages": [message.model_dump(mode="json") for message in messages],
    }


def run_prompt_request(request: dict[str, Any]) -> dict[str, Any]:
    """The outcome of a :func:`prompt_request`: ``{"reply", "metadata"}``, or ``{"error"}`` when
    the call could not be made (after the model layer's retries); never raises for the call."""
    try:
        model, options = prompt_model(request["model"], request["options"])
        messages = [ChatMessage.model_validate(message) for message in request["messages"]]
        reply, metadata = generate_reply(model, options, messages, None)
    except Exception as exc:  # noqa: BLE001 - the caller turns it into the judgment's error
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"reply": reply, "metadata": metadata}
