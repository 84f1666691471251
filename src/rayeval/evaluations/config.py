"""The arguments of ``evaluations.run``, validated up front (before any Ray work).

Every problem found in ``file``, ``evaluators`` and ``dataset`` is reported at once, in one
:class:`EvaluationConfigError` whose lines name the evaluator (by path and position), the
datapoint (by position) and the field at fault.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .._messages import listed, pydantic_problems
from ..errors import ConfigError
from ..evals.model import id_problem
from ..storage.store import ResultStore
from .catalog import Kind, content_hash, find_version, version_id
from .library import REPORTED, expand_evaluators, is_reference, remember_evaluator
from .prompts import CONNECTION_OPTIONS, PromptVersion, is_prompt_version, missing_placeholders
from .runtime import WithoutTarget, has_target

log = logging.getLogger(__name__)

FileType = Literal["prompt", "tool", "flow", "agent", "evaluator"]
ArgsType = Literal["target_free", "target_required"]
ReturnType = Literal["boolean", "number", "select", "multi_select", "text"]

# A file given by these alone names a stored prompt version.
STORED_PROMPT_FIELDS = frozenset({"path", "type", "version_id"})


class EvaluationConfigError(ConfigError):
    """``evaluations.run`` was given a bad ``name``, ``file``, ``evaluators`` or ``dataset``."""

    def __init__(self, problems: Sequence[str], where: str = "evaluations.run"):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{where}: {len(self.problems)} problem(s) in the arguments:\n{lines}")


def _json_problem(value: Any) -> str | None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return f"is not JSON-serialisable ({exc})"
    return None


def _real(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"must be a number, got {value!r} ({type(value).__name__})")  # noqa: TRY004 - pydantic reports ValueError
    if not math.isfinite(value):
        raise ValueError(f"must be finite, got {value!r}")
    return float(value)


def _non_empty(value: str) -> str:
    """``value`` stripped; a blank one is an error."""
    stripped = value.strip()
    if not stripped:
        raise ValueError("must be a non-empty string")
    return stripped


#: a file's, an evaluator's or a dataset's path: not blank, kept stripped
NonBlankPath = Annotated[str, AfterValidator(_non_empty)]


def _cannot_bind(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> str | None:
    """Why ``fn(*args, **kwargs)`` would fail on its signature alone (None if it fits or is unknown)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have none: nothing to check
        return None
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        return str(exc)
    return None


class FileConfig(BaseModel):
    """The evaluated thing: ``callable(**inputs, messages=messages)`` returns the log's output,
    or, for a prompt defined in code, ``version = {model, template, ...}`` is called
    (:class:`~rayeval.evaluations.prompts.PromptVersion`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    path: NonBlankPath
    type: FileType = "flow"
    version: str | dict[str, Any] | None = None
    callable: Callable[..., Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _prompt_type(cls, data: Any) -> Any:
        if isinstance(data, dict) and "prompt" in data and "version" not in data:
            raise ValueError(
                "prompt: not a field of file: a prompt defined in code is its version, "
                "file={'path': ..., 'version': {'model': ..., 'template': ...}}"
            )
        if isinstance(data, dict) and "type" not in data and is_prompt_version(data.get("version")):
            return {**data, "type": "prompt"}
        return data

    @field_validator("version")
    @classmethod
    def _version(cls, value: Any) -> Any:
        if isinstance(value, str):
            return _non_empty(value)
        if isinstance(value, dict):
            problem = _json_problem(value)
            if problem:
                raise ValueError(f"version {problem}")
            if is_prompt_version(value):
                try:
                    return PromptVersion.model_validate(value).model_dump(exclude_none=True)
                except ValidationError as exc:
                    raise ValueError("; ".join(pydantic_problems(exc, "version"))) from None
        return value

    @model_validator(mode="after")
    def _called(self) -> FileConfig:
        if self.prompt is not None and self.callable is not None:
            raise ValueError("a prompt (version with model and template) calls its model: give no callable")
        if self.prompt is None and self.callable is None:
            raise ValueError("callable is required (or a version with model and template: a prompt defined in code)")
        return self

    @property
    def prompt(self) -> PromptVersion | None:
        """The prompt defined in code, when the version is one."""
        return PromptVersion.model_validate(self.version) if is_prompt_version(self.version) else None

    @property
    def version_label(self) -> str | None:
        """The version as text: a string as given, a dict (e.g. prompt parameters) by content hash."""
        if self.version is None or isinstance(self.version, str):
            return self.version
        return version_id(self.version)

    @property
    def identity(self) -> str:
        """The results' ``model``: ``path`` or ``path@version``."""
        label = self.version_label
        return self.path if label is None else f"{self.path}@{label}"


