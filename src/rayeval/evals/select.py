"""Choosing the evals a run covers: ``--sample-id``, ``--filter`` and ``--limit``."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from .._messages import option
from ..errors import ConfigError
from .model import Eval


class EvalSelectionError(ConfigError):
    """The selection names an eval that is not there, or leaves none."""


def _matches(eval_: Eval, selector: str) -> bool:
    """``key=value``: the eval's metadata ``key`` is ``value`` (compared as text); otherwise a
    glob on the eval id (``pbmc_*``)."""
    key, sep, value = selector.partition("=")
    if sep:
        metadata = eval_.metadata or {}
        return key.strip() in metadata and str(metadata[key.strip()]) == value.strip()
    return fnmatch.fnmatchcase(eval_.id, selector)


def select_evals(
    evals: list[Eval], *, sample_ids: Sequence[str] = (), filters: Sequence[str] = (), limit: int | None = None
) -> list[Eval]:
    """The evals with one of ``sample_ids`` (all when empty) that match every filter, the
    first ``limit`` of them in loading order.  Naming an id that was not loaded, or selecting
    nothing, is an :class:`EvalSelectionError` (a run of nothing is a mistake, not a result)."""
    chosen = evals
    if sample_ids:
        known = {eval_.id for eval_ in evals}
        unknown = [name for name in sample_ids if name not in known]
        if unknown:
            raise EvalSelectionError(
                f"{option('--sample-id')}: no eval with id {', '.join(map(repr, unknown))} among the {len(evals)} loaded"
            )
        wanted = set(sample_ids)
        chosen = [eval_ for eval_ in chosen if eval_.id in wanted]
    for selector in filters:
        chosen = [eval_ for eval_ in chosen if _matches(eval_, selector)]
    if limit is not None:
        chosen = chosen[:limit]
    if not chosen:
        chosen_by = [("--sample-id", list(sample_ids)), ("--filter", list(filters))]
        described = ", ".join(option(flag, values) for flag, values in chosen_by if values)
        raise EvalSelectionError(f"{described}: no eval of the {len(evals)} loaded is selected")
    return chosen
