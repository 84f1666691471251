"""Loading eval files and folders, reporting every problem with file, field and message."""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import ValidationError

from .._messages import field_problems
from ..errors import ConfigError, RayevalError
from ..graders.registry import get_grader
from .data_roots import checked_data_tree, local_node_path, resolve_roots, unreadable_data
from .model import Eval, selection_problem

SKIPPED_FILE_NAMES = frozenset({"manifest.json"})

# Limits on what an eval file may hold, so that `validate` refuses what `run` would choke on
# (Ray pickles every eval, and pickling fails a few hundred levels down). Real evals are far
# below them: the benchmark files are at most 16 KB, 5 levels deep, with 14,151-character tasks.
MAX_EVAL_FILE_BYTES = 16 * 1024 * 1024
"""A larger eval file is refused without being read (data belongs in ``data_node``)."""
MAX_STRING_CHARS = 1024 * 1024
"""The longest string (the task, a key, a grader config value) in an eval file, in characters."""
MAX_NESTING_DEPTH = 64
"""How deep JSON objects and arrays may nest in an eval file; the top-level object is level 1."""
MAX_PROBLEMS_PER_FILE = 20
"""Structure problems (nesting, NaN, duplicate keys, long strings) reported per file at most."""


@dataclass(frozen=True)
class EvalProblem:
    path: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}: {self.field}" if self.field else self.path
        return f"{where}: {self.message}"


class EvalFileError(ConfigError):
    """Raised with every problem found across all the files that were asked for."""

    def __init__(self, problems: list[EvalProblem]):
        self.problems = list(problems)
        count = len(self.problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"{count} problem{'s' if count != 1 else ''} in eval files:\n{lines}")


class _NonFinite:
    """What NaN, Infinity, -Infinity and numbers overflowing to infinity (``1e999``) decode to,
    so the walk can name their field."""

    __slots__ = ("literal",)

    def __init__(self, literal: str):
        self.literal = literal

    def problem(self) -> str:
        if self.literal in ("NaN", "Infinity", "-Infinity"):
            return f"{self.literal} is not valid JSON and eval files may not hold it (write a number, a string or null)"
        shown = self.literal if len(self.literal) <= 40 else self.literal[:40] + "..."
        return f"number {shown} overflows to infinity, which eval files may not hold"


class _TooManyProblems(RayevalError):
    pass


_PLAIN_KEY = re.compile(r"[\w\-]+\Z")
# A JSON escape of a UTF-16 surrogate: the only way a lone one (not Unicode text) gets into a
# file that decoded as UTF-8.  A paired one decodes to its character and passes the check.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SCAN_TOKEN = re.compile(r'["{}\[\],]|-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?')
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_Duplicates = dict[int, tuple[dict, dict[str, int]]]
_TOO_BIG = f"file is larger than the {MAX_EVAL_FILE_BYTES // (1024 * 1024)} MiB limit for eval files"


def _join_path(segments: Iterable[str | int]) -> str:
    """``grader.config.items[0]``; a key with dots, spaces, brackets… or a long one as ``["odd key"]``."""
    path = ""
    for part in segments:
        if isinstance(part, int):
            path += f"[{part}]"
        elif len(part) <= 40 and _PLAIN_KEY.match(part):
            path += f".{part}" if path else part
        else:  # a long key is cut short; one that is not Unicode text is shown escaped
            key = part if len(part) <= 40 else part[:40] + "..."
            path += f"[{json.dumps(key, ensure_ascii=_not_unicode(key) is not None)}]"
    return path


def _decode(text: str) -> tuple[Any, _Duplicates, bool]:
    """``json.loads`` noting duplicate keys (by object id) and turning NaN, Infinity and numbers
    overflowing to infinity into ``_NonFinite`` markers; the bool says whether there are any."""
    duplicates: _Duplicates = {}
    markers: list[_NonFinite] = []

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict:
        obj = dict(pairs)
        if len(obj) != len(pairs):  # the object is kept alive with its entry: its id stays unique
            counts = Counter(key for key, _ in pairs)
            duplicates[id(obj)] = (obj, {key: n for key, n in counts.items() if n > 1})
        return obj

    def constant(literal: str) -> _NonFinite:
        markers.append(_NonFinite(literal))
        return markers[-1]

    def number(literal: str) -> float | _NonFinite:
        value = float(literal)
        return constant(literal) if math.isinf(value) else value

    data = json.loads(text, object_pairs_hook=pairs_hook, parse_constant=constant, parse_float=number)
    return data, duplicates, bool(markers)