class EvaluatorConfig(BaseModel):
    """One local evaluator, called as ``callable(log)`` or ``callable(log, datapoint)``."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    path: NonBlankPath
    args_type: ArgsType = "target_free"
    return_type: ReturnType
    callable: Callable[..., Any]
    threshold: float | None = None
    #: a target_required evaluator and a datapoint without a target: refused before the run
    #: (an evaluator defined in code), or judged not applicable (one named by path, as
    #: Humanloop's hosted evaluators judge what they can)
    without_target: WithoutTarget = "refuse"

    @field_validator("threshold", mode="before")
    @classmethod
    def _threshold(cls, value: Any) -> Any:
        return None if value is None else _real(value)

    @model_validator(mode="after")
    def _fits(self) -> EvaluatorConfig:
        if self.threshold is not None:
            if self.return_type == "text":
                raise ValueError("a text evaluator has no score, so it takes no threshold")
            if self.return_type in ("select", "multi_select"):
                raise ValueError(
                    f"a {self.return_type} evaluator's score is the share of its most common option, whichever "
                    "that is (a file giving the same wrong option every time scores 1.0), so it takes no threshold"
                )
            if self.return_type == "boolean" and not 0.0 <= self.threshold <= 1.0:
                raise ValueError(
                    "a boolean evaluator's threshold is a share of logs in [0, 1] "
                    f"(e.g. 0.8 for 80%), got {self.threshold:g}"
                )
        args: tuple[dict, ...] = ({}, {}) if self.args_type == "target_required" else ({},)
        problem = _cannot_bind(self.callable, *args)
        if problem:
            form = "callable(log, datapoint)" if self.args_type == "target_required" else "callable(log)"
            raise ValueError(f"callable cannot be called as {form} ({self.args_type}): {problem}")
        return self

    @property
    def kind(self) -> str:
        """The EvaluatorStats kind: the return type's, but ``multi_select`` is counted as
        ``select`` (per option)."""
        return "select" if self.return_type == "multi_select" else self.return_type


class DatapointConfig(BaseModel):
    """One row of the dataset; an ``id`` is optional (default: a hash of the content)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str | None = None
    inputs: dict[str, Any] = Field(default_factory=dict)
    messages: list[dict[str, Any]] | None = None
    target: Any = None

    @field_validator("id")
    @classmethod
    def _id(cls, value: str | None) -> str | None:
        if value is not None and (problem := id_problem(value)):
            raise ValueError(f"id {problem}")
        return value

    @model_validator(mode="after")
    def _plain_json(self) -> DatapointConfig:
        for field in ("inputs", "messages", "target"):
            problem = _json_problem(getattr(self, field))
            if problem:
                raise ValueError(f"{field} {problem}")
        if self.messages is not None and "messages" in self.inputs:
            raise ValueError(
                "inputs has a 'messages' key and the datapoint has messages: the callable gets messages= once"
            )
        return self

    @property
    def has_target(self) -> bool:
        return has_target(self.target)

    def content_id(self) -> str:
        """Stable id from the content: the same inputs, messages and target give the same id."""
        body = {"inputs": self.inputs, "messages": self.messages, "target": self.target}
        return "dp-" + content_hash(body)


class DatasetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: NonBlankPath
    datapoints: list[DatapointConfig]

    def stored_body(self) -> list[dict[str, Any]]:
        """The datapoints as stored under the dataset's path (their hash is the version id)."""
        return [point.model_dump(exclude_none=True) for point in self.datapoints]

    @property
    def version_id(self) -> str:
        """The content hash of the datapoints as stored: the dataset's version."""
        return version_id(self.stored_body())


