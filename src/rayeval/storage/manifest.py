"""The run manifest: what a run was asked to do and in which environment, one JSON per run.

Stored at ``<root>/run_id=<id>/_manifest.json`` (the underscore keeps Parquet readers away).
Values of secret-looking agent arguments and command-line flags are masked, and every secret of
the run (``secrets`` in the validation context, see :func:`rayeval.secrets.run_secrets`; else
this environment's) is scrubbed wherever it appears.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ..secrets import MASK, is_secret_argument, redact, secret_values

__all__ = ["EvalFileRef", "PlanEntry", "RunManifest", "RunStatus", "SeedItem", "mask_command_line", "mask_secrets"]

RunStatus = Literal["running", "completed", "failed", "cancelled"]
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


def mask_secrets(value: Any) -> Any:
    """A copy of ``value`` with the values under secret-looking keys replaced by ``***``."""
    if isinstance(value, dict):
        masked = {}
        for key, item in value.items():
            if isinstance(key, str) and is_secret_argument(key) and item not in (None, ""):
                masked[key] = MASK
            else:
                masked[key] = mask_secrets(item)
        return masked
    if isinstance(value, (list, tuple)):
        return [mask_secrets(item) for item in value]
    return value


def mask_command_line(argv: list[str]) -> list[str]:
    """``--api-key X`` / ``--token=X`` style values masked, and those of secret-looking
    ``KEY=VALUE`` pairs, alone or an option's (``--agent-arg api_key=X``, ``--agent-arg=api_key=X``)."""
    out: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next and not arg.startswith("-"):
            out.append(MASK)
            mask_next = False
            continue
        mask_next = False
        if not arg.startswith("-"):
            out.append(_masked_pair(arg))
            continue
        option, sep, value = arg.partition("=")
        if is_secret_argument(option.lstrip("-")):
            out.append(f"{option}={MASK}" if sep else arg)
            mask_next = not sep
        else:
            out.append(f"{option}={_masked_pair(value)}" if sep else arg)
    return out


def _masked_pair(text: str) -> str:
    """``KEY=VALUE`` with its value masked when the key is secret-looking; else ``text``."""
    key, sep, value = text.partition("=")
    return f"{key}={MASK}" if sep and value and is_secret_argument(key) else text


def utcnow() -> datetime:
    """Now, in UTC: what manifests, leases and the row writer's errors are stamped with."""
    return datetime.now(timezone.utc)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _rayeval_version() -> str:
    try:
        from .. import __version__

        return __version__
    except Exception:  # noqa: BLE001 - partial installs  # pragma: no cover
        return _version("rayeval") or "unknown"


