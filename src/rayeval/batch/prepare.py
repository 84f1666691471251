"""What a run checks and plans before anything starts, the run and its dry run alike: its
evals (loaded and selected), its agent, judges and data, and its plan.  A usage error is found
here, before a run's rows are touched, not as thousands of error rows."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._messages import option
from ..agents.locate import check_module_agent
from ..agents.resolve import agent_ref, check_agent_args, is_module_path
from ..data.remote_data import remote_data_problems
from ..evals import Eval, EvalFileError, load_evals, select_evals
from ..evals.loader import EvalProblem
from ..evals.model import DEFAULT_AGENT_TIMEOUT_S
from ..graders.rubric import check_judge_key, judge_models
from ..models.failures import ANTHROPIC_KEY_FALLBACK_ON, ANTHROPIC_KEY_FALLBACKS, fallback_keys, key_fallback_on
from ..models.providers import ModelError
from ..secrets import run_secrets
from ..unit.context import AgentFunction, UnitResources
from .cluster import runs_embedded
from .config import BatchConfig
from .plan import Plan


@dataclass(frozen=True)
class PreparedRun:
    """A run's checked inputs and plan."""

    evals: list[Eval]
    plan: Plan
    #: what one unit asks Ray for
    resources: UnitResources
    #: its units and judges run on an embedded Ray, with this process's environment
    embedded: bool
    #: lines the run's start and its dry run print: each unit's time limit, and what the checks
    #: could not check from here (a cluster's judge keys)
    notes: list[str]
    #: masked in everything the run stores (see :func:`rayeval.secrets.run_secrets`); never
    #: stored, nor given to a unit
    secrets: frozenset[str] = field(default=frozenset(), repr=False)


def prepare_run(
    config: BatchConfig, evals: list[Eval] | None = None, agent: AgentFunction | None = None
) -> PreparedRun:
    """The run's evals (``evals``, or loaded from ``config.evals``), selected; its agent's
    options, judges' keys and remote data checked; its plan; its secrets.  Whether a sandboxed or
    ``process`` agent loads is checked where units run (by the run's workers before the first
    unit) or, by a dry run, in a unit runner on this machine (see rayeval.batch.preview)."""
    evals = run_evals(config, evals)
    embedded = runs_embedded(config.ray.address)
    resources = check_agent(config, agent, embedded=embedded)
    notes = [describe_time_limits(evals, config.execution.timeout), *check_judges(evals, embedded=embedded)]
    notes += describe_key_fallbacks(os.environ)
    if config.check_data:
        check_data(evals, s3_endpoint_url=config.storage.s3_endpoint_url)
    plan = Plan(evals, config.models, config.seeds, config.agent)
    secrets = run_secrets(config.execution.sandbox.env_names, config.agent_args)
    return PreparedRun(evals, plan, resources, embedded, notes, secrets)


def describe_time_limits(evals: list[Eval], timeout: float | None) -> str:
    """The time each unit may run, as the run's start line and dry run say it: the run's
    ``--timeout``, else each eval's own, else the default."""
    if timeout is not None:
        return f"time limit per unit: {timeout:g} s ({option('--timeout')})"
    limits = Counter(eval_.effective_timeout for eval_ in evals)
    own = sum(1 for eval_ in evals if eval_.agent_timeout or eval_.timeout)
    if not own:
        return f"time limit per unit: {DEFAULT_AGENT_TIMEOUT_S:g} s (the default: no eval sets one; {option('--timeout', 'S')} changes it)"
    shown = ", ".join(
        f"{seconds:g} s for {count} eval{'s' if count != 1 else ''}" for seconds, count in sorted(limits.items())
    )
    return f"time limit per unit: {shown} ({own} of {len(evals)} evals set their own, the others {DEFAULT_AGENT_TIMEOUT_S:g} s, the default)"


#: what each ``ANTHROPIC_KEY_FALLBACK_ON`` takes the next key on, as the run's start says it
_FALLBACK_TRIGGERS = {
    "rejected_key": "a rejected key (401/403, billing)",
    "refusal": "a refusal, as latch-eval-tools does",
    "both": "a rejected key or a refusal",
}


