"""Evaluators by path: the built-in library (Humanloop's ``Example Evaluators/...``), a user
registry, and LLM-as-judge evaluators defined in code.

An evaluator in ``evaluations.run`` is one of:

* code: ``{path, args_type, return_type, callable, threshold}``;
* an LLM judge: ``{path, evaluator_type: "llm", args_type, return_type, prompt: {model,
  template, temperature, ...}, options: [...] (select / multi_select), threshold}``
  (see :class:`rayeval.evaluations.prompts.LLMJudge`);
* a reference: ``{path}`` alone (optionally ``threshold``, and ``model`` to change an LLM
  judge's model), resolved from :data:`EVALUATORS`: what
  :func:`~rayeval.evaluations.config.register_evaluator` registered, the built-ins, then the
  ``rayeval.evaluators`` entry points of installed packages.

The built-ins' code reads a target's text as ``target["output"]``, else the target's only
value, else the target itself when it is a string (:func:`target_text`).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from .._messages import listed, pydantic_problems
from ..registry import Registry
from .prompts import LLMJudge, PromptVersion

BUILTIN_PREFIX = "Example Evaluators/"
# What an LLM judge's template may name (a log's fields; target and datapoint when target_required).
JUDGE_VARIABLES = frozenset(
    {
        "output",
        "inputs",
        "messages",
        "error",
        "datapoint_id",
        "source_datapoint_id",
        "run_id",
        "evaluation",
        "file",
        "version_id",
        "start_time",
        "end_time",
        "duration_s",
        "cost_usd",
        "input_tokens",
        "output_tokens",
        "log",
    }
)
TARGET_VARIABLES = frozenset({"target", "datapoint"})
DEFAULT_JUDGE_MODEL = "openai/gpt-4o-mini"


def target_text(datapoint: Mapping[str, Any]) -> str:
    """The text a built-in compares the output with (see the module's docstring)."""
    target = datapoint.get("target")
    if isinstance(target, Mapping):
        if "output" in target:
            target = target["output"]
        elif len(target) == 1:
            target = next(iter(target.values()))
    return target if isinstance(target, str) else json.dumps(target, ensure_ascii=False)


def latency(log: dict[str, Any]) -> float:
    return log["duration_s"]


def cost(log: dict[str, Any]) -> float | None:
    return log.get("cost_usd")


def exact_match(log: dict[str, Any], datapoint: dict[str, Any]) -> bool:
    return log["output"].strip() == target_text(datapoint).strip()


def contains(log: dict[str, Any], datapoint: dict[str, Any]) -> bool:
    return target_text(datapoint).strip().casefold() in log["output"].casefold()


def regex_match(log: dict[str, Any], datapoint: dict[str, Any]) -> bool:
    return re.search(target_text(datapoint), log["output"]) is not None


def valid_json(log: dict[str, Any]) -> bool:
    try:
        json.loads(log["output"])
    except ValueError:
        return False
    return True


def length(log: dict[str, Any]) -> int:
    return len(log["output"])


SEMANTIC_SIMILARITY_TEMPLATE = [
    {
        "role": "system",
        "content": "You compare the meaning of two texts. Ignore wording, formatting and length; "
        "judge only whether they say the same thing.",
    },
    {
        "role": "user",
        "content": "Text A (the expected answer):\n{{target}}\n\nText B (the answer given):\n{{output}}\n\n"
        "Rate how similar their meanings are from 1 (unrelated or contradictory) to 5 (the same meaning).",
    },
]


def _code(
    measures: str, return_type: str, fn: Callable[..., Any], *, target: bool = False
) -> tuple[str, dict[str, Any]]:
    """A built-in code evaluator: what it measures, and the evaluator (``target``: target_required)."""
    args_type = "target_required" if target else "target_free"
    return measures, {"args_type": args_type, "return_type": return_type, "callable": fn}


#: path -> (what it measures, the evaluator); the README's table lists the same.
BUILTINS: dict[str, tuple[str, dict[str, Any]]] = {
    "Example Evaluators/AI/Semantic similarity": (
        "how close the output's meaning is to the target's, 1-5, judged by a model",
        {
            "evaluator_type": "llm",
            "args_type": "target_required",
            "return_type": "number",
            "prompt": {"model": DEFAULT_JUDGE_MODEL, "template": SEMANTIC_SIMILARITY_TEMPLATE, "temperature": 0},
        },
    ),
    "Example Evaluators/Code/Latency": _code("seconds the file took to produce the output", "number", latency),
    "Example Evaluators/Code/Cost": _code(
        "USD the file's model calls cost (a callable's as the gateway counted them; null for a model without a price)",
        "number",
        cost,
    ),
    "Example Evaluators/Code/Exact match": _code(
        "the output equals the target text (surrounding whitespace ignored)", "boolean", exact_match, target=True
    ),
    "Example Evaluators/Code/Contains": _code(
        "the output contains the target text (case ignored)", "boolean", contains, target=True
    ),
    "Example Evaluators/Code/Regex match": _code(
        "the target text, a regular expression, matches somewhere in the output", "boolean", regex_match, target=True
    ),
    "Example Evaluators/Code/Valid JSON": _code("the output parses as JSON", "boolean", valid_json),
    "Example Evaluators/Code/Length": _code("the output's length in characters", "number", length),
}


def _evaluator(value: Any) -> dict[str, Any]:
    """An entry point's evaluator: a mapping, checked like any evaluator where it is used."""
    if not isinstance(value, Mapping):
        raise TypeError(f"an evaluator is a mapping, got {type(value).__name__}")
    return dict(value)


#: By path: the built-ins, then what :func:`remember_evaluator` adds (replacing a built-in).
EVALUATORS: Registry[dict[str, Any]] = Registry(
    "evaluators", _evaluator, {path: spec for path, (_, spec) in BUILTINS.items()}
)
REFERENCE_FIELDS = frozenset({"path", "threshold", "model"})


class JudgeSpec(BaseModel):
    """What an LLM-as-judge evaluator's judge is made of (its other fields are checked as any
    evaluator's, once the judge is its callable)."""

    model_config = ConfigDict(extra="ignore")

    args_type: str = "target_free"
    return_type: str
    prompt: PromptVersion
    options: list[str] = []

    #: the fields the judge takes the place of
    FIELDS: ClassVar[tuple[str, ...]] = ("evaluator_type", "prompt", "options")


def known_paths() -> list[str]:
    return sorted(EVALUATORS.names())


def remember_evaluator(evaluator: Mapping[str, Any]) -> None:
    """Make a checked ``evaluator`` known by its path (see
    :func:`~rayeval.evaluations.config.register_evaluator`, which checks it)."""
    EVALUATORS.register(str(evaluator["path"]).strip(), dict(evaluator), replace=True)


def is_reference(raw: Mapping[str, Any]) -> bool:
    """``{path}`` alone (with a threshold or a judge's model): an evaluator named, not defined."""
    return set(raw) <= REFERENCE_FIELDS and "path" in raw


def _resolve(raw: Mapping[str, Any], where: str, problems: list[str]) -> dict[str, Any] | None:
    path = raw.get("path")
    found = EVALUATORS.find(path) if isinstance(path, str) else None
    if found is None:
        known = known_paths()
        problems.append(
            f"{where}: no evaluator has the path {path!r}{_nearest_path(path, known)} (known: {listed(known)})"
        )
        return None
    resolved = {**found, "path": path, **({"threshold": raw["threshold"]} if "threshold" in raw else {})}
    if "model" in raw:
        if resolved.get("evaluator_type") != "llm":
            problems.append(f"{where}: model: only an LLM evaluator takes a model, and {path!r} is code")
            return None
        resolved["prompt"] = {**resolved["prompt"], "model": raw["model"]}
    return resolved


def _judge(
    raw: Mapping[str, Any], where: str, connection: Mapping[str, Any], problems: list[str], environment: bool
) -> dict[str, Any] | None:
    """An LLM evaluator as a code evaluator whose callable is an :class:`LLMJudge`."""
    try:
        spec = JudgeSpec.model_validate(dict(raw))
    except ValidationError as exc:
        problems.extend(pydantic_problems(exc, where))
        return None
    found: list[str] = []
    allowed = JUDGE_VARIABLES | (TARGET_VARIABLES if spec.args_type == "target_required" else frozenset())
    unknown = [name for name in spec.prompt.placeholders() if name.split(".")[0] not in allowed]
    if unknown:
        found.append(
            f"{where}: prompt.template: unknown placeholder(s) {listed(unknown)} "
            f"(a judge's template takes {listed(sorted(allowed))})"
        )
    if spec.return_type in ("select", "multi_select") and not spec.options:
        found.append(f"{where}: options: a {spec.return_type} LLM evaluator needs its options")
    problem = spec.prompt.model_problem(connection, environment=environment)
    if problem:
        found.append(f"{where}: prompt.model: {problem}")
    if found:
        problems.extend(found)
        return None
    evaluator = {key: value for key, value in raw.items() if key not in JudgeSpec.FIELDS}
    return {**evaluator, "callable": LLMJudge(spec.prompt, connection, spec.return_type, spec.options)}


def expand_evaluators(evaluators: Any, connection: Mapping[str, Any], problems: list[str], *, environment: bool) -> Any:
    """``evaluators`` with references resolved and LLM judges turned into code evaluators; what
    is not a list of dicts is returned as it is, for the validator to report."""
    if isinstance(evaluators, (str, bytes, Mapping)) or not isinstance(evaluators, Sequence):
        return evaluators
    expanded: list[Any] = []
    for index, raw in enumerate(evaluators):
        if not isinstance(raw, Mapping):
            expanded.append(raw)
            continue
        path = raw.get("path")
        where = f"evaluator {path!r} (evaluators[{index}])" if isinstance(path, str) else f"evaluators[{index}]"
        current: dict[str, Any] | None = dict(raw)
        if is_reference(raw):
            current = _resolve(raw, where, problems)
        if current is not None and current.get("evaluator_type") == "llm":
            current = _judge(current, where, connection, problems, environment)
        elif current is not None and current.get("evaluator_type") == "python":
            del current["evaluator_type"]  # Humanloop's name for a code evaluator
        if current is not None and is_reference(raw):  # named, as a hosted one: it judges what it can
            current["without_target"] = "not_applicable"
        expanded.append(REPORTED if current is None else current)
    return expanded


#: In an expanded list, in place of an evaluator whose problems are already reported.
REPORTED = object()


def _nearest_path(path: object, known: list[str]) -> str:
    """``; did you mean ...?`` for a path whose last part is, or is close to, a known one's
    (the built-ins are ``Example Evaluators/<kind>/<name>``: ``Exact match`` names one)."""
    if not isinstance(path, str):
        return ""
    full_path: dict[str, list[str]] = {}
    for known_path in known:
        full_path.setdefault(known_path.rsplit("/", 1)[-1].casefold(), []).append(known_path)
    name = path.strip().rsplit("/", 1)[-1].casefold()
    close = difflib.get_close_matches(name, list(full_path), n=3, cutoff=0.75)
    found = [known_path for match in close for known_path in full_path[match]]
    return f"; did you mean {' or '.join(repr(k) for k in found)}?" if found else ""
