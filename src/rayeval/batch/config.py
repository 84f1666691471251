"""A run's configuration by concern: where units run (Ray), how many at once (scheduling), how
each unit runs (execution), where rows go (storage) and what the driver shows (display).

BatchConfig composes them with the run's own inputs; it also takes every concern's fields by
their own names (``BatchConfig(evals=..., agent=..., output=..., workers=4)``), as the CLI and
the Python API give them.  Each field's default is stated here once, and a field's description
is its ``rayeval run`` option's help: the CLI makes the option from the field (its flag is
``--field-name`` unless ``json_schema_extra`` names another ``option``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, model_validator

from .._messages import KEYWORD_OF_FLAG
from ..evals.model import DEFAULT_AGENT_TIMEOUT_S, MAX_TIMEOUT_S
from ..gateway.pin import DEFAULT_MODEL
from ..sandbox.config import SandboxConfig
from ..sandbox.isolation import Isolation
from ..unit.execution import INT64_MAX, INT64_MIN
from ..unit.grading_process import DEFAULT_TIMEOUT_S as DEFAULT_GRADE_TIMEOUT_S
from ..unit.prompt import AnswerConvention


class RayConfig(BaseModel):
    """The Ray cluster the run joins (or starts) and what each of its units asks Ray for."""

    address: str | None = Field(
        None, description="auto, HOST:PORT or local (default: embedded Ray, or the job's cluster)"
    )
    workers: int | None = Field(
        None,
        ge=1,
        description="worker processes the units running at once are spread over (default: a CPU's worth of units each)",
    )
    #: object store of an embedded Ray, bytes
    object_store_memory: int = 512 * 1024 * 1024
    #: what one unit asks Ray for, overriding the agent's own declaration (see UnitResources)
    unit_cpus: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="CPUs a unit asks Ray for (default: the agent's own: 1 for the agent programs, 0.01 for "
        "sleep/replay/prompt, 0.25 for module:function)",
    )
    unit_memory: int | None = Field(
        None,
        ge=0,
        description="memory a unit asks Ray for, e.g. 512M or 2G (default: the agent's own: 1G for the agent "
        "programs, 512M for module:function)",
    )
    unit_resources: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        default_factory=dict,
        description="another resource a unit asks Ray for: GPU, or a custom resource of the cluster's nodes "
        "(repeatable)",
        json_schema_extra={"option": "--unit-resource"},
    )


class SchedulingConfig(BaseModel):
    """How many units (and judge calls) are in flight at once, and how failed units are retried."""

    max_concurrency: int = Field(32, ge=1, description="units running at once, over the whole cluster")
    judge_concurrency: int = Field(
        16,
        ge=1,
        description="judge calls of LLM-judged graders (rubric) in flight at once, apart from the units' slots",
    )
    model_concurrency: dict[str, int] = Field(
        default_factory=dict, description="at most N units of MODEL at once (repeatable)"
    )
    retries: int = Field(
        2,
        ge=0,
        description="retries, with backoff, of a unit that failed for what may pass on a second try: a lost worker "
        "or node, its data or sandbox, a provider's failure the gateway saw (but a rate limit, which the unit's own "
        "requests may bring on); an agent's own error is not retried",
    )
    retry_backoff_s: float = Field(2.0, ge=0)
    #: the model calls' cost as the gateway counts them; an agent run in the worker: as it
    #: reports them, when it ends
    max_cost_usd: float | None = Field(
        None,
        gt=0,
        description="the run's budget in USD: what its units' model calls and judges cost, over the cluster, "
        "earlier attempts included; once spent, no unit starts, running units' calls are refused and the run "
        "stops (exit 3), resumable with a higher --max-cost (default: none)",
        json_schema_extra={"option": "--max-cost"},
    )


class ExecutionConfig(BaseModel):
    """How each unit runs on its worker: isolated how, for how long, in which folders."""

    isolation: Isolation = Field(
        "sandbox",
        description="how agents run: sandbox: namespaces via bubblewrap; process: a fresh process without a "
        "sandbox (the explicit opt-out where the sandbox cannot start); inline: in the worker, for trusted agents only",
    )
    sandbox: SandboxConfig = SandboxConfig()
    timeout: float | None = Field(
        None,
        gt=0,
        le=MAX_TIMEOUT_S,
        description="seconds each unit's agent may run, over the evals' own agent_timeout (default: the eval's, "
        f"else {DEFAULT_AGENT_TIMEOUT_S:g}, the reference runner's, 1.8x the longest recorded real-agent run)",
    )
    grade_timeout: float = Field(
        DEFAULT_GRADE_TIMEOUT_S,
        gt=0,
        le=MAX_TIMEOUT_S,
        description="seconds a unit's grading may take, in a grading process of its own, before it is a timeout row",
    )
    #: see rayeval.unit.prompt
    answer_convention: AnswerConvention = Field(
        "legacy",
        description="names the agent is told: legacy (eval_answer.json, COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT) or "
        "benchmark (analysis_output.json, RUN_COMPLETE: latch-eval-tools' benchmark=True); both are read",
    )
    allow_models: list[str] = Field(
        default_factory=list,
        description="a model units may call besides their own (repeatable; any: every model, so that a row's "
        "model no longer says which model answered): the model gateway refuses any other",
        json_schema_extra={"option": "--allow-model"},
    )
    work_root: str | None = Field(
        None, description="where work folders are created (default: $RAYEVAL_WORK_ROOT or the temp dir)"
    )
    cache_dir: str | None = None


def _results_root(root: str) -> str:
    """The root as :func:`rayeval.filesystem.check_root` accepts it.  It and the storage
    layer's defaults are imported when a run is configured: they load pyarrow, which the
    command line reads none of these defaults from."""
    from ..filesystem import check_root

    return check_root(root)


def _store_retry_s() -> float:
    from ..storage.store import STORE_RETRY_S

    return STORE_RETRY_S


#: the results root a run writes to when none is given (``rayeval run``, ``batch.run``,
#: ``evaluations.run`` alike): a folder of the working folder
DEFAULT_OUTPUT = "rayeval-results"


class StorageConfig(BaseModel):
    """Where the run's rows go, under which run id, and whether an earlier run is resumed."""

    output: Annotated[str, AfterValidator(_results_root)] = Field(
        DEFAULT_OUTPUT,
        description="results root: a folder or s3://bucket/prefix",
        json_schema_extra={"default_note": ", in the working folder, as evaluations.run writes"},
    )
    run_id: str | None = Field(
        None, description="the run's id (default: a new one from the time); with --resume, the run to finish"
    )
    resume: bool = Field(False, description="finish run --run-id: only units without a stored row run")
    force: bool = Field(
        False,
        description="with --resume: go on although agent arguments, models, seeds, eval files or unit options "
        "changed (units with new ids run, stored rows stay, the manifest records the new inputs)",
    )
    retry_errors: bool = Field(
        False,
        description="with --run-id: resume the run, and run again, as new attempts, its units whose latest row is "
        "an error or a timeout",
    )
    s3_endpoint_url: str | None = Field(None, json_schema_extra={"option": "--s3-endpoint"})
    flush_rows: int = Field(1000, ge=1)
    flush_seconds: float = Field(5.0, gt=0)
    #: seconds storing rows may keep failing (retried) before the run stops (a full disk: at once)
    store_retry_s: float = Field(default_factory=_store_retry_s, gt=0)


