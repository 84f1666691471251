"""``rayeval.evaluations.run``: a Humanloop-style evaluation on the Ray batch engine.

Each datapoint becomes one unit of the batch engine (an in-memory eval whose id is the stable
datapoint id); the file callable is the unit's agent and the evaluators grade it as the
registered ``evaluations`` grader, both shipped to the Ray workers with cloudpickle. Rows land
in the usual Parquet layout (``<output>/run_id=<id>/model=<file path[@version]>/``), the stats
are read back from them; the run's manifest names its evaluation, found again by the next run.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..batch.config import DEFAULT_OUTPUT
from ..report import (
    REPORT_COLUMNS,
    EvaluationStats,
    ResultsReader,
    benchmark_table,
    evaluation_stats,
    to_text,
)
from ..report.benchmark import isolation_note
from ..report.stats import (
    BooleanEvaluatorStats,
    NumberEvaluatorStats,
    SelectEvaluatorStats,
)
from ..sandbox.isolation import Isolation
from ..storage.store import ResultStore
from .catalog import store_version
from .config import EvaluationConfigError, EvaluationSpec, EvaluatorConfig, ReturnType, validate_arguments
from .prompts import PromptCaller
from .runtime import EVALUATIONS_GRADER, DatapointCaller, EvaluationGrade, LocalEvaluator


class EvaluatorCheck(BaseModel):
    """One evaluator's aggregate over the run, its change since the previous run, its threshold.

    ``score``: boolean → share of logs judged true (``num_true / total_logs``: errors and
    nulls count as not true); number → mean of the judgments; select / multi_select → share
    of logs whose judgment is (or, multi-select, includes) the most common option, named in
    ``option`` (ties: the first option alphabetically); text → None. ``delta`` = score −
    the previous run's score (select: the previous share of the same option), None on a
    first run or when either score is None. ``threshold_check`` = score >= threshold (False
    when there is no score), None without a threshold.
    """

    model_config = ConfigDict(frozen=True)

    path: str
    return_type: ReturnType
    score: float | None
    delta: float | None
    threshold: float | None
    threshold_check: bool | None
    improvement_check: bool | None = None  # delta >= 0 (None on a first run)
    previous_score: float | None = None
    option: str | None = None  # select / multi_select: the option whose share is the score
    num_judgments: int = 0
    num_errors: int = 0
    #: logs it could not judge: it needs a target their datapoint lacks (nulls, not in the score)
    num_not_applicable: int = 0


class EvaluationResult(BaseModel):
    """What ``evaluations.run`` returns (and prints as ``report``)."""

    model_config = ConfigDict(frozen=True)

    name: str
    run_id: str
    previous_run_id: str | None
    version_id: str  # the rows' ``model``: file path[@version]
    output: str
    results_path: str  # hand it to pandas.read_parquet
    stats: EvaluationStats
    checks: list[EvaluatorCheck]
    report: str

    @property
    def passed(self) -> bool:
        """No threshold check failed (evaluators without a threshold do not count)."""
        return all(check.threshold_check is not False for check in self.checks)

    def check(self, path: str) -> EvaluatorCheck:
        for check in self.checks:
            if check.path == path:
                return check
        raise KeyError(f"no evaluator {path!r} in this evaluation (have {', '.join(c.path for c in self.checks)})")

    def __str__(self) -> str:
        return self.report


# -- scores --------------------------------------------------------------------------------
def _mode(counts: Mapping[str, int]) -> str | None:
    return min(counts, key=lambda option: (-counts[option], option)) if counts else None


def evaluator_score(stat: Any, option: str | None = None) -> tuple[float | None, str | None]:
    """(score, option) of one EvaluatorStats; ``option`` fixes the select option to score."""
    if isinstance(stat, BooleanEvaluatorStats):
        return (stat.num_true / stat.total_logs if stat.total_logs else None), None
    if isinstance(stat, NumberEvaluatorStats):
        return stat.mean, None
    if isinstance(stat, SelectEvaluatorStats):
        counts = stat.num_judgments_per_option
        chosen = option if option is not None else _mode(counts)
        if chosen is None or not stat.total_logs:
            return None, chosen
        return counts.get(chosen, 0) / stat.total_logs, chosen
    return None, None


def _stats_by_path(stats: EvaluationStats | None, run_id: str | None) -> dict[str, Any]:
    if stats is None:
        return {}
    for run in stats.run_stats:
        if run.run_id == run_id:
            return {s.evaluator: s for s in run.evaluator_stats}
    return {}


def _delta(score: float | None, previous: float | None) -> float | None:
    if score is None or previous is None:
        return None
    return round(score - previous, 12)  # no float noise such as 0.20000000000000007


def _threshold_met(stat: Any, score: float | None, threshold: float) -> bool:
    """Whether ``score`` meets ``threshold``; a number evaluator's only where every log has a
    number: its score is the mean of those that do, and a log without one (its callable or its
    evaluator raised, or judged it null: the output may bring either about) must not lift it."""
    if isinstance(stat, NumberEvaluatorStats) and (stat.num_errors or stat.num_nulls):
        return False
    return score is not None and score >= threshold


def build_checks(
    evaluators: Sequence[EvaluatorConfig],
    current: Mapping[str, Any],
    previous: Mapping[str, Any],
    previous_types: Mapping[str, str],
) -> list[EvaluatorCheck]:
    checks = []
    for evaluator in evaluators:
        stat = current.get(evaluator.path)
        score, option = evaluator_score(stat) if stat is not None else (None, None)
        before = None
        if evaluator.path in previous and previous_types.get(evaluator.path) == evaluator.return_type:
            before, _ = evaluator_score(previous[evaluator.path], option)
        delta = _delta(score, before)
        threshold_check = None if evaluator.threshold is None else _threshold_met(stat, score, evaluator.threshold)
        checks.append(
            EvaluatorCheck(
                path=evaluator.path,
                return_type=evaluator.return_type,
                score=score,
                delta=delta,
                threshold=evaluator.threshold,
                threshold_check=threshold_check,
                improvement_check=None if delta is None else delta >= 0,
                previous_score=before,
                option=option,
                num_judgments=getattr(stat, "num_judgments", 0),
                num_errors=getattr(stat, "num_errors", 0),
                num_not_applicable=getattr(stat, "num_not_applicable", 0),
            )
        )
    return checks


# -- the report ----------------------------------------------------------------------------
def _number(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.4f}" if signed else f"{value:.4f}"


def checks_table(checks: Sequence[EvaluatorCheck], stats: Mapping[str, Any]) -> str:
    header = ("evaluator", "type", "logs", "judged", "nulls", "n/a", "errors", "score", "delta", "threshold", "check")
    rows = []
    for check in checks:
        stat = stats.get(check.path)
        name = check.path if check.option is None else f"{check.path} [{check.option}]"
        verdict = {None: "-", True: "PASS", False: "FAIL"}[check.threshold_check]
        rows.append(
            (
                name,
                check.return_type,
                str(getattr(stat, "total_logs", 0)),
                str(getattr(stat, "num_judgments", 0)),
                str(getattr(stat, "num_nulls", 0)),
                str(getattr(stat, "num_not_applicable", 0)),
                str(getattr(stat, "num_errors", 0)),
                _number(check.score),
                _number(check.delta, signed=True),
                _number(check.threshold),
                verdict,
            )
        )
    if not rows:
        return "no evaluators"
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]
    left = {0, 1}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *(line(r) for r in rows)])


def _report(
    spec: EvaluationSpec,
    run_id: str,
    previous: Mapping[str, Any] | None,
    stats: EvaluationStats,
    units: Any,
    checks: list[EvaluatorCheck],
    current: Mapping[str, Any],
    results_path: str,
) -> str:
    compared = (
        f"compared with run {previous['run_id']} ({previous['models'][0]})"
        if previous
        else "first run of this name: no delta"
    )
    points = len(spec.dataset.datapoints)
    parts = [
        f"Evaluation {spec.name!r}: {spec.file.type} {spec.file.identity} on dataset {spec.dataset.path!r} ({points} datapoints)",
        f"run {run_id}, {compared}",
        f"status: {stats.status}; {stats.progress}",
    ]
    if len(units):
        parts.append("")
        parts.append(to_text(benchmark_table(units)))
        unsandboxed = isolation_note(units)
        if unsandboxed:
            parts.append(unsandboxed)
        parts.append(
            "Accuracy is the share of logs that passed every check (boolean evaluators, and number "
            "evaluators with a threshold); errors count as failures."
        )
    parts += ["", checks_table(checks, current)]
    if checks:
        parts.append(
            "score: a boolean evaluator's share of true judgments as a fraction (0-1, as Humanloop reports it), "
            "a number evaluator's mean; Accuracy above is in percent."
        )
        if any(c.num_not_applicable for c in checks):
            parts.append("n/a: nulls of an evaluator that needs a target, on datapoints without one (not judged).")
    gated = [c for c in checks if c.threshold_check is not None]
    if gated:
        failed = [c.path for c in gated if not c.threshold_check]
        parts.append(
            f"{len(gated) - len(failed)}/{len(gated)} threshold checks passed"
            + (f"; failed: {', '.join(failed)}" if failed else "")
        )
    parts.append(f"results: {results_path}")
    return "\n".join(parts)


# -- run -----------------------------------------------------------------------------------
def _in_memory_evals(spec: EvaluationSpec) -> list[Any]:
    """One Eval per datapoint, graded by the ``evaluations`` grader."""
    from .._json import dumps
    from ..evals.model import Eval, GraderSpec

    grader = GraderSpec(
        type=EVALUATIONS_GRADER,
        config={
            "evaluators": [
                {"path": e.path, "args_type": e.args_type, "return_type": e.return_type, "threshold": e.threshold}
                for e in spec.evaluators
            ]
        },
    )
    evals = []
    for datapoint_id, point in zip(spec.datapoint_ids, spec.dataset.datapoints):
        task = dumps(
            {"inputs": point.inputs, "messages": point.messages}
            if point.messages is not None
            else {"inputs": point.inputs}
        )
        evals.append(
            Eval.model_construct(
                id=datapoint_id,
                task=task,
                grader=grader,
                metadata={"task": spec.dataset.path, "eval_type": "datapoint"},
                inputs=point.inputs,
                messages=point.messages,
                target=point.target,
            )
        )
    return evals


def _read_stats(
    reader: ResultsReader,
    run_id: str,
    evaluators: Mapping[str, str],
    *,
    planned: int | None = None,
    status: str | None = None,
) -> tuple[EvaluationStats, Any]:
    """(EvaluationStats without report, the units) of one run."""
    units = reader.units(runs=run_id, columns=[*REPORT_COLUMNS, "metrics_json"])
    # every judgment is in metrics_json: an evaluator path may equal a result column's name
    stats = evaluation_stats(
        units,
        evaluators=dict(evaluators),
        evaluator_source="metrics",
        planned_units=planned,
        run_status=status,
        report=False,
    )
    return stats, units


def previous_run(reader: ResultsReader, name: str, *, before: str) -> dict[str, Any] | None:
    """The manifest of the newest completed run of evaluation ``name`` under the reader's root
    other than ``before``: the engine's record of a run, whose ``agent_args`` name its
    evaluation and its evaluators' return types."""
    runs = [
        manifest
        for run, manifest in reader.manifests().items()
        if run != before and manifest.get("status") == "completed" and _evaluation_of(manifest) == name
    ]
    return max(runs, key=lambda manifest: (str(manifest.get("created_at", "")), manifest["run_id"]), default=None)


