"""EvalRunner: one agent on one eval, isolated, staged, answered, graded, recorded."""

from __future__ import annotations

import re
import time
import traceback
from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from .._json import TooManyValues, amount_in, count_in
from ..data.cache import default_cache_dir, remove_tree
from ..data.staging import StagingError, stage_data
from ..errors import ConfigError
from ..evals import Eval, load_eval
from ..evals.data_roots import resolve_roots
from ..gateway.server import CallLimits, Gateway, ModelUsage, RunBudget, SessionReport
from ..gateway.transcript import MODEL_CALLS_ARTIFACT, transcript_text
from ..gateway.unit import UnitAccess, open_unit_access, route_of, shared_gateway
from ..graders.judging import Judgments
from ..models.failures import MESSAGE_CHARS, REQUEST_CAUSED_STATUSES, failure_code
from ..record import PROVIDER_ERROR, RAYEVAL_FAILURE, SeenBy
from ..sandbox.config import MiB, SandboxConfig
from ..sandbox.isolation import Isolation, Outcome, run_inline
from ..sandbox.units import SandboxError, unit_runner
from ..secrets import environment_secrets, handed_secrets, redact
from .answers import MAX_ANSWER_NESTING, find_answer, nested_deeper_than
from .checkpoint import STAGED_DATA_FOLDER, ChunkCheckpoints, SavedChunk, unit_checkpoints
from .context import AgentContext, AgentFunction, AgentRef, ModelRelay, UnitKey, call_agent
from .execution import claims_against_counts, grade_execution, now, unanswered_result
from .grading_process import DEFAULT_TIMEOUT_S as DEFAULT_GRADE_TIMEOUT_S
from .prompt import AnswerConvention, build_prompt
from .result import EvalResult
from .unit_agent import UNIT_PRELOAD, check_runs_here, probe, unit_spec
from .workspace import (
    Listing,
    collect_artifacts,
    default_work_root,
    list_or_remove,
    list_work_dir,
    make_work_dir,
)

if TYPE_CHECKING:  # typing's own is Python 3.11's; only mypy reads the annotation
    from typing_extensions import Unpack

#: a row's ``error_details.seen_by`` (see :data:`rayeval.record.SeenBy`)
RUNNER: SeenBy = "runner"
GATEWAY: SeenBy = "gateway"


class ExecuteOptions(TypedDict, total=False):
    """The keywords of :meth:`EvalRunner.execute`, which :meth:`EvalRunner.run` passes on."""

    model: str | None
    seed: int | None
    timeout: float | None
    agent_args: dict[str, str] | None
    isolation: Isolation
    sandbox: SandboxConfig | None
    convention: AnswerConvention
    budget: RunBudget | None
    attempt: int
    from_any_checkpoint: bool
    allow_models: tuple[str, ...]


