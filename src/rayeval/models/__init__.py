"""Calling models: ``provider/model`` names, retries, a request limit per provider, a
response cache and the cost of every call.

>>> from rayeval.models import get_model
>>> model = get_model("openai/gpt-4o", temperature=0, cache="~/.cache/rayeval/responses")  # doctest: +SKIP
>>> model.generate("What is 2 + 2?").text  # doctest: +SKIP
"""

from __future__ import annotations

from .model import Model, get_model
from .prices import Price, price_table
from .providers import PROVIDERS, ModelError
from .types import ChatMessage, GenerateConfig, ModelOutput, RetryPolicy

__all__ = [
    "PROVIDERS",
    "ChatMessage",
    "GenerateConfig",
    "Model",
    "ModelError",
    "ModelOutput",
    "Price",
    "RetryPolicy",
    "get_model",
    "price_table",
]
