"""What a call costs: USD per million input and output tokens, by ``provider/model``.

The table shipped in ``prices.json`` (list prices of common models and of every model the
built-in programs are pinned to run, without batch discounts; ``cache_read`` and
``cache_write``, where known, are the prices of prompt-cache reads and writes) can be extended
or overridden with a dict or a JSON file of the same shape: ``{"openai/gpt-4o": {"input": 2.5,
"output": 10.0}, ...}``. A dated model id (``claude-sonnet-4-5-20250929``,
``gpt-4o-2024-08-06``) falls back to its undated name.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from .._messages import field_problems
from .providers import ModelError
from .types import Usage

_DATE_SUFFIX = re.compile(r"-(\d{8}|\d{4}-\d{2}-\d{2})$")

#: the version of the rule and table that price a program's tokens and the gateway's calls (a
#: run summary's ``pricing_version`` when its ``cost_source`` is ``rayeval_price_table`` or
#: ``configured_prices``); 2: cache prices of the older OpenAI and Anthropic models; 3:
#: Anthropic's 1-hour cache writes at twice the input price
PRICING_VERSION = "3"
#: what a token written to Anthropic's 1-hour cache costs, in input prices (5-minute ones: 1.25,
#: the table's ``cache_write``)
HOUR_CACHE_WRITE_FACTOR = 2.0


class Price(BaseModel):
    """USD per million tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: Annotated[float, Field(ge=0)]
    output: Annotated[float, Field(ge=0)]
    cache_read: Annotated[float, Field(ge=0)] | None = None
    cache_write: Annotated[float, Field(ge=0)] | None = None


PriceTable = dict[str, Price]
_TABLE = TypeAdapter(PriceTable)


@lru_cache(maxsize=1)
def shipped_prices() -> PriceTable:
    return _TABLE.validate_json(resources.files(__package__).joinpath("prices.json").read_bytes())


def price_table(override: dict | str | Path | None = None) -> PriceTable:
    """The shipped table with ``override`` (a dict, or a JSON file's path) on top."""
    if override is None:
        return shipped_prices()
    source = "the price override"
    try:
        if isinstance(override, (str, Path)):
            source = f"price file {override}"
            extra = _TABLE.validate_json(Path(override).read_bytes())
        else:
            extra = _TABLE.validate_python(override)
    except OSError as exc:
        raise ModelError(f"{source}: cannot read it: {exc}") from None
    except ValidationError as exc:
        raise ModelError(f"{source}: {field_problems(exc)[0]}") from None
    return {**shipped_prices(), **extra}


def undated(model: str) -> str:
    """``model`` without the date a dated id ends in (``claude-sonnet-4-5-20250929``,
    ``gpt-4o-2024-08-06``): a dated id and its undated name are one model, priced (and pinned
    by the model gateway) alike."""
    return _DATE_SUFFIX.sub("", model)


def find_price(table: PriceTable, name: str) -> Price | None:
    """The price of ``provider/model`` (or of its undated name, or of the bare model name)."""
    provider, _, model = name.partition("/")
    bare = undated(model)
    for candidate in (name, f"{provider}/{bare}", model, bare):
        if candidate in table:
            return table[candidate]
    return None


def cost_usd(price: Price | None, usage: Usage) -> float | None:
    """What tokens counted as ``usage`` (every prompt token in ``input_tokens``, cache reads and
    writes among them, as the gateway and the model layer count) cost at ``price``: cache
    reads and writes at their own prices where it has them, else as any input; writes to
    Anthropic's 1-hour cache at :data:`HOUR_CACHE_WRITE_FACTOR` times the input price. None
    when the price or either count is unknown."""
    if price is None or usage.input_tokens is None or usage.output_tokens is None:
        return None
    read = (usage.cache_read_tokens or 0) if price.cache_read is not None else 0
    hour = min(usage.cache_write_1h_tokens or 0, usage.cache_write_tokens or 0)
    minutes = (usage.cache_write_tokens or 0) - hour if price.cache_write is not None else 0
    uncached = max(usage.input_tokens - read - minutes - hour, 0)
    cached = read * (price.cache_read or 0.0) + minutes * (price.cache_write or 0.0)
    cached += hour * HOUR_CACHE_WRITE_FACTOR * price.input
    return (uncached * price.input + cached + usage.output_tokens * price.output) / 1_000_000