class EvalRunner:
    """Runs agents on one eval. Each ``run`` gets a new work folder under ``work_root``."""

    def __init__(
        self,
        eval_or_path: Eval | str | Path,
        *,
        work_root: str | Path | None = None,
        cache_dir: str | Path | None = None,
        keep_workspace: bool = False,
        run_id: str | None = None,
        s3_endpoint_url: str | None = None,
        data_roots: Sequence[str | Path] = (),
        runner_root: str | Path | None = None,
        sessions_root: str | None = None,
        secrets: frozenset[str] = frozenset(),
    ):
        self.eval = eval_or_path if isinstance(eval_or_path, Eval) else load_eval(eval_or_path, data_roots=data_roots)
        # local data nodes are staged from the eval's data roots (none for an eval built in memory) and these
        self.data_roots = (*self.eval.data_roots, *resolve_roots(data_roots))
        self.work_root = Path(work_root) if work_root is not None else default_work_root()
        #: what this process's unit runner binds: work roots under one folder share one runner
        self.runner_root = Path(runner_root) if runner_root is not None else self.work_root
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.keep_workspace = keep_workspace
        self.run_id = run_id
        self.s3_endpoint_url = s3_endpoint_url
        #: where a chunked session's unit saves its checkpoints, a folder per unit (None: nowhere)
        self.sessions_root = sessions_root
        #: its run's (:func:`rayeval.secrets.run_secrets`), masked in every result with those
        #: of this environment and those a unit is handed here
        self.secrets = secrets

    def run(
        self,
        agent: AgentFunction | AgentRef,
        *,
        grade_timeout: float = DEFAULT_GRADE_TIMEOUT_S,
        **options: Unpack[ExecuteOptions],
    ) -> EvalResult:
        """Stage, run, find the answer (:meth:`execute`, given ``options``), grade (in a grading
        subprocess, at most ``grade_timeout`` seconds). Never raises for anything the agent does."""
        return grade_execution(self.eval, self.execute(agent, **options), grade_timeout=grade_timeout)

    def execute(
        self,
        agent: AgentFunction | AgentRef,
        *,
        model: str | None = None,
        seed: int | None = None,
        timeout: float | None = None,
        agent_args: dict[str, str] | None = None,
        isolation: Isolation = "sandbox",
        sandbox: SandboxConfig | None = None,
        convention: AnswerConvention = "legacy",
        budget: RunBudget | None = None,
        attempt: int = 1,
        from_any_checkpoint: bool = False,
        allow_models: tuple[str, ...] = (),
    ) -> EvalResult:
        """Everything but grading, so a batch engine can grade many units in one task: the
        result as the run fills it in, not graded yet (its ``status`` None; see :meth:`run`).

        ``agent``: a function (or callable object), or an :class:`AgentRef` naming one, which
        is imported only where it runs, or carries the function the agents layer loaded here
        for a unit run in this process. Only a ref carries a built-in's traits (the replay
        agent's recorded durations, the prompt agent running in this process).
        ``isolation``: see :mod:`rayeval.sandbox.isolation`;
        ``sandbox``: what a sandboxed (or ``process``) unit sees, gets and may use.
        ``convention``: the answer-file name and completion marker the agent is told
        (:mod:`rayeval.unit.prompt`). ``budget``: its run's (``--max-cost``), which its gateway
        session asks before each model call and charges after. ``attempt``: the run's
        attempt at the unit; with a ``sessions_root``, its chunked session goes on from the
        newest checkpoint that attempt saved (Ray runs it again when its node is lost), or,
        ``from_any_checkpoint`` (the attempt before lost its node, or could not run), from the
        newest of any. ``allow_models``: the models its calls may name besides its ``model``
        (``any``: every model; see :mod:`rayeval.gateway.pin`).
        """
        started_at = now()
        start = time.monotonic()
        if _runs_in_worker(agent):
            isolation = "inline"
        limit = timeout if timeout is not None else self.eval.effective_timeout
        context = AgentContext(
            eval_id=self.eval.id,
            model=model,
            seed=seed,
            run_id=self.run_id,
            timeout=limit,
            args=agent_args or {},
            convention=convention,
        )
        work_dir = make_work_dir(self.work_root, run_id=self.run_id, eval_id=self.eval.id, model=model, seed=seed)
        removed = False
        config = sandbox or SandboxConfig()
        checkpoints = self._checkpoints(context, work_dir, attempt)
        try:
            ran, calls = self._run_agent(
                work_dir,
                agent,
                context,
                limit,
                isolation,
                config,
                budget,
                checkpoints,
                from_any_checkpoint,
                allow_models,
            )
            try:
                fields, removed = self._left_behind(ran, calls, work_dir, config)
            except Exception as exc:  # noqa: BLE001 - what the agent left tripped rayeval: its error, its calls counted
                fields = {"outcome": "error", **rayeval_failure(exc), "artifacts": {}}
            if calls is not None:
                _count_calls(fields, calls, int(config.limits.artifact_mb * MiB))
                _keep_failure_at_deadline(fields, calls.counted)
        finally:
            if not self.keep_workspace and not removed:
                remove_tree(work_dir)
        if self.keep_workspace:
            fields.setdefault("metadata", {})["work_dir"] = str(work_dir)
        if checkpoints is not None and (checkpoints.saved or checkpoints.problem):
            _count_carried_turns(fields, checkpoints.resumed)
            fields.setdefault("metadata", {})["session_checkpoints"] = checkpoints.metadata()
        pattern = environment_secrets(self.secrets | handed_secrets(config.env_names, agent_args or {}))
        if pattern is not None:
            fields = redact(fields, pattern)
        if calls is not None:
            fields = redact(fields, [calls.token])
        return EvalResult(
            **fields,
            **context.model_dump(include=set(UnitKey.model_fields)),  # the unit its agent was told
            isolation=isolation,
            replayed=_replays(agent),
            started_at=started_at,
            finished_at=now(),
            duration_s=round(time.monotonic() - start, 6),
        )

    def _left_behind(
        self, ran: Outcome | Exception, calls: SessionReport | None, work_dir: Path, config: SandboxConfig
    ) -> tuple[dict[str, Any], bool]:
        """The unit's fields from how its agent's run ended (``ran``) and what it left in
        ``work_dir`` (its answer files, its artifacts), listed once; and whether the folder is
        gone already (it held nothing)."""
        removed = False
        if self.keep_workspace:
            listing = list_work_dir(work_dir)
        else:
            left = list_or_remove(work_dir)
            removed, listing = left is None, left or []
        fields: dict[str, Any]
        if isinstance(ran, (StagingError, SandboxError)):  # could not run here (its data, its sandbox): worth a retry
            fields = {"outcome": "error", "error_type": type(ran).__name__, "error_message": str(ran)}
            fields["metadata"] = {"error_details": {"seen_by": RUNNER}}
        elif isinstance(ran, Exception):
            fields = {"outcome": "error", **rayeval_failure(ran)}
        else:
            counted = calls.counted if calls is not None else None
            fields = _find_answer(ran, work_dir, listing, int(config.limits.answer_file_mb * MiB), counted)
        fields["artifacts"] = collect_artifacts(listing, int(config.limits.artifact_mb * MiB))
        return fields, removed

    def _run_agent(
        self,
        work_dir: Path,
        agent: AgentFunction | AgentRef,
        context: AgentContext,
        limit: float | None,
        isolation: Isolation,
        sandbox: SandboxConfig,
        budget: RunBudget | None = None,
        checkpoints: ChunkCheckpoints | None = None,
        from_any_checkpoint: bool = False,
        allow_models: tuple[str, ...] = (),
    ) -> tuple[Outcome | Exception, SessionReport | None]:
        """Stage the data and run the agent in ``work_dir``: its outcome, or why it could not
        run (``StagingError``, ``SandboxError``; any other exception: rayeval failed on the
        unit as it ran, its gateway session closed all the same), and what its model calls
        used, as the gateway saw them (None: a user's agent run in this process, ``--isolation
        inline``, where no gateway stands between it and its models). With ``checkpoints``,
        its chunked session saves them, and goes on from one (see ``ChunkCheckpoints.start``):
        its work folder restored before the data is staged, its gateway session starting from
        the counts saved with it."""
        resumed = checkpoints.start(from_any_checkpoint) if checkpoints is not None else None
        base_dir = self.eval.source_path.parent if self.eval.source_path else None
        # Agents that never read inputs (replay, sleep) set ``needs_data = False``.
        nodes = self.eval.data_nodes if getattr(agent, "needs_data", True) else []
        cache_dir = self.cache_dir or default_cache_dir()
        try:
            staged = stage_data(
                nodes,
                work_dir / STAGED_DATA_FOLDER,
                base_dir=base_dir,
                cache_dir=cache_dir,
                timeout=self.eval.download_timeout,
                s3_endpoint_url=self.s3_endpoint_url,
                data_roots=self.data_roots,
                mode="mount" if isolation == "sandbox" else "copy",
            )
        except StagingError as exc:
            return exc, None
        prompt = build_prompt(self.eval.task, work_dir, [node.path for node in staged], context.convention)
        if isolation == "inline" and not _runs_in_worker(agent):  # the user's choice: no gateway
            function = _resolved(agent)
            return run_inline(lambda: call_agent(function, prompt, work_dir, context), limit), None
        gateway = shared_gateway()
        access = open_unit_access(
            gateway,
            context.args,
            model=context.model,
            api=agent.model_api if isinstance(agent, AgentRef) else None,
            options=isinstance(agent, AgentRef) and agent.module is None,
            limits=CallLimits(
                tokens=sandbox.limits.tokens, cost_usd=sandbox.limits.cost_usd, model_calls=sandbox.limits.model_calls
            ),
            budget=budget,
            retry_s=sandbox.limits.gateway_retry_s,
            timeout_s=limit,
            allowed_models=allow_models,
            falls_back=isinstance(agent, AgentRef) and agent.falls_back(context.args),
        )
        if isolation == "inline":  # the prompt agent, in this process: its calls relayed as a unit's
            return self._run_in_worker(agent, prompt, work_dir, context, limit, gateway, access)
        try:
            if resumed is not None:
                access.session.carry(resumed.counted, resumed.calls)
            inputs = [(node.view_source, str(work_dir / node.path)) for node in staged if node.view_source]
            session_id = resumed.session_id if resumed is not None else None
            unit_context = context.model_copy(update={"args": access.args, "resume_session": session_id})
            runner = unit_runner(
                unit_sandbox(sandbox, agent, context.args, self.data_roots), isolation, self.runner_root, cache_dir
            )
            spec = unit_spec(
                runner, agent, prompt, work_dir, unit_context, inputs, model_env=access.env, gateway_port=gateway.port
            )
            if checkpoints is not None:
                checkpoints.report = partial(gateway.settled_report, access.session)
            ran: Outcome | Exception = runner.run(spec, limit, serve=gateway.serve, on_chunk=checkpoints)
        except Exception as exc:  # noqa: BLE001 - the unit's row says why, with its calls counted
            ran = exc
        return ran, gateway.close(access.session)

    def _checkpoints(self, context: AgentContext, work_dir: Path, attempt: int) -> ChunkCheckpoints | None:
        """The unit's checkpoints under ``sessions_root`` (None: none are kept)."""
        if self.sessions_root is None:
            return None
        folder = unit_checkpoints(self.sessions_root, context.eval_id, context.model, context.seed)
        return ChunkCheckpoints(folder, work_dir, attempt=attempt, s3_endpoint_url=self.s3_endpoint_url)

    @staticmethod
    def _run_in_worker(
        agent: AgentFunction | AgentRef,
        prompt: str,
        work_dir: Path,
        context: AgentContext,
        limit: float | None,
        gateway: Gateway,
        access: UnitAccess,
    ) -> tuple[Outcome, SessionReport]:
        """Run rayeval's prompt agent in this process, its model calls sent through the
        gateway with the unit's token (:class:`ModelRelay`). Its options stay as given: its
        response cache is keyed by the provider's endpoint, not the gateway's."""
        function = _resolved(agent)
        route = route_of(context.model)
        relay = ModelRelay(base_url=gateway.base_url(route), token=access.session.token) if route else None
        unit_context = context.model_copy(update={"relay": relay})
        try:
            ran = run_inline(lambda: call_agent(function, prompt, work_dir, unit_context), limit)
        finally:  # a call still in flight past the unit's time is refused from now on
            report = gateway.close(access.session)
        return ran, report