def _evaluation_of(manifest: Mapping[str, Any]) -> Any:
    args = manifest.get("agent_args")
    return args.get("evaluation") if isinstance(args, Mapping) else None


def _store_given(store: ResultStore, spec: EvaluationSpec, file: Any, dataset: Any) -> None:
    """Store the dataset and the prompt given in full under their paths, so a later run can
    name them."""
    if isinstance(file, Mapping) and spec.file.prompt is not None and "version" in file:
        store_version(store, "prompt", spec.file.path, spec.file.version)
    if isinstance(dataset, Mapping) and "datapoints" in dataset:
        store_version(store, "dataset", spec.dataset.path, spec.dataset.stored_body())


def _with_type(file: Any, file_type: str) -> Any:
    """``file`` with the ``type`` given beside it; the two must agree when both are given."""
    if not isinstance(file, Mapping):
        return file  # validation says what is wrong with it
    if file.get("type", file_type) != file_type:
        raise EvaluationConfigError([f"type: {file_type!r}, but file.type is {file['type']!r}: give one"])
    return {**file, "type": file_type}


def _caller(spec: EvaluationSpec) -> DatapointCaller | PromptCaller:
    if spec.file.prompt is not None:
        return PromptCaller(spec.file.prompt, spec.model_options)
    assert spec.file.callable is not None
    return DatapointCaller(spec.file.callable)


