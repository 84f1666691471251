"""Calling models: ``provider/model`` names, retries, a request limit per provider, a
response cache and the cost of every call.

>>> from rayeval.models import get_model
>>> model = get_model("openai/gpt-4o", temperature=0, cache="~/.cache/rayeval/responses")  # doctest: +SKIP
>>> model.generate("What is 2 + 2?").text  # doctest: +SKIP

Exports load on first use: naming a model (``providers``, ``types``) needs neither the
response cache's pyarrow nor the SDKs, so the graders can check a judge's name cheaply.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # the exports (see rayeval._lazy)
    from .model import Model, get_model
    from .prices import Price, price_table
    from .providers import PROVIDERS, ModelError
    from .types import ChatMessage, GenerateConfig, ModelOutput, RetryPolicy

__getattr__, __all__ = lazy_exports(__name__)