class DisplayConfig(BaseModel):
    """What the driver shows while the run goes."""

    show_progress: bool = True


#: BatchConfig's concerns: its field name for each, and the model behind it
CONCERNS: dict[str, type[BaseModel]] = {
    "ray": RayConfig,
    "scheduling": SchedulingConfig,
    "execution": ExecutionConfig,
    "storage": StorageConfig,
    "display": DisplayConfig,
}


class BatchConfig(BaseModel):
    """Everything a run needs; the CLI and the Python API both build one."""

    evals: list[str] = Field(json_schema_extra={"option": "EVALS"})
    data_roots: list[str] = Field(
        default_factory=list,
        description="a folder local data_node paths may also come from, besides the evals folder given (repeatable)",
        json_schema_extra={"option": "--data-root"},
    )
    agent: str = Field(description="built-in name (see `rayeval agents`) or module:function")
    agent_args: dict[str, str] = Field(
        default_factory=dict, description="agent option (repeatable)", json_schema_extra={"option": "--agent-arg"}
    )
    models: list[str] = Field(default_factory=lambda: [DEFAULT_MODEL])
    seeds: list[Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]] = Field(
        default_factory=lambda: [1]
    )  # stored as int64
    #: which of the loaded evals the run covers
    sample_ids: list[str] = Field(
        default_factory=list,
        description="only the evals with these ids (repeatable)",
        json_schema_extra={"option": "--sample-id"},
    )
    filters: list[str] = Field(
        default_factory=list,
        description="only evals whose id matches the glob (pbmc_*) or whose metadata KEY is VALUE (task=qc); "
        "repeatable, all must match",
        json_schema_extra={"option": "--filter"},
    )
    limit: int | None = Field(None, ge=1, description="only the first N evals (after --sample-id and --filter)")
    #: check that every remote data node (s3://, http(s)://) is there before any unit (``--no-check-data``: not)
    check_data: bool = True
    ray: RayConfig = RayConfig()
    scheduling: SchedulingConfig = SchedulingConfig()
    execution: ExecutionConfig = ExecutionConfig()
    storage: StorageConfig
    display: DisplayConfig = DisplayConfig()

    @model_validator(mode="before")
    @classmethod
    def _gather_concerns(cls, data: Any) -> Any:
        """Move each concern's fields, given by their own names, into that concern."""
        if not isinstance(data, dict):
            return data
        gathered = dict(data)
        for concern, model in CONCERNS.items():
            given = {name: gathered.pop(name) for name in model.model_fields if name in gathered}
            if given:
                part = gathered.get(concern, {})
                gathered[concern] = {**(dict(part) if isinstance(part, BaseModel) else part), **given}
        return gathered

    @classmethod
    def option_names(cls) -> set[str]:
        """Every name BatchConfig takes: its own fields and each concern's."""
        return {*cls.model_fields, *(name for model in CONCERNS.values() for name in model.model_fields)}


def option_field(loc: Sequence[int | str]) -> str:
    """The option a validation error's location is about, the concern it sits in left out."""
    names = [str(part) for part in loc if part not in CONCERNS]
    return names[0] if names else ""


def field_extra(model: type[BaseModel], name: str) -> dict[str, Any]:
    """What field ``name`` of ``model`` says of its option: its ``option`` (the flag, where it is
    not ``--field-name``) and a ``default_note``."""
    extra = model.model_fields[name].json_schema_extra
    return extra if isinstance(extra, dict) else {}


def _keywords_of_flags() -> dict[str, str]:
    """``--max-cost``: ``max_cost_usd``: each option whose flag is not its field's own name."""
    named: dict[str, str] = {}
    models: list[type[BaseModel]] = [BatchConfig, *CONCERNS.values()]
    for model in models:
        for name in model.model_fields:
            flag = field_extra(model, name).get("option")
            if isinstance(flag, str) and flag.startswith("--"):
                named[flag] = name
    return named


KEYWORD_OF_FLAG.update(_keywords_of_flags())