def unit_sandbox(
    sandbox: SandboxConfig, agent: AgentFunction | AgentRef, args: dict[str, str], data_roots: Iterable[Path] = ()
) -> SandboxConfig:
    """The sandbox of ``agent``'s units: the evals' folders (answer keys) hidden, the modules
    that call it preloaded, and what the agent reads where it runs shown (a ``module:function``'s module, a program's install
    folder, the files its options name). As sets: units whose evals add nothing new share
    their worker's one runner."""
    hide = tuple(sorted({*sandbox.hide, *map(str, data_roots)}))
    preload = tuple(dict.fromkeys((*UNIT_PRELOAD, *sandbox.preload)))
    if not isinstance(agent, AgentRef):
        return sandbox.model_copy(update={"hide": hide, "preload": preload})
    return sandbox.model_copy(
        update={
            "hide": hide,
            "preload": tuple(dict.fromkeys((*preload, *agent.preload))),
            "bind": tuple(dict.fromkeys((*sandbox.bind, *agent.shown_paths(args)))),
            "exec_only": tuple(dict.fromkeys((*sandbox.exec_only, *agent.exec_only))),
            "modules": tuple(dict.fromkeys((*sandbox.modules, *([agent.module] if agent.module else [])))),
        }
    )


def check_agent_loads(
    agent: AgentFunction | AgentRef,
    args: dict[str, str],
    *,
    isolation: Isolation,
    sandbox: SandboxConfig,
    runner_root: Path,
    cache_dir: Path | None = None,
    keep: bool = True,
) -> AgentFunction | AgentRef:
    """The start-up check where units run (a run's worker): the unit runner its units will use
    starts (``keep``: and goes on serving them), and the agent loads in a unit of it and takes
    ``args`` there (``SandboxError``, ``AgentUnavailable``). Nothing to check for an agent
    that runs in this process. Returns the agent as its units run it: a ``module:function``
    ref that declared ``needs_data = False`` where it loaded gets no data staged."""
    if isolation == "inline" or _runs_in_worker(agent):
        return agent
    config = unit_sandbox(sandbox, agent, args)
    cache = cache_dir or default_cache_dir()
    if keep:
        needs_data = probe(unit_runner(config, isolation, runner_root, cache), agent, args)
    else:
        needs_data = check_runs_here(config, isolation, runner_root, cache, agent, args)
    if isinstance(agent, AgentRef) and agent.needs_data and not needs_data:
        return agent.model_copy(update={"needs_data": False})
    return agent


