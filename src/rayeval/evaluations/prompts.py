"""Prompts defined in code, as Humanloop's ``file.version``: a model, a template and settings.

A prompt file (``{"model": "openai/gpt-4o", "template": [{"role": "system", "content": "Answer
{{topic}} questions."}, ...], "temperature": 0}``) is called once per datapoint: the template's
``{{name}}`` placeholders are filled from the datapoint's inputs, its messages follow, and the
model's reply is the log's output. An LLM-as-judge evaluator (:class:`LLMJudge`) is a prompt
too, filled from the log and the datapoint, whose reply is read as its return type.

A prompt file calls the model as the prompt agent does (:func:`~rayeval.models.calls.generate_reply`),
in the Ray worker's own process (as the prompt agent runs): it runs nothing the model writes,
and it needs the worker's key and response cache. A judge's call is a judge request on the
rubric grader's path (:mod:`rayeval.graders.judging`): made by the run's judge actor, or here
when nothing collects it. This module stays light for the workers.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .._messages import field_problems
from ..agents.prompt import prompt_agent
from ..errors import RayevalError
from ..graders._common import lookup_dotted
from ..graders.judging import Deferred, judge_outcomes
from ..models import ChatMessage
from ..models.calls import PromptOptions, check_model, generate_reply, prompt_model, prompt_request
from ..models.providers import ModelError, inferred_provider
from ..unit.prompt import task_of

log = logging.getLogger(__name__)
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][\w-]*(?:\.[\w-]+)*)\s*\}\}")
# How to reach the model (PromptOptions fields that are not part of a prompt's version).
CONNECTION_OPTIONS = ("base_url", "api_key_env", "cache", "prices", "max_connections")


class TemplateMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


class PromptVersion(BaseModel):
    """A prompt's version: what its id hashes. ``provider`` + a bare ``model`` (Humanloop's
    spelling) is the same as ``provider/model``; a bare ``model`` that can only be one
    provider's (``gpt-4``, ``o3-mini``, ``claude-...``) takes that provider, with a warning
    saying so, as Humanloop users write it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _infer_provider(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or data.get("provider") is not None:
            return data
        model = data.get("model")
        provider = inferred_provider(model) if isinstance(model, str) else None
        if provider is None:
            return data
        log.warning(
            "model %r names no provider: calling %s/%s (write %r, or add provider=..., to choose)",
            model, provider, model, f"{provider}/{model}",
        )  # fmt: skip
        return {**data, "provider": provider}

    model: str
    template: str | list[TemplateMessage]
    provider: str | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    seed: int | None = None

    @property
    def model_name(self) -> str:
        if self.provider and "/" not in self.model:
            return f"{self.provider}/{self.model}"
        return self.model

    def messages(self) -> list[TemplateMessage]:
        if isinstance(self.template, str):
            return [TemplateMessage(role="user", content=self.template)]
        return list(self.template)

    def placeholders(self) -> list[str]:
        """The names the template's placeholders use, in order of first use."""
        names = (m.group(1) for message in self.messages() for m in PLACEHOLDER.finditer(message.content))
        return list(dict.fromkeys(names))

    def settings(self, connection: Mapping[str, Any]) -> dict[str, Any]:
        """The prompt agent's options, unchecked: this version's settings, reached as
        ``connection`` says."""
        settings = self.model_dump(include={"temperature", "max_tokens", "top_p", "seed"}, exclude_none=True)
        return {**settings, **{key: value for key, value in connection.items() if value is not None}}

    def model_problem(self, connection: Mapping[str, Any], *, environment: bool) -> str | None:
        """Why this version's model cannot be called, reached as ``connection`` says (None: it
        can). ``environment``: the calls are made with this process's environment (embedded
        Ray), so the key is checked too."""
        try:
            check_model(self.model_name, self.settings(connection), environment=environment)
        except ValidationError as exc:
            return str(field_problems(exc)[0])
        except ModelError as exc:
            return str(exc)
        return None


def is_prompt_version(version: Any) -> bool:
    """A ``file.version`` that defines a prompt in code (rather than labelling a callable)."""
    return isinstance(version, Mapping) and "model" in version and "template" in version


def missing_placeholders(names: Sequence[str], variables: Mapping[str, Any]) -> list[str]:
    """The placeholders without a value in ``variables``; dots go into dicts (``target.answer``)."""
    return [name for name in names if not lookup_dotted(variables, name)[0]]


def render(text: str, variables: Mapping[str, Any]) -> str:
    """``text`` with each ``{{name}}`` replaced by its value (strings as they are, anything else
    as JSON; dots go into dicts); KeyError naming a placeholder without a value."""

    def value(match: re.Match[str]) -> str:
        found, value = lookup_dotted(variables, match.group(1))
        if not found:
            raise KeyError(match.group(1))
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    return PLACEHOLDER.sub(value, text)


def rendered(template: Sequence[TemplateMessage], variables: Mapping[str, Any]) -> list[ChatMessage]:
    return [ChatMessage(role=m.role, content=render(m.content, variables)) for m in template]


class BoundPrompt:
    """A prompt version with the way to reach its model: what travels to the Ray workers."""

    def __init__(self, version: PromptVersion, connection: Mapping[str, Any]):
        self.model_name = version.model_name
        self.template = version.messages()
        self.options = PromptOptions.model_validate(version.settings(connection))


class PromptCaller(BoundPrompt):
    """The engine's agent for a prompt file: the datapoint's inputs fill the template, its
    messages follow, the model's reply is the output; tokens and cost go to the row."""

    needs_data = False  # nothing to stage
    # it waits on the model, as the prompt agent does
    resources = prompt_agent.resources  # type: ignore[attr-defined]

    def __call__(self, task_prompt: str, work_dir: Path) -> dict[str, Any]:
        point = json.loads(task_of(task_prompt))
        after = [ChatMessage.model_validate(m) for m in point.get("messages") or []]
        model, options = prompt_model(self.model_name, self.options.model_dump(exclude_none=True))
        text, metadata = generate_reply(model, options, [*rendered(self.template, point["inputs"]), *after], None)
        return {"answer": {"output": text}, "metadata": metadata}


# -- LLM-as-judge --------------------------------------------------------------------------
JUDGMENT_FORMS = {
    "boolean": "true or false",
    "number": "a number",
    "select": "exactly one of these options: {options}",
    "multi_select": "the options that apply, separated by commas, from: {options}",
    "text": "your judgment",
}
TRUE_WORDS = frozenset({"true", "yes", "pass"})
FALSE_WORDS = frozenset({"false", "no", "fail"})
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


class JudgmentError(RayevalError, ValueError):
    """The judge's reply holds no judgment of the evaluator's return type."""


def _last_line(reply: str) -> str:
    lines = [line.strip() for line in reply.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _option(text: str, options: Sequence[str]) -> str | None:
    folded = text.strip().strip(".*`'\"").casefold()
    return next((o for o in options if o.casefold() == folded), None)


def read_judgment(reply: str, return_type: str, options: Sequence[str] = ()) -> Any:
    """The judgment in the reply's last line, as the return type; JudgmentError when absent."""
    last = _last_line(reply)
    if return_type == "text":
        return reply.strip()
    if return_type == "boolean":
        word = re.sub(r"[^a-z]", "", last.rsplit(":", 1)[-1].lower())
        if word in TRUE_WORDS | FALSE_WORDS:
            return word in TRUE_WORDS
    elif return_type == "number":
        numbers = NUMBER.findall(last)
        if numbers:
            number = float(numbers[-1])
            return int(number) if number.is_integer() else number
    elif return_type == "select":
        chosen = _option(last.rsplit(":", 1)[-1], options)
        if chosen is not None:
            return chosen
    elif return_type == "multi_select":
        picked = [_option(part, options) for part in last.rsplit(":", 1)[-1].split(",")]
        if picked and all(p is not None for p in picked):
            return list(dict.fromkeys(p for p in picked if p is not None))
    form = JUDGMENT_FORMS[return_type].format(options=", ".join(options))
    raise JudgmentError(f"the judge's last line {last[:200]!r} is not {form}")


class LLMJudge(BoundPrompt):
    """An evaluator's callable that asks a model: its template is filled with ``output``,
    ``inputs``, ``messages`` and the rest of the log (also as ``log.<field>``) and, for a
    target_required evaluator, ``target`` (and ``datapoint``); the reply's last line is read as
    the return type (:func:`read_judgment`)."""

    def __init__(
        self,
        version: PromptVersion,
        connection: Mapping[str, Any],
        return_type: str,
        options: Sequence[str] = (),
    ):
        super().__init__(version, connection)
        self.return_type = return_type
        self.choices = list(options)

    def request(self, log: dict[str, Any], datapoint: dict[str, Any] | None = None) -> dict[str, Any]:
        """The judge's model call for this log, as JSON (see :func:`prompt_request`)."""
        variables: dict[str, Any] = {**log, "log": log}
        if datapoint is not None:
            variables.update(datapoint=datapoint, target=datapoint.get("target"))
        form = JUDGMENT_FORMS[self.return_type].format(options=", ".join(self.choices))
        instruction = ChatMessage(role="user", content=f"End your reply with one line holding only {form}.")
        return prompt_request(self.model_name, self.options, [*rendered(self.template, variables), instruction])

    def __call__(self, log: dict[str, Any], datapoint: dict[str, Any] | None = None) -> Any:
        """The judgment; its call is made here, or by the run's judge actor (a batch run's
        evaluators run twice: first their requests are collected, then they read the outcomes)."""
        outcomes = judge_outcomes([self.request(log, datapoint)])
        if isinstance(outcomes, Deferred):
            return None  # collecting: this pass's judgments are discarded
        outcome = outcomes[0]
        if "error" in outcome:
            raise JudgeCallError(str(outcome["error"]))
        return read_judgment(str(outcome.get("reply", "")), self.return_type, self.choices)


class JudgeCallError(RayevalError, RuntimeError):
    """The judge model could not be called (after the model layer's retries)."""
