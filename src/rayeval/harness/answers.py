"""Finding the agent's answer, however it was delivered."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from .._json import dumps
from .workspace import Listing

# Benchmark convention first, as in the reference; both are accepted.
ANSWER_FILE_NAMES = ("analysis_output.json", "eval_answer.json")
FINISHED_FILE = "finished.txt"

_TAGGED = re.compile(r"<EVAL_ANSWER>(.*?)</EVAL_ANSWER>", re.DOTALL)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)


class FoundAnswer(BaseModel):
    """An answer and where it came from; ``answer is None`` means nothing usable was found."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    answer: Any = None
    source: str | None = None
    metadata: dict[str, Any] = {}
    problem: str | None = None

    @property
    def found(self) -> bool:
        return self.answer is not None


def unwrap_return(value: Any) -> tuple[Any, dict[str, Any]]:
    """(answer, metadata) from an agent's return value.

    Only a true envelope ``{"answer": <dict or None>, "metadata": <dict>}`` is unwrapped. A plain
    answer such as ``{"answer": "B"}`` (the multiple-choice schema) stays as it is: the reference
    unwrapped it to ``"B"`` and then failed it, which silently mis-scored runs.
    """
    if (
        isinstance(value, dict)
        and "answer" in value
        and set(value) <= {"answer", "metadata"}
        and (value["answer"] is None or isinstance(value["answer"], dict))
        and isinstance(value.get("metadata", {}), dict)
    ):
        return value["answer"], dict(value.get("metadata") or {})
    return value, {}


def extract_tagged(text: str) -> Any:
    """The last well-formed ``<EVAL_ANSWER>{json}</EVAL_ANSWER>`` in ``text``, else None."""
    for raw in reversed(_TAGGED.findall(text)):
        body = raw.strip()
        fenced = _FENCE.match(body)
        for candidate in (body, fenced.group(1).strip() if fenced else None):
            if candidate is None:
                continue
            try:
                return json.loads(candidate)
            except (json.JSONDecodeError, RecursionError):
                continue
    return None


def _existing(listing: Listing, names: tuple[str, ...]) -> list[Path]:
    """Those of ``names`` present as files in the listed folders, in order."""
    return [base / name for base, present in listing for name in names if name in present and (base / name).is_file()]


def read_answer_files(work_dir: Path, listing: Listing) -> FoundAnswer:
    """The first existing answer file of the work folder's ``listing``; a broken one is
    reported, never silently skipped."""
    for path in _existing(listing, ANSWER_FILE_NAMES):
        source = str(path.relative_to(work_dir))
        try:
            return FoundAnswer(answer=json.loads(path.read_text(encoding="utf-8")), source=source)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            return FoundAnswer(source=source, problem=f"{source} is not valid JSON: {exc}")
    for path in _existing(listing, (FINISHED_FILE,)):
        text = path.read_text(encoding="utf-8", errors="replace")
        return FoundAnswer(answer={"finished_file_contents": text}, source=str(path.relative_to(work_dir)))
    return FoundAnswer(problem="the agent returned no answer and wrote no eval_answer.json")


def find_answer(returned: Any, work_dir: Path, listing: Listing) -> FoundAnswer:
    """Return value first (envelope, dict, tagged text), then answer files in the work folder
    (``listing``: see ``workspace.list_work_dir``)."""
    answer, metadata = unwrap_return(returned)
    if isinstance(answer, str):
        tagged = extract_tagged(answer)
        if tagged is not None:
            return FoundAnswer(answer=tagged, source="returned <EVAL_ANSWER>", metadata=metadata)
        answer = None
    if answer is not None:
        # graded and stored as JSON: numpy scalars, tuples and the like become plain JSON values
        return FoundAnswer(answer=json.loads(dumps(answer)), source="returned value", metadata=metadata)
    from_files = read_answer_files(work_dir, listing)
    from_files.metadata = metadata
    return from_files
