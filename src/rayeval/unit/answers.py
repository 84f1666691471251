"""Finding the agent's answer, however it was delivered."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path
from string import ascii_letters
from typing import Any

from pydantic import BaseModel, ConfigDict

from .._json import TooManyValues, dumps, loads_bounded
from ..sandbox.config import MAX_ANSWER_FILE_BYTES
from .workspace import FileTooLarge, Listing, read_left_file

# Benchmark convention first, as in the reference; both are accepted.
ANSWER_FILE_NAMES = ("analysis_output.json", "eval_answer.json")
FINISHED_FILE = "finished.txt"
#: Bounds of the search for a ``finished.txt`` in a subfolder (the agent shapes that tree): the
#: folder entries read in all, and how many folders deep.
MAX_SEARCHED_ENTRIES = 10_000
MAX_SEARCHED_DEPTH = 16
#: How deep an answer or the agent's metadata may nest lists and objects: trusted code walks
#: them (masking secrets, validating, storing, grading), and a walk of a value nested 500
#: deep exhausts the interpreter's recursion limit.
MAX_ANSWER_NESTING = 100
#: Staged input data, never searched: a data file of that name is not the agent's marker.
DATA_SUBDIR = "data"

#: Metadata keys rayeval's runner writes (the kept work folder, the session's checkpoints, the
#: gateway's counts and where the agent's claims differ from them): an agent's are dropped.
RUNNER_METADATA_KEYS = frozenset({"work_dir", "session_checkpoints", "gateway", "claims_differ_from_gateway"})

OPEN_TAG, CLOSE_TAG = "<EVAL_ANSWER>", "</EVAL_ANSWER>"
FENCE = "```"


class FoundAnswer(BaseModel):
    """An answer and where it came from; ``answer is None`` means nothing usable was found."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    answer: Any = None
    source: str | None = None
    metadata: dict[str, Any] = {}
    problem: str | None = None
    #: the answer was there but could not be taken (larger than what is read)
    oversized: bool = False

    @property
    def found(self) -> bool:
        return self.answer is not None


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` (decoded JSON) nests lists and objects more than ``limit`` levels
    deep; told without recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def unwrap_return(value: Any) -> tuple[Any, dict[str, Any]]:
    """(answer, metadata) from an agent's return value.

    Only a true envelope ``{"answer": <dict or None>, "metadata": <dict>}`` is unwrapped. A plain
    answer such as ``{"answer": "B"}`` (the multiple-choice schema) stays as it is: the reference
    unwrapped it to ``"B"`` and then failed it, which silently mis-scored runs. The metadata
    holds none of :data:`RUNNER_METADATA_KEYS`.
    """
    if (
        isinstance(value, dict)
        and "answer" in value
        and set(value) <= {"answer", "metadata"}
        and (value["answer"] is None or isinstance(value["answer"], dict))
        and isinstance(value.get("metadata", {}), dict)
    ):
        metadata = value.get("metadata") or {}
        return value["answer"], {key: item for key, item in metadata.items() if key not in RUNNER_METADATA_KEYS}
    return value, {}


def answer_envelope(answer: Any, metadata: dict[str, Any], work_dir: Path) -> dict[str, Any]:
    """What an agent returns for an answer of any JSON type, with its metadata: an object (or
    None) in the envelope :func:`unwrap_return` takes; any other value (a list, a string) is
    still the answer, written as the answer file so that graders see it as it is."""
    if answer is None or isinstance(answer, dict):
        return {"answer": answer, "metadata": metadata}
    (work_dir / ANSWER_FILE_NAMES[-1]).write_text(json.dumps(answer))
    return {"answer": None, "metadata": metadata}


def tagged_spans(text: str) -> list[tuple[int, int]]:
    """Where the tag bodies of ``text`` are, in order: the matches of
    ``<EVAL_ANSWER>(.*?)</EVAL_ANSWER>`` (DOTALL), found in one pass.

    Each open tag pairs with the first close tag after it and the scan goes on after that close.
    An open tag with no close after it ends the scan, as no later one has a close either: the
    regex instead retried from every open tag to the end of the text, quadratic in hostile text.
    """
    spans = []
    position = 0
    while (start := text.find(OPEN_TAG, position)) >= 0:
        start += len(OPEN_TAG)
        end = text.find(CLOSE_TAG, start)
        if end < 0:
            break
        spans.append((start, end))
        position = end + len(CLOSE_TAG)
    return spans


def unfence(body: str) -> str | None:
    """The content, stripped, of a stripped body that is a code fence (three backticks, an
    optional language, the content, three backticks), else None: what
    ``^```[a-zA-Z]*\\s*\\n?(.*?)\\n?```$`` (DOTALL) captures, stripped.

    Computed directly, in linear time: with both fences pinned to the ends, that pattern's first
    match takes every leading ASCII letter as the language and the rest is content, whereas its
    backtracking was quadratic in a long run of letters or blanks.
    """
    if len(body) < 2 * len(FENCE) or not (body.startswith(FENCE) and body.endswith(FENCE)):
        return None
    return body[len(FENCE) : -len(FENCE)].lstrip(ascii_letters).strip()


def extract_tagged(text: str, limit: int = MAX_ANSWER_FILE_BYTES) -> Any:
    """The last well-formed ``<EVAL_ANSWER>{json}</EVAL_ANSWER>`` in ``text`` (its body may be
    fenced), else None. Linear in the size of ``text``: the answer is hostile input. A body that
    holds more values than an answer file of ``limit`` bytes may raises :class:`TooManyValues`."""
    for start, end in reversed(tagged_spans(text)):
        body = text[start:end].strip()
        for candidate in (body, unfence(body)):
            if candidate is None:
                continue
            try:
                return loads_bounded(candidate, limit)
            except TooManyValues:
                raise
            except (ValueError, RecursionError):  # ValueError: also an integer over Python's digit limit
                continue
    return None


def _existing(listing: Listing, names: tuple[str, ...]) -> list[Path]:
    """Those of ``names`` present in the listed folders, in order."""
    return [base / name for base, present in listing for name in names if name in present]


@dataclass(frozen=True)
class AnswerFile:
    """One answer file as read: its JSON value, or the problem that keeps it from being one."""

    value: Any = None
    problem: str | None = None
    #: larger than what is read (then it was not read)
    oversized: bool = False
    #: its first characters, to show what it held
    head: str = ""


HEAD_CHARS = 500


def read_answer_file(path: Path, name: str, limit: int = MAX_ANSWER_FILE_BYTES) -> AnswerFile | None:
    """The answer file at ``path`` (``name`` in messages), read as the hostile input it is: a
    regular file only (never through a symbolic link), at most ``limit`` bytes, strict UTF-8,
    and JSON no parser error escapes (nesting beyond the parser, an integer beyond Python's
    digit limit), refused unread when it may hold more values than ``limit`` allows (see
    :func:`rayeval._json.loads_bounded`). None when there is no regular file there."""
    try:
        data = read_left_file(path, limit)
    except FileTooLarge as exc:
        return AnswerFile(problem=str(exc), oversized=True)
    if data is None:
        return None
    head = data[: HEAD_CHARS * 4].decode("utf-8", errors="replace")[:HEAD_CHARS]
    try:
        return AnswerFile(value=loads_bounded(data.decode("utf-8"), limit), head=head)
    except TooManyValues as exc:
        return AnswerFile(problem=f"{name} is too large to read: {exc}", head=head, oversized=True)
    except (ValueError, RecursionError) as exc:  # bad UTF-8, bad JSON, an integer over the digit limit
        return AnswerFile(problem=f"{name} is not valid JSON: {exc}", head=head)


def _nested_finished_file(work_dir: Path, listing: Listing) -> Iterator[Path]:
    """The ``finished.txt`` an agent wrote in a subfolder of the work folder (not its staged
    data), as the reference finds it: the first in sorted path order. Never through a
    symbolic link, at most ``MAX_SEARCHED_DEPTH`` folders deep and ``MAX_SEARCHED_ENTRIES``
    entries read: nothing when none is found within them."""
    if not listing:
        return
    skipped = {base / DATA_SUBDIR for base, _ in listing}
    remaining = MAX_SEARCHED_ENTRIES

    def search(folder: Path, depth: int) -> Path | None:
        # pre-order over each folder's entries in name order: the order of sorted(rglob(name))
        nonlocal remaining
        try:
            with os.scandir(folder) as entries:
                found = sorted(islice(entries, remaining + 1), key=lambda entry: entry.name)
        except OSError:
            return None
        remaining -= len(found)
        for entry in found:
            if remaining < 0:
                return None
            path = Path(entry.path)
            if entry.name == FINISHED_FILE and depth > 0 and entry.is_file(follow_symlinks=False):
                return path
            if depth < MAX_SEARCHED_DEPTH and path not in skipped and entry.is_dir(follow_symlinks=False):
                hit = search(path, depth + 1)
                if hit is not None:
                    return hit
        return None

    hit = search(work_dir, 0)
    if hit is not None:
        yield hit


def read_answer_files(work_dir: Path, listing: Listing, limit: int = MAX_ANSWER_FILE_BYTES) -> FoundAnswer:
    """The first answer file of the work folder's ``listing`` that is a regular file (never a
    link out of the work folder); a broken or oversized one is reported, never skipped."""
    for path in _existing(listing, ANSWER_FILE_NAMES):
        source = str(path.relative_to(work_dir))
        read = read_answer_file(path, source, limit)
        if read is not None:
            return FoundAnswer(answer=read.value, source=source, problem=read.problem, oversized=read.oversized)
    # the subfolders are searched only when the listed folders have no finished.txt
    for path in chain(_existing(listing, (FINISHED_FILE,)), _nested_finished_file(work_dir, listing)):
        try:
            data = read_left_file(path, limit)
        except FileTooLarge as exc:
            return FoundAnswer(source=str(path.relative_to(work_dir)), problem=str(exc), oversized=True)
        if data is not None:
            text = data.decode("utf-8", errors="replace")
            return FoundAnswer(answer={"finished_file_contents": text}, source=str(path.relative_to(work_dir)))
    return FoundAnswer(problem="the agent returned no answer and wrote no eval_answer.json")


def find_answer(
    returned: Any, work_dir: Path, listing: Listing, file_limit: int = MAX_ANSWER_FILE_BYTES, *, decoded: bool = False
) -> FoundAnswer:
    """Return value first (envelope, dict, tagged text), then answer files in the work folder
    (``listing``: see ``workspace.list_work_dir``) of at most ``file_limit`` bytes. ``decoded``:
    ``returned`` was decoded from JSON text (a sandboxed unit's), so it is not encoded again."""
    answer, metadata = unwrap_return(returned)
    if isinstance(answer, str):
        tagged = extract_tagged(answer, file_limit)
        if tagged is not None:
            return FoundAnswer(answer=tagged, source="returned <EVAL_ANSWER>", metadata=metadata)
        answer = None
    if answer is not None:
        # graded and stored as JSON: numpy scalars, tuples and the like become plain JSON values
        plain = answer if decoded else json.loads(dumps(answer))
        return FoundAnswer(answer=plain, source="returned value", metadata=metadata)
    from_files = read_answer_files(work_dir, listing, file_limit)
    from_files.metadata = metadata
    return from_files
