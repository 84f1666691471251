"""What a unit's sandbox is made of: what it shows, passes on and allows (``units.py`` runs it)."""

from __future__ import annotations

import os
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ConfigError

SandboxIsolation = Literal["sandbox", "process"]
#: what a sandboxed unit reaches: ``host`` the machine's network, ``model`` its loopback and
#: the model gateway (nothing else), ``none`` its loopback only
Network = Literal["host", "model", "none"]

MiB = 1 << 20
#: Default of the largest answer file read from a unit's work folder (``UnitLimits.answer_file_mb``;
#: the same as the cap on a returned answer): the harness reads it (``harness.answers``).
MAX_ANSWER_FILE_BYTES = 10 << 20
#: Default of the last bytes kept of each artifact a unit leaves (``UnitLimits.artifact_mb``).
MAX_ARTIFACT_BYTES = 2 << 20


class SandboxUnusable(ConfigError):
    """The sandbox's configuration names what is not there."""


#: how the limits on a unit's model calls work, in their help
_CALLS_LIMIT = (
    "per unit, as the gateway counts them: the call made once it is reached is refused and the agent ends "
    "with the answer it left; the row's limit_reached names it"
)


class UnitLimits(BaseModel):
    """What one unit may use. ``None``: no limit of that kind. Each field's description is its
    command-line option's help, the option ``--limit-<field>`` unless ``option`` names another."""

    model_config = ConfigDict(frozen=True)

    memory_mb: Annotated[int, Field(gt=0)] | None = Field(
        4096, description="memory of the unit's processes together (a control group), else per process, MB"
    )
    processes: Annotated[int, Field(gt=0)] | None = Field(512, description="processes and threads per unit")
    file_size_mb: Annotated[int, Field(gt=0)] | None = Field(2048, description="largest file an agent may write, MB")
    tmp_mb: Annotated[int, Field(gt=0)] = Field(1024, description="size of the private /tmp (and /dev/shm), MB")
    max_output_mb: Annotated[float, Field(gt=0)] = Field(
        10.0, description="largest return value, as JSON, MB", json_schema_extra={"option": "--limit-output-mb"}
    )
    answer_file_mb: Annotated[float, Field(gt=0)] = Field(
        MAX_ANSWER_FILE_BYTES / MiB,
        description="largest answer file read (eval_answer.json, ...): a larger one is the unit's AnswerTooLarge error, MB",
    )
    artifact_mb: Annotated[float, Field(gt=0)] = Field(
        MAX_ARTIFACT_BYTES / MiB, description="what is kept of each artifact (trajectory.json, logs): its last MB"
    )
    tokens: Annotated[int, Field(gt=0)] | None = Field(None, description=f"tokens (input and output) {_CALLS_LIMIT}")
    cost_usd: Annotated[float, Field(gt=0)] | None = Field(
        None, description=f"USD its model calls cost {_CALLS_LIMIT}", json_schema_extra={"option": "--limit-cost"}
    )
    model_calls: Annotated[int, Field(gt=0)] | None = Field(None, description=f"model calls {_CALLS_LIMIT}")
    gateway_retry_s: Annotated[float, Field(ge=0, le=3600)] = Field(
        60.0,
        description="seconds the model gateway holds a call the provider failed (429, 5xx, 529, no answer), trying "
        "it again after the provider's hint or a backoff, before the agent sees the failure; never past the unit's "
        "time (0: at once)",
        json_schema_extra={"option": "--gateway-retry-s"},
    )


class SandboxConfig(BaseModel):
    """What sandboxed units see, get and may use (``process`` isolation: the environment and
    limits only)."""

    model_config = ConfigDict(frozen=True)

    network: Network = "host"
    limits: UnitLimits = UnitLimits()
    #: Further folders or files agents must not see (results root, evals folders, ...), covered
    #: wherever they lie inside what is shown.
    hide: tuple[str, ...] = ()
    #: Host files and folders shown read-only at their own path (``--sandbox-bind``; the agent's
    #: install folders and the files its options name are added where it runs).
    bind: tuple[str, ...] = ()
    #: Modules whose code units import, shown by their code where they lie (a ``module:function``
    #: agent's package: its modules, not its data files).
    modules: tuple[str, ...] = ()
    #: Variables passed from the worker's environment besides ``units.BASE_ENV_NAMES``.
    env_names: tuple[str, ...] = ()
    #: Program binaries shown execute-only at their own path (a real agent program's): the
    #: processes started from them are not dumpable, out of their tools' reach (``exec_only.py``).
    exec_only: tuple[str, ...] = ()
    #: Modules the runner imports once for every unit: rayeval's own (the harness adds those
    #: that call its agents), and a grading runner's the caller's grader code; never an agent's.
    preload: tuple[str, ...] = ()

    def check_binds(self) -> None:
        """``SandboxUnusable`` naming each ``bind`` path that does not exist on this machine."""
        missing = [path for path in self.bind if not os.path.exists(path)]
        if missing:
            raise SandboxUnusable(f"--sandbox-bind: no such file or folder: {', '.join(missing)}")
