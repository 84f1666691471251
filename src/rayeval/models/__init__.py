"""Calling models: ``provider/model`` names, retries, a request limit per provider, a
response cache and the cost of every call.

>>> from rayeval.models import get_model
>>> model = get_model("openai/gpt-4o", temperature=0, cache="~/.cache/rayeval/responses")  # doctest: +SKIP
>>> model.generate("What is 2 + 2?").text  # doctest: +SKIP

Exports load on first use: naming a model (``providers``, ``types``) needs neither the
response cache's pyarrow nor the SDKs, so the graders can check a judge's name cheaply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .model import Model, get_model
    from .prices import Price, price_table
    from .providers import PROVIDERS, ModelError
    from .types import ChatMessage, GenerateConfig, ModelOutput, RetryPolicy

_EXPORTS = {
    "PROVIDERS": ".providers",
    "ModelError": ".providers",
    "ChatMessage": ".types",
    "GenerateConfig": ".types",
    "ModelOutput": ".types",
    "RetryPolicy": ".types",
    "Model": ".model",
    "get_model": ".model",
    "Price": ".prices",
    "price_table": ".prices",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)

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
