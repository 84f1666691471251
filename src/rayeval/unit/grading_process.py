"""Grading under limits, in a fresh process of the sandbox's unit runner.

Graders are pure functions, but some take far longer on a crafted answer than on any honest
one, and answers are hostile. A thread cannot be stopped, so each grading runs in a process of
its own, as a unit's agent does (``rayeval.sandbox.units``, ``process`` isolation): forked from
a runner that has imported the graders and nothing else, with an environment that holds no
credentials, under a unit's limits (memory, processes), and ended with everything it started
when it overruns: the CPU it burned stops too.

What crosses, both ways, is JSON text: the grader entries, the answer and the judge outcomes
in, the verdict (or the judge requests) out; NaN, ±Infinity and lone surrogates come back as
the grader saw or made them.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any, Literal, NamedTuple

from .._json import json_fallback
from ..errors import RayevalError
from ..evals import Eval
from ..graders.judging import Judgments
from ..graders.registry import GRADER_REGISTRY, is_registered, named_grader_types
from ..graders.result import GraderResult
from ..sandbox.config import MiB, SandboxConfig, UnitLimits
from ..sandbox.isolation import Outcome
from ..sandbox.units import SandboxError, UnitRunner, unit_runner
from . import grading
from .grading import collect_judge_requests, grade_with_outcomes

DEFAULT_TIMEOUT_S = 30.0
MAX_REQUEST_BYTES = 128 << 20
"""Longer requests are refused: answers are capped at 10 MB before grading, and JSON escapes
at most make six bytes of one."""
ENTRY = f"{grading.__name__}:{grading.graded_request.__name__}"
#: the grading process's: it imports the graders once for every grading; its reply may repeat
#: the answer, escaped twice
_CONFIG = SandboxConfig(preload=(grading.__name__,), limits=UnitLimits(max_output_mb=4 * MAX_REQUEST_BYTES / MiB))
_OWN_GRADERS = "rayeval.graders."


class GradingError(RayevalError):
    """A bounded grading that gave no verdict."""


class GradingTimeout(GradingError):
    """The grading ran past its time limit; its process was killed."""


class GradingCrashed(GradingError):
    """The grading process died, or could not be started."""


class GradingRefused(GradingError):
    """The answer could not be graded in a grading process: not sendable as JSON, over the
    size limit, or the graders raised there."""


class EvalGraders(NamedTuple):
    """What a grading process needs of an eval: its grader entries, and where its plug-in
    grader types (outside rayeval's graders) are defined, ``module:qualified name`` by type:
    their modules are imported where it starts."""

    specs: list[dict[str, Any]]
    single: bool
    plugins: dict[str, str]


def verdict_of(reply: dict[str, Any]) -> GraderResult:
    """The verdict a grading process sent, every field named: a reply without one (its score,
    say) is the process's fault, never a verdict with a default score."""
    try:
        sent = reply["result"]
        return GraderResult(
            passed=sent["passed"],
            score=sent["score"],
            score_max=sent["score_max"],
            metrics=sent["metrics"],
            reasoning=sent["reasoning"],
            agent_answer=sent["agent_answer"],
            field_scores=sent["field_scores"],
        )
    except (KeyError, TypeError) as exc:
        raise GradingRefused(f"the grading process sent no whole verdict (missing {exc})") from None


_graders: dict[str, EvalGraders | None] = {}
_root: str | None = None
_root_lock = threading.Lock()


def _plugins(specs: Any) -> dict[str, str] | None:
    """Where each plug-in grader type named in ``specs`` (composite children included) is
    defined, ``module:qualified name``; None when one cannot be imported by its name (defined in
    ``__main__`` or in a function)."""
    plugins = {}
    for kind in named_grader_types(specs):
        grader = GRADER_REGISTRY[kind] if is_registered(kind) else None
        if grader is None or grader.__module__.startswith(_OWN_GRADERS):
            continue
        if grader.__module__ == "__main__" or "<locals>" in grader.__qualname__:
            return None
        plugins[kind] = f"{grader.__module__}:{grader.__qualname__}"
    return plugins


def _survives_json(value: Any) -> bool:
    try:
        return json.loads(json.dumps(value)) == value
    except (TypeError, ValueError, RecursionError):
        return False


def eval_graders(eval_: Eval) -> EvalGraders | None:
    """``eval_``'s grader entries for a grading process, or None when it must be graded in this
    process: entries that JSON would change, a plug-in grader type a grading process cannot
    import (see ``_plugins``), or one that its module does not register there."""
    key = eval_.content_hash()
    if key not in _graders:
        specs = [spec.model_dump() for spec in eval_.grader_specs]
        plugins = _plugins(specs)
        sendable = plugins is not None and _survives_json(specs)
        _graders[key] = EvalGraders(specs, eval_.grader is not None, plugins or {}) if sendable else None
    return _graders[key]


def _grading_runner(plugins: dict[str, str] | None = None) -> UnitRunner:
    """This process's runner of grading processes (one for each set of plug-in modules, which it
    imports), with a folder of its own: their work folder."""
    global _root
    with _root_lock:
        if _root is None:
            _root = tempfile.mkdtemp(prefix="rayeval-grading-")
            atexit.register(shutil.rmtree, _root, ignore_errors=True)
    modules = sorted({plugin.partition(":")[0] for plugin in (plugins or {}).values()})
    config = _CONFIG.model_copy(update={"preload": (*_CONFIG.preload, *modules)}) if modules else _CONFIG
    return unit_runner(config, "process", Path(_root), None)


def prestart_grading(evals: list[Eval]) -> None:
    """Start this process's grading runner now, ahead of the gradings of ``evals`` (none when
    each eval is graded in this process, see ``eval_graders``): it imports the graders while
    the first units run."""
    wanted = {tuple(sorted(graders.plugins.items())) for graders in map(eval_graders, evals) if graders is not None}
    for plugins in wanted:
        _grading_runner(dict(plugins)).start()


def grade_bounded(
    eval_: Eval, answer: Any, timeout: float | None = DEFAULT_TIMEOUT_S, *, judgments: Judgments | None = None
) -> GraderResult:
    """``grade(eval_, answer)`` in a grading process, stopped after ``timeout`` seconds:
    GradingTimeout then, another GradingError when the process fails. ``timeout=None``, or an
    eval that ``eval_graders`` cannot send, grades in this process, without a limit.
    ``judgments``: the outcomes of its LLM-judged graders' judge calls (see
    ``rayeval.graders.judging``)."""
    graders = None if timeout is None else eval_graders(eval_)
    reply = None if timeout is None or graders is None else _graded_apart(eval_, graders, answer, timeout, judgments)
    if reply is None:
        return grade_with_outcomes(eval_.grader_specs, answer, single=eval_.grader is not None, judgments=judgments)
    return verdict_of(reply)


def judge_requests_bounded(eval_: Eval, answer: Any, timeout: float | None = DEFAULT_TIMEOUT_S) -> Judgments:
    """The judge calls ``eval_``'s LLM-judged graders would make on ``answer``, collected as
    ``grade_bounded`` grades (the answer is hostile input: in a grading process)."""
    graders = None if timeout is None else eval_graders(eval_)
    reply = None if timeout is None or graders is None else _graded_apart(eval_, graders, answer, timeout, "collect")
    if reply is None:
        return collect_judge_requests(eval_.grader_specs, answer, single=eval_.grader is not None)
    return reply["requests"]


def _graded_apart(
    eval_: Eval, graders: EvalGraders, answer: Any, timeout: float, judgments: Judgments | Literal["collect"] | None
) -> dict[str, Any] | None:
    """The reply of a grading process to one request (see ``grading.graded_request``): with
    ``judgments`` the outcomes of judge calls, or ``"collect"`` for the judge requests; None
    when a plug-in's module does not register its grader type there (``eval_`` is then graded
    in this process from now on)."""
    extra = {"collect": True} if judgments == "collect" else {"judgments": judgments} if judgments else {}
    try:
        request = json.dumps({**graders._asdict(), "answer": answer, **extra}, default=json_fallback)
    except (ValueError, RecursionError) as exc:
        raise GradingRefused(f"the answer cannot be sent to grading as JSON: {exc}") from exc
    if len(request) > MAX_REQUEST_BYTES:
        raise GradingRefused(f"the request is over the grading limit of {MAX_REQUEST_BYTES} bytes")
    runner = _grading_runner(graders.plugins)
    try:  # graders write no file: the gradings share the runner's folder as their work folder
        outcome = runner.run(runner.spec(ENTRY, {"request": request}, Path(runner.work_root), []), timeout)
    except SandboxError as exc:
        raise GradingCrashed(f"the grading process could not be started: {exc}") from exc
    reply = _reply(outcome, timeout)
    if "unregistered" in reply:
        _graders[eval_.content_hash()] = None
        return None
    return reply


def _reply(outcome: Outcome, timeout: float) -> dict[str, Any]:
    if outcome.kind == "timeout":
        raise GradingTimeout(f"grading took longer than {timeout:g} s and was stopped")
    if outcome.kind == "crashed":
        raise GradingCrashed(f"the grading process died: {outcome.error_type}: {outcome.error_message}")
    if outcome.kind == "raised":
        why = f"{outcome.error_type}: {outcome.error_message}"
        raise GradingRefused(f"the grading process could not grade the answer: {why}")
    try:
        reply = json.loads(outcome.value)
    except (TypeError, ValueError, RecursionError):
        reply = None
    if not isinstance(reply, dict):
        raise GradingRefused("the grading process sent no JSON reply")
    return reply