def rayeval_failure(exc: Exception, secrets: re.Pattern[str] | None = None) -> dict[str, str]:
    """A unit's error fields when rayeval's own code raised ``exc`` as the unit ran (see
    :data:`rayeval.record.RAYEVAL_FAILURE`), ``secrets`` masked."""
    error = {
        "error_type": RAYEVAL_FAILURE,
        "error_message": f"rayeval failed on this unit: {type(exc).__name__}: {exc}",
        "error_traceback": "".join(traceback.format_exception(exc)),
    }
    return redact(error, secrets)


def failed_after_run(
    execution: EvalResult, exc: Exception, judgments: Judgments | None = None, secrets: re.Pattern[str] | None = None
) -> EvalResult:
    """The result of a unit whose agent ran (``execution``, as the runner filled it in) and that
    rayeval's own code then failed on, raising ``exc`` (as it graded the unit or made its row):
    a :data:`RAYEVAL_FAILURE` error, as one in the runner is (:meth:`EvalRunner.execute`). It
    keeps what the trusted side measured and saw of the run (its times and isolation, its
    model calls as the gateway counted them, their transcript; the judge calls made, with
    their ``judgments``), not what the agent left (its answer, metadata and files), which
    rayeval may have tripped on and could trip on again."""
    failed = execution.trusted_part(outcome="error", **rayeval_failure(exc, secrets))
    return unanswered_result(failed, judgments)


