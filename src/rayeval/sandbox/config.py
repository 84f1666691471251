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


class UnitLimits(BaseModel):
    """What one unit may use. ``None``: no limit of that kind."""

    model_config = ConfigDict(frozen=True)

    #: memory of the unit's processes together (a control group), else per process (RLIMIT_DATA)
    memory_mb: Annotated[int, Field(gt=0)] | None = 4096
    #: processes and threads of the unit (a control group, and RLIMIT_NPROC)
    processes: Annotated[int, Field(gt=0)] | None = 512
    #: largest file the agent may write (RLIMIT_FSIZE)
    file_size_mb: Annotated[int, Field(gt=0)] | None = 2048
    #: size of the private /tmp (and /dev/shm), in memory
    tmp_mb: Annotated[int, Field(gt=0)] = 1024
    #: largest return value the agent may send back, as JSON
    max_output_mb: Annotated[float, Field(gt=0)] = 10.0
    #: largest answer file (eval_answer.json, ...) read from the work folder: a larger one is
    #: the unit's AnswerTooLarge error
    answer_file_mb: Annotated[float, Field(gt=0)] = MAX_ANSWER_FILE_BYTES / MiB
    #: what is kept of each artifact the agent leaves (trajectory.json, its logs): the last MB
    artifact_mb: Annotated[float, Field(gt=0)] = MAX_ARTIFACT_BYTES / MiB
    #: its model calls, as the gateway counts them: the first call made once its tokens (input
    #: and output), cost or calls reached the limit is refused, and the agent ends as it will
    tokens: Annotated[int, Field(gt=0)] | None = None
    cost_usd: Annotated[float, Field(gt=0)] | None = None
    model_calls: Annotated[int, Field(gt=0)] | None = None
    #: the most seconds the gateway holds one model call that the provider failed (429, 5xx,
    #: 529, no answer), trying it again after the provider's hint or a doubling backoff, before
    #: it hands the failure on (0: at once); never past the unit's own time
    gateway_retry_s: Annotated[float, Field(ge=0, le=3600)] = 60.0


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
    #: Modules whose code units import, shown where they lie (a ``module:function`` agent's).
    modules: tuple[str, ...] = ()
    #: Variables passed from the worker's environment besides ``units.BASE_ENV_NAMES``.
    env_names: tuple[str, ...] = ()
    #: Program binaries shown execute-only at their own path (a real agent program's): the
    #: processes started from them are not dumpable, out of their tools' reach (``exec_only.py``).
    exec_only: tuple[str, ...] = ()
    #: Modules the runner imports once for every unit: rayeval's own, never an agent's (the
    #: harness adds those that call its agents).
    preload: tuple[str, ...] = ()

    def check_binds(self) -> None:
        """``SandboxUnusable`` naming each ``bind`` path that does not exist on this machine."""
        missing = [path for path in self.bind if not os.path.exists(path)]
        if missing:
            raise SandboxUnusable(f"--sandbox-bind: no such file or folder: {', '.join(missing)}")