class EvaluationSpec(BaseModel):
    """The validated arguments, with a stable id per datapoint."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    file: FileConfig
    evaluators: list[EvaluatorConfig]
    dataset: DatasetConfig
    datapoint_ids: list[str]
    model_options: dict[str, Any] = {}


# -- validation ----------------------------------------------------------------------------
def _stored_body(store: ResultStore | None, kind: Kind, raw: Mapping[str, Any], problems: list[str]) -> Any:
    """The body of the stored version ``raw`` names (``path``, optional ``version_id``), or
    None with the problem reported."""
    path, version = raw.get("path"), raw.get("version_id")
    if not isinstance(path, str) or not path.strip():
        problems.append(f"{kind}: path: must be a non-empty string, got {path!r}")
        return None
    if version is not None and not isinstance(version, str):
        problems.append(f"{kind} {path!r}: version_id: must be a string, got {version!r}")
        return None
    if store is None:
        problems.append(f"{kind} {path!r}: naming a stored {kind} needs the results root (output)")
        return None
    found = find_version(store, kind, path.strip(), version)
    if isinstance(found, str):
        problems.append(f"{kind}: {found}")
        return None
    return found.body


def _validate_file(file: Any, problems: list[str], store: ResultStore | None = None) -> FileConfig | None:
    if isinstance(file, FileConfig):
        return file
    if not isinstance(file, Mapping):
        problems.append(f"file: must be a dict {{path, type, version, callable}}, got {type(file).__name__}")
        return None
    if set(file) <= STORED_PROMPT_FIELDS and "path" in file:  # a stored prompt, named
        body = _stored_body(store, "prompt", file, problems)
        if body is None:
            return None
        file = {"path": file["path"], "type": file.get("type", "prompt"), "version": body}
    try:
        return FileConfig.model_validate(dict(file))
    except ValidationError as exc:
        path = file.get("path")
        problems.extend(pydantic_problems(exc, f"file {path!r}" if isinstance(path, str) and path.strip() else "file"))
        return None


def validate_evaluators(evaluators: Any, problems: list[str]) -> list[EvaluatorConfig]:
    if evaluators is None:
        return []
    if isinstance(evaluators, (str, bytes, Mapping)) or not isinstance(evaluators, Sequence):
        problems.append(f"evaluators: must be a list of evaluator dicts, got {type(evaluators).__name__}")
        return []
    valid: list[EvaluatorConfig] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(evaluators):
        if raw is REPORTED:
            continue
        path = raw.get("path") if isinstance(raw, Mapping) else getattr(raw, "path", None)
        where = f"evaluator {path!r} (evaluators[{index}])" if isinstance(path, str) else f"evaluators[{index}]"
        if isinstance(raw, EvaluatorConfig):
            config = raw
        elif not isinstance(raw, Mapping):
            problems.append(
                f"{where}: must be a dict {{path, args_type, return_type, callable, threshold}}, got {type(raw).__name__}"
            )
            continue
        else:
            try:
                config = EvaluatorConfig.model_validate(dict(raw))
            except ValidationError as exc:
                problems.extend(pydantic_problems(exc, where))
                continue
        if config.path in seen:
            problems.append(f"{where}: path {config.path!r} is already used by evaluators[{seen[config.path]}]")
            continue
        seen[config.path] = index
        valid.append(config)
    return valid


def register_evaluator(evaluator: Mapping[str, Any]) -> None:
    """Make ``evaluator`` (code or LLM judge, with its ``path``) available by path to every later
    ``evaluations.run`` in this process; registering a path again replaces it. Raises
    :class:`EvaluationConfigError` for a bad evaluator."""
    problems: list[str] = []
    if not isinstance(evaluator, Mapping) or is_reference(evaluator):
        problems.append("register_evaluator: give a whole evaluator (with a callable, or evaluator_type 'llm')")
    else:
        validate_evaluators(expand_evaluators([evaluator], {}, problems, environment=False), problems)
    if problems:
        raise EvaluationConfigError(problems, "register_evaluator")
    remember_evaluator(evaluator)


def _validate_dataset(
    dataset: Any, problems: list[str], store: ResultStore | None = None, unnamed: str | None = None
) -> DatasetConfig | None:
    """``unnamed``: the path of a dataset given with its datapoints but no path (the evaluation's name)."""
    if isinstance(dataset, DatasetConfig):
        return dataset
    if not isinstance(dataset, Mapping):
        problems.append(f"dataset: must be a dict {{path, datapoints}}, got {type(dataset).__name__}")
        return None
    if "path" not in dataset and "datapoints" in dataset and unnamed:
        dataset = {**dataset, "path": unnamed}
    if set(dataset) <= {"path", "version_id"} and "path" in dataset:  # a stored dataset, named
        body = _stored_body(store, "dataset", dataset, problems)
        if body is None:
            return None
        dataset = {"path": dataset["path"], "datapoints": body}
    unknown = sorted(str(k) for k in dataset if k not in DatasetConfig.model_fields)
    if unknown:
        problems.append(f"dataset: {', '.join(unknown)}: not a known field (use path, datapoints)")
    path = dataset.get("path")
    where = f"dataset {path!r}" if isinstance(path, str) else "dataset"
    if not isinstance(path, str) or not path.strip():
        problems.append(f"dataset: path: must be a non-empty string, got {path!r}")
    raw_points = dataset.get("datapoints")
    if isinstance(raw_points, (str, bytes, Mapping)) or not isinstance(raw_points, Sequence):
        problems.append(
            f"{where}: datapoints: must be a list of {{inputs, messages, target}} dicts, got {type(raw_points).__name__}"
        )
        return None
    if not raw_points:
        problems.append(f"{where}: datapoints is empty: nothing to evaluate")
    points: list[DatapointConfig] = []
    failed = False
    for index, raw in enumerate(raw_points):
        if isinstance(raw, DatapointConfig):
            points.append(raw)
            continue
        if not isinstance(raw, Mapping):
            problems.append(
                f"{where}: datapoints[{index}]: must be a dict {{inputs, messages, target}}, got {type(raw).__name__}"
            )
            failed = True
            continue
        try:
            points.append(DatapointConfig.model_validate(dict(raw)))
        except ValidationError as exc:
            problems.extend(pydantic_problems(exc, f"{where}: datapoints[{index}]"))
            failed = True
    if failed or unknown or not isinstance(path, str) or not path.strip():
        return None
    return DatasetConfig(path=path, datapoints=points)


def _datapoint_ids(dataset: DatasetConfig, problems: list[str]) -> list[str]:
    """Given ids, else content ids; repeated content gets ``-2``, ``-3``… in dataset order."""
    given: dict[str, int] = {}
    for index, point in enumerate(dataset.datapoints):
        if point.id is None:
            continue
        if point.id in given:
            problems.append(
                f"dataset {dataset.path!r}: datapoints[{index}].id {point.id!r} repeats datapoints[{given[point.id]}].id"
            )
        given.setdefault(point.id, index)
    ids: list[str] = []
    used = set(given)
    for point in dataset.datapoints:
        if point.id is not None:
            ids.append(point.id)
            continue
        base = point.content_id()
        candidate, n = base, 1
        while candidate in used:
            n += 1
            candidate = f"{base}-{n}"
        used.add(candidate)
        ids.append(candidate)
    return ids


def _check_fit(
    file: FileConfig, evaluators: list[EvaluatorConfig], dataset: DatasetConfig, problems: list[str]
) -> None:
    unfit: list[str] = []
    prompt = file.prompt
    for index, point in enumerate(dataset.datapoints):
        if prompt is not None:
            missing_inputs = missing_placeholders(prompt.placeholders(), point.inputs)
            problem = f"no {listed(missing_inputs)}" if missing_inputs else None
        else:
            assert file.callable is not None  # a FileConfig has a prompt or a callable
            kwargs = dict(point.inputs)
            if point.messages is not None:
                kwargs["messages"] = point.messages
            problem = _cannot_bind(file.callable, **kwargs)
        if problem:
            unfit.append(f"datapoints[{index}] ({problem})")
    if unfit:
        what = (
            "template's placeholders have no value in the inputs of" if prompt else "callable cannot take the inputs of"
        )
        problems.append(f"file {file.path!r}: {what} {listed(unfit)}")
    missing = _without_target(dataset)
    for index, evaluator in enumerate(evaluators):
        if evaluator.args_type == "target_required" and missing and evaluator.without_target == "refuse":
            problems.append(
                f"evaluator {evaluator.path!r} (evaluators[{index}]) is target_required, "
                f"but {listed(missing)} of dataset {dataset.path!r} have no target"
            )


def _without_target(dataset: DatasetConfig) -> list[str]:
    return [f"datapoints[{i}]" for i, point in enumerate(dataset.datapoints) if not point.has_target]


def _warn_not_applicable(evaluators: list[EvaluatorConfig], dataset: DatasetConfig) -> None:
    """Before the run: which judgments will be recorded as not applicable, and why."""
    missing = _without_target(dataset)
    for evaluator in evaluators:
        if missing and evaluator.args_type == "target_required" and evaluator.without_target == "not_applicable":
            one = len(missing) == 1
            log.warning(
                "evaluations.run: evaluator %r needs a target, and %s of dataset %r %s none: %s recorded "
                "as not applicable (no target)",
                evaluator.path, listed(missing), dataset.path, "has" if one else "have",
                "its judgment is" if one else "their judgments are",
            )  # fmt: skip


def _validate_connection(
    connection: Any, file: FileConfig | None, problems: list[str], environment: bool
) -> dict[str, Any]:
    """``model_options`` (how to reach the models), checked against the prompt file's model."""
    if connection is None:
        connection = {}
    if not isinstance(connection, Mapping):
        problems.append(f"model_options: must be a dict, got {type(connection).__name__}")
        return {}
    unknown = sorted(str(k) for k in connection if k not in CONNECTION_OPTIONS)
    if unknown:
        problems.append(f"model_options: {listed(unknown)}: not known (it takes {listed(list(CONNECTION_OPTIONS))})")
        return {}
    prompt = file.prompt if file is not None else None
    problem = prompt.model_problem(connection, environment=environment) if prompt is not None else None
    if problem:
        problems.append(f"file {file.path!r}: version.model: {problem}")  # type: ignore[union-attr]
    return dict(connection)


def validate_arguments(
    name: Any,
    file: Any,
    evaluators: Any,
    dataset: Any,
    *,
    store: ResultStore | None = None,
    model_options: Any = None,
    environment: bool = False,
) -> EvaluationSpec:
    """The validated arguments, or an :class:`EvaluationConfigError` listing every problem.

    ``store``: the results root where datasets and prompts named by path alone are stored;
    ``model_options``: how the prompt file and the LLM judges reach their models;
    ``environment``: the model calls see this process's environment (their keys are checked)."""
    problems: list[str] = []
    if not isinstance(name, str) or not name.strip():
        problems.append(f"name: must be a non-empty string, got {name!r}")
    file_config = _validate_file(file, problems, store)
    connection = _validate_connection(model_options, file_config, problems, environment)
    expanded = expand_evaluators(evaluators, connection, problems, environment=environment)
    evaluator_configs = validate_evaluators(expanded, problems)
    dataset_config = _validate_dataset(
        dataset, problems, store, unnamed=name.strip() if isinstance(name, str) else None
    )
    ids: list[str] = []
    if dataset_config is not None:
        ids = _datapoint_ids(dataset_config, problems)
        if file_config is not None:
            _check_fit(file_config, evaluator_configs, dataset_config, problems)
    if problems:
        raise EvaluationConfigError(problems)
    assert file_config is not None and dataset_config is not None
    _warn_not_applicable(evaluator_configs, dataset_config)
    return EvaluationSpec(
        name=name.strip(),
        file=file_config,
        evaluators=evaluator_configs,
        dataset=dataset_config,
        datapoint_ids=ids,
        model_options=connection,
    )
