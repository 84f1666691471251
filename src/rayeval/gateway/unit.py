"""A unit's access to its models: a gateway session, and the variables and options the unit
gets instead of keys and provider endpoints."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..models.failures import ANTHROPIC_KEY_FALLBACKS
from ..models.providers import PROVIDERS, inferred_provider
from .pin import model_pin
from .server import PROVIDER_ROUTES, CallLimits, Gateway, RunBudget, Session, Upstream, upstreams_from

#: variables that carry a model provider's key besides those of the gateway's routes: none
#: reaches a unit (providers the gateway does not relay are out of a unit's reach)
_OTHER_KEY_VARIABLES = (
    "ANTHROPIC_AUTH_TOKEN", ANTHROPIC_KEY_FALLBACKS, "OPENAI_ADMIN_KEY", "CODEX_API_KEY", "GEMINI_API_KEY",
    "GOOGLE_API_KEY", "XAI_API_KEY", "MISTRAL_API_KEY", "GROQ_API_KEY", "TOGETHER_API_KEY", "DEEPSEEK_API_KEY",
)  # fmt: skip


def provider_variables() -> frozenset[str]:
    """Every variable that names a provider's key, fallback keys or endpoint: a unit gets the
    gateway's values for them, or nothing."""
    names = set(_OTHER_KEY_VARIABLES)
    for base_variable, _, key_variable in PROVIDER_ROUTES.values():
        names |= {key_variable, *([base_variable] if base_variable else [])}
    for name in PROVIDERS.names():
        provider = PROVIDERS.get(name)
        names |= {provider.key_env, provider.base_url_env}
        if provider.key_fallbacks_env:
            names.add(provider.key_fallbacks_env)
    return frozenset(names)


def unit_model_variables() -> frozenset[str]:
    """The variables every unit run through the gateway gets: each provider's endpoint (the
    gateway's) and key variable (the unit's token)."""
    return frozenset(
        name
        for base_variable, _, key_variable in PROVIDER_ROUTES.values()
        for name in (base_variable, key_variable)
        if name
    )


def route_of(model: str | None) -> str | None:
    """The API a model is served by: its provider's (``openai/...``, ``anthropic/...``, a
    registered provider), or the one a bare name can only be (``claude-...``, ``gpt-...``)."""
    if not model:
        return None
    provider_name, sep, _ = model.partition("/")
    if sep and provider_name in PROVIDER_ROUTES:
        return provider_name
    provider = PROVIDERS.find(provider_name) if sep else None
    if provider is not None:
        return provider.sdk
    inferred = inferred_provider(model)
    return PROVIDERS.get(inferred).sdk if inferred else None


@dataclass
class UnitAccess:
    """What one unit gets: its session (the trusted side keeps it), the variables set in its
    environment, and its options with every provider endpoint replaced by the gateway's."""

    session: Session
    env: dict[str, str]
    args: dict[str, str]


def open_unit_access(
    gateway: Gateway,
    args: Mapping[str, str],
    *,
    model: str | None = None,
    api: str | None = None,
    options: bool = False,
    limits: CallLimits | None = None,
    budget: RunBudget | None = None,
    retry_s: float = 0.0,
    timeout_s: float | None = None,
    environ: Mapping[str, str] | None = None,
    allowed_models: tuple[str, ...] = (),
    falls_back: bool = False,
) -> UnitAccess:
    """A session for one unit, its upstreams from ``environ`` (default: this process's) and,
    where ``options`` (a built-in agent's, which take ``base_url`` and ``api_key_env``), from
    ``args``: ``base_url`` is the endpoint of the model's API (``api``, else the model's) and
    ``api_key_env`` the variable holding its key. The unit sees the gateway instead. Its calls
    may name ``model``, the ``allowed_models`` and, where its program ``falls_back`` to another
    model when its model refuses, that one (see :func:`.pin.model_pin`), each through its own
    provider's route only (see :func:`pinned_routes`)."""
    environ = os.environ if environ is None else environ
    upstreams = upstreams_from(environ)
    unit_args = dict(args)
    route = api or route_of(model)
    env: dict[str, str] = {}
    if options and route is not None and (args.get("base_url") or args.get("api_key_env")):
        base_url, key_variable = args.get("base_url"), args.get("api_key_env")
        current = upstreams.get(route) or Upstream(PROVIDER_ROUTES[route][1])
        if base_url:
            current = replace(current, base_url=base_url)
        if key_variable:
            key = environ.get(key_variable)
            current = replace(current, keys=(key,) if key else ())
        upstreams[route] = current
    pin = model_pin(model, allowed_models, falls_back)
    if pin is not None:
        upstreams = pinned_routes(upstreams, route, allowed_models)
    session = gateway.open(upstreams, limits, budget=budget, retry_s=retry_s, timeout_s=timeout_s, pin=pin)
    for name, (base_variable, _, key_variable) in PROVIDER_ROUTES.items():
        if base_variable:
            env[base_variable] = gateway.base_url(name)
        env[key_variable] = session.token
    if options and route is not None:
        if args.get("base_url"):
            unit_args["base_url"] = gateway.base_url(route)
        if args.get("api_key_env"):
            env[args["api_key_env"]] = session.token
    return UnitAccess(session, env, unit_args)


def pinned_routes(
    upstreams: dict[str, Upstream], route: str | None, allowed_models: tuple[str, ...]
) -> dict[str, Upstream]:
    """The routes of a unit pinned to its model (served at ``route``) and ``allowed_models``:
    theirs only, where each one's is known. A call of its model at another provider's route
    fails there (no such model, no key), a failure of the unit's making that would otherwise
    read as its provider's."""
    routes = {route, *map(route_of, allowed_models)}
    if None in routes:
        return upstreams
    return {name: upstream for name, upstream in upstreams.items() if name in routes}


_shared: Gateway | None = None
_starting = threading.Lock()


def shared_gateway() -> Gateway:
    """This process's gateway, started on first use: the units of a worker (or of
    ``rayeval run-one``) share it."""
    global _shared
    with _starting:
        if _shared is None:
            _shared = Gateway().start()
        return _shared