def _replays(agent: AgentFunction | AgentRef) -> bool:
    """Whether ``agent`` is rayeval's replay agent: a trait only an :class:`AgentRef` carries,
    as the agents layer told it (a function's own attributes are not trusted)."""
    return isinstance(agent, AgentRef) and agent.replays_recorded_runs


def _runs_in_worker(agent: AgentFunction | AgentRef) -> bool:
    """Whether ``agent`` is rayeval's prompt agent, which runs in this process whatever the
    isolation (see :mod:`rayeval.agents.prompt`): a trait only an :class:`AgentRef` carries,
    as the agents layer told it (a function's own attributes are not trusted)."""
    return isinstance(agent, AgentRef) and agent.runs_in_worker


def _resolved(agent: AgentFunction | AgentRef) -> AgentFunction:
    """The function itself, for an agent run in this process: as given, or as the agents layer
    loaded it for its ref."""
    if not isinstance(agent, AgentRef):
        return agent
    if agent.function is None:
        raise ConfigError(
            f"agent {agent.name!r} runs in this process but was not loaded here: "
            "name it with rayeval.agents.resolve.agent_ref(name, load=True)"
        )
    return agent.function


def _find_answer(
    outcome: Outcome, work_dir: Path, listing: Listing, file_limit: int, counted: ModelUsage | None = None
) -> dict:
    """The unit's answer and outcome. Left without an answer, it is a ``ProviderError`` when
    its last model call ended in the provider's failure, as the gateway saw it (``counted``),
    whether the agent returned or raised or died on it; only an agent run in this process (no
    gateway) has its own report of one taken."""
    fields: dict = {"agent_s": round(outcome.seconds, 6)}
    failed = gateway_failure_details(counted) if counted is not None and outcome.kind != "timeout" else None
    if outcome.kind != "returned" and failed is not None:  # it ended on its provider's failure: not its own error
        failed["agent_error"] = f"{outcome.error_type}: {outcome.error_message}"[:MESSAGE_CHARS]
        return {
            **fields,
            "outcome": "error",
            "error_type": PROVIDER_ERROR,
            "error_message": _provider_message(failed),
            "error_traceback": outcome.traceback,
            "metadata": {"error_details": failed},
        }
    if outcome.kind != "returned":  # out of time (no traceback), raised or died
        return {
            **fields,
            "outcome": "timeout" if outcome.kind == "timeout" else "error",
            "error_type": outcome.error_type,
            "error_message": outcome.error_message,
            "error_traceback": outcome.traceback,
        }
    try:
        found = find_answer(outcome.value, work_dir, listing, file_limit, decoded=outcome.decoded)
    except TooManyValues as exc:  # a returned <EVAL_ANSWER> body no answer file of the most read holds
        message = f"the agent's tagged answer is too large to read: {exc}"
        return {**fields, "outcome": "error", "error_type": "AnswerTooLarge", "error_message": message}
    except (ValueError, RecursionError) as exc:  # inline: a returned value no JSON holds (a 5,000-digit int)
        message = f"the agent's return value cannot be stored as JSON: {type(exc).__name__}: {exc}"
        return {**fields, "outcome": "error", "error_type": "UnsendableResult", "error_message": message}
    if any(nested_deeper_than(value, MAX_ANSWER_NESTING) for value in (found.answer, found.metadata)):
        return {
            **fields,
            "outcome": "error",
            "error_type": "AnswerTooDeep",
            "error_message": f"the agent's answer or metadata nests lists or objects more than "
            f"{MAX_ANSWER_NESTING} levels deep",
        }
    if isinstance(found.metadata.get("error_details"), dict):  # who saw a failure is the trusted side's word
        found.metadata["error_details"].pop("seen_by", None)
    fields.update(agent_answer=found.answer, answer_source=found.source, metadata=found.metadata)
    if found.found:
        return {**fields, "outcome": "answered"}
    if found.oversized:  # an answer no store takes is the unit's error, as a returned one is
        return {**fields, "outcome": "error", "error_type": "AnswerTooLarge", "error_message": found.problem}
    details = found.metadata.get("error_details")
    failure = provider_failure_details(details) if counted is None else failed
    if failure is not None:  # no answer because the provider failed: the run's error, not a wrong answer
        found.metadata["error_details"] = {**(details or {}), **failure}
        return {**fields, "outcome": "error", "error_type": PROVIDER_ERROR, "error_message": _provider_message(failure)}
    detail = details.get("error") if isinstance(details, dict) else None
    message = "; ".join(text for text in (found.problem, detail) if text)
    return {**fields, "outcome": "no_answer", "error_type": "NoAnswer", "error_message": message}


