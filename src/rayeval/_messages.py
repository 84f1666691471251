"""Wording shared by error messages."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from pydantic import ValidationError
    from pydantic_core import ErrorDetails

MAX_LISTED = 5  # items named in a message before "... and N more"

#: rayeval's words for some pydantic errors, said of the field named before them (``path: is required``)
_FIELD_WORDS = {"missing": "is required", "extra_forbidden": "is not a known field"}


#: a run's options as its messages name them: ``rayeval run``'s flags while the command line
#: runs (:func:`options_as_flags`), else the keywords of ``batch.run`` (a Python caller's)
_as_flags = False
#: the keyword of a flag not spelled as its keyword (``--max-cost``: ``max_cost_usd``), filled
#: by the configuration that names the flags (``rayeval.batch.config``)
KEYWORD_OF_FLAG: dict[str, str] = {}


@contextmanager
def options_as_flags() -> Iterator[None]:
    """Messages made meanwhile name the options as ``rayeval run``'s flags (the command line's)."""
    global _as_flags
    before, _as_flags = _as_flags, True
    try:
        yield
    finally:
        _as_flags = before


def option(flag: str, value: object = None) -> str:
    """Option ``flag`` as the caller writes it: ``--max-concurrency 8`` on the command line and
    ``max_concurrency=8`` from Python; ``value`` True is a switch (``--resume``: ``resume=True``),
    a list the values of a repeatable option (``--filter a, --filter b``: ``filters=['a', 'b']``),
    a dict the entries of a repeatable ``KEY=VALUE`` option (``--unit-resource GPU=1``:
    ``unit_resources={'GPU': 1}``), None names the option alone (``--timeout``: ``timeout``)."""
    if _as_flags:
        if isinstance(value, list):
            return ", ".join(f"{flag} {item}" for item in value)
        if isinstance(value, dict):
            return ", ".join(f"{flag} {key}={item}" for key, item in value.items())
        return flag if value is None or value is True else f"{flag} {value}"
    keyword = KEYWORD_OF_FLAG.get(flag, flag.removeprefix("--").replace("-", "_"))
    if isinstance(value, dict):
        return f"{keyword}={{{', '.join(f'{key!r}: {item}' for key, item in value.items())}}}"
    return keyword if value is None else f"{keyword}={value!r}" if isinstance(value, list) else f"{keyword}={value}"


def options(*given: tuple[str, object]) -> str:
    """Several options given together: ``--resume --run-id r1``, ``resume=True, run_id='r1'``."""
    return (" " if _as_flags else ", ").join(option(flag, value) for flag, value in given)


#: what a terminal would act on rather than show: C0 and C1 controls (ESC among them), DEL,
#: and the marks that reorder text (bidirectional overrides and isolates)
_UNSHOWN = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def shown(text: str) -> str:
    """``text`` (an agent's, say) safe to print to a terminal: each character a terminal would
    act on written as its escape (``\\x1b``), so the text cannot move the cursor, erase or
    recolour lines, set the window's title or reorder what follows."""
    return _UNSHOWN.sub(lambda match: match.group().encode("unicode_escape").decode("ascii"), text)


def listed(items: Sequence[str], most: int = MAX_LISTED) -> str:
    """``a, b, c, d, e and 3 more``: a message names a few and counts the rest."""
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


class FieldProblem(NamedTuple):
    """One error of a pydantic ``ValidationError``, as a user reads it."""

    #: the field's path, ``criteria[0].score_delta`` ("" for the whole object)
    field: str
    #: what is wrong with it (see :func:`field_problems`)
    message: str
    #: pydantic's error: its ``type``, ``loc``, ``input``, ``ctx``
    error: ErrorDetails

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


def field_problems(exc: ValidationError, words: Mapping[str, str] | None = None) -> list[FieldProblem]:
    """The problems of ``exc``, each once: ``words[type]`` where given, else pydantic's message
    (a callable's said as ``must be callable, got str``) without its ``Value error, `` prefix."""
    problems: dict[tuple[str, str], FieldProblem] = {}
    for error in exc.errors(include_url=False):
        if words and error["type"] in words:
            message = words[error["type"]]
        elif error["type"] == "callable_type":
            message = f"must be callable, got {type(error.get('input')).__name__}"
        else:
            message = error["msg"].removeprefix("Value error, ")
        field = _field_path(error["loc"])
        problems.setdefault((field, message), FieldProblem(field, message, error))
    return list(problems.values())


def pydantic_problems(exc: ValidationError, where: str) -> list[str]:
    """``where: field: problem``, one line per problem of ``exc``, in rayeval's words for a field."""
    return [f"{where}: {problem}" for problem in field_problems(exc, _FIELD_WORDS)]


def _field_path(loc: Iterable[Any]) -> str:
    """``criteria[0].score_delta``: a pydantic ``loc`` as a user names the field."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ("str", "list[str]") or re.fullmatch(r"function-\w+\[.*\]", part):
            continue  # union-branch and validator names are pydantic internals, not fields
        else:
            path += f".{part}" if path else str(part)
    return path