def _beyond_limits(data: Any, long_strings: bool) -> bool:
    """Whether objects and arrays nest beyond MAX_NESTING_DEPTH, or (when ``long_strings``) a
    key or string is longer than MAX_STRING_CHARS: level by level, without recursion."""
    level, depth = [data], 1
    while level:
        if depth > MAX_NESTING_DEPTH:
            return True
        items = [item for container in level for item in (container.values() if type(container) is dict else container)]
        if long_strings:
            keys = [key for container in level if type(container) is dict for key in container]
            strings = [item for item in items if type(item) is str]
            if (
                max(map(len, keys), default=0) > MAX_STRING_CHARS
                or max(map(len, strings), default=0) > MAX_STRING_CHARS
            ):
                return True
        level = [item for item in items if type(item) is dict or type(item) is list]
        depth += 1
    return False


def _not_unicode(text: str) -> str | None:
    """Why ``text`` is not Unicode text (a lone surrogate, from a ``\\ud800`` escape), else None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"unpaired surrogate \\u{ord(text[exc.start]):04x} at character {exc.start:,}: not Unicode text, "
            "which no agent's prompt or stored row can hold"
        )
    return None


def _structure_problems(
    data: Any, name: str, duplicates: _Duplicates, long_strings: bool, surrogates: bool
) -> list[EvalProblem]:
    """Nesting beyond MAX_NESTING_DEPTH, NaN/Infinity, duplicate keys, (when ``long_strings``
    may occur) strings beyond MAX_STRING_CHARS and (when ``surrogates`` may occur) keys and
    strings that are not Unicode text, each with the field path where it is."""
    problems: list[EvalProblem] = []
    segments: list[str | int] = []

    def add(message: str, *last: str) -> None:
        if len(problems) == MAX_PROBLEMS_PER_FILE:
            problems.append(
                EvalProblem(name, "", f"more problems not shown (at most {MAX_PROBLEMS_PER_FILE} per file)")
            )
            raise _TooManyProblems
        problems.append(EvalProblem(name, _join_path([*segments, *last]), message))

    def too_long(kind: str, length: int) -> str:
        return f"{kind} of {length:,} characters is longer than the {MAX_STRING_CHARS:,}-character limit for eval files"

    def visit(value: Any, depth: int) -> None:
        kind = type(value)
        if kind is str:
            if long_strings and len(value) > MAX_STRING_CHARS:
                add(too_long("string", len(value)))
            if surrogates and (problem := _not_unicode(value)):
                add(problem)
        elif kind is dict or kind is list:
            if depth > MAX_NESTING_DEPTH:
                add(
                    f"JSON objects and arrays nested more than {MAX_NESTING_DEPTH} levels deep (the limit for eval files)"
                )
                return
            if kind is list:
                for index, item in enumerate(value):
                    segments.append(index)
                    visit(item, depth + 1)
                    segments.pop()
                return
            repeated = duplicates.get(id(value))
            if repeated is not None and repeated[0] is value:
                for key, count in repeated[1].items():
                    add(
                        f"duplicate key {key!r}: it appears {count} times in the same object and JSON keeps only the last",
                        key,
                    )
            for key, item in value.items():
                segments.append(key)
                if long_strings and len(key) > MAX_STRING_CHARS:
                    add(too_long("key", len(key)))
                if surrogates and (problem := _not_unicode(key)):
                    add(f"key with an {problem}")
                visit(item, depth + 1)
                segments.pop()
        elif kind is _NonFinite:
            add(value.problem())

    try:
        visit(data, 1)
    except _TooManyProblems:
        pass
    return problems


def _locate(text: str, *, digits_over: int | None = None) -> tuple[str, str] | None:
    """Where a text json.loads refused without saying where goes too deep, or holds an integer
    of more than ``digits_over`` digits: (field path, message). Only ever run on such a file."""
    stack: list[list[Any]] = []  # per open container: [is_object, key or index, expecting a key]
    position = 0
    while (match := _SCAN_TOKEN.search(text, position)) is not None:
        token, position = match.group(), match.end()
        if token == '"':
            string = _JSON_STRING.match(text, match.start())
            if string is None:
                return None
            position = string.end()
            if stack and stack[-1][0] and stack[-1][2]:
                stack[-1][1:] = [json.loads(string.group()), False]
        elif token in "{[":
            if len(stack) >= MAX_NESTING_DEPTH:
                where = _join_path(level[1] for level in stack)
                return (
                    where,
                    f"JSON objects and arrays nested more than {MAX_NESTING_DEPTH} levels deep (the limit for eval files)",
                )
            stack.append([token == "{", "" if token == "{" else 0, token == "{"])
        elif token in "}]":
            if stack:
                stack.pop()
        elif token == ",":
            if stack and stack[-1][0]:
                stack[-1][2] = True
            elif stack:
                stack[-1][1] += 1
        elif digits_over is not None and token.lstrip("-").isdigit() and len(token.lstrip("-")) > digits_over:
            where = _join_path(level[1] for level in stack)
            return (
                where,
                f"integer of {len(token.lstrip('-')):,} digits is longer than the {digits_over:,} digits Python reads",
            )
    return None


def _read_at_most(file: BinaryIO, limit: int, size: int) -> bytes:
    """Up to ``limit`` bytes: what fstat said (one read, no ``limit``-sized buffer), and more
    in chunks when the file turns out longer or says nothing of its size (a pipe, /proc)."""
    chunks, total, want = [], 0, size + 1 if size else 1 << 16
    while total < limit:
        chunk = file.read(min(want, limit - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if len(chunk) < want:  # a buffered read returns less only at the end of the file
            break
        want = 1 << 20
    return b"".join(chunks)


def _read_json_object(path: Path) -> tuple[dict | None, list[EvalProblem]]:
    """The file's top-level object, or the problems that keep it from being an eval: unreadable,
    too big, not UTF-8, not JSON, not an object, or beyond the limits above (by field)."""
    name = str(path)
    try:
        with path.open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size > MAX_EVAL_FILE_BYTES:  # refused unread
                return None, [EvalProblem(name, "", f"{_TOO_BIG} ({size:,} bytes)")]
            raw = _read_at_most(file, MAX_EVAL_FILE_BYTES + 1, size)
    except OSError as exc:
        return None, [EvalProblem(name, "", f"cannot read file: {exc.strerror or exc}")]
    if len(raw) > MAX_EVAL_FILE_BYTES:
        return None, [EvalProblem(name, "", _TOO_BIG)]
    if not raw.strip():
        return None, [EvalProblem(name, "", "file is empty")]
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return None, [EvalProblem(name, "", f"not valid UTF-8 (byte {exc.start}): {exc.reason}")]
    try:
        data, duplicates, non_finite = _decode(text)
    except json.JSONDecodeError as exc:
        return None, [EvalProblem(name, "", f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}")]
    except RecursionError:
        found = _locate(text)
        return None, [
            EvalProblem(name, *(found or ("", f"invalid JSON: nested more than {MAX_NESTING_DEPTH} levels deep")))
        ]
    except ValueError as exc:  # an integer too long for int() (sys.get_int_max_str_digits)
        found = _locate(text, digits_over=getattr(sys, "get_int_max_str_digits", lambda: 0)() or None)
        return None, [EvalProblem(name, *(found or ("", f"invalid JSON: {exc}")))]
    if not isinstance(data, dict):
        return None, [EvalProblem(name, "", f"top level must be a JSON object, got {type(data).__name__}")]
    long_strings = len(text) > MAX_STRING_CHARS  # a shorter text cannot hold a longer string
    may_nest = raw.count(b"{") + raw.count(b"[") > MAX_NESTING_DEPTH  # in bytes: faster, and the same count
    surrogates = _SURROGATE_ESCAPE.search(text) is not None
    if not (duplicates or non_finite or surrogates) and not (
        (may_nest or long_strings) and _beyond_limits(data, long_strings)
    ):
        return data, []  # the walk naming each problem's field runs only when there is one to find
    problems = _structure_problems(data, name, duplicates, long_strings, surrogates)
    return (None if problems else data), problems


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


def data_node_problems(eval_: Eval, path: str, eval_files: Collection[Path] = ()) -> list[EvalProblem]:
    """One problem per local data node outside the eval's data roots, or one that is or
    holds something outside them, the eval's own file or one of ``eval_files`` (real paths:
    the other evals of the run), whose answer keys would reach the agent (see ``data_roots.py``),
    and per one that does not exist or cannot be read."""
    base = eval_.source_path.parent if eval_.source_path else Path.cwd()
    secret = {*eval_files, *([eval_.source_path] if eval_.source_path else [])}
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
            real = checked_data_tree(local, eval_.data_roots, secret)
        except ValueError as exc:
            problems.append(EvalProblem(path, field, f"local data node {node!r} {exc}"))
            continue
        except OSError as exc:
            problems.append(
                EvalProblem(path, field, f"local data node {node!r}: cannot read {exc.filename}: {exc.strerror}")
            )
            continue
        if (problem := unreadable_data(real)) is not None:
            given_relative = "://" not in node and not Path(node).expanduser().is_absolute()
            relative = f"; a relative path is relative to the eval file's folder, {base}" if given_relative else ""
            problems.append(
                EvalProblem(path, field, f"local data node {node!r} ({local}) {problem}: correct the path{relative}")
            )
    return problems


def parse_eval(
    data: dict,
    path: str,
    *,
    data_roots: Sequence[Path] = (),
    check_grader_configs: bool = True,
    check_data_nodes: bool = True,
    eval_files: Collection[Path] = (),
) -> tuple[Eval | None, list[EvalProblem]]:
    """Validate one decoded eval object; returns the Eval or the problems found.

    ``data_roots`` are the real folders (see ``resolve_roots``) its local data nodes may
    come from: ``check_evals`` passes the evals root and the user's ``--data-root`` folders.
    ``eval_files``: the real paths of the eval files checked with it, which its data nodes
    may not hold.
    """
    try:
        eval_ = Eval.model_validate(data)
    except ValidationError as exc:
        problems = [
            EvalProblem(path, problem.field, problem.message)
            for problem in field_problems(exc, {"missing": "required field is missing"})
            if problem.field
        ]
        selection = selection_problem(data.get("grader"), data.get("graders"))
        if selection:
            problems.append(EvalProblem(path, *selection))
        return None, problems
    eval_._source_path = Path(path).resolve()
    eval_._data_roots = tuple(data_roots)
    problems = grader_config_problems(eval_, path) if check_grader_configs else []
    if check_data_nodes:
        problems += data_node_problems(eval_, path, eval_files)
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
    found_files: list[tuple[Path, list[Path]]] = []
    for target in map(Path, paths):
        if not target.exists():
            problems.append(EvalProblem(str(target), "", "no such file or folder"))
            continue
        found_files.append((target, discover_eval_files(target)))
    # the real paths of every eval file given: no eval's data node may hand one to its agent
    eval_files = frozenset(Path(os.path.realpath(file)) for _, files in found_files for file in files)
    for target, files in found_files:
        roots = resolve_roots([target if target.is_dir() else target.parent, *data_roots])
        if not files:
            problems.append(EvalProblem(str(target), "", "folder contains no *.json eval files"))
        for file in files:
            data, found = _read_json_object(file)
            if data is None:
                problems.extend(found)
                continue
            eval_, found = parse_eval(
                data,
                str(file),
                data_roots=roots,
                check_grader_configs=check_grader_configs,
                check_data_nodes=check_data_nodes,
                eval_files=eval_files,
            )
            problems.extend(found)
            if eval_ is None:
                continue
            if eval_.id in seen_ids:
                problems.append(
                    EvalProblem(str(file), "id", f"duplicate eval id {eval_.id!r}, also in {seen_ids[eval_.id]}")
                )
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