def describe_key_fallbacks(environ: Mapping[str, str]) -> list[str]:
    """How many Anthropic fallback keys this machine lists and on what the next is taken (the
    default differs from latch-eval-tools', so a run says which is in effect); none when it
    lists none, or lists them wrongly (the agent's check stops the run on that)."""
    try:
        keys = fallback_keys(ANTHROPIC_KEY_FALLBACKS, environ.get(ANTHROPIC_KEY_FALLBACKS))
        trigger = key_fallback_on(environ.get(ANTHROPIC_KEY_FALLBACK_ON))
    except ValueError:
        return []
    if not keys:
        return []
    shown = f"{ANTHROPIC_KEY_FALLBACK_ON}={trigger}"
    hint = (
        ""
        if trigger != "rejected_key"
        else f"; {ANTHROPIC_KEY_FALLBACK_ON}=refusal takes them on a refusal, as latch-eval-tools does"
    )
    return [f"Anthropic fallback keys: {len(keys)}, each taken on {_FALLBACK_TRIGGERS[trigger]} ({shown}{hint})"]


def run_evals(config: BatchConfig, evals: list[Eval] | None = None) -> list[Eval]:
    """The evals the run covers: ``evals``, or every eval of ``config.evals`` (each validated
    before any work starts), then the selection (``sample_ids``, ``filters``, ``limit``)."""
    if evals is None:
        evals = load_evals(*config.evals, data_roots=config.data_roots)
    return select_evals(evals, sample_ids=config.sample_ids, filters=config.filters, limit=config.limit)


def check_agent(config: BatchConfig, agent: AgentFunction | None, *, embedded: bool) -> UnitResources:
    """The sandbox's binds (where units run on this machine), a built-in agent's options (and,
    where units share this environment, its key); a named agent is known (an inline one
    resolves).  Returns what one unit asks Ray for: the agent's declaration (an in-memory
    agent's ``resources`` attribute), with the run's overrides."""
    if embedded:  # a cluster's nodes have their own files (there, the workers check)
        config.execution.sandbox.check_binds()
        if agent is None and is_module_path(config.agent):
            check_module_agent(config.agent)
    if agent is None:
        check_agent_args(config.agent, config.agent_args, config.models, environment=embedded)
        declared = agent_ref(config.agent, load=config.execution.isolation == "inline").resources
    else:
        declared = getattr(agent, "resources", UnitResources())
    overrides: dict[str, Any] = {"custom": {**declared.custom, **config.ray.unit_resources}}
    if config.ray.unit_cpus is not None:
        overrides["cpus"] = config.ray.unit_cpus
    if config.ray.unit_memory is not None:
        overrides["memory"] = config.ray.unit_memory
    return declared.model_copy(update=overrides)


def check_judges(evals: list[Eval], *, embedded: bool) -> list[str]:
    """Every rubric judge of the run's evals can be called.  Where the judges run with this
    process's environment (``embedded``: an embedded Ray), their keys are there: else EvalFileError naming,
    per judge model without one, the first eval file and field that names it.  Elsewhere (a
    cluster, whose nodes' environment the judge actor has), the note saying what is not checked."""
    used: dict[str, list[tuple[str, str]]] = {}
    for eval_ in evals:
        specs = [spec.model_dump() for spec in eval_.grader_specs]
        named = judge_models(specs[0], "grader") if eval_.grader is not None else judge_models(specs, "graders")
        for where, model in named:
            used.setdefault(model, []).append((str(eval_.source_path or f"<eval {eval_.id}>"), where))
    if not used:
        return []
    if not embedded:
        note = f"judges {', '.join(used)}: names checked; their keys are read on the cluster's nodes, not checked here"
        return [note]
    problems = []
    for model, naming in used.items():
        try:
            check_judge_key(model)
        except ModelError as exc:
            (path, field), others = naming[0], len(naming) - 1
            also = f" (named here and by {others} more graders)" if others else ""
            problems.append(
                EvalProblem(
                    path, field,
                    f"the rubric judge {model!r}{also} cannot be called: {exc}. It runs on this machine's Ray, with "
                    "this environment: set the variable before the run, or name another judge in model_id",
                )
            )  # fmt: skip
    if problems:
        raise EvalFileError(problems)
    return []


def check_data(evals: list[Eval], *, s3_endpoint_url: str | None) -> None:
    """Every remote data node of the run's evals is there, else EvalFileError naming each eval
    file and field; local ones were checked when they loaded."""
    if problems := remote_data_problems(evals, s3_endpoint_url=s3_endpoint_url):
        raise EvalFileError(problems)
