"""What goes to a model and what comes back: the layer's boundary, as pydantic models."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant"]


class ChatMessage(BaseModel):
    """One message of a conversation, as both APIs take it (text only)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Role
    content: str


class GenerateConfig(BaseModel):
    """Generation settings sent with a request. ``None``: the provider's default (Anthropic
    requires ``max_tokens``: :data:`ANTHROPIC_DEFAULT_MAX_TOKENS` is sent then; it has no
    ``seed``, which it ignores). ``extra_body``: provider-specific request fields sent as
    they are (Anthropic ``thinking`` or ``output_config``, OpenAI ``response_format``). Part
    of the response cache's key."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    seed: int | None = None
    stop: tuple[str, ...] | None = None
    extra_body: dict[str, Any] | None = None


class RetryPolicy(BaseModel):
    """How failed calls are retried: 429, 408, 409, 5xx and connection errors, with
    exponential backoff and jitter, or after the server's ``retry-after`` (capped); at most
    ``max_attempts`` tries and ``max_total_s`` seconds in all. Other errors raise at once."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: Annotated[int, Field(ge=1)] = 6
    backoff_s: Annotated[float, Field(ge=0)] = 1.0
    max_backoff_s: Annotated[float, Field(ge=0)] = 30.0
    max_retry_after_s: Annotated[float, Field(ge=0)] = 60.0
    max_total_s: Annotated[float, Field(gt=0)] = 600.0


class ModelOutput(BaseModel):
    """A model's reply. ``cost_usd``: from the price table (None: the model is not in it; 0
    for a reply from the response cache, whose entry keeps the original cost)."""

    model_config = ConfigDict(frozen=True)

    model: str
    text: str
    stop_reason: str | None = None
    #: the provider's refusal text (OpenAI's ``message.refusal``), apart from ``text``
    refusal: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    latency_s: float = 0.0
    #: tries it took (1: no retry); 0 for a cached reply
    attempts: int = 1
    #: the times the call moved to a fallback key because the provider rejected the key
    key_fallbacks: int = 0
    cached: bool = False
