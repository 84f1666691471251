"""Grading under limits, in a fresh process of the sandbox's unit runner.

Graders are pure functions, but some take far longer on a crafted answer than on any honest
one, and answers are hostile. A thread cannot be stopped, so each grading runs in a process of
its own, as a unit's agent does (``rayeval.sandbox.units``, ``process`` isolation): forked from
a runner that has imported the graders and nothing else, with an environment that holds no
credentials, under a unit's limits (memory, processes), and ended with everything it started
when it overruns: the CPU it burned stops too.

What crosses, both ways, is JSON text: the grader entries, the answer and the judge outcomes
in, the verdict (or the judge requests) out; NaN, ±Infinity and lone surrogates come back as
the grader saw or made them. The caller's own grader code (a plug-in's module, the evaluators
of ``evaluations.run``, sent pickled: never anything of the agent's) is graded the same way,
with the caller's environment, as it had in the caller's process.
"""

from __future__ import annotations

import atexit
import base64
import dataclasses
import json
import os
import pickle
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any, Literal, NamedTuple

from .._json import json_fallback, loads_bounded
from ..errors import RayevalError
from ..evals import Eval
from ..graders.judging import Judgments
from ..graders.registry import GRADER_REGISTRY, is_registered, named_grader_types
from ..graders.result import GraderResult
from ..sandbox.config import MAX_ANSWER_FILE_BYTES, MiB, SandboxConfig, UnitLimits
from ..sandbox.isolation import Outcome
from ..sandbox.units import SandboxError, UnitRunner, unit_runner
from . import grading
from .grading import ECHOED, collect_judge_requests, grade_with_outcomes

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
    """What a grading process needs of an eval: its grader entries as JSON (``specs``), or
    pickled (``pickled``, base64: a library caller's entries that JSON would change, such as
    ``evaluations.run``'s, which hold the caller's evaluators), whether it has one ``grader``,
    and where its plug-in grader types (outside rayeval's graders) are defined, ``module:
    qualified name`` by type: their modules are imported where it starts."""

    specs: list[dict[str, Any]] | None
    single: bool
    plugins: dict[str, str]
    pickled: str | None = None
    #: the modules of the functions and classes the pickled entries hold (see ``_code_modules``)
    code_modules: tuple[str, ...] = ()

    @property
    def modules(self) -> tuple[str, ...]:
        """What the runner of its gradings imports once, as it starts: its plug-ins' modules and
        its pickled code's (rather than each grading process, again and again)."""
        return tuple(sorted({plugin.partition(":")[0] for plugin in self.plugins.values()} | set(self.code_modules)))

    @property
    def callers_code(self) -> bool:
        """Whether grading runs the caller's code (a plug-in, a pickled evaluator), which gets
        this process's environment; rayeval's own graders grade without it (no credentials)."""
        return bool(self.plugins or self.pickled)


def verdict_of(reply: dict[str, Any], answer: Any) -> GraderResult:
    """The verdict a grading process sent, every field named: a reply without one (its score,
    say) is the process's fault, never a verdict with a default score. Its ``agent_answer`` is
    ``answer``, the one sent, where the reply says so (a grader's echo of it is not sent back)."""
    try:
        sent = reply["result"]
        return GraderResult(
            passed=sent["passed"],
            score=sent["score"],
            score_max=sent["score_max"],
            metrics=sent["metrics"],
            reasoning=sent["reasoning"],
            agent_answer=answer if reply.get(ECHOED) is True else sent["agent_answer"],
            field_scores=sent["field_scores"],
        )
    except (KeyError, TypeError) as exc:
        raise GradingRefused(f"the grading process sent no whole verdict (missing {exc})") from None


#: plug-in grader types a grading process lacked (their modules do not register them): graded here
_unregistered: set[str] = set()
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