def run(
    name: str,
    file: Mapping[str, Any],
    evaluators: Sequence[Mapping[str, Any]] | None,
    dataset: Mapping[str, Any],
    workers: int = 4,
    *,
    output: str = DEFAULT_OUTPUT,
    address: str | None = None,
    s3_endpoint_url: str | None = None,
    show_progress: bool = True,
    print_report: bool = True,
    run_id: str | None = None,
    timeout: float | None = None,
    retries: int = 0,
    isolation: Isolation = "sandbox",
    model_options: Mapping[str, Any] | None = None,
    type: str | None = None,
    **engine_options: Any,
) -> EvaluationResult:
    """Evaluate ``file`` over ``dataset`` with ``evaluators`` on Ray; rows go to ``output``.

    ``file = {path, type="flow", version=None, callable}``: ``callable(**inputs,
    messages=messages)`` (``messages`` only when the datapoint has them) returns the log's
    output, a string (anything else is stored as JSON text). ``path`` and ``version`` (a
    string, or a dict of parameters identified by its hash) make the rows' ``model``:
    ``path`` or ``path@version``.

    ``evaluators = [{path, args_type="target_free"|"target_required", return_type=
    "boolean"|"number"|"select"|"multi_select"|"text", callable, threshold=None}]``:
    ``callable(log)``, or ``callable(log, datapoint)`` when target_required; the log and the
    datapoint are plain dicts (see :mod:`rayeval.evaluations.runtime`). An evaluator that
    raises records ``{"error": ...}`` as its judgment (counted in ``num_errors``), never a
    crash. Thresholds: a share in [0, 1] for boolean evaluators, any number for number
    evaluators (met only where every log has a number), none for select, multi_select or text.

    ``dataset = {path, datapoints: [{inputs, messages=None, target=None, id=None}]}``:
    a datapoint's id (the rows' ``eval_id``) is its ``id`` or a hash of its content; without a
    ``path``, the dataset takes the evaluation's ``name``. ``type`` is the file's type, given
    beside ``file`` rather than in it (as one of Humanloop's examples writes it).

    Humanloop parity: ``file.version = {model, template, temperature, ...}`` is a prompt defined
    in code, called per datapoint (:mod:`rayeval.evaluations.prompts`; ``model_options`` says
    how to reach its model and the LLM judges'); a dataset or prompt given in full is stored
    under its path in ``output`` and ``{"path": ...}`` alone names the one stored last
    (:mod:`rayeval.evaluations.catalog`); an evaluator ``{"path": ...}`` alone is a built-in
    or a registered one, ``evaluator_type="llm"`` an LLM judge (:mod:`rayeval.evaluations.library`).

    ``workers`` is the number of datapoints in flight at once. Ray is embedded (started and
    stopped here, loopback only) unless ``address`` names a cluster or Ray is already
    initialised. Every argument is validated before any Ray work
    (:class:`~rayeval.evaluations.EvaluationConfigError`). ``timeout`` (seconds per call of
    the file callable), ``retries`` (of a callable that raised), ``isolation`` (``"sandbox"``, the
    default: each datapoint in a sandboxed process of its own that holds that datapoint's inputs
    only, as an agent's unit; ``"process"``: a fresh process without the sandbox; ``"inline"``:
    in the Ray workers, for a callable you trust) and other ``BatchConfig`` options (``flush_seconds``,
    ``work_root``…) pass to the engine. Returns the run's EvaluationStats and a check per
    evaluator, with the delta against the previous run of the same ``name`` under ``output``.
    """
    from ..batch.cluster import runs_embedded
    from ..batch.config import BatchConfig
    from ..batch.engine import new_run_id, run_batch

    store = ResultStore(output, s3_endpoint_url=s3_endpoint_url)
    if type is not None:
        file = _with_type(file, type)
    # on an embedded Ray the judges' model calls have this process's environment: their keys are checked
    spec = validate_arguments(
        name, file, evaluators, dataset, store=store, model_options=model_options, environment=runs_embedded(address)
    )
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"evaluations.run: workers must be an integer >= 1, got {workers!r}")
    version_id = spec.file.identity
    file_info = {"path": spec.file.path, "type": spec.file.type, "version": spec.file.version}
    run_id = run_id or new_run_id()
    # the run's manifest names its evaluation, dataset version and evaluators (see previous_run)
    labels = {
        "evaluation": spec.name,
        "file": spec.file.path,
        "dataset": spec.dataset.path,
        "dataset_version": spec.dataset.version_id,
        "evaluators": json.dumps({e.path: e.return_type for e in spec.evaluators}),
    }
    # the engine options run sets itself (``workers`` is the concurrency)
    settings: dict[str, Any] = {
        "evals": [],
        "agent": spec.file.type,
        "agent_args": labels,
        "models": [version_id],
        "seeds": [1],
        "output": output,
        "run_id": run_id,
        "max_concurrency": workers,
        "address": address,
        "s3_endpoint_url": s3_endpoint_url,
        "show_progress": show_progress,
        "timeout": timeout,
        "retries": retries,
        # a prompt runs in the workers as the prompt agent does (see .prompts)
        "isolation": "inline" if spec.file.prompt is not None else isolation,
    }
    clash = sorted(set(engine_options) & {*settings, "resume"})  # an evaluation is never resumed
    if clash:
        raise TypeError(f"evaluations.run: {', '.join(clash)} cannot be passed as engine options")
    unknown = sorted(set(engine_options) - BatchConfig.option_names())
    if unknown:
        raise TypeError(f"evaluations.run: unknown option(s) {', '.join(unknown)}")
    config = BatchConfig(**settings, **engine_options)
    _store_given(store, spec, file, dataset)
    caller = _caller(spec)
    grader = EvaluationGrade(
        [
            LocalEvaluator(e.path, e.args_type, e.return_type, e.threshold, e.callable, e.without_target)
            for e in spec.evaluators
        ],
        name=spec.name,
        file=file_info,
        version_id=version_id,
        grade_timeout=config.execution.grade_timeout,
    )
    summary = run_batch(config, evals=_in_memory_evals(spec), agent=caller, grade=grader)

    reader = ResultsReader(output, s3_endpoint_url)
    kinds = {e.path: e.kind for e in spec.evaluators}
    manifest = store.read_manifest(run_id)
    stats, units = _read_stats(
        reader, run_id, kinds, planned=len(spec.dataset.datapoints), status=manifest.status if manifest else None
    )
    current = _stats_by_path(stats, run_id)

    previous = previous_run(reader, spec.name, before=run_id)
    previous_stats: dict[str, Any] = {}
    previous_types: dict[str, str] = {}
    if previous is not None:
        previous_types = json.loads(previous["agent_args"].get("evaluators", "{}"))
        shared = {e.path: e.kind for e in spec.evaluators if previous_types.get(e.path) == e.return_type}
        if shared:
            before, _ = _read_stats(reader, previous["run_id"], shared)
            previous_stats = _stats_by_path(before, previous["run_id"])
    checks = build_checks(spec.evaluators, current, previous_stats, previous_types)

    text = _report(spec, run_id, previous, stats, units, checks, current, summary.results_path)
    stats = stats.model_copy(update={"report": text})
    if print_report:
        print(text, file=sys.stdout, flush=True)
    return EvaluationResult(
        name=spec.name,
        run_id=run_id,
        previous_run_id=previous["run_id"] if previous else None,
        version_id=version_id,
        output=output,
        results_path=summary.results_path,
        stats=stats,
        checks=checks,
        report=text,
    )