def _count_calls(fields: dict[str, Any], calls: SessionReport, artifact_bytes: int) -> None:
    """What the gateway saw of the unit's model calls: its counts, their transcript (the
    ``model_calls.json`` artifact, the newest calls that fit), and where the agent's own
    report of them differs."""
    fields["model_usage"] = calls.counted
    left_out = calls.counted.refused_calls_not_kept
    fields["artifacts"][MODEL_CALLS_ARTIFACT] = transcript_text(calls.calls, artifact_bytes, left_out)
    metadata = fields.setdefault("metadata", {})
    if isinstance(metadata, dict):
        metadata["gateway"] = calls.counted.model_dump(mode="json")
        metadata.pop("claims_differ_from_gateway", None)  # the gateway's word, never the agent's
        differs = claims_against_counts(metadata, calls.counted)
        if differs:
            metadata["claims_differ_from_gateway"] = differs


def _keep_failure_at_deadline(fields: dict[str, Any], counted: ModelUsage) -> None:
    """A unit its deadline ended while its provider failed (the gateway saw its last model call
    end in the failure) keeps that failure in its ``error_details``, stopped by the deadline, as
    the reference runner keeps a failure its program was still retrying at the timeout."""
    failure = gateway_failure_details(counted)
    if fields.get("outcome") == "timeout" and failure is not None:
        fields.setdefault("metadata", {})["error_details"] = {**failure, "provider_retry_stop_reason": "run_deadline"}