def _pickled(value: Any) -> str | None:
    """``value`` pickled (by value where it must be, as Ray does), base64; None when it cannot be."""
    import cloudpickle

    try:
        return base64.b64encode(cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")
    except Exception:  # noqa: BLE001 - what holds a lock, a socket, a generator...: graded here
        return None


def _code_modules(value: Any) -> tuple[str, ...]:
    """The modules (importable by name) of the functions and classes held in ``value``: grader
    entries, their dicts, lists and dataclasses walked."""
    modules: set[str] = set()
    stack, seen = [value], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            stack.extend([type(item), *(getattr(item, field.name) for field in dataclasses.fields(item))])
        elif callable(item):
            module = getattr(item, "__module__", None)
            if isinstance(module, str) and module not in ("__main__", "builtins"):
                modules.add(module)
    return tuple(sorted(modules))


def eval_graders(eval_: Eval) -> EvalGraders | None:
    """``eval_``'s grader entries for a grading process, or None when it must be graded in this
    process: a plug-in grader type a grading process cannot import (see ``_plugins``) or that
    its module does not register there, or entries that neither JSON nor pickle carries."""
    specs = [spec.model_dump() for spec in eval_.grader_specs]
    plugins = _plugins(specs)
    if plugins is None or _unregistered.intersection(plugins):
        return None
    single = eval_.grader is not None
    if _survives_json(specs):
        return EvalGraders(specs, single, plugins)
    pickled = _pickled(eval_.grader_specs)
    return None if pickled is None else EvalGraders(None, single, plugins, pickled, _code_modules(specs))


def _grading_runner(modules: tuple[str, ...] = ()) -> UnitRunner:
    """This process's runner of grading processes (one for each set of ``modules`` of the
    caller's, which it imports), with a folder of its own: their work folder."""
    global _root
    with _root_lock:
        if _root is None:
            _root = tempfile.mkdtemp(prefix="rayeval-grading-")
            atexit.register(shutil.rmtree, _root, ignore_errors=True)
    config = _CONFIG.model_copy(update={"preload": (*_CONFIG.preload, *modules)}) if modules else _CONFIG
    return unit_runner(config, "process", Path(_root), None)


def prestart_grading(evals: list[Eval]) -> None:
    """Start this process's grading runner now, ahead of the gradings of ``evals`` (none when
    each eval is graded in this process, see ``eval_graders``): it imports the graders while
    the first units run."""
    for modules in {graders.modules for graders in map(eval_graders, evals) if graders is not None}:
        _grading_runner(modules).start()


def grade_bounded(
    eval_: Eval, answer: Any, timeout: float | None = DEFAULT_TIMEOUT_S, *, judgments: Judgments | None = None
) -> GraderResult:
    """``grade(eval_, answer)`` in a grading process, stopped after ``timeout`` seconds:
    GradingTimeout then, another GradingError when the process fails. ``timeout=None``, or an
    eval that ``eval_graders`` cannot send, grades in this process, without a limit.
    ``judgments``: the outcomes of its LLM-judged graders' judge calls (see
    ``rayeval.graders.judging``)."""
    graders = None if timeout is None else eval_graders(eval_)
    reply = None if timeout is None or graders is None else _graded_apart(graders, answer, timeout, judgments)
    if reply is None:
        return grade_with_outcomes(eval_.grader_specs, answer, single=eval_.grader is not None, judgments=judgments)
    return verdict_of(reply, answer)


def judge_requests_bounded(eval_: Eval, answer: Any, timeout: float | None = DEFAULT_TIMEOUT_S) -> Judgments:
    """The judge calls ``eval_``'s LLM-judged graders would make on ``answer``, collected as
    ``grade_bounded`` grades (the answer is hostile input: in a grading process)."""
    graders = None if timeout is None else eval_graders(eval_)
    reply = None if timeout is None or graders is None else _graded_apart(graders, answer, timeout, "collect")
    if reply is None:
        return collect_judge_requests(eval_.grader_specs, answer, single=eval_.grader is not None)
    return reply["requests"]


def _graded_apart(
    graders: EvalGraders, answer: Any, timeout: float, judgments: Judgments | Literal["collect"] | None
) -> dict[str, Any] | None:
    """The reply of a grading process to one request (see ``grading.graded_request``): with
    ``judgments`` the outcomes of judge calls, or ``"collect"`` for the judge requests; None
    when a plug-in's module does not register its grader type there (that type is then
    graded in this process from now on)."""
    extra = {"collect": True} if judgments == "collect" else {"judgments": judgments} if judgments else {}
    try:
        sent = {
            "specs": graders.specs,
            "single": graders.single,
            "plugins": graders.plugins,
            "pickled": graders.pickled,
        }
        request = json.dumps({**sent, "answer": answer, **extra}, default=json_fallback)
    except (ValueError, RecursionError) as exc:
        raise GradingRefused(f"the answer cannot be sent to grading as JSON: {exc}") from exc
    if len(request) > MAX_REQUEST_BYTES:
        raise GradingRefused(f"the request is over the grading limit of {MAX_REQUEST_BYTES} bytes")
    runner = _grading_runner(graders.modules)
    environment = os.environ.items() if graders.callers_code else ()
    try:  # graders write no file: the gradings share the runner's folder as their work folder
        spec = runner.spec(ENTRY, {"request": request}, Path(runner.work_root), [], env=environment)
        outcome = runner.run(spec, timeout)
    except SandboxError as exc:
        raise GradingCrashed(f"the grading process could not be started: {exc}") from exc
    reply = _reply(outcome, timeout, len(request))
    if "unregistered" in reply:
        _unregistered.update(reply["unregistered"])
        return None
    return reply


def _reply(outcome: Outcome, timeout: float, request_chars: int = 0) -> dict[str, Any]:
    """The grading process's reply; decoded only when it may hold as many JSON values as two
    answers may, or two of the request it answers (its metrics may echo parts of the answer)."""
    if outcome.kind == "timeout":
        raise GradingTimeout(f"grading took longer than {timeout:g} s and was stopped")
    if outcome.kind == "crashed":
        raise GradingCrashed(f"the grading process died: {outcome.error_type}: {outcome.error_message}")
    if outcome.kind == "raised":
        why = f"{outcome.error_type}: {outcome.error_message}"
        raise GradingRefused(f"the grading process could not grade the answer: {why}")
    try:
        reply = loads_bounded(outcome.value, 2 * max(MAX_ANSWER_FILE_BYTES, request_chars))
    except (TypeError, ValueError, RecursionError):
        reply = None
    if not isinstance(reply, dict):
        raise GradingRefused("the grading process sent no JSON reply")
    return reply
