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


Count = Annotated[int, Field(ge=0)] | None


class Usage(BaseModel):
    """Tokens of one call or of many. As the model gateway and the model layer count them (the
    rows' ``input_tokens``, a :class:`ModelOutput`'s), ``input_tokens`` counts every prompt token, cached ones included (Anthropic reports cache
    reads and writes apart: they are added in). A run summary's (``rayeval.unit.run_summary``,
    version 2) are each provider's own counts in the same fields: there Anthropic's
    ``input_tokens`` leaves the cache reads and writes out."""

    model_config = ConfigDict(extra="forbid")

    input_tokens: Count = None
    output_tokens: Count = None
    cache_read_tokens: Count = None
    cache_write_tokens: Count = None
    reasoning_tokens: Count = None
    #: of ``cache_write_tokens``, those written to Anthropic's 1-hour cache, which cost more than
    #: 5-minute ones (read for their price; not stored: a row's counts keep their shape)
    cache_write_1h_tokens: Count = Field(default=None, exclude=True)

    def add(self, other: Usage) -> None:
        """Add ``other``'s counts (another call's, a later run's, another model's) to these."""
        for name in Usage.model_fields:
            theirs = getattr(other, name)
            if theirs is not None:
                setattr(self, name, (getattr(self, name) or 0) + theirs)

    def total_tokens(self) -> int:
        return (self.input_tokens or 0) + (self.output_tokens or 0)

    def as_dict(self) -> dict[str, int | None]:
        return self.model_dump()


class ReportedUsage(Usage):
    """A program's own claims (``rayeval.agents``): each provider's counts as it reported them,
    as a run summary holds them (``model_dump()``). With ``cache_apart`` (Anthropic's)
    ``input_tokens`` leaves out the cache reads and writes; else (OpenAI's) it includes the
    cache reads."""

    cache_apart: bool = Field(default=False, exclude=True)

    def as_dict(self) -> dict[str, int | None]:
        """The counts as the gateway counts them: ``input_tokens`` every prompt token, cache
        reads and writes included (the metadata's ``usage`` and ``input_tokens``)."""
        counts = self.model_dump()
        for part in (self.cache_read_tokens, self.cache_write_tokens) if self.cache_apart else ():
            if part is not None:
                counts["input_tokens"] = (counts["input_tokens"] or 0) + part
        return counts
