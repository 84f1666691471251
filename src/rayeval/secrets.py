"""Finding secret values in an environment and scrubbing them from anything we keep.

The agent harnesses pass API keys to the programs they run only through the environment, and
everything they return or leave on disk (answer, metadata, trajectory, logs) goes through
:func:`redact` first.  The runner uses the same two functions for its own records.

>>> env = {"OPENAI_API_KEY": "sk-abcdef123456", "HOME": "/root"}
>>> redact({"log": ["key=sk-abcdef123456"]}, secret_values(env))
{'log': ['key=***']}
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from typing import Any

__all__ = [
    "MASK",
    "MIN_SECRET_LENGTH",
    "compile_secrets",
    "environment_secrets",
    "handed_secrets",
    "is_secret_argument",
    "is_secret_name",
    "redact",
    "redact_text",
    "run_secrets",
    "secret_values",
    "url_credentials",
    "without_credentials",
]

MASK = "***"

#: Values shorter than this are never treated as secrets: masking "1" or "true" everywhere
#: would destroy the record without protecting anything.
MIN_SECRET_LENGTH = 8

# Names that hold credentials.  Matched case-insensitively against the whole variable name.
_SECRET_NAME_RE = re.compile(
    r"""(
        .*_API_KEYS?(_.*)?$        # OPENAI_API_KEY, ANTHROPIC_API_KEY_FALLBACKS, X_API_KEY_2
      | ^API_KEYS?$
      | .*_TOKEN$                  # GITHUB_TOKEN, ANTHROPIC_AUTH_TOKEN, HF_TOKEN
      | ^TOKEN$
      | .*SECRET.*                 # AWS_SECRET_ACCESS_KEY, CLIENT_SECRET
      | .*PASSWORD.*
      | .*PASSWD.*
      | .*_PRIVATE_KEY.*
      | .*_SESSION_KEY$
      | .*_ACCESS_KEY$
    )""",
    re.IGNORECASE | re.VERBOSE,
)


def is_secret_name(name: str) -> bool:
    """True when an environment variable with this name is treated as holding a secret."""
    return bool(_SECRET_NAME_RE.fullmatch(name))


# Words that make an argument name secret, matched against the name's words (snake, kebab and
# camel case split), so ``api_key``/``apiKey``/``auth_token`` are secret but ``max_tokens`` is not.
_SECRET_WORDS = frozenset(
    {
        "key",
        "keys",
        "apikey",
        "token",
        "secret",
        "secrets",
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "credential",
        "credentials",
        "auth",
        "authorization",
        "cookie",
        "bearer",
    }
)
_WORD_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def is_secret_argument(name: str) -> bool:
    """True when an option or agent argument with this name holds a secret (a secret variable
    name, or one of its words is ``key``, ``token``, ``password``, ...)."""
    if is_secret_name(name):
        return True
    return any(word.lower() in _SECRET_WORDS for word in _WORD_RE.findall(name))


#: a URL's user information (``user:password@``), up to the last ``@`` before its host
_URL_USERINFO = re.compile(r"\b([a-z][a-z0-9+.-]{0,31}://)([^/?#\s]*)@", re.IGNORECASE)


def without_credentials(value: str) -> str:
    """``value`` with the user and password of each URL in it left out
    (``http://user:pass@proxy:3128`` → ``http://proxy:3128``)."""
    return _URL_USERINFO.sub(r"\1", value)


def url_credentials(value: str) -> Iterator[str]:
    """The user information of each URL in ``value`` and its password, as written and
    percent-decoded: a credential whatever the variable holding it is called."""
    for match in _URL_USERINFO.finditer(value):
        userinfo = match.group(2)
        for part in (userinfo, userinfo.partition(":")[2]):
            yield part
            yield urllib.parse.unquote(part)


def _expand(value: str) -> Iterable[str]:
    """The value itself, plus the members of a JSON array of strings (key fallback lists)."""
    yield value
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        try:
            items = json.loads(text)
        except ValueError:
            return
        if isinstance(items, list):
            for item in items:
                if isinstance(item, str):
                    yield item


def secret_values(env: Mapping[str, str] | None = None, *, extra: Iterable[str] = ()) -> set[str]:
    """Values of the secret-looking variables in ``env`` (default: ``os.environ``).

    Variables named like ``*_API_KEY``, ``*_TOKEN``, ``*SECRET*``, ``*PASSWORD*``,
    ``ANTHROPIC_API_KEY_FALLBACKS`` (a JSON array: each member counts) and a few similar
    patterns contribute their value, and every variable the credentials of a URL it holds
    (:func:`url_credentials`: a proxy's user and password).  Values shorter than
    :data:`MIN_SECRET_LENGTH` are ignored.  ``extra`` adds values known to be secret whatever
    their name.
    """
    if env is None:
        env = os.environ
    found: set[str] = set()
    for name, value in env.items():
        if not value or not isinstance(value, str):
            continue
        candidates = [*_expand(value)] if is_secret_name(name) else []
        for candidate in [*candidates, *url_credentials(value)]:
            candidate = candidate.strip()
            if len(candidate) >= MIN_SECRET_LENGTH:
                found.add(candidate)
    for value in extra:
        if isinstance(value, str) and len(value.strip()) >= MIN_SECRET_LENGTH:
            found.add(value.strip())
    return found


def handed_secrets(
    env_names: Iterable[str], agent_args: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> frozenset[str]:
    """What a run hands its agents that is a credential whatever its name: the value in ``env``
    (default: ``os.environ``) of each variable passed by name (``--agent-env``), and each agent
    argument under a secret name (:func:`is_secret_argument`, at any depth); those of at least
    :data:`MIN_SECRET_LENGTH`."""
    if env is None:
        env = os.environ
    values = [env[name] for name in env_names if name in env]
    return frozenset(secret_values({}, extra=[*values, *_argument_secrets(agent_args)]))


def _argument_secrets(args: Mapping[str, Any]) -> Iterator[str]:
    for name, value in args.items():
        if isinstance(value, Mapping):
            yield from _argument_secrets(value)
        elif isinstance(value, str) and isinstance(name, str) and is_secret_argument(name):
            yield value


def run_secrets(
    env_names: Iterable[str], agent_args: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> frozenset[str]:
    """A run's secrets, made once where it is set up and masked in everything it stores: those
    of ``env`` (:func:`secret_values`) and those it hands its agents (:func:`handed_secrets`)."""
    return frozenset(secret_values(env, extra=handed_secrets(env_names, agent_args, env)))


def _variants(secret: str) -> set[str]:
    """Spellings under which a secret can show up in text we keep."""
    variants = {secret}
    escaped = json.dumps(secret)[1:-1]  # inside a JSON string
    variants.add(escaped)
    variants.add(json.dumps(escaped)[1:-1])  # JSON inside JSON (tool results in event streams)
    variants.add(urllib.parse.quote(secret, safe=""))
    variants.add(urllib.parse.quote_plus(secret))
    return {v for v in variants if len(v) >= MIN_SECRET_LENGTH}


def _pattern(secrets: Iterable[str]) -> re.Pattern[str] | None:
    spellings: set[str] = set()
    for secret in secrets:
        if isinstance(secret, str) and secret:
            spellings |= _variants(secret)
    if not spellings:
        return None
    # Longest first so that a secret containing another one is masked whole.
    ordered = sorted(spellings, key=len, reverse=True)
    return re.compile("|".join(re.escape(s) for s in ordered))


def redact_text(text: str, secrets: Iterable[str] | re.Pattern[str] | None) -> str:
    """``text`` with every occurrence of every secret replaced by ``***``."""
    pattern = secrets if isinstance(secrets, re.Pattern) else _pattern(secrets or ())
    if pattern is None or not text:
        return text
    return pattern.sub(MASK, text)


def redact(obj: Any, secrets: Iterable[str] | re.Pattern[str] | None) -> Any:
    """A copy of ``obj`` with every secret value masked in every string it contains.

    Walks dicts (keys and values), lists, tuples and sets; other values are returned as they
    are.  The input is never modified.
    """
    pattern = secrets if isinstance(secrets, re.Pattern) else _pattern(secrets or ())
    if pattern is None:
        return obj
    return _redact(obj, pattern)


def _redact(obj: Any, pattern: re.Pattern[str]) -> Any:
    if isinstance(obj, str):
        return pattern.sub(MASK, obj)
    if isinstance(obj, dict):
        return {(_redact(k, pattern) if isinstance(k, str) else k): _redact(v, pattern) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redact(v, pattern) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_redact(v, pattern) for v in obj)
    if isinstance(obj, (set, frozenset)):
        return type(obj)(_redact(v, pattern) for v in obj)
    if isinstance(obj, bytes):
        try:
            return pattern.sub(MASK, obj.decode("utf-8")).encode("utf-8")
        except UnicodeDecodeError:
            return obj
    return obj


@lru_cache(maxsize=8)
def _environment_pattern(raw_environment: frozenset[tuple[Any, Any]], extra: frozenset[str]) -> re.Pattern[str] | None:
    """``raw_environment`` is only the cache key: the pattern is made from ``os.environ``."""
    return compile_secrets(secret_values(dict(os.environ), extra=extra))


def environment_secrets(extra: frozenset[str] = frozenset()) -> re.Pattern[str] | None:
    """The compiled secrets of ``os.environ`` and ``extra`` (a run's: :func:`run_secrets`),
    recomputed only when either changes.

    Keyed on the environment's undecoded mapping: ``os.environ.items()`` decodes every
    variable, ≈18 µs a call, which every unit paid (a twentieth of an instant unit's harness
    time); its raw mapping compares in ≈2 µs."""
    return _environment_pattern(frozenset(os.environ._data.items()), extra)  # type: ignore[attr-defined]


def compile_secrets(secrets: Iterable[str]) -> re.Pattern[str] | None:
    """Precompile a secret set for repeated :func:`redact` / :func:`redact_text` calls."""
    return _pattern(secrets)