def git_revision(cwd: str | None = None) -> str | None:
    """``git rev-parse HEAD`` in ``cwd`` (default: the current directory), None if not a repo."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd or os.getcwd(),
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    revision = done.stdout.strip()
    return revision if done.returncode == 0 and revision else None


class EvalFileRef(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    id: str
    eval_hash: str


class PlanEntry(BaseModel):
    """A unit as manifests of earlier versions listed them (read, never written)."""

    model_config = ConfigDict(frozen=True)

    unit_id: str
    eval_id: str
    model: str
    seed: int


#: A seed, or an inclusive range ``[first, last]`` of consecutive seeds.
SeedItem = int | tuple[int, int]

# PBKDF2 rounds of a secret argument's fingerprint: slow to guess a short secret from.
_FINGERPRINT_ROUNDS = 100_000


def _fingerprint(value: Any, salt: bytes, rounds: int = _FINGERPRINT_ROUNDS) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.pbkdf2_hmac("sha256", canonical, salt, rounds)
    return f"pbkdf2-sha256${rounds}${salt.hex()}${digest.hex()}"


def _fingerprint_matches(fingerprint: str, value: Any) -> bool:
    try:
        _, rounds, salt, _ = fingerprint.split("$")
        return hmac.compare_digest(fingerprint, _fingerprint(value, bytes.fromhex(salt), int(rounds)))
    except ValueError:  # not a fingerprint this version makes: nothing to compare with
        return True


def _secrets(info: ValidationInfo) -> Iterable[str]:
    """The run's secrets, given as ``secrets`` in the validation context; else this environment's."""
    given = (info.context or {}).get("secrets")
    return secret_values() if given is None else given


class RunManifest(BaseModel):
    """One run: the inputs of its plan and its environment.  Environment fields default to the
    current process.

    The plan's units are not listed: they are derived from the inputs (``eval_files``, whose
    content hashes identify the evals, ``models``, ``seeds``, ``agent``), and ``plan_digest``
    (see ``Plan.digest``: sha256 over the sorted distinct unit-key prefixes, models and seeds)
    changes iff the set of units does.  Manifests of earlier versions list the units in
    ``plan`` and their seeds one by one: they still load, and readers use what is there.
    """

    run_id: str
    status: RunStatus = "running"
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
    agent: str | None = None
    #: masked: secret-looking values are ``***``, compared on ``--resume`` by fingerprint
    agent_args: dict[str, Any] = Field(default_factory=dict)
    #: salted PBKDF2 of each agent argument value that is masked, by name
    secret_fingerprints: dict[str, str] = Field(default_factory=dict)
    #: how agents ran (sandbox, process, inline) and, sandboxed, their network
    isolation: str | None = None
    network: str | None = None
    #: per-unit agent timeout (None: the evals' own) and grading timeout, in seconds
    timeout: float | None = None
    grade_timeout: float | None = None
    #: the answer-file name and completion marker agents were told (None: before the option)
    answer_convention: str | None = None
    #: the models units could call besides their own (``--allow-model``; ``any``: every model)
    allow_models: list[str] = Field(default_factory=list)
    #: what one unit may use (``UnitLimits``: memory, processes, answer and artifact sizes...)
    limits: dict[str, float | None] | None = None
    models: list[str] = Field(default_factory=list)
    #: in plan order; runs of consecutive seeds as ``[first, last]``
    seeds: list[SeedItem] = Field(default_factory=list)
    eval_files: list[EvalFileRef] = Field(default_factory=list)
    plan_digest: str | None = None
    #: earlier versions only (see the class docstring); not written
    plan: list[PlanEntry] = Field(default_factory=list, exclude=True)
    total_units: int = 0
    rayeval_version: str = Field(default_factory=_rayeval_version)
    ray_version: str | None = Field(default_factory=lambda: _version("ray"))
    pyarrow_version: str | None = Field(default_factory=lambda: _version("pyarrow"))
    python_version: str = Field(default_factory=platform.python_version)
    git_revision: str | None = Field(default_factory=git_revision)
    #: masked, as given or this process's (a default is masked too)
    command_line: list[str] = Field(default_factory=lambda: list(sys.argv), validate_default=True)
    host: str = Field(default_factory=socket.gethostname)

    @model_validator(mode="before")
    @classmethod
    def _fingerprint_secret_args(cls, data: Any, info: ValidationInfo) -> Any:
        """Fingerprint the agent arguments masking will hide (those of a stored manifest are
        masked already and keep their fingerprints)."""
        if not isinstance(data, dict) or not isinstance(data.get("agent_args"), dict):
            return data
        raw = data["agent_args"]
        masked = redact(mask_secrets(raw), _secrets(info))
        fingerprints = dict(data.get("secret_fingerprints") or {})
        salt = os.urandom(16)
        for name, value in raw.items():
            if name not in fingerprints and masked.get(name) != value:
                fingerprints[name] = _fingerprint(value, salt)
        return {**data, "secret_fingerprints": fingerprints}

    @field_validator("agent_args", mode="after")
    @classmethod
    def _mask_agent_args(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        return redact(mask_secrets(value), _secrets(info))

    @field_validator("command_line", mode="after")
    @classmethod
    def _mask_command_line(cls, value: list[str], info: ValidationInfo) -> list[str]:
        return redact(mask_command_line(value), _secrets(info))

    @model_validator(mode="after")
    def _default_total(self) -> RunManifest:
        if "total_units" not in self.model_fields_set and self.plan:
            self.total_units = len(self.plan)
        return self

    def secret_args_changed(self, agent_args: dict[str, Any]) -> list[str]:
        """Names of the arguments masked here whose value in ``agent_args`` (unmasked) differs."""
        return [
            name
            for name, fingerprint in self.secret_fingerprints.items()
            if name in agent_args and not _fingerprint_matches(fingerprint, agent_args[name])
        ]

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def with_status(self, status: RunStatus) -> RunManifest:
        """A copy with a new status; ``finished_at`` is set when the status is terminal."""
        now = utcnow()
        return self.model_copy(
            update={
                "status": status,
                "updated_at": now,
                "finished_at": now if status in TERMINAL_STATUSES else None,
            }
        )
