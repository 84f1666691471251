"""A run's configuration by concern: where units run (Ray), how many at once (scheduling), how
each unit runs (execution), where rows go (storage) and what the driver shows (display).

BatchConfig composes them with the run's own inputs; it also takes every concern's fields by
their own names (``BatchConfig(evals=..., agent=..., output=..., workers=4)``), as the CLI and
the Python API give them.  Each field's default is stated here once: the CLI reads it back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, model_validator

from ..evals.model import MAX_TIMEOUT_S
from ..grading.pool import DEFAULT_TIMEOUT_S as DEFAULT_GRADE_TIMEOUT_S
from ..harness.execution import INT64_MAX, INT64_MIN
from ..harness.prompt import AnswerConvention
from ..sandbox.config import SandboxConfig
from ..sandbox.isolation import Isolation


class RayConfig(BaseModel):
    """The Ray cluster the run joins (or starts) and what each of its units asks Ray for."""

    #: ``auto``, ``HOST:PORT`` or ``local``; None: the job's cluster, else an embedded Ray
    address: str | None = None
    #: worker processes the concurrent units are spread over (default: a CPU's worth of units each)
    workers: int | None = Field(None, ge=1)
    #: object store of an embedded Ray, bytes
    object_store_memory: int = 512 * 1024 * 1024
    #: what one unit asks Ray for, overriding the agent's own declaration (see UnitResources)
    unit_cpus: float | None = Field(None, gt=0, allow_inf_nan=False)
    unit_memory: int | None = Field(None, ge=0)
    unit_resources: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(default_factory=dict)


class SchedulingConfig(BaseModel):
    """How many units (and judge calls) are in flight at once, and how failed units are retried."""

    max_concurrency: int = Field(32, ge=1)
    #: judge calls of LLM-judged graders in flight at once, over the run
    judge_concurrency: int = Field(16, ge=1)
    model_concurrency: dict[str, int] = Field(default_factory=dict)
    retries: int = Field(2, ge=0)
    retry_backoff_s: float = Field(2.0, ge=0)
    #: the run's budget in USD (``--max-cost``): what its units' model calls (as the gateway
    #: counts them; an agent run in the worker: as it reports them, when it ends) and their
    #: judges cost, its earlier attempts' included; once spent, no unit starts and the running
    #: ones' calls are refused. None: no budget
    max_cost_usd: float | None = Field(None, gt=0)


class ExecutionConfig(BaseModel):
    """How each unit runs on its worker: isolated how, for how long, in which folders."""

    #: how agents run: ``sandbox`` (the default), ``process`` (no sandbox: the explicit
    #: opt-out where it cannot start) or ``inline`` (trusted in-process agents only)
    isolation: Isolation = "sandbox"
    sandbox: SandboxConfig = SandboxConfig()
    timeout: float | None = Field(None, gt=0, le=MAX_TIMEOUT_S)
    #: seconds a unit's grading may take (in a grading subprocess) before it is a timeout row
    grade_timeout: float = Field(DEFAULT_GRADE_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S)
    #: the answer-file name and completion marker agents are told (``benchmark``: latch-eval-tools'
    #: ``benchmark=True`` names, see rayeval.harness.prompt)
    answer_convention: AnswerConvention = "legacy"
    work_root: str | None = None
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

    output: Annotated[str, AfterValidator(_results_root)] = DEFAULT_OUTPUT
    run_id: str | None = None
    resume: bool = False
    #: resume even though the inputs changed (agent arguments, models, seeds, evals, options)
    force: bool = False
    #: with ``resume``: units whose latest row is an error or a timeout run again, as new attempts
    retry_errors: bool = False
    s3_endpoint_url: str | None = None
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

    evals: list[str]
    #: folders besides the evals roots that local data nodes may come from (``--data-root``)
    data_roots: list[str] = Field(default_factory=list)
    agent: str
    agent_args: dict[str, str] = Field(default_factory=dict)
    models: list[str] = Field(default_factory=lambda: ["default"])
    seeds: list[Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]] = Field(
        default_factory=lambda: [1]
    )  # stored as int64
    #: which of the loaded evals the run covers (``--sample-id``, ``--filter``, ``--limit``)
    sample_ids: list[str] = Field(default_factory=list)
    filters: list[str] = Field(default_factory=list)
    limit: int | None = Field(None, ge=1)
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
