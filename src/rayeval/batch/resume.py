"""What a run starts from: the manifest it stores (the inputs its units derive from), checked
against the one stored by the run it resumes, and the units left to run."""

from __future__ import annotations

import logging

import numpy as np

from .._messages import option, options
from ..errors import RayevalError
from ..storage import ResultStore, RunManifest
from ..storage.store import ManifestError
from .config import BatchConfig, StorageConfig
from .plan import Plan, compact_seeds, plan_changes, unstored
from .prepare import PreparedRun
from .queue import goes_on_from_any_checkpoint

log = logging.getLogger(__name__)


class RunConflict(RayevalError, ValueError):
    """The run id already holds results (without --resume), or --resume has nothing to resume."""


def resumed_run_id(config: StorageConfig) -> str | None:
    """The run ``--resume`` finishes (None: the run is a new one); RunConflict for options
    that cannot go together, the Python API's as the command line's."""
    if config.retry_errors and not config.resume:
        raise RunConflict(
            f"{option('--retry-errors', True)} goes with {option('--resume', True)}: it reruns the errored units of "
            "an existing run"
        )
    if config.resume and config.run_id is None:
        raise RunConflict(f"{option('--resume', True)} needs {option('--run-id')}: the run to finish")
    return config.run_id if config.resume else None


def starting_manifest(store: ResultStore, run_id: str, config: BatchConfig, prepared: PreparedRun) -> RunManifest:
    """The manifest of run ``run_id`` as it starts, its secrets masked: a new run id, or
    (``--resume``) a stored run planned with the same inputs; else :class:`RunConflict` (or
    :class:`ManifestError`) saying why and what to do instead."""
    storage = config.storage
    previous, damaged = previous_manifest(store, run_id, storage)
    if storage.resume and previous is None and not damaged:
        raise RunConflict(f"{option('--resume', True)}: no run {run_id!r} under {storage.output}")
    if not storage.resume and previous is not None:
        raise RunConflict(_existing_run(run_id, storage.output, previous.status))
    if previous is not None and previous.agent != config.agent:
        raise RunConflict(f"run {run_id!r} was made with agent {previous.agent!r}, not {config.agent!r}")
    planned = run_manifest(config, run_id, prepared, previous)
    # a resumed run finishes the plan it started with: with other inputs its stored rows and
    # the new ones would mix two experiments (--force takes the new inputs knowingly)
    if previous is not None and (changes := plan_changes(previous, planned, config.agent_args)):
        diff = "".join(f"\n  {change}" for change in changes)
        if not storage.force:
            raise RunConflict(
                f"{option('--resume', True)}: run {previous.run_id!r} was planned with other inputs (before → after):{diff}\n"
                "Its rows and new ones would mix two experiments. Restore those inputs, start a new run "
                f"(another {option('--run-id')}), or pass {option('--force', True)} to resume with the new inputs."
            )
        log.warning(
            "--resume --force: run %s goes on with new inputs (units with new ids run, stored rows stay):%s",
            previous.run_id,
            diff,
        )
    return planned


def previous_manifest(store: ResultStore, run_id: str, config: StorageConfig) -> tuple[RunManifest | None, bool]:
    """The run's stored manifest, and whether it is damaged (not a run manifest).  A damaged
    one leaves the run's inputs unknown: only ``--resume --force`` goes on, with the current
    inputs (its stored units are not run again); anything else is refused saying so."""
    try:
        return store.read_manifest(run_id), False
    except ManifestError as exc:
        if not (config.resume and config.force):
            raise ManifestError(
                f"{exc}: the inputs run {run_id!r} was planned with are unknown; "
                f"{options(('--resume', True), ('--force', True))} finishes it with the current inputs (its stored "
                "units are not run again)"
            ) from None
        log.warning("--resume --force: %s; replaced by the manifest of the current inputs", exc)
        return None, True


def _existing_run(run_id: str, output: str, status: str) -> str:
    """Why a new run cannot take ``run_id``, and what to do instead: a finished run has
    nothing left to resume (its errored units can run again)."""
    where = f"run {run_id!r} already exists under {output}"
    if status == "completed":
        return (
            f"{where} and is finished: choose another {option('--run-id')} (or none, for a new one); "
            f"{options(('--retry-errors', True), ('--run-id', run_id))} runs its errored units again"
        )
    left = "interrupted" if status == "running" else status  # this driver holds its lease: nobody runs it
    return f"{where} ({left}): pass {option('--resume', True)} to finish it"


def run_manifest(config: BatchConfig, run_id: str, prepared: PreparedRun, previous: RunManifest | None) -> RunManifest:
    """The run's manifest: the inputs its units are derived from, not the units; the run's
    secrets masked wherever they appear."""
    execution, evals, plan = config.execution, prepared.evals, prepared.plan
    return RunManifest.model_validate(
        {
            "run_id": run_id,
            "agent": config.agent,
            "agent_args": config.agent_args,
            "isolation": execution.isolation,
            "network": execution.sandbox.network if execution.isolation == "sandbox" else None,
            "timeout": execution.timeout,
            "grade_timeout": execution.grade_timeout,
            "answer_convention": execution.answer_convention,
            "allow_models": execution.allow_models,
            "limits": execution.sandbox.limits.model_dump(),
            "models": config.models,
            "seeds": compact_seeds(config.seeds),
            "eval_files": [
                {"path": str(e.source_path or "<in-memory>"), "id": e.id, "eval_hash": e.content_hash()} for e in evals
            ],
            "plan_digest": plan.digest(),
            "total_units": len(plan),
            **({"created_at": previous.created_at} if previous else {}),
        },
        context={"secrets": prepared.secrets},
    )


def units_to_run(
    config: StorageConfig, store: ResultStore, run_id: str, plan: Plan
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """A bool per plan position, the units to run (a resumed run's stored ones are not, but
    those its budget cut short are, and with ``retry_errors`` its errored ones); the attempts
    already stored of each unit that runs again (None: none does); and a bool per position,
    whether the unit's first attempt in this run goes on from any checkpoint
    (:func:`.queue.goes_on_from_any_checkpoint` of what is stored: a resumed run decides as
    the run it resumes would have)."""
    if not config.resume:
        todo = unstored(plan, np.array([], dtype="S32"))
        return todo, None, np.zeros(len(plan), dtype=bool)
    stored = store.stored_unit_id_array(run_id)
    never_stored = unstored(plan, stored)  # goes_on_from_any_checkpoint(None) for each
    rerun = store.units_to_run_again(run_id, errors=config.retry_errors)
    if not rerun:
        return never_stored, None, never_stored.copy()
    again = np.sort(np.array(list(rerun), dtype="S32"))
    todo = unstored(plan, stored[~np.isin(stored, again)])
    earlier = np.zeros(len(plan), dtype=np.int32)
    from_any_checkpoint = never_stored.copy()
    for position in np.flatnonzero(~unstored(plan, again)):
        attempt, metadata_json = rerun[plan.unit(int(position)).unit_id]
        earlier[position] = attempt
        from_any_checkpoint[position] = goes_on_from_any_checkpoint(metadata_json)
    return todo, earlier, from_any_checkpoint


def units_run_again(todo: np.ndarray, earlier: np.ndarray | None) -> int:
    """Of the units to run (``todo``, :func:`units_to_run`'s), those stored before."""
    return 0 if earlier is None else int((earlier[todo] > 0).sum())


def rerun_text(again: int) -> str:
    """How the run's start and its dry run say that units stored before run again."""
    return f", {again} of them again: errored, or cut short by the budget" if again else ""