def _count_carried_turns(fields: dict[str, Any], resumed: SavedChunk | None) -> None:
    """A resumed unit's turns: those its earlier part reported (as saved with its checkpoint)
    and its own, each counted once."""
    metadata = fields.get("metadata")
    if resumed is not None and isinstance(metadata, dict) and type(metadata.get("n_turns")) is int:
        metadata["n_turns"] += resumed.turns


def gateway_failure_details(counted: ModelUsage) -> dict[str, Any] | None:
    """The provider failure the gateway saw end the unit's last model call, as a
    ``ProviderError`` row's details (None: there was none): ``seen_by`` the gateway unless the
    unit's own requests may have brought it about (a rate limit: see :data:`~rayeval.record.SeenBy`)."""
    failure = counted.last_failure
    if failure is None:
        return None
    seen = {} if failure.request_caused else {"seen_by": GATEWAY}
    return {**failure.as_dict(), **seen, "provider_retry_count": None, "provider_retry_wait_s": None}


def provider_failure_details(details: Any) -> dict[str, Any] | None:
    """The provider failure an agent's ``error_details`` report, checked field by field (the
    agent is not trusted): ``status`` an HTTP status or None, ``code`` the one that status has,
    ``message`` cut to 500 characters, ``retry_after_s`` and the recovery's counts as finite
    numbers >= 0 (else None); None when the details report no provider failure."""
    if not isinstance(details, dict) or not isinstance(details.get("code"), str):
        return None
    status = details.get("status")
    if status is not None and not (type(status) is int and 100 <= status <= 599):
        return None
    if details["code"] != failure_code(status):
        return None
    message = details.get("message")
    return {
        "status": status,
        "code": details["code"],
        "message": message[:MESSAGE_CHARS] if isinstance(message, str) else "",
        "retry_after_s": amount_in(details.get("retry_after_s")),
        "provider_retry_count": count_in(details.get("provider_retry_count")),
        "provider_retry_wait_s": amount_in(details.get("provider_retry_wait_s")),
    }


def _provider_message(failure: dict[str, Any]) -> str:
    status = f"HTTP {failure['status']}" if failure["status"] is not None else "no HTTP status"
    retries = failure["provider_retry_count"]
    resumed = f", after {retries} resume{'s' if retries != 1 else ''}" if retries else ""
    # a rate limit is not run again (the unit's own requests may bring one on): say what helps
    hint = "; not run again: raise --gateway-retry-s or lower --max-concurrency, then --resume --retry-errors"
    tail = hint if failure["status"] in REQUEST_CAUSED_STATUSES else ""
    return f"the model's provider failed ({status}, {failure['code']}{resumed}{tail}): {failure['message']}"
