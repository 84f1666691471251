"""The models a unit may call through the gateway.

A row is attributed to its unit's model (its ``model`` column), so the gateway refuses a model
call naming another one: a unit run as a weak model cannot have a strong one answer for it.
A unit may call its own model (as the run names it, with or without its provider, dated or
not: :func:`names_model`), the models its run allows besides (``--allow-model``) and, where its
program goes on with a fallback model when its model refuses (Claude Code's
``switchModelsOnFlag``), one other model once the gateway relayed it a refusal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..models.prices import undated

#: what ``--allow-model`` takes to let a run's units call any model (nothing pinned)
ANY_MODEL = "any"
#: the model of a run's units when no ``--models`` is given: the agent's own choice, which pins nothing
DEFAULT_MODEL = "default"
#: the most characters of a model name an error message repeats, or a fallback model has (the name is the unit's)
NAME_CHARS = 200


def names_model(asked: str, model: str) -> bool:
    """Whether a call asking for ``asked`` (as an agent sends it: ``claude-sonnet-4-5``) asks
    for ``model`` (as a run names it: ``anthropic/claude-sonnet-4-5``, ``openrouter/<vendor>/<model>``):
    the name, or its part after a ``/`` (its provider's prefix off), dated or not (see
    :func:`rayeval.models.prices.undated`)."""
    wanted, named = undated(asked), undated(model)
    return bool(wanted) and (named == wanted or named.endswith("/" + wanted))


@dataclass
class ModelPin:
    """The models one unit's calls may name: ``models`` (its own first, then those its run
    allows besides) and, where it ``falls_back`` (its program moves to a fallback model when its
    model refuses), the first other model it asks a route for after the gateway relayed it a
    refusal there: its ``fallback``, the one other model it may call from then on."""

    models: tuple[str, ...]
    falls_back: bool = False
    fallback: str | None = None

    def allows(self, asked: str) -> bool:
        return any(names_model(asked, model) for model in (*self.models, *filter(None, [self.fallback])))

    def refused(self, payload: dict[str, Any], named_twice: bool, refusal_relayed: Callable[[], bool]) -> str | None:
        """Why a model call (``payload``; ``named_twice``: its body as sent names ``model`` or
        ``models`` twice) is refused, None: it may go. A fallback model (see the class) is taken
        here, when ``refusal_relayed()`` says the unit got a refusal on the call's route."""
        asked = _asked_models(payload)
        if asked is None or named_twice:
            return "rayeval gateway: a model call names its model once, as a string in its 'model' field"
        others = [name for name in asked if not self.allows(name)]
        if not others:
            return None
        fallback = others[0] if len(set(others)) == 1 and len(others[0]) <= NAME_CHARS else None
        if self.falls_back and self.fallback is None and fallback is not None and refusal_relayed():
            self.fallback = fallback
            return None
        allowed = ", ".join(repr(name) for name in (*self.models, *filter(None, [self.fallback])))
        return (
            f"rayeval gateway: this unit may call {allowed} only, not {others[0][:NAME_CHARS]!r} "
            f"(a run allows another model with --allow-model)"
        )


def model_pin(model: str | None, allowed: tuple[str, ...] = (), falls_back: bool = False) -> ModelPin | None:
    """The pin of a unit of ``model`` (None: not pinned: a unit without a model, or of the
    run's default model, or one its run lets call any model)."""
    if model is None or model == DEFAULT_MODEL or ANY_MODEL in allowed:
        return None
    return ModelPin((model, *allowed), falls_back)


def _asked_models(payload: dict[str, Any]) -> list[str] | None:
    """The models a call asks for: its ``model``, and each of OpenRouter's ``models`` (the ones
    it falls back to); None: one is not a string, or it names none."""
    model, more = payload.get("model"), payload.get("models", [])
    if not isinstance(model, str) or not isinstance(more, list):
        return None
    asked = [model, *more]
    return asked if all(isinstance(name, str) for name in asked) else None
