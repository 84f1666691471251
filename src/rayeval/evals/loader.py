"""Loading eval files and folders, reporting every problem with file, field and message."""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..graders.registry import get_grader
from .data_roots import checked_data_path, local_node_path, resolve_roots
from .model import Eval, selection_problem

SKIPPED_FILE_NAMES = frozenset({"manifest.json"})


@dataclass(frozen=True)
class EvalProblem:
    path: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}: {self.field}" if self.field else self.path
        return f"{where}: {self.message}"


class EvalFileError(ValueError):
    """Raised with every problem found across all the files that were asked for."""

    def __init__(self, problems: list[EvalProblem]):
        self.problems = list(problems)
        count = len(self.problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"{count} problem{'s' if count != 1 else ''} in eval files:\n{lines}")


def _field_path(loc: Iterable[Any]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ("str", "list[str]", "function-after[_one_grader_selection(), Eval]"):
            continue  # union-branch and validator names are pydantic internals, not fields
        else:
            path += f".{part}" if path else str(part)
    return path


def _pydantic_problems(path: str, error: ValidationError) -> list[EvalProblem]:
    problems: dict[tuple[str, str], EvalProblem] = {}
    for item in error.errors(include_url=False):
        field = _field_path(item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "missing":
            message = "required field is missing"
        problems.setdefault((field, message), EvalProblem(path, field, message))
    return list(problems.values())


def _read_json_object(path: Path) -> tuple[dict | None, EvalProblem | None]:
    name = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return None, EvalProblem(name, "", f"cannot read file: {exc.strerror or exc}")
    if not raw.strip():
        return None, EvalProblem(name, "", "file is empty")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return None, EvalProblem(name, "", f"not valid UTF-8 (byte {exc.start}): {exc.reason}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, EvalProblem(name, "", f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}")
    except RecursionError:
        return None, EvalProblem(name, "", "invalid JSON: nested too deeply")
    if not isinstance(data, dict):
        return None, EvalProblem(name, "", f"top level must be a JSON object, got {type(data).__name__}")
    return data, None


def grader_config_problems(eval_: Eval, path: str) -> list[EvalProblem]:
    """Dry-run every grader on an empty answer: graders check their whole config first."""
    problems = []
    prefix = "grader" if eval_.grader is not None else "graders"
    for index, spec in enumerate(eval_.grader_specs):
        field = f"{prefix}.config" if eval_.grader is not None else f"graders[{index}].config"
        result = get_grader(spec.type).evaluate_answer({}, spec.config)
        reason = result.metrics.get("configuration_error")
        if reason is not None:
            problems.append(EvalProblem(path, field, f"{spec.type} configuration error: {reason}"))
    return problems


def data_node_problems(eval_: Eval, path: str) -> list[EvalProblem]:
    """One problem per local data node outside the eval's data roots (see ``data_roots.py``)."""
    base = eval_.source_path.parent if eval_.source_path else Path.cwd()
    problems = []
    for index, node in enumerate(eval_.data_nodes):
        field = "data_node" if isinstance(eval_.data_node, str) else f"data_node[{index}]"
        try:
            local = local_node_path(node, base)
        except ValueError as exc:  # file://host/...
            problems.append(EvalProblem(path, field, f"data node {node!r}: {exc}"))
            continue
        if local is None:
            continue
        try:
            checked_data_path(local, eval_.data_roots)
        except ValueError as exc:
            problems.append(EvalProblem(path, field, f"local data node {node!r} {exc}"))
    return problems


def parse_eval(
    data: dict,
    path: str,
    *,
    data_roots: Sequence[Path] = (),
    check_grader_configs: bool = True,
    check_data_nodes: bool = True,
) -> tuple[Eval | None, list[EvalProblem]]:
    """Validate one decoded eval object; returns the Eval or the problems found.

    ``data_roots`` are the real folders (see ``resolve_roots``) its local data nodes may
    come from: ``check_evals`` passes the evals root and the user's ``--data-root`` folders.
    """
    try:
        eval_ = Eval.model_validate(data)
    except ValidationError as exc:
        problems = [p for p in _pydantic_problems(path, exc) if p.field]
        selection = selection_problem(data.get("grader"), data.get("graders"))
        if selection:
            problems.append(EvalProblem(path, *selection))
        return None, problems
    eval_._source_path = Path(path).resolve()
    eval_._data_roots = tuple(data_roots)
    problems = grader_config_problems(eval_, path) if check_grader_configs else []
    if check_data_nodes:
        problems += data_node_problems(eval_, path)
    return (None if problems else eval_), problems


def discover_eval_files(target: Path) -> list[Path]:
    if target.is_dir():
        return sorted(p for p in target.rglob("*.json") if p.is_file() and p.name not in SKIPPED_FILE_NAMES)
    return [target]


def check_evals(
    *paths: str | Path,
    data_roots: Sequence[str | Path] = (),
    check_grader_configs: bool = True,
    check_data_nodes: bool = True,
) -> tuple[list[Eval], list[EvalProblem]]:
    """Load what can be loaded and collect every problem (used by ``validate`` and the planner).

    Local data nodes must resolve inside the evals root (the folder argument an eval was
    found under, or an eval file's own folder) or one of ``data_roots``.
    """
    evals: list[Eval] = []
    problems: list[EvalProblem] = []
    seen_ids: dict[str, str] = {}
    if not paths:
        problems.append(EvalProblem("<arguments>", "", "no eval files or folders given"))
    for target in map(Path, paths):
        if not target.exists():
            problems.append(EvalProblem(str(target), "", "no such file or folder"))
            continue
        files = discover_eval_files(target)
        roots = resolve_roots([target if target.is_dir() else target.parent, *data_roots])
        if not files:
            problems.append(EvalProblem(str(target), "", "folder contains no *.json eval files"))
        for file in files:
            data, problem = _read_json_object(file)
            if problem:
                problems.append(problem)
                continue
            eval_, found = parse_eval(
                data, str(file), data_roots=roots, check_grader_configs=check_grader_configs, check_data_nodes=check_data_nodes
            )
            problems.extend(found)
            if eval_ is None:
                continue
            if eval_.id in seen_ids:
                problems.append(EvalProblem(str(file), "id", f"duplicate eval id {eval_.id!r}, also in {seen_ids[eval_.id]}"))
                continue
            seen_ids[eval_.id] = str(file)
            evals.append(eval_)
    return evals, problems


def load_evals(
    *paths: str | Path,
    data_roots: Sequence[str | Path] = (),
    check_grader_configs: bool = True,
    check_data_nodes: bool = True,
) -> list[Eval]:
    """Every eval under ``paths`` (files or folders, recursively), or EvalFileError listing all problems.

    ``data_roots``: folders besides the evals roots that local data nodes may come from.
    """
    evals, problems = check_evals(
        *paths, data_roots=data_roots, check_grader_configs=check_grader_configs, check_data_nodes=check_data_nodes
    )
    if problems:
        raise EvalFileError(problems)
    return evals


def load_eval(path: str | Path, *, data_roots: Sequence[str | Path] = (), check_data_nodes: bool = True) -> Eval:
    """Exactly one eval file; its local data nodes must be in its own folder or ``data_roots``."""
    evals = load_evals(path, data_roots=data_roots, check_data_nodes=check_data_nodes)
    if len(evals) != 1:
        raise EvalFileError([EvalProblem(str(path), "", f"expected one eval file, found {len(evals)}")])
    return evals[0]


__all__ = [
    "EvalFileError",
    "EvalProblem",
    "check_evals",
    "load_eval",
    "load_evals",
    "parse_eval",
]
